package client

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"tidings/jsonrpc"
	"tidings/mcp"
)

// TestSessionTransportDecorates: the session decorator alone gives a
// request its session id and version, and turns a 404 into a forgotten
// session whatever the body says; the transport underneath sends only
// what the request carries.
func TestSessionTransportDecorates(t *testing.T) {
	got := make(chan http.Header, 1)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		got <- r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"Session not found"}}`)
	}))
	t.Cleanup(func() { closeServer(ts) })
	cfg := newConfig([]HTTPOption{WithLogger(quietLogger()), WithHTTPClient(ts.Client())}, HTTPOption.applyHTTP)
	c := newClient(newHTTPTransport(ts.URL, cfg), cfg, newLifetime())
	t.Cleanup(func() { _ = c.Close() })
	req := func() *outbound {
		return &outbound{id: jsonrpc.IntID(1), method: mcp.MethodToolsList, body: []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)}
	}

	ls := &legacySession{id: "s-1", version: mcp.LegacyVersion}
	if _, err := ls.over(c).roundTrip(t.Context(), req(), nil); !errors.Is(err, errSessionGone) {
		t.Errorf("404 in a session: err = %v, want errSessionGone", err)
	}
	h := <-got
	if h.Get(mcp.HeaderSessionID) != "s-1" || h.Get(mcp.HeaderProtocolVersion) != mcp.LegacyVersion || h.Get(mcp.HeaderMethod) != "" {
		t.Errorf("session request headers: %v", h)
	}

	// Without a session id (stdio-like sessions, or before initialize) a
	// 404 is an answer like any other.
	m, err := (&legacySession{version: mcp.LegacyVersion}).over(c).roundTrip(t.Context(), req(), nil)
	if err != nil || m.Error == nil {
		t.Errorf("404 without a session: %v, %v; want the JSON-RPC error", m, err)
	}
	if h := <-got; h.Get(mcp.HeaderSessionID) != "" {
		t.Errorf("a session without an id sent %s %q", mcp.HeaderSessionID, h.Get(mcp.HeaderSessionID))
	}
}
