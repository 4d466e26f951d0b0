package gateway_test

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tidings/client"
	"tidings/gateway"
	"tidings/internal/testrig/testkit"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/streamhttp"
)

// TestGatewayAsItsOwnUpstream: a gateway whose configuration names its
// own address as an upstream, beside a real one, finds the loop, says
// so, serves the other upstream's tools at once, and, left alone, uses
// no CPU.
func TestGatewayAsItsOwnUpstream(t *testing.T) {
	a := startUpstream(t, mcp.ScopePublic, "echo")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	self := "http://" + ln.Addr().String() + "/mcp"
	// The address answers before the gateway exists, as a restarted
	// process's would, with 503 until it does.
	var h atomic.Pointer[http.Handler]
	hs := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := h.Load(); p != nil {
			(*p).ServeHTTP(w, r)
			return
		}
		http.Error(w, "starting", http.StatusServiceUnavailable)
	})}}
	hs.Start()
	var logs testkit.SyncBuffer
	g, err := gateway.New(context.Background(), gateway.Config{Upstreams: []gateway.Upstream{{ID: "self", URL: self}, {ID: "a", URL: a.url}}},
		gateway.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	handler := http.Handler(streamhttp.New(g.Server(), streamhttp.WithParking()))
	h.Store(&handler)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = g.Server().Shutdown(ctx)
		hs.Close()
		g.Close()
	})

	c := client.NewHTTP(self)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	raw, err := c.Request(ctx, mcp.MethodToolsList, nil)
	if err != nil {
		t.Fatalf("tools/list on a gateway that is its own upstream: %v", err)
	}
	var page struct {
		Tools []mcp.Tool     `json:"tools"`
		Meta  map[string]any `json:"_meta"`
	}
	if err := jsonrpc.UnmarshalParams(raw, &page); err != nil {
		t.Fatal(err)
	}
	if got := names(page.Tools); len(got) != 1 || got[0] != "a_echo" {
		t.Fatalf("tools %v, want [a_echo]", got)
	}
	testkit.WaitFor(t, waitTimeout, "the loop to be logged", func() bool {
		return strings.Contains(logs.String(), "upstream self leads back to this gateway: it is this gateway itself")
	})
	// At rest, the gateway costs nothing: no listen of its own to hear.
	before, ok := processCPU()
	if !ok {
		t.Skip("no CPU time on this platform")
	}
	time.Sleep(500 * time.Millisecond) // a span of rest to measure, not a wait for anything
	if used, _ := processCPU(); used-before > 100*time.Millisecond {
		t.Errorf("the gateway used %v of CPU in half a second at rest", used-before)
	}
}
