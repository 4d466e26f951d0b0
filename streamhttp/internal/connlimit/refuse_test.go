package connlimit_test

import (
	"bufio"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"tidings/internal/testrig/testkit"
	"tidings/streamhttp/internal/connlimit"
)

// TestRefusalsAnsweredApartAreBounded: with clients that speak first
// (here HTTP/2 beside HTTP/1.1), refused connections that never speak
// are held apart from the accept loop, at most 64 at once, the rest
// answered at once in plain HTTP/1.1; closing the server ends those
// held (goleak checks their goroutines).
func TestRefusalsAnsweredApartAreBounded(t *testing.T) {
	g := connlimit.New(connlimit.Config{PerAddress: 1, HTTP2: true, MaxRefusing: 8})
	ts := httptest.NewUnstartedServer(g.Handler(http.HandlerFunc(ok)))
	ts.Listener = g.Listen(ts.Listener)
	ts.Config.ConnState = g.ConnState
	ts.Start()
	closed := false
	defer func() {
		if !closed {
			ts.Close()
		}
	}()
	addr := ts.Listener.Addr().String()

	silent := refuseSilent(t, g, addr, 8)
	if n := g.Stats().Refusing; n != 8 {
		t.Fatalf("%d refusals held apart; want 8, the bound", n)
	}
	// The ones past the bound are answered at once.
	for i, c := range silent[8:] {
		if resp, body := readResponse(t, c, bufio.NewReader(c)); resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "allows 1 at once") {
			t.Fatalf("refusal %d past the bound: %d %q", 8+i, resp.StatusCode, body)
		}
		if !closedByServer(t, c) {
			t.Fatalf("refusal %d past the bound is still open", 8+i)
		}
	}

	ts.Close()
	closed = true
	if n := g.Stats().Refusing; n != 0 {
		t.Fatalf("%d refusals still held after the server closed", n)
	}
	for i, c := range silent[:8] {
		if !closedByServer(t, c) {
			t.Fatalf("held refusal %d is still open after the server closed", i)
		}
	}
}

// TestRefusalOverHTTP1BesideHTTP2: where clients may speak HTTP/2, an
// HTTP/1.1 client refused at the cap still reads the 503 naming it.
func TestRefusalOverHTTP1BesideHTTP2(t *testing.T) {
	g, addr := serve(t, connlimit.Config{PerAddress: 1, HTTP2: true}, http.HandlerFunc(ok))
	dialFrom(t, "127.0.0.1", addr)
	testkit.WaitFor(t, wait, "the holder to be admitted", func() bool { return g.Stats().Open == 1 })
	c := dialFrom(t, "127.0.0.1", addr)
	resp, body := get(t, c, bufio.NewReader(c), "/")
	if resp.StatusCode != http.StatusServiceUnavailable || body != "too many connections from 127.0.0.1: this server allows 1 at once from one client address\n" {
		t.Fatalf("refused: %d %q", resp.StatusCode, body)
	}
}

// TestUntoldRefusalsOverTLSAreCounted: over TLS, refused connections
// past the bound of those answered apart cannot be told why at once
// (the client has not yet spoken TLS): they are closed, and counted.
// The bound is its default.
func TestUntoldRefusalsOverTLSAreCounted(t *testing.T) {
	// The silent clients never say hello, so the config needs no
	// certificate.
	g, addr := serve(t, connlimit.Config{PerAddress: 1, TLS: &tls.Config{}}, http.HandlerFunc(ok))
	silent := refuseSilent(t, g, addr, connlimit.DefaultMaxRefusing)
	if s := g.Stats(); s.Refusing != 64 || s.Untold != 6 {
		t.Fatalf("%d refusals held apart and %d untold; want 64, the bound, and the 6 past it", s.Refusing, s.Untold)
	}
	for i, c := range silent[64:] {
		if !closedByServer(t, c) {
			t.Fatalf("refusal %d past the bound is still open", 64+i)
		}
	}
}

// refuseSilent fills g's cap of one connection per address at addr with
// a connection that sends nothing (new, so not idle, and not closed to
// make room), then opens bound+6 more that send nothing, and returns
// them once all are refused: 6 past bound, the most refusals answered
// apart.
func refuseSilent(t *testing.T, g *connlimit.Guard, addr string, bound int) []net.Conn {
	t.Helper()
	dialFrom(t, "127.0.0.1", addr)
	testkit.WaitFor(t, wait, "the first connection to be let in", func() bool { return g.Stats().Open == 1 })
	var silent []net.Conn
	for range bound + 6 {
		silent = append(silent, dialFrom(t, "127.0.0.1", addr))
	}
	testkit.WaitFor(t, wait, "the refusals", func() bool { return g.Stats().Refused[connlimit.PerAddress] == int64(bound+6) })
	return silent
}
