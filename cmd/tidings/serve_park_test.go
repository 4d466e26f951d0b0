package main

import (
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"tidings/client"
)

// TestParkListensFlag: serve parks a listen by default, and keeps it on
// its goroutines with --park-listens=false; /metrics tells which.
func TestParkListensFlag(t *testing.T) {
	for _, tc := range []struct {
		flags  []string
		parked float64
	}{{nil, 1}, {[]string{"--park-listens=false"}, 0}} {
		t.Run(map[float64]string{1: "default", 0: "off"}[tc.parked], func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644); err != nil {
				t.Fatal(err)
			}
			base, stop := serveInProcess(t, dir, tc.flags...)
			defer stop()
			c := client.NewHTTP(base + "/mcp")
			defer c.Close()
			w := c.Watch(t.Context(), client.WatchOptions{Resources: true})
			defer w.Close()
			hc := &http.Client{}
			defer hc.CloseIdleConnections()
			waitMetric(t, hc, base, "tidings_listens_open", 1)
			if v := metric(t, hc, base, "tidings_listens_parked"); v != tc.parked {
				t.Fatalf("tidings_listens_parked = %v, want %v", v, tc.parked)
			}
		})
	}
}
