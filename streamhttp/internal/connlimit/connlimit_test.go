package connlimit_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"tidings/internal/testrig/testkit"
	"tidings/streamhttp/internal/connlimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 10 * time.Second

// serve runs h behind a Guard with cfg on a loopback listener, closed at
// the test's end.
func serve(t *testing.T, cfg connlimit.Config, h http.Handler) (*connlimit.Guard, string) {
	t.Helper()
	g := connlimit.New(cfg)
	ts := httptest.NewUnstartedServer(g.Handler(h))
	ts.Listener = g.Listen(ts.Listener)
	ts.Config.ConnState = g.ConnState
	ts.Start()
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		if s := g.Stats(); s.Open != 0 || s.Idle != 0 {
			t.Errorf("after the server closed: %d connections open, %d idle; want none", s.Open, s.Idle)
		}
	})
	return g, ts.Listener.Addr().String()
}

// dialFrom opens a connection to addr from the loopback address ip: all
// of 127/8 is loopback, so a test can be several clients.
func dialFrom(t *testing.T, ip, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Control: smallReceiveBuffer}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get sends one GET on c and returns the response, read whole.
func get(t *testing.T, c net.Conn, r *bufio.Reader, path string) (*http.Response, string) {
	t.Helper()
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: test\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	return readResponse(t, c, r)
}

func readResponse(t *testing.T, c net.Conn, r *bufio.Reader) (*http.Response, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatalf("reading a response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading a response body: %v", err)
	}
	return resp, string(b)
}

// closedByServer reports whether the server has closed c, reading
// whatever it still sends first.
func closedByServer(t *testing.T, c net.Conn) bool {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return true
}

func ok(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") }

// TestPerAddressCapRefusesTheExcess: with a cap of 20 per address, 30
// connections from one address that send nothing leave 20 open and 10
// refused with a 503 that names the cap, while a client at another
// address is served, and the caps' counts say so.
func TestPerAddressCapRefusesTheExcess(t *testing.T) {
	g, addr := serve(t, connlimit.Config{PerAddress: 20}, http.HandlerFunc(ok))
	var conns []net.Conn
	for range 30 {
		conns = append(conns, dialFrom(t, "127.0.0.1", addr))
	}
	testkit.WaitFor(t, wait, "the excess to be refused", func() bool {
		s := g.Stats()
		return s.Refused[connlimit.PerAddress] == 10 && s.Open == 20
	})
	// The accept queue keeps the order of the dials.
	for i, c := range conns[20:] {
		resp, body := readResponse(t, c, bufio.NewReader(c))
		if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "127.0.0.1") || !strings.Contains(body, "allows 20 at once from one client address") {
			t.Fatalf("refused connection %d: %d %q; want a 503 naming the address and the cap", 20+i, resp.StatusCode, body)
		}
		if !closedByServer(t, c) {
			t.Fatalf("refused connection %d is still open", 20+i)
		}
	}

	other := dialFrom(t, "127.0.0.2", addr)
	if resp, body := get(t, other, bufio.NewReader(other), "/"); resp.StatusCode != http.StatusOK || body != "ok\n" {
		t.Fatalf("another address: %d %q", resp.StatusCode, body)
	}
	// The connections let in are served, none of them being idle.
	if resp, _ := get(t, conns[0], bufio.NewReader(conns[0]), "/"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a connection within the cap: %d", resp.StatusCode)
	}
	s := g.Stats()
	if s.Refused[connlimit.Total] != 0 || s.Evicted[connlimit.PerAddress] != 0 {
		t.Errorf("stats %+v: want refusals at the per-address cap only, and no eviction", s)
	}
}

// TestIdleConnectionsMakeRoom: when every connection under the cap is
// idle between requests, a new one closes the one idle longest instead
// of being refused.
func TestIdleConnectionsMakeRoom(t *testing.T) {
	g, addr := serve(t, connlimit.Config{PerAddress: 20}, http.HandlerFunc(ok))
	var conns []net.Conn
	for i := range 20 {
		c := dialFrom(t, "127.0.0.1", addr)
		if resp, _ := get(t, c, bufio.NewReader(c), "/"); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		conns = append(conns, c)
		// One at a time, so that they are idle in the order of conns.
		testkit.WaitFor(t, wait, "the connection to be idle", func() bool { return g.Stats().Idle == i+1 })
	}

	c := dialFrom(t, "127.0.0.1", addr)
	if resp, body := get(t, c, bufio.NewReader(c), "/"); resp.StatusCode != http.StatusOK {
		t.Fatalf("a new connection at a cap of idle ones: %d %q", resp.StatusCode, body)
	}
	if !closedByServer(t, conns[0]) {
		t.Fatalf("the connection idle longest is still open; stats %+v", g.Stats())
	}
	s := g.Stats()
	if s.Evicted[connlimit.PerAddress] != 1 || s.Refused[connlimit.PerAddress] != 0 || s.Open != 20 {
		t.Fatalf("stats %+v: want one eviction, no refusal, 20 open", s)
	}
	if resp, _ := get(t, conns[1], bufio.NewReader(conns[1]), "/"); resp.StatusCode != http.StatusOK {
		t.Fatal("an idle connection that was not evicted no longer serves")
	}
}

