package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tidings/client"
	"tidings/dirsource"
	"tidings/internal/testrig/testkit"
)

// TestServeTwentyThousandFiles: with the default limit a directory of
// 20,000 files is listed partially, and the list says so; with
// --max-files 100000 all 20,000 are listed and the marker is gone.
func TestServeTwentyThousandFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 20,000 files")
	}
	dir := t.TempDir()
	for i := range 20000 {
		sub := filepath.Join(dir, fmt.Sprintf("d%02d", i%50))
		if i < 50 {
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%05d.txt", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	list := func(extra ...string) (files int, partial bool) {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		errOut := &testkit.SyncBuffer{}
		cmd := newRootCmd()
		cmd.SetArgs(append([]string{"serve", dir, "--addr", "127.0.0.1:0"}, extra...))
		cmd.SetErr(errOut)
		done := make(chan error, 1)
		go func() { done <- cmd.ExecuteContext(ctx) }()
		defer func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		}()
		var url string
		deadline := time.Now().Add(wait)
		for url == "" || !strings.Contains(errOut.String(), "watching directory") {
			if m := listening.FindStringSubmatch(errOut.String()); m != nil {
				url = m[1]
			}
			if time.Now().After(deadline) {
				t.Fatalf("serve did not come up:\n%s", errOut.String())
			}
			time.Sleep(20 * time.Millisecond) // polling the log, with a deadline
		}
		c := client.NewHTTP(url)
		defer c.Close()
		rs, err := c.Resources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if strings.HasPrefix(r.URI, "file://") {
				files++
			} else if _, ok := r.Meta[dirsource.PartialMetaKey]; ok {
				partial = true
			}
		}
		return files, partial
	}
	if files, partial := list(); files != dirsource.DefaultMaxFiles || !partial {
		t.Errorf("default limit: %d files listed, partial marker %v; want %d and a marker", files, partial, dirsource.DefaultMaxFiles)
	}
	if files, partial := list("--max-files", "100000"); files != 20000 || partial {
		t.Errorf("--max-files 100000: %d files listed, partial marker %v; want 20000 and none", files, partial)
	}
}
