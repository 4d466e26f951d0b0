package dirsource

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"tidings/mcp"
	"tidings/server"
)

// TestExcludedDirectoriesAreNotWatched: a directory excluded from the
// start gets no watch, and one excluded by a .gitignore changed later
// loses its watches, those below it included.
func TestExcludedDirectoriesAreNotWatched(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"node_modules/pkg", "src/gen/deep", "src/main"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("node_modules/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := New(dir, WithGitignore())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Register(server.New(mcp.Implementation{Name: "test", Version: "1"})); err != nil {
		t.Fatal(err)
	}
	wt, err := src.watch(false)
	if err != nil {
		t.Fatal(err)
	}
	defer wt.close()
	watched := func() []string {
		var rels []string
		for _, p := range wt.w.WatchList() {
			rel, _ := src.relOf(p)
			rels = append(rels, rel)
		}
		slices.Sort(rels)
		return rels
	}
	if got, want := watched(), []string{"", "src", "src/gen", "src/gen/deep", "src/main"}; !slices.Equal(got, want) {
		t.Errorf("watched %q, want %q", got, want)
	}
	if err := os.WriteFile(filepath.Join(dir, ".gitignore"), []byte("node_modules/\ngen/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src.rescan(wt, false)
	src.unwatchExcluded(wt)
	if got, want := watched(), []string{"", "src", "src/main"}; !slices.Equal(got, want) {
		t.Errorf("after the change, watched %q, want %q", got, want)
	}
}