// TestTotalCap: with a total cap of 10 and no cap per address, idle
// connections are closed to make room, and a connection is refused
// once none is idle.
func TestTotalCap(t *testing.T) {
	g, addr := serve(t, connlimit.Config{Total: 10}, http.HandlerFunc(ok))
	for range 5 {
		c := dialFrom(t, "127.0.0.1", addr)
		if resp, _ := get(t, c, bufio.NewReader(c), "/"); resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
	}
	for range 5 {
		dialFrom(t, "127.0.0.2", addr)
	}
	testkit.WaitFor(t, wait, "10 open, 5 idle", func() bool { s := g.Stats(); return s.Open == 10 && s.Idle == 5 })
	var last net.Conn
	for range 6 {
		last = dialFrom(t, "127.0.0.3", addr)
	}
	testkit.WaitFor(t, wait, "5 evictions and a refusal", func() bool {
		s := g.Stats()
		return s.Evicted[connlimit.Total] == 5 && s.Refused[connlimit.Total] == 1
	})
	resp, body := readResponse(t, last, bufio.NewReader(last))
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "allows 10 at once in all") {
		t.Fatalf("the connection beyond the cap: %d %q", resp.StatusCode, body)
	}
}

// TestSlowBodyIsCut: a body whose first byte comes and the rest never
// does is cut off after the body timeout, answered with what the
// handler makes of the error, and the connection closed.
func TestSlowBodyIsCut(t *testing.T) {
	done := make(chan error, 1)
	g, addr := serve(t, connlimit.Config{BodyTimeout: 200 * time.Millisecond}, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		done <- err
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
		}
	}))
	c := dialFrom(t, "127.0.0.1", addr)
	if _, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: test\r\nContent-Length: 100\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		var bte *connlimit.BodyTimeoutError
		if !errors.As(err, &bte) || !errors.Is(err, errDeadline) || bte.Timeout != 200*time.Millisecond {
			t.Fatalf("reading the body: %v; want a BodyTimeoutError", err)
		}
	case <-time.After(wait):
		t.Fatal("a body that stopped coming was waited for without end")
	}
	resp, body := readResponse(t, c, bufio.NewReader(c))
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(body, "did not arrive within 200ms") {
		t.Fatalf("answer: %d %q", resp.StatusCode, body)
	}
	if !closedByServer(t, c) {
		t.Fatal("the connection stays open after its body was cut")
	}
	if n := g.Stats().BodyTimeouts; n != 1 {
		t.Fatalf("BodyTimeouts = %d, want 1", n)
	}
}

// TestDeadlinesSpareLongAnswers: a POST whose answer streams for many
// times the body and write timeouts, with pauses longer than both, and a
// GET stream alike, are not cut, nor are their contexts cancelled.
func TestDeadlinesSpareLongAnswers(t *testing.T) {
	const timeout = 100 * time.Millisecond
	stream := func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if _, err := io.ReadAll(r.Body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
		}
		rc := http.NewResponseController(w)
		for i := range 4 {
			if i > 0 {
				select {
				case <-time.After(3 * timeout): // a pause longer than either timeout
				case <-r.Context().Done():
					return
				}
			}
			if _, err := fmt.Fprintf(w, "event %d\n", i); err != nil {
				return
			}
			if err := rc.Flush(); err != nil {
				return
			}
		}
	}
	g, addr := serve(t, connlimit.Config{BodyTimeout: timeout, WriteTimeout: timeout}, http.HandlerFunc(stream))
	c := &http.Client{}
	defer c.CloseIdleConnections()
	for _, method := range []string{http.MethodPost, http.MethodGet} {
		var body io.Reader
		if method == http.MethodPost {
			body = strings.NewReader(`{"listen":true}`)
		}
		req, err := http.NewRequestWithContext(context.Background(), method, "http://"+addr+"/", body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || strings.Count(string(b), "event") != 4 {
			t.Fatalf("%s: %q, %v; want 4 events", method, b, err)
		}
	}
	if s := g.Stats(); s.BodyTimeouts != 0 || s.WriteTimeouts != 0 {
		t.Fatalf("stats %+v: a long answer was taken for a timeout", s)
	}
}

// TestStalledReaderIsCut: an answer far larger than the socket buffers,
// to a client that never reads, is cut after the write timeout: the
// handler returns instead of blocking for ever.
func TestStalledReaderIsCut(t *testing.T) {
	done := make(chan error, 1)
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	g, addr := serve(t, connlimit.Config{WriteTimeout: 200 * time.Millisecond}, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for range 64 {
			if _, err := w.Write(chunk); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}))
	c := dialFrom(t, "127.0.0.1", addr)
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: test\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, errDeadline) {
			t.Fatalf("the handler ended with %v, want a write deadline error", err)
		}
	case <-time.After(wait):
		t.Fatal("the handler is still writing to a reader that never reads")
	}
	testkit.WaitFor(t, wait, "the connection to close", func() bool { return g.Stats().Open == 0 })
	if n := g.Stats().WriteTimeouts; n != 1 {
		t.Fatalf("WriteTimeouts = %d, want 1", n)
	}
}

// errDeadline is the error of a read or write past its deadline.
var errDeadline = os.ErrDeadlineExceeded
