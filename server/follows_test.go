package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
	"tidings/stdio"
)

// uris returns n resource URIs under prefix.
func uris(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("mem://%s/%d", prefix, i)
	}
	return out
}

// listenOn is a listen's params following the given URIs.
func listenOn(uris []string) P {
	return P{"notifications": P{"toolsListChanged": true, "resourceSubscriptions": uris}}
}

// refusedListen runs a listen that must be refused. One let through is
// stopped as soon as it sends its acknowledgement, and fails the test.
func (h *harness) refusedListen(id any, params P) *response {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	rec := newRecorder(h.t)
	done := make(chan engine.Reply, 1)
	go func() { done <- h.serveRaw(ctx, encodeRequest(h.t, id, mcp.MethodListen, params), rec) }()
	var rep engine.Reply
	select {
	case rep = <-done:
	case <-rec.poke:
		cancel()
		<-done
		h.t.Fatalf("listen %v was let through: %s", id, rec.messages()[0])
	}
	rec.end()
	return decodeResponse(h.t, mcp.MethodListen, id, rep)
}

// refusedFor checks that r is the refusal of a limit: the code, a
// message naming the limit's value, and data naming the limit.
func refusedFor(t *testing.T, r *response, code jsonrpc.Code, limit string, value int) {
	t.Helper()
	r.fails(t, code)
	if want := fmt.Sprintf("(limit %d)", value); !strings.Contains(r.Error.Message, want) {
		t.Errorf("refusal %q does not say %s", r.Error.Message, want)
	}
	d := r.data(t)
	if d["limit"] != limit || d["value"] != float64(value) {
		t.Errorf("refusal data = %v, want limit %s and value %d", d, limit, value)
	}
}

// TestListenLimits: listens are refused once they would pass a bound of
// WithListenLimits — the URIs of one listen (-32602), the listens and
// URIs of one principal, and of every principal together (-32603) — and
// what an ended listen held is given back.
func TestListenLimits(t *testing.T) {
	h := listenServer(t, server.WithListenLimits(server.ListenLimits{
		URIsPerListen: 4,
		PerPrincipal:  server.Allowance{Listens: 2, URIs: 5},
		Total:         server.Allowance{Listens: 3, URIs: 9},
	}))
	alice, bob, carol := h.as("alice"), h.as("bob"), h.as("carol")

	r := alice.refusedListen(1, listenOn(uris("big", 5)))
	refusedFor(t, r, jsonrpc.CodeInvalidParams, "urisPerListen", 4)

	first := alice.startListen(2, listenOn(append(uris("a", 3), "mem://a/0"))) // a repeat counts once
	first.ack(t)
	r = alice.refusedListen(3, listenOn(uris("b", 3)))
	refusedFor(t, r, jsonrpc.CodeInternalError, "urisPerPrincipal", 5)
	alice.startListen(4, listenOn(uris("b", 2))).ack(t)
	r = alice.refusedListen(5, listenOn(nil))
	refusedFor(t, r, jsonrpc.CodeInternalError, "listensPerPrincipal", 2)

	// Another principal has its own allowance, within the total.
	bob.startListen(6, listenOn(uris("c", 4))).ack(t)
	r = carol.refusedListen(7, listenOn(nil))
	refusedFor(t, r, jsonrpc.CodeInternalError, "listens", 3)

	st := h.srv.ListenStats()
	if st.Listens != 3 || st.URIs != 3+2+4 {
		t.Errorf("ListenStats = %d listens following %d URIs, want 3 following 9", st.Listens, st.URIs)
	}
	for limit, n := range map[string]int64{"urisPerListen": 1, "urisPerPrincipal": 1, "listensPerPrincipal": 1, "listens": 1, "uris": 0} {
		if st.Refused[limit] != n {
			t.Errorf("Refused[%s] = %d, want %d", limit, st.Refused[limit], n)
		}
	}

	// An ended listen gives back what it held.
	first.stop(t)
	r = carol.refusedListen(8, listenOn(uris("d", 4)))
	refusedFor(t, r, jsonrpc.CodeInternalError, "uris", 9)
	carol.startListen(9, listenOn(uris("d", 2))).ack(t)
	if st := h.srv.ListenStats(); st.Listens != 3 || st.URIs != 8 {
		t.Errorf("after one ended and another began: %d listens following %d URIs, want 3 following 8", st.Listens, st.URIs)
	}
}

// TestListenLimitsAnonymousShare: unauthenticated callers are one
// principal, so that no number of them holds more than one allowance.
func TestListenLimitsAnonymousShare(t *testing.T) {
	h := listenServer(t, server.WithListenLimits(server.ListenLimits{PerPrincipal: server.Allowance{Listens: 1}}))
	h.as("").startListen(1, listenOn(nil)).ack(t)
	r := h.as("").refusedListen(2, listenOn(nil))
	refusedFor(t, r, jsonrpc.CodeInternalError, "listensPerPrincipal", 1)
	h.as("alice").startListen(3, listenOn(nil)).ack(t)
}

