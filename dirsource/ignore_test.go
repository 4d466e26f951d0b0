package dirsource_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"tidings/dirsource"
	"tidings/mcp"
)

// ignoredTree is a checkout with nested .gitignore files, negations and
// directory patterns.
var ignoredTree = map[string]string{
	".gitignore":                "# build output\nnode_modules/\n*.log\n!keep.log\n/build\n*.tmp\n",
	"node_modules/pkg/index.js": "secret",
	"a.log":                     "secret",
	"keep.log":                  "kept",
	"build/out.txt":             "secret",
	"root.tmp":                  "secret",
	"src/.gitignore":            "gen/\n!*.tmp\n",
	"src/main.go":               "package main",
	"src/build/kept.txt":        "kept", // /build is anchored to the root
	"src/gen/x.go":              "secret",
	"src/cache.tmp":             "kept", // the deeper .gitignore decides
	"lib/node_modules":          "kept", // a file: node_modules/ names directories
	".git/config":               "secret",
}

var ignoredTreeListed = []string{"keep.log", "lib/node_modules", "src/build/kept.txt", "src/cache.tmp", "src/main.go"}

// listedRels returns the listed files as paths relative to the root.
func (f *fixture) listedRels(t testing.TB) []string {
	t.Helper()
	var rels []string
	for _, u := range f.allURIs(t) {
		rel, ok := strings.CutPrefix(u, f.uri("")+"/")
		if !ok {
			t.Fatalf("listed %q, outside the root", u)
		}
		rels = append(rels, rel)
	}
	slices.Sort(rels)
	return rels
}

func TestGitignoreExcludes(t *testing.T) {
	f := newFixture(t, ignoredTree, dirsource.WithGitignore())
	if got := f.listedRels(t); !slices.Equal(got, ignoredTreeListed) {
		t.Fatalf("listed %v, want %v", got, ignoredTreeListed)
	}
	for _, rel := range []string{"node_modules/pkg/index.js", "a.log", "build/out.txt", "root.tmp", "src/gen/x.go"} {
		if text, _ := f.readState(t, rel); text != "missing" {
			t.Errorf("read of the excluded %s = %q, want not found", rel, text)
		}
		if r := f.tool(t, "file_info", map[string]any{"path": rel}); !r.IsError {
			t.Errorf("file_info of the excluded %s = %v", rel, r.Structured)
		}
	}
	if text, _ := f.readState(t, "keep.log"); text != "kept" {
		t.Errorf("read of keep.log = %q", text)
	}
	for _, dir := range []string{"node_modules", "build", "src/gen"} {
		if r := f.tool(t, "list_directory", map[string]any{"path": dir}); !r.IsError {
			t.Errorf("list_directory of the excluded %s = %v", dir, r.Structured)
		}
	}
	entries := func(dir string) []string {
		r := f.tool(t, "list_directory", map[string]any{"path": dir})
		if r.IsError {
			t.Fatalf("list_directory %q: %v", dir, r.Content)
		}
		var names []string
		for _, e := range r.Structured["entries"].([]any) {
			names = append(names, e.(map[string]any)["name"].(string))
		}
		return names
	}
	if got, want := entries(""), []string{"keep.log", "lib", "src"}; !slices.Equal(got, want) {
		t.Errorf("list_directory of the root = %v, want %v", got, want)
	}
	if got, want := entries("src"), []string{"build", "cache.tmp", "main.go"}; !slices.Equal(got, want) {
		t.Errorf("list_directory of src = %v, want %v", got, want)
	}
	r := f.tool(t, "search_files", map[string]any{"query": "secret"})
	if n := len(r.Structured["matches"].([]any)); n != 0 {
		t.Errorf("search_files found %d matches in excluded files: %v", n, r.Content)
	}
}

// TestGitignoreIsOptIn: without WithGitignore, .gitignore files mean
// nothing (hidden files and .git aside, which are never served).
func TestGitignoreIsOptIn(t *testing.T) {
	f := newFixture(t, ignoredTree)
	got := f.listedRels(t)
	if want := len(ignoredTree) - 3; len(got) != want || !slices.Contains(got, "node_modules/pkg/index.js") {
		t.Errorf("listed %d files %v, want every one of the %d not hidden", len(got), got, want)
	}
}

