package gitignore

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cases pairs .gitignore lines (at the root) with paths and what git says
// of them; a path ending in "/" is a directory.
var cases = []struct {
	lines string
	path  string
	want  bool
}{
	{"*.log", "a.log", true},
	{"*.log", "deep/er/a.log", true},
	{"*.log", "a.logx", false},
	{"*.log", "a/b", false},
	{"node_modules/", "node_modules/", true},
	{"node_modules/", "x/node_modules/", true},
	{"node_modules/", "node_modules", false}, // a file of that name
	{"/build", "build", true},
	{"/build", "sub/build", false},
	{"doc/*.txt", "doc/a.txt", true},
	{"doc/*.txt", "doc/sub/a.txt", false},
	{"doc/*.txt", "x/doc/a.txt", false},
	{"**/foo", "foo", true},
	{"**/foo", "a/b/foo", true},
	{"**/foo/bar", "a/foo/bar", true},
	{"a/**/b", "a/b", true},
	{"a/**/b", "a/x/y/b", true},
	{"a/**/b", "a/x/y/c", false},
	{"abc/**", "abc/", false},
	{"abc/**", "abc/x", true},
	{"abc/**", "abc/x/y", true},
	{"a**b", "axxb", true},
	{"a**b", "a/b", false},
	{"?.c", "x.c", true},
	{"?.c", "xy.c", false},
	{"[a-c].go", "b.go", true},
	{"[a-c].go", "d.go", false},
	{"[!a-c].go", "d.go", true},
	{"[^a-c].go", "a.go", false},
	{"[[:digit:]]x", "7x", true},
	{"[[:digit:]]x", "ax", false},
	{"[]]", "]", true},
	{"# comment", "# comment", false},
	{`\#hash`, "#hash", true},
	{`\!bang`, "!bang", true},
	{"*.log\n!keep.log", "keep.log", false},
	{"*.log\n!keep.log", "drop.log", true},
	{"!keep.log\n*.log", "keep.log", true}, // the last match decides
	{"trail   ", "trail", true},
	{`space\ `, "space ", true},
	{"x\r", "x", true},
	{"[abc", "[abc", false}, // unclosed: refused by git, matches nothing
	{`end\`, `end\`, false},
	{"*", "anything/", true},
	{"a/", "a/", true},
	{"/a/b/", "a/b/", true},
	{"/a/b/", "a/b", false},
	{"foo", "a/foo/", true},
	{"*.txt", "a.TXT", false}, // case matters
}

func TestMatch(t *testing.T) {
	for _, c := range cases {
		r := Parse("", []byte(c.lines))
		rel, isDir := strings.TrimSuffix(c.path, "/"), strings.HasSuffix(c.path, "/")
		if got := r.Match(rel, isDir) == Exclude; got != c.want {
			t.Errorf("%q against %q: excluded = %v, want %v", c.lines, c.path, got, c.want)
		}
	}
}

// TestMatchAgreesWithGit asks git itself about the same cases, so the
// table above says what git does and not what this package thinks.
func TestMatchAgreesWithGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	for _, c := range cases {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, ".gitignore"), []byte(c.lines), 0o644); err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimSuffix(c.path, "/")
		full := filepath.Join(dir, rel)
		if strings.HasSuffix(c.path, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
		} else if !strings.ContainsAny(rel, `\`) {
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command("git", "-c", "core.ignoreCase=false", "check-ignore", "--no-index", "-q", rel)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir, "GIT_CEILING_DIRECTORIES="+filepath.Dir(dir))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if out, err := exec.Command("git", "-C", dir, "init", "-q").CombinedOutput(); err != nil {
			t.Fatalf("git init: %v: %s", err, out)
		}
		err := cmd.Run()
		ee, _ := err.(*exec.ExitError)
		switch {
		case err == nil:
			if !c.want {
				t.Errorf("git excludes %q under %q; the table says it does not", c.path, c.lines)
			}
		case ee != nil && ee.ExitCode() == 1:
			if c.want {
				t.Errorf("git does not exclude %q under %q; the table says it does", c.path, c.lines)
			}
		default:
			t.Errorf("git check-ignore %q: %v: %s", c.path, err, stderr.String())
		}
	}
}

func TestRulesApplyBelowTheirDirectory(t *testing.T) {
	r := Parse("sub", []byte("/anchored\nloose\n"))
	for path, want := range map[string]Verdict{
		"sub/anchored":   Exclude,
		"sub/x/anchored": NoMatch,
		"sub/loose":      Exclude,
		"sub/x/loose":    Exclude,
		"anchored":       NoMatch,
		"subx/loose":     NoMatch,
		"sub":            NoMatch,
	} {
		if got := r.Match(path, false); got != want {
			t.Errorf("Match(%q) = %v, want %v", path, got, want)
		}
	}
}

func TestSet(t *testing.T) {
	s := NewSet(nil)
	s.Put(Parse("", []byte("*.log\nbuild/\n")))
	s.Put(Parse("app", []byte("!keep.log\n")))
	s.Put(Parse("app/build", []byte("!*\n"))) // inside an excluded directory: no effect
	for _, c := range []struct {
		path  string
		isDir bool
		want  bool
	}{
		{"a.log", false, true},
		{"app/keep.log", false, false}, // the deeper file decides
		{"app/other.log", false, true},
		{"app/build", true, true},
		{"app/build/out.txt", false, true}, // its directory is excluded
		{"app/src/main.go", false, false},
	} {
		if got := s.Ignored(c.path, c.isDir); got != c.want {
			t.Errorf("Ignored(%q, %v) = %v, want %v", c.path, c.isDir, got, c.want)
		}
	}
	first, err := Compile([]string{"app/src", "!a.log"})
	if err != nil {
		t.Fatal(err)
	}
	s2 := s.Clone()
	s2.first = first
	if !s2.Ignored("app/src/main.go", false) || s2.Ignored("a.log", false) {
		t.Error("the first rules do not decide before the directories'")
	}
	if s.Ignored("app/src/main.go", false) {
		t.Error("changing a clone changed the original")
	}
	s2.DropUnder("app")
	if !s2.Ignored("app/keep.log", false) {
		t.Error("DropUnder left the rules of app in place")
	}
	s2.DropUnder("")
	if s2.Dirs() != 0 {
		t.Errorf("DropUnder(\"\") left %d directories", s2.Dirs())
	}
}

func TestCompileRefusesPatternsThatMatchNothing(t *testing.T) {
	for _, p := range []string{"", "  ", "#x", "!", "/"} {
		if _, err := Compile([]string{p}); err == nil {
			t.Errorf("Compile(%q) accepted a pattern that matches nothing", p)
		}
	}
	if _, err := Compile([]string{"#x"}); err == nil || !strings.Contains(err.Error(), `\\#x`) {
		t.Errorf("the refusal of a comment does not say how to write it: %v", err)
	}
	if r, err := Compile([]string{"*.tmp", `\#x`}); err != nil || r.Len() != 2 {
		t.Errorf("Compile = %v, %v", r, err)
	}
}

