package dirsource

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestListDirectoryReadsOnlyWhatItShows lists a directory of 5,000
// files with a limit of 50: the listing must cost what it shows, not
// the whole directory, which allocating for every entry would.
func TestListDirectoryReadsOnlyWhatItShows(t *testing.T) {
	const n, limit = 5000, 50
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.Mkdir(big, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := os.WriteFile(filepath.Join(big, fmt.Sprintf("f%05d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	src, err := New(dir, WithMaxDirEntries(limit))
	if err != nil {
		t.Fatal(err)
	}
	var out dirListing
	allocs := testing.AllocsPerRun(3, func() {
		if out, err = src.listTool(context.Background(), nil, listArgs{Path: "big"}); err != nil {
			t.Fatal(err)
		}
	})
	if len(out.Entries) != limit || !out.Truncated {
		t.Fatalf("listing holds %d entries, truncated %v; want %d, truncated", len(out.Entries), out.Truncated, limit)
	}
	if allocs > n/2 {
		t.Errorf("listing %d of %d entries made %.0f allocations: the whole directory was read", limit, n, allocs)
	}
	t.Logf("%.0f allocations", allocs)
}
