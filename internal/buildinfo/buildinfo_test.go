package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestVersionOf(t *testing.T) {
	rev := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: modified}}
	}
	main := func(v string) debug.Module { return debug.Module{Path: module, Version: v} }
	for _, c := range []struct {
		name    string
		bi      *debug.BuildInfo
		stamped string
		want    string
	}{
		{"module version wins", &debug.BuildInfo{Main: main("v1.2.3"), Settings: rev("false")}, "v9", "v1.2.3"},
		{"stamped without a module version", &debug.BuildInfo{Main: main("(devel)")}, "v1.4.0", "v1.4.0"},
		{"revision", &debug.BuildInfo{Main: main("(devel)"), Settings: rev("false")}, "", "rev 0123456789ab"},
		{"modified revision", &debug.BuildInfo{Main: main("(devel)"), Settings: rev("true")}, "", "rev 0123456789ab+dirty"},
		{"nothing", &debug.BuildInfo{Main: main("(devel)")}, "", "devel"},
		{"no build info", nil, "v2.0.0", "v2.0.0"},
		{"a program that requires tidings", &debug.BuildInfo{Main: debug.Module{Path: "example.com/app", Version: "v0.1.0"},
			Deps: []*debug.Module{{Path: module, Version: "v1.5.0"}}, Settings: rev("false")}, "", "v1.5.0"},
		{"a program with tidings replaced by a checkout", &debug.BuildInfo{Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{{Path: module, Version: "(devel)"}}, Settings: rev("false")}, "", "devel"},
	} {
		if got := versionOf(c.bi, c.stamped); got != c.want {
			t.Errorf("%s: versionOf = %q, want %q", c.name, got, c.want)
		}
	}
}
