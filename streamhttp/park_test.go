package streamhttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"tidings/internal/engine"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// parkMode is one way a listen is carried: parked (over HTTP/1.1 on
// Linux, with WithParking) or on its own goroutine (the default).
type parkMode struct {
	name   string
	opts   []streamhttp.Option
	parked bool
}

// parkModes returns both modes; tests of listens run under each.
func parkModes() []parkMode {
	return []parkMode{
		{name: "parked", opts: []streamhttp.Option{streamhttp.WithParking()}, parked: runtime.GOOS == "linux"},
		{name: "goroutine"},
	}
}

// want checks that n listens are parked in the parked mode (waiting for
// the hand-over), and none in the other.
func (m parkMode) want(t *testing.T, f *fixture, n int) {
	t.Helper()
	if !m.parked {
		if got := f.h.ParkedListens(); got != 0 {
			t.Fatalf("%d listens parked, want none (%s)", got, m.name)
		}
		return
	}
	testkit.WaitFor(t, 10*time.Second, "the listens to be parked", func() bool { return f.h.ParkedListens() == n })
}

// TestParkedListenEndsWhenItsClientLeaves: a parked listen hears of
// changes, tagged with its id, and once its client closes the
// connection, the listen ends (the hub and the open-listen count let go
// of it) with nothing waiting on the connection.
func TestParkedListenEndsWhenItsClientLeaves(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("listens are parked on Linux only")
	}
	f := newFixture(t, nil, streamhttp.WithParking())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := f.open(t, ctx, listenBody(7, `{"toolsListChanged":true,"resourceSubscriptions":["res://doc"]}`), headers(mcp.MethodListen, ""))
	if ev := s.next(t); ev.Method != mcp.NotifyAcknowledged || subscriptionID(t, ev.Params) != "7" {
		t.Fatalf("first event %q %s, want the acknowledgement of 7", ev.Method, ev.Params)
	}
	parkModes()[0].want(t, f, 1)
	for range 3 {
		f.srv.ResourceUpdated("res://doc")
		ev := s.next(t)
		var u struct {
			URI string `json:"uri"`
		}
		_ = json.Unmarshal(ev.Params, &u)
		if ev.Method != mcp.NotifyResourceUpdated || u.URI != "res://doc" || subscriptionID(t, ev.Params) != "7" {
			t.Fatalf("after an update got %q %s", ev.Method, ev.Params)
		}
	}
	f.srv.RemoveTools("coffee")
	if ev := s.next(t); ev.Method != mcp.NotifyToolsListChanged || subscriptionID(t, ev.Params) != "7" {
		t.Fatalf("after a tool change got %q %s", ev.Method, ev.Params)
	}
	if n := f.srv.ListenStats().Listens; n != 1 {
		t.Fatalf("%d listens open, want 1", n)
	}
	s.resp.Body.Close()
	testkit.WaitFor(t, 10*time.Second, "the listen to end after its client left", func() bool {
		return f.h.ParkedListens() == 0 && engine.Of(f.srv).Hub().Len() == 0 && f.srv.ListenStats().Listens == 0
	})
}

// TestParkedListenEndSurvivesAPanickingMiddleware: a parked listen ends
// on a goroutine every parked listen shares, so a middleware whose
// AfterEnd function panics must cost a log line, not the process: the
// middleware's other end functions still run, the panic is logged, and
// the server parks and ends the next listen as before.
func TestParkedListenEndSurvivesAPanickingMiddleware(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("listens are parked on Linux only")
	}
	var logged testkit.SyncBuffer
	ended := make(chan error, 2)
	mw := func(next server.MethodHandler) server.MethodHandler {
		return func(ctx context.Context, req *server.Request) error {
			err := next(ctx, req)
			req.AfterEnd(func(error) { panic("an end function's bug") })
			req.AfterEnd(func(end error) { ended <- end })
			return err
		}
	}
	f := newFixture(t, []server.Option{server.WithMiddleware(mw), server.WithLogger(slog.New(slog.NewTextHandler(&logged, nil)))},
		streamhttp.WithParking())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 2 {
		s := f.open(t, ctx, listenBody(i, `{"toolsListChanged":true}`), headers(mcp.MethodListen, ""))
		if ev := s.next(t); ev.Method != mcp.NotifyAcknowledged {
			t.Fatalf("listen %d: first event %q", i, ev.Method)
		}
		parkModes()[0].want(t, f, 1)
		s.resp.Body.Close()
		select {
		case <-ended:
		case <-ctx.Done():
			t.Fatalf("listen %d: the end function after the panicking one never ran", i)
		}
		testkit.WaitFor(t, 10*time.Second, "the listen to end", func() bool {
			return f.h.ParkedListens() == 0 && f.srv.ListenStats().Listens == 0
		})
	}
	if !strings.Contains(logged.String(), "an end function's bug") {
		t.Fatalf("the panic was not logged:\n%s", logged.String())
	}
}

