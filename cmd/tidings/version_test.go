package main

import (
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionOf(t *testing.T) {
	rev := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: modified}}
	}
	for _, c := range []struct {
		name    string
		bi      *debug.BuildInfo
		stamped string
		want    string
	}{
		{"module version wins", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: rev("false")}, "v9", "v1.2.3"},
		{"stamped without a module version", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "v1.4.0", "v1.4.0"},
		{"revision", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: rev("false")}, "", "rev 0123456789ab"},
		{"modified revision", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: rev("true")}, "", "rev 0123456789ab+dirty"},
		{"nothing", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "", "devel"},
		{"no build info", nil, "v2.0.0", "v2.0.0"},
	} {
		if got := versionOf(c.bi, c.stamped); got != c.want {
			t.Errorf("%s: versionOf = %q, want %q", c.name, got, c.want)
		}
	}
}

// TestVersionFlagWithoutVCSStamping builds the binary the way a source
// tarball without .git is built, and checks that the version given at
// link time is what --version prints.
func TestVersionFlagWithoutVCSStamping(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to build the binary: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "tidings")
	build := exec.Command(goTool, "build", "-buildvcs=false", "-ldflags", "-X main.buildVersion=v7.8.9-test", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("--version: %v\n%s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "tidings version v7.8.9-test" {
		t.Errorf("--version = %q, want the version given at link time", got)
	}
}
