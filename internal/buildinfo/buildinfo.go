// Package buildinfo tells which version of tidings a binary was built
// from, so that every part of it — the server's serverInfo, the client's
// clientInfo, the gateway's, and tidings --version — says the same.
package buildinfo

import (
	"runtime/debug"
)

// module is tidings's module path.
const module = "tidings"

// Version is the version of tidings in this binary: its module version
// (go install tidings/cmd/tidings@VERSION, or go build in a VCS checkout,
// as a tag or a pseudo-version), or, in a program that requires tidings,
// the version it requires; else stamped (a version set with -ldflags at
// build time, "" for none); else the VCS revision of a checkout; and only
// then "devel", which says that the binary cannot tell what it was built
// from.
func Version(stamped string) string {
	bi, _ := debug.ReadBuildInfo() // nil without build information
	return versionOf(bi, stamped)
}

func versionOf(bi *debug.BuildInfo, stamped string) string {
	if bi != nil {
		if bi.Main.Path == module && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			return bi.Main.Version
		}
		for _, d := range bi.Deps {
			if d.Path == module && d.Version != "" && d.Version != "(devel)" {
				return d.Version
			}
		}
	}
	if stamped != "" {
		return stamped
	}
	if bi != nil && bi.Main.Path == module {
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			if modified == "true" {
				rev += "+dirty"
			}
			return "rev " + rev
		}
	}
	return "devel"
}
