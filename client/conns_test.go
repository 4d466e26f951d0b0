package client

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// TestConcurrentCallsReuseConnections makes rounds of concurrent
// requests: from the second round on, each goes over a connection kept
// from the first, where net/http's default of 2 per server would open
// (and then close) one for every request past two.
func TestConcurrentCallsReuseConnections(t *testing.T) {
	srv := server.New(mcp.Implementation{Name: "conns", Version: "1.0.0"}, server.WithLogger(quietLogger()))
	addTools(t, srv, "echo")
	var opened atomic.Int64
	hs := httptest.NewUnstartedServer(streamhttp.New(srv))
	hs.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			opened.Add(1)
		}
	}
	hs.Start()
	t.Cleanup(hs.Close)
	c := NewHTTP(hs.URL, WithLogger(quietLogger()))
	t.Cleanup(func() { c.Close() })
	const inFlight, rounds = 8, 10
	for range rounds {
		var wg sync.WaitGroup
		errs := make(chan error, inFlight)
		for range inFlight {
			wg.Go(func() {
				if _, err := c.Request(context.Background(), mcp.MethodToolsList, nil); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	// Connect's own requests and the first round may open up to inFlight
	// (and one more, for a request racing a connection's return).
	if n := opened.Load(); n > inFlight+1 {
		t.Fatalf("%d rounds of %d concurrent requests opened %d connections; want at most %d", rounds, inFlight, n, inFlight+1)
	}
}