func TestExclude(t *testing.T) {
	files := map[string]string{
		".gitignore":       "!important.log\n",
		"important.log":    "x",
		"notes.txt":        "x",
		"secret/a.txt":     "x",
		"sub/secret/b.txt": "x",
		"sub/c.key":        "x",
		"sub/keep.key":     "x",
	}
	for _, c := range []struct {
		name string
		opts []dirsource.Option
		want []string
	}{
		{"alone", []dirsource.Option{dirsource.WithExclude("secret/", "*.key", "!keep.key", "*.log")}, []string{"notes.txt", "sub/keep.key"}},
		{"before .gitignore", []dirsource.Option{dirsource.WithGitignore(), dirsource.WithExclude("/secret", "*.log")}, []string{"notes.txt", "sub/c.key", "sub/keep.key", "sub/secret/b.txt"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, files, c.opts...)
			if got := f.listedRels(t); !slices.Equal(got, c.want) {
				t.Errorf("listed %v, want %v", got, c.want)
			}
		})
	}
	if _, err := dirsource.New(t.TempDir(), dirsource.WithExclude("#generated")); err == nil || !strings.Contains(err.Error(), "comment") {
		t.Errorf("New accepted a comment as a pattern: %v", err)
	}
}

// waitListed waits for list changes until the list is want.
func (f *fixture) waitListed(t testing.TB, l *listener, want []string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		got := f.listedRels(t)
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("listed %v, want %v", got, want)
		}
		if n := l.next(t); n.Method != mcp.NotifyResourcesListChanged {
			t.Fatalf("got %s, want resources/list_changed", n.Method)
		}
	}
}

func TestGitignoreAtRunTime(t *testing.T) {
	f := newFixture(t, ignoredTree, dirsource.WithGitignore())
	f.run(t)
	l := f.listen(t, map[string]any{"resourcesListChanged": true})
	listed := slices.Clone(ignoredTreeListed)
	step := 0
	// settle writes a file that is listed, and waits for the list to be
	// want with it: the events before it have all been acted on.
	settle := func(want []string) {
		t.Helper()
		step++
		marker := fmt.Sprintf("marker%d.txt", step)
		writeFiles(t, f.root, map[string]string{marker: "m"})
		listed = append(slices.Clone(want), marker)
		slices.Sort(listed)
		f.waitListed(t, l, listed)
	}

	// Files created under excluded directories, old and new, and
	// matching excluded names stay out.
	writeFiles(t, f.root, map[string]string{
		"node_modules/new/index.js": "x",
		"build/more.txt":            "x",
		"src/gen/y.go":              "x",
		"b.log":                     "x",
	})
	if err := os.RemoveAll(filepath.Join(f.root, "build")); err != nil {
		t.Fatal(err)
	}
	// Directories created at run time, by any pattern and a directory one.
	writeFiles(t, f.root, map[string]string{"build/again.txt": "x", "src/node_modules/dep.js": "x"})
	settle(listed)

	// A changed .gitignore takes effect: the root's ...
	writeFiles(t, f.root, map[string]string{".gitignore": "node_modules/\n*.log\n/build\n*.tmp\nlib/\n"})
	settle(slices.DeleteFunc(slices.Clone(listed), func(r string) bool { return r == "keep.log" || r == "lib/node_modules" }))
	// ... and files created under a directory excluded since then stay
	// out, though it is still watched.
	writeFiles(t, f.root, map[string]string{"lib/more.txt": "x"})
	settle(listed)
	// ... a nested one, new ...
	writeFiles(t, f.root, map[string]string{"src/build/.gitignore": "*.txt\n"})
	settle(slices.DeleteFunc(slices.Clone(listed), func(r string) bool { return r == "src/build/kept.txt" }))
	// ... and removed, which brings back what it excluded.
	if err := os.Remove(filepath.Join(f.root, "src", ".gitignore")); err != nil {
		t.Fatal(err)
	}
	// (src/cache.tmp was kept by it alone.)
	settle(append(slices.DeleteFunc(slices.Clone(listed), func(r string) bool { return r == "src/cache.tmp" }), "src/gen/x.go", "src/gen/y.go"))
	if err := os.Remove(filepath.Join(f.root, ".gitignore")); err != nil {
		t.Fatal(err)
	}
	settle(append(slices.Clone(listed), "a.log", "b.log", "build/again.txt", "keep.log", "lib/more.txt",
		"lib/node_modules", "node_modules/new/index.js", "node_modules/pkg/index.js", "root.tmp", "src/cache.tmp", "src/node_modules/dep.js"))
}