// TestParkedListensHoldNoGoroutine: a thousand parked listens add a
// handful of goroutines (the poller, the writers, the ticker), not one
// or two each, and all of them hear a change.
func TestParkedListensHoldNoGoroutine(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("listens are parked on Linux only")
	}
	const listens = 1000
	f := newFixture(t, []server.Option{server.WithKeepAlive(0), server.WithListenLimits(server.ListenLimits{
		PerPrincipal: server.Allowance{Listens: 2 * listens}, Total: server.Allowance{Listens: 2 * listens}})}, streamhttp.WithParking())
	before := runtime.NumGoroutine()
	conns := make([]*bufio.Reader, listens)
	for i := range conns {
		conns[i] = bufio.NewReader(dialListen(t, f, listenBody(i, `{"toolsListChanged":true}`)))
	}
	parkModes()[0].want(t, f, listens)
	grown := runtime.NumGoroutine() - before
	t.Logf("%d parked listens: %d more goroutines", listens, grown)
	if grown >= 100 {
		t.Fatalf("%d parked listens hold %d more goroutines, want fewer than 100", listens, grown)
	}
	f.srv.RemoveTools("coffee")
	for i, br := range conns {
		// The ack, then the change, each an SSE event in a chunk.
		for _, want := range []string{mcp.NotifyAcknowledged, mcp.NotifyToolsListChanged} {
			if err := readUntil(br, want); err != nil {
				t.Fatalf("listen %d: waiting for %s: %v", i, want, err)
			}
		}
	}
}

// readUntil reads lines from br until one contains want.
func readUntil(br *bufio.Reader, want string) error {
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		if json.Valid([]byte(l[min(len(l), len("data: ")):])) && containsMethod(l, want) {
			return nil
		}
	}
}

func containsMethod(line, method string) bool {
	var e struct {
		Method string `json:"method"`
	}
	if len(line) < 6 || line[:6] != "data: " {
		return false
	}
	return json.Unmarshal([]byte(line[6:]), &e) == nil && e.Method == method
}

// opaqueListener hands out connections that hide their socket, as a
// net.Listener wrapper may: a listen on one cannot be parked once
// net/http has let go of the connection, and goes on its own goroutine,
// written to the connection directly.
type opaqueListener struct{ net.Listener }

func (l opaqueListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return struct{ net.Conn }{c}, nil
}

// TestListenOnAnOpaqueConnection: a listen whose connection cannot be
// parked is acknowledged, hears its changes and ends with the complete
// result and a clean end of the body, as any.
func TestListenOnAnOpaqueConnection(t *testing.T) {
	f := newFixture(t, nil, streamhttp.WithParking())
	f.ts.Close() // the fixture's own server; its cleanup closes the one made here
	ts := httptest.NewUnstartedServer(f.h)
	ts.Listener = opaqueListener{ts.Listener}
	ts.Start()
	f.ts, f.c = ts, ts.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := f.open(t, ctx, listenBody(5, `{"toolsListChanged":true}`), headers(mcp.MethodListen, ""))
	if ev := s.next(t); ev.Method != mcp.NotifyAcknowledged {
		t.Fatalf("first event %q, want the acknowledgement", ev.Method)
	}
	f.srv.RemoveTools("coffee")
	if ev := s.next(t); ev.Method != mcp.NotifyToolsListChanged || subscriptionID(t, ev.Params) != "5" {
		t.Fatalf("after a tool change got %q %s", ev.Method, ev.Params)
	}
	if n := f.h.ParkedListens(); n != 0 {
		t.Fatalf("%d listens parked on a connection without a socket", n)
	}
	if err := f.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if end := s.next(t); string(end.ID) != "5" || end.Result == nil {
		t.Fatalf("after shutdown got %+v, want the result of 5", end)
	}
	if _, err := s.r.Next(); err == nil || err.Error() != "EOF" {
		t.Fatalf("after the result: %v, want EOF (a clean end of the chunked body)", err)
	}
}
