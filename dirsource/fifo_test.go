//go:build unix

package dirsource_test

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"tidings/mcp"
)

// promptly runs fn and fails the test if it does not return within a few
// seconds. A call stuck opening the named pipe at fifo is released by
// opening the pipe's other end, so the test ends either way.
func promptly(t *testing.T, what, fifo string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		t.Errorf("%s blocked on a named pipe", what)
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		<-done
	}
}

func TestNamedPipesAreRefused(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": "a"})
	fifo := filepath.Join(f.root, "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	f.run(t)

	promptly(t, "resources/read", fifo, func() {
		r := f.rpc(t, mcp.MethodResourcesRead, map[string]any{"uri": f.uri("pipe")})
		if r.Error == nil || r.Error.Code != -32602 {
			t.Errorf("read of a named pipe = %+v, want resource not found", r)
		}
	})
	promptly(t, "file_info", fifo, func() {
		if r := f.tool(t, "file_info", map[string]any{"path": "pipe"}); !r.IsError {
			t.Errorf("file_info of a named pipe = %v", r.Structured)
		}
	})
	promptly(t, "list_directory", fifo, func() {
		if r := f.tool(t, "list_directory", map[string]any{"path": "pipe"}); !r.IsError {
			t.Errorf("list_directory of a named pipe = %v", r.Structured)
		}
	})

	// A pipe appearing while the tree is watched is skipped, and the
	// watcher keeps going: a regular file created afterwards is listed.
	if err := syscall.Mkfifo(filepath.Join(f.root, "later"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, f.root, map[string]string{"b.txt": "b"})
	deadline := time.Now().Add(wait)
	for {
		uris := f.listURIs(t)
		if slices.Contains(uris, f.uri("b.txt")) {
			if want := []string{f.uri("a.txt"), f.uri("b.txt")}; !slices.Equal(uris, want) {
				t.Errorf("list = %v, want %v", uris, want)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("b.txt never listed: %v", uris)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}