// TestLegacySubscriptionsCount: the resources a 2025-11-25 session
// subscribes to are followed URIs of its principal, whether or not its
// stream is open, until it unsubscribes or ends.
func TestLegacySubscriptionsCount(t *testing.T) {
	srv := legacyServer(t, server.WithListenLimits(server.ListenLimits{
		URIsPerListen: 2,
		PerPrincipal:  server.Allowance{URIs: 3},
	}))
	h := &harness{t: t, srv: srv.Server}
	h.startListen(1, listenOn([]string{"res://a", "res://b"})).ack(t)
	ss := openSession(t, srv, nil)
	subscribe := func(id int, method, uri string) *legacyResponse {
		r, _ := serve(t, srv, ss, id, method, map[string]any{"uri": uri})
		return r
	}
	subscribe(2, mcp.MethodResourcesSubscribe, "res://x").ok(t)
	subscribe(3, mcp.MethodResourcesSubscribe, "res://x").ok(t) // again: nothing more
	r := subscribe(4, mcp.MethodResourcesSubscribe, "res://y")
	r.fails(t, jsonrpc.CodeInternalError)
	if !strings.Contains(r.Error.Message, "(limit 3)") {
		t.Errorf("refusal %q does not name the limit's value", r.Error.Message)
	}
	subscribe(5, mcp.MethodResourcesUnsubscribe, "res://x").ok(t)
	subscribe(6, mcp.MethodResourcesSubscribe, "res://y").ok(t)
	if st := srv.ListenStats(); st.URIs != 3 {
		t.Errorf("URIs followed = %d, want the listen's 2 and the session's 1", st.URIs)
	}
	// One session follows no more than one listen may.
	srv2 := legacyServer(t, server.WithListenLimits(server.ListenLimits{URIsPerListen: 1}))
	ss2 := openSession(t, srv2, nil)
	r2, _ := serve(t, srv2, ss2, 1, mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://x"})
	r2.ok(t)
	r2, _ = serve(t, srv2, ss2, 2, mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://y"})
	r2.fails(t, jsonrpc.CodeInvalidParams)

	srv.EndSession(ss.ID())
	if st := srv.ListenStats(); st.URIs != 2 {
		t.Errorf("after the session ended, URIs followed = %d, want the listen's 2", st.URIs)
	}
}

// stdioConn is one stdio connection to a server, driven line by line.
type stdioConn struct {
	t     *testing.T
	in    *io.PipeWriter
	lines chan map[string]json.RawMessage
}

// dialStdio serves srv on a new stdio connection for the test's life.
func dialStdio(t *testing.T, srv *server.Server) *stdioConn {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = stdio.Serve(ctx, srv, inR, outW)
		outW.Close()
	}()
	c := &stdioConn{t: t, in: inW, lines: make(chan map[string]json.RawMessage, 64)}
	go func() {
		defer close(c.lines)
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]json.RawMessage
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				c.lines <- m
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		<-done
		for range c.lines {
		}
	})
	return c
}

// listen sends a listen and returns the first message it gets: the
// acknowledgement, or the error that refused it.
func (c *stdioConn) listen(id int, uris []string) map[string]json.RawMessage {
	c.t.Helper()
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": mcp.MethodListen,
		"params": map[string]any{"_meta": defaultMeta(), "notifications": map[string]any{"resourceSubscriptions": uris}}})
	if err != nil {
		c.t.Fatal(err)
	}
	if _, err := c.in.Write(append(b, '\n')); err != nil {
		c.t.Fatal(err)
	}
	select {
	case m := <-c.lines:
		return m
	case <-time.After(waitLimit):
		c.t.Fatalf("no answer to listen %d", id)
		return nil
	}
}

// refusal returns the code and limit of an error message, or 0 and "".
func refusal(m map[string]json.RawMessage) (jsonrpc.Code, string) {
	var e struct {
		Code jsonrpc.Code `json:"code"`
		Data struct {
			Limit string `json:"limit"`
		} `json:"data"`
	}
	if json.Unmarshal(m["error"], &e) != nil {
		return 0, ""
	}
	return e.Code, e.Data.Limit
}

// TestListenLimitsPerConnection: on stdio, one connection's listens are
// bounded apart from those of another connection of the same principal.
func TestListenLimitsPerConnection(t *testing.T) {
	h := listenServer(t, server.WithListenLimits(server.ListenLimits{PerConnection: server.Allowance{Listens: 2, URIs: 3}}))
	a, b := dialStdio(t, h.srv), dialStdio(t, h.srv)
	for i, step := range []struct {
		conn  *stdioConn
		uris  []string
		limit string // "" for an acknowledgement
	}{
		{a, uris("a", 2), ""},
		{a, uris("b", 2), "urisPerConnection"},
		{a, uris("b", 1), ""},
		{a, nil, "listensPerConnection"},
		{b, uris("c", 3), ""}, // the other connection, same principal
		{b, nil, ""},
	} {
		m := step.conn.listen(i+1, step.uris)
		code, limit := refusal(m)
		switch {
		case step.limit == "" && code != 0:
			t.Fatalf("listen of %d URIs refused: %s", len(step.uris), m["error"])
		case step.limit == "" && string(m["method"]) != `"`+mcp.NotifyAcknowledged+`"`:
			t.Fatalf("listen of %d URIs: first message %v, want the acknowledgement", len(step.uris), m)
		case step.limit != "" && (code != jsonrpc.CodeInternalError || limit != step.limit):
			t.Fatalf("listen of %d URIs: %s, want -32603 for %s", len(step.uris), m["error"], step.limit)
		}
	}
}
