package dirsource_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"tidings/dirsource"
	"tidings/mcp"
)

// BenchmarkCreateDelete10k creates 10,000 files in the served directory
// and then deletes them, and measures how long it takes until the
// resource list is right after each: create-ms until all are listed,
// delete-ms until none is; the -lag-ms figures count from the last file
// operation, which leaves out the file system's own time. It runs beside trees of different sizes
// already being served: a change costs in proportion to what changed,
// so the figures should not grow with the tree. A lag is the time from the
// last file operation to the notification after which the list is right.
func BenchmarkCreateDelete10k(b *testing.B) {
	const churn = 10000
	for _, tree := range []int{0, 100000} {
		b.Run(fmt.Sprintf("tree=%d", tree), func(b *testing.B) {
			files := make(map[string]string, tree)
			for i := range tree {
				files[fmt.Sprintf("tree/d%03d/f%05d.txt", i%100, i)] = "x"
			}
			f := newFixture(b, files, dirsource.WithMaxFiles(tree+churn))
			f.run(b)
			l := f.listen(b, map[string]any{"resourcesListChanged": true})
			dir := filepath.Join(f.root, "churn")
			if err := os.Mkdir(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			var create, remove, createLag, removeLag time.Duration
			n := 0
			for b.Loop() {
				start := time.Now()
				for i := range churn {
					if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%05d.txt", i)), []byte("x"), 0o644); err != nil {
						b.Fatal(err)
					}
				}
				last := time.Now()
				told := f.waitCount(b, l, tree+churn, last)
				create += told.Sub(start)
				createLag += told.Sub(last)
				start = time.Now()
				for i := range churn {
					if err := os.Remove(filepath.Join(dir, fmt.Sprintf("f%05d.txt", i))); err != nil {
						b.Fatal(err)
					}
				}
				last = time.Now()
				told = f.waitCount(b, l, tree, last)
				remove += told.Sub(start)
				removeLag += told.Sub(last)
				n++
			}
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n) }
			b.ReportMetric(ms(create), "create-ms")
			b.ReportMetric(ms(createLag), "create-lag-ms")
			b.ReportMetric(ms(remove), "delete-ms")
			b.ReportMetric(ms(removeLag), "delete-lag-ms")
		})
	}
}

// waitCount waits for list changes until the list holds n resources and
// returns when the server sent the latest notification before the check
// that found it right (since, when it was right at once): when a listening
// client learns that its list is right, not when this check has walked a
// list of a hundred thousand items. Notifications are drained between
// checks, so the stream never backs up.
func (f *fixture) waitCount(b *testing.B, l *listener, n int, since time.Time) time.Time {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	told := since
	for {
		for drained := false; !drained; {
			select {
			case m := <-l.ch:
				if !bytes.Contains(m, []byte(mcp.NotifyResourcesListChanged)) {
					b.Fatalf("got %s", m)
				}
				told = l.lastSent()
			default:
				drained = true
			}
		}
		if len(f.allURIs(b)) == n {
			return told
		}
		if time.Now().After(deadline) {
			b.Fatalf("list holds %d resources, want %d", len(f.allURIs(b)), n)
		}
		if m := l.next(b); m.Method != mcp.NotifyResourcesListChanged {
			b.Fatalf("got %s", m.Method)
		}
		told = l.lastSent()
	}
}

// BenchmarkListDirectory lists a directory with list_directory, which
// answers with at most the entry limit (1000) of its entries: the cost of
// a directory of 100,000 should be that of the entries shown, as for a
// directory of 1000, not that of the whole directory. The files are made
// after the source scanned the tree, so that only the tool reads them.
func BenchmarkListDirectory(b *testing.B) {
	for _, n := range []int{1000, 100000} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			f := newFixture(b, nil)
			dir := filepath.Join(f.root, "big")
			if err := os.Mkdir(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			for i := range n {
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%06d.txt", i)), nil, 0o644); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if r := f.tool(b, "list_directory", map[string]any{"path": "big"}); r.IsError || len(r.Structured["entries"].([]any)) != 1000 {
					b.Fatalf("list_directory: %v", r.Content)
				}
			}
		})
	}
}
