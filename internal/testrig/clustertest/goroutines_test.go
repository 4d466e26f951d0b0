package clustertest_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"tidings/client"
	"tidings/internal/testrig/clustertest"
	"tidings/internal/testrig/testbroker"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// TestBusAddsNoGoroutinePerListen: what n more listens cost in goroutines
// is the same with a bus as without one. The bus delivers to the hub from
// its one receiving goroutine, whatever the number of listens.
func TestBusAddsNoGoroutinePerListen(t *testing.T) {
	const n = 16
	cost := func(t *testing.T, url string) int {
		t.Helper()
		watchers := func(from int) {
			ws := make([]*clustertest.Watch, n)
			for i := range ws {
				ws[i] = clustertest.NewWatch(t, fmt.Sprintf("watcher %d", from+i), url, "", client.WatchOptions{URIs: []string{"res://doc"}})
			}
			for _, w := range ws {
				w.Ready(t, 1)
			}
		}
		watchers(0)
		before := quietGoroutines(t)
		watchers(n)
		after := quietGoroutines(t)
		return after - before
	}
	var plain int
	t.Run("without a bus", func(t *testing.T) {
		srv := server.New(mcp.Implementation{Name: "plain", Version: "1"}, server.WithLogger(slog.New(slog.DiscardHandler)))
		if err := addDoc(srv); err != nil {
			t.Fatal(err)
		}
		ts := httptest.NewServer(mcpMux(srv))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), clustertest.Wait)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				t.Error(err)
			}
			ts.Close()
		})
		plain = cost(t, ts.URL+"/mcp")
		t.Logf("%d more listens without a bus: %d more goroutines", n, plain)
		if plain < n {
			t.Fatalf("%d listens cost %d goroutines: the count does not see them", n, plain)
		}
	})
	if plain == 0 {
		t.FailNow()
	}
	for _, b := range buses() {
		t.Run(b.name, func(t *testing.T) {
			c := clustertest.Start(t, clustertest.Options{Replicas: 2, Bus: b.start(t).URL(),
				Setup: func(r *clustertest.Replica) error { return addDoc(r.Server) }})
			got := cost(t, c.Replicas[0].URL()+"/mcp")
			t.Logf("%d more listens with the %s bus: %d more goroutines", n, b.name, got)
			if got != plain {
				t.Errorf("%d more listens cost %d goroutines with the %s bus, %d without", n, got, b.name, plain)
			}
		})
	}
}

// quietGoroutines returns the number of goroutines once it has stayed the
// same for a while: connections opened for the last reads settle into
// their idle state.
func quietGoroutines(t *testing.T) int {
	t.Helper()
	deadline := time.Now().Add(clustertest.Wait)
	last, same := runtime.NumGoroutine(), 0
	for same < 50 {
		if time.Now().After(deadline) {
			t.Fatalf("the goroutine count did not settle in %v (last %d)", clustertest.Wait, last)
		}
		time.Sleep(time.Millisecond) // sampling a count, not waiting for an event
		if n := runtime.NumGoroutine(); n == last {
			same++
		} else {
			last, same = n, 0
		}
	}
	return last
}

// addDoc registers res://doc, whose content never changes.
func addDoc(s *server.Server) error {
	return s.AddResource(mcp.Resource{URI: "res://doc", Name: "doc"}, func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "text/plain", "doc")}}, nil
	})
}

// mcpMux serves srv at /mcp, as every replica of a cluster does.
func mcpMux(srv *server.Server) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/mcp", streamhttp.New(srv, streamhttp.WithLogger(slog.New(slog.DiscardHandler))))
	return mux
}

// busKind is a real broker the cluster tests run over.
type busKind struct {
	name  string
	start func(t testing.TB) interface{ URL() string }
}

func buses() []busKind {
	return []busKind{
		{"nats", func(t testing.TB) interface{ URL() string } { return testbroker.StartNATS(t) }},
		{"redis", func(t testing.TB) interface{ URL() string } { return testbroker.StartRedis(t) }},
	}
}
