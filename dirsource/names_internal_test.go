package dirsource

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzDisplayName: every path is shown as valid UTF-8, a valid component
// unchanged, and each component shown leads back to its exact bytes.
func FuzzDisplayName(f *testing.F) {
	for _, p := range []string{"a.txt", "caf\xe9.txt", "d\xff/x", "50%\xe9", "ok %E9", "%25\xc3", "\xc3\xa9", "a/\xed\xa0\x80/b", "ok %E9/\xff"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		shown := displayName(p)
		if !utf8.ValidString(shown) {
			t.Fatalf("displayName(%q) = %q, not UTF-8", p, shown)
		}
		cs, ss := strings.Split(p, "/"), strings.Split(shown, "/")
		if len(cs) != len(ss) {
			t.Fatalf("%q shown as %q: components differ", p, shown)
		}
		for i, c := range cs {
			back, decoded := componentFromDisplay(ss[i])
			switch {
			case utf8.ValidString(c):
				if ss[i] != c {
					t.Fatalf("valid %q shown as %q", c, ss[i])
				}
			case !decoded || back != c:
				t.Fatalf("%q shown as %q reads back as %q (%v)", c, ss[i], back, decoded)
			}
		}
	})
}