// quote escapes every character a pattern gives a meaning to.
func quote(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(`*?[]\!# `, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// FuzzMatch checks what must hold for any pattern and path: no panic,
// negation gives the opposite verdict, a directory-only pattern never
// excludes a file, and a name quoted as a pattern matches itself.
func FuzzMatch(f *testing.F) {
	for _, c := range cases {
		f.Add(c.lines, strings.TrimSuffix(c.path, "/"), strings.HasSuffix(c.path, "/"))
	}
	f.Add("a/**/b/**/c/**/**", "a/x/b/y/c/z", true)
	f.Add("***[[:alpha:]", "x", false)
	f.Fuzz(func(t *testing.T, line, rel string, isDir bool) {
		if strings.ContainsAny(line, "\n\r") {
			return
		}
		r := Parse("", []byte(line))
		v := r.Match(rel, isDir)
		if r.Len() == 1 && !r.pats[0].negate {
			if neg := Parse("", []byte("!"+line)).Match(rel, isDir); v == Exclude != (neg == Include) || v == NoMatch != (neg == NoMatch) {
				t.Errorf("%q gives %v for %q, but its negation gives %v", line, v, rel, neg)
			}
			if !isDir && v != NoMatch && r.pats[0].dirOnly {
				t.Errorf("directory-only %q matched the file %q", line, rel)
			}
		}
		if rel == "" || strings.Contains(rel, "//") || strings.HasPrefix(rel, "/") || strings.HasSuffix(rel, "/") ||
			strings.ContainsAny(rel, "\n\r") { // no line of a .gitignore holds these
			return
		}
		if got := Parse("", []byte("/"+quote(rel))).Match(rel, isDir); got != Exclude {
			t.Errorf("the quoted pattern of %q does not match it: %v", rel, got)
		}
		name := rel[strings.LastIndexByte(rel, '/')+1:]
		if got := Parse("", []byte(quote(name))).Match(rel, isDir); got != Exclude {
			t.Errorf("the quoted name of %q does not match it: %v", rel, got)
		}
		_ = NewSet(nil).Ignored(rel, isDir)
	})
}
