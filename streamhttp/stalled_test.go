package streamhttp_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// bigResource is the size of the resource the stalled-reader test asks
// for: far more than a small receive buffer and a small send buffer hold
// together.
const bigResource = 2 << 20

// TestStalledReaderOfAPlainAnswerIsCut: clients that ask for a large
// resource and never read get a plain JSON answer, not a stream; its
// write is cut after the write timeout, the handler returns, and the
// encoded bodies are freed.
func TestStalledReaderOfAPlainAnswerIsCut(t *testing.T) {
	const clients = 8
	srv := server.New(mcp.Implementation{Name: "big", Version: "1"})
	text := strings.Repeat("x", bigResource)
	if err := srv.AddResource(mcp.Resource{URI: "res://big", Name: "big"},
		func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "text/plain", text)}}, nil
		}); err != nil {
		t.Fatal(err)
	}
	h := streamhttp.New(srv, streamhttp.WithWriteTimeout(200*time.Millisecond))
	done := make(chan struct{}, clients)
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		done <- struct{}{}
	}))
	ts.Listener = smallSendBuffer{ts.Listener}
	ts.Start()
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
	})

	before := heapInUse()
	body := request(1, mcp.MethodResourcesRead, `"uri":"res://big"`)
	for range clients {
		stalledPost(t, ts.Listener.Addr().String(), body, headers(mcp.MethodResourcesRead, "res://big"))
	}
	timeout := time.After(10 * time.Second)
	for i := range clients {
		select {
		case <-done:
		case <-timeout:
			t.Fatalf("%d of %d handlers are still writing to readers that never read", clients-i, clients)
		}
	}
	after := heapInUse()
	t.Logf("heap %d KB before, %d KB once the %d answers of %d MiB were cut", before>>10, after>>10, clients, bigResource>>20)
	// Held, the bodies would be clients*bigResource.
	if after > before && after-before > 2*bigResource {
		t.Fatalf("heap grew by %d MB: the cut answers' bodies are still held", (after-before)>>20)
	}
}

// stalledPost sends one POST over a connection with a small receive
// buffer and never reads from it.
func stalledPost(t *testing.T, addr string, body []byte, hdr http.Header) net.Conn {
	t.Helper()
	d := net.Dialer{Control: smallReceiveBuffer}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST / HTTP/1.1\r\nHost: %s\r\n", addr)
	for k, vs := range hdr {
		for _, v := range vs {
			fmt.Fprintf(&req, "%s: %s\r\n", k, v)
		}
	}
	fmt.Fprintf(&req, "Content-Length: %d\r\n\r\n", len(body))
	req.Write(body)
	if _, err := conn.Write(req.Bytes()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestSlowReaderOfAPlainAnswerIsNotCut: a client that reads a large
// answer steadily, if more slowly than the write timeout would allow for
// the whole body at once, gets all of it: the timeout bounds each
// write, not the answer.
func TestSlowReaderOfAPlainAnswerIsNotCut(t *testing.T) {
	const size = 8 << 20
	srv := server.New(mcp.Implementation{Name: "big", Version: "1"})
	text := strings.Repeat("x", size)
	if err := srv.AddResource(mcp.Resource{URI: "res://big", Name: "big"},
		func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "text/plain", text)}}, nil
		}); err != nil {
		t.Fatal(err)
	}
	const timeout = 200 * time.Millisecond
	ts := httptest.NewUnstartedServer(streamhttp.New(srv, streamhttp.WithWriteTimeout(timeout)))
	ts.Listener = smallSendBuffer{ts.Listener}
	ts.Start()
	t.Cleanup(ts.Close)
	addr := ts.Listener.Addr().String()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/", bytes.NewReader(request(1, mcp.MethodResourcesRead, `"uri":"res://big"`)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = headers(mcp.MethodResourcesRead, "res://big")
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	// At most 16 KiB a millisecond: the 8 MiB take half a second or
	// more, while a write of them all at once would have to be done
	// within the timeout.
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	start := time.Now()
	resp, err := http.ReadResponse(bufio.NewReader(&throttled{r: conn, tick: tick.C, max: 16 << 10}), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.Copy(io.Discard, resp.Body)
	if err != nil || got != resp.ContentLength || got < size {
		t.Fatalf("read %d bytes of a %d-byte answer: %v", got, resp.ContentLength, err)
	}
	if d := time.Since(start); d < 2*timeout {
		t.Fatalf("the answer was read in %v, too fast to show anything of a %v write timeout", d, timeout)
	}
}

// smallSendBuffer gives accepted connections a fixed 64 KiB send
// buffer, so that what a reader has not read yet stays on the writer.
type smallSendBuffer struct{ net.Listener }

func (l smallSendBuffer) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(64 << 10)
	}
	return c, err
}

// throttled reads at most max bytes per tick.
type throttled struct {
	r    io.Reader
	tick <-chan time.Time
	max  int
}

func (t *throttled) Read(p []byte) (int, error) {
	<-t.tick
	return t.r.Read(p[:min(len(p), t.max)])
}

// TestBodyPastItsReadDeadlineGets408: a body that has not arrived by the
// read deadline a handler around this one set is answered with 408
// Request Timeout, which names the deadline's error.
func TestBodyPastItsReadDeadlineGets408(t *testing.T) {
	h := streamhttp.New(server.New(mcp.Implementation{Name: "slow", Version: "1"}))
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	addr := ts.Listener.Addr().String()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	hdr := headers(mcp.MethodToolsList, "")
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Length: 100\r\n", addr)
	for k := range hdr {
		fmt.Fprintf(&req, "%s: %s\r\n", k, hdr.Get(k))
	}
	req.WriteString("\r\n{")
	if _, err := conn.Write(req.Bytes()); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	e := decodeEnvelope(t, body)
	if resp.StatusCode != http.StatusRequestTimeout || e.Error == nil || !strings.Contains(e.Error.Message, "Request Timeout") {
		t.Fatalf("answer %d %s; want a 408 that says the body timed out", resp.StatusCode, body)
	}
}
