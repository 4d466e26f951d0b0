package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

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

// TestVersionCommand: tidings version says what --version says.
func TestVersionCommand(t *testing.T) {
	var out strings.Builder
	root := newRootCmd()
	root.SetOut(&out)
	root.SetArgs([]string{"version"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "tidings version "+version()+"\n"; got != want {
		t.Errorf("tidings version printed %q, want %q", got, want)
	}
}
