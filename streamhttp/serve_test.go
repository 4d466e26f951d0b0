package streamhttp_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"tidings/internal/sse"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// frontDoor serves a server with one tool, its Handler made without
// WithParking and mounted at /mcp of a ServeMux behind a middleware, as
// a program would, with Serve on loopback. stop cancels Serve's context
// and returns what Serve returned.
type frontDoor struct {
	srv   *server.Server
	h     *streamhttp.Handler
	front *streamhttp.Server
	url   string
	stop  func() error
}

func startFrontDoor(t *testing.T, opts ...streamhttp.ServeOption) *frontDoor {
	t.Helper()
	srv := server.New(mcp.Implementation{Name: "front", Version: "1"}, server.WithKeepAlive(0))
	if err := srv.AddTool(mcp.Tool{Name: "coffee", InputSchema: []byte(`{"type":"object"}`)}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	h := streamhttp.New(srv)
	mux := http.NewServeMux()
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Middleware", "yes")
		h.ServeHTTP(w, r)
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	front := streamhttp.NewServer(mux, opts...)
	go func() { served <- front.Serve(ctx, ln) }()
	fd := &frontDoor{srv: srv, h: h, front: front, url: "http://" + ln.Addr().String() + "/mcp"}
	var once bool
	var result error
	fd.stop = func() error {
		if !once {
			once = true
			cancel()
			result = <-served
		}
		return result
	}
	t.Cleanup(func() { _ = fd.stop() })
	return fd
}

// listen opens a listen on tools with c and returns its stream, read
// past the acknowledgement.
func listenWith(t *testing.T, c *http.Client, url string, id int) (*sse.Reader, io.Closer) {
	t.Helper()
	body := []byte(`{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"subscriptions/listen","params":{"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"` + mcp.Version + `","io.modelcontextprotocol/clientCapabilities":{}},` +
		`"notifications":{"toolsListChanged":true}}}`)
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version)
	req.Header.Set(mcp.HeaderMethod, mcp.MethodListen)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Middleware") != "yes" {
		t.Fatalf("listen: %s (middleware %q)", resp.Status, resp.Header.Get("X-Middleware"))
	}
	r := sse.NewReader(resp.Body, 0)
	waitFor(t, r, mcp.NotifyAcknowledged)
	return r, resp.Body
}

// waitFor reads events until one holds want.
func waitFor(t *testing.T, r *sse.Reader, want string) {
	t.Helper()
	for {
		ev, err := r.Next()
		if err != nil {
			t.Fatalf("waiting for %s: %v", want, err)
		}
		if bytes.Contains(ev.Data, []byte(want)) {
			return
		}
	}
}

// TestServeParksListensBehindAMux: a Handler made without WithParking,
// behind a ServeMux and a middleware, served by Serve, parks its listens
// over HTTP/1.1 (Linux) and HTTP/2 (h2c): they hold no goroutine, hear a
// change, and, when Serve's context ends, get their complete result
// before Serve returns nil.
func TestServeParksListensBehindAMux(t *testing.T) {
	const n = 30
	for _, h2c := range []bool{false, true} {
		name := "HTTP/1.1"
		if h2c {
			name = "h2c"
		}
		t.Run(name, func(t *testing.T) {
			if !h2c && runtime.GOOS != "linux" {
				t.Skip("listens over HTTP/1.1 park on Linux only")
			}
			fd := startFrontDoor(t)
			tr := &http.Transport{}
			if h2c {
				tr.Protocols = new(http.Protocols)
				tr.Protocols.SetUnencryptedHTTP2(true)
			}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			// The client's own goroutines per stream or connection are
			// counted apart: a read loop per connection (HTTP/1.1) or
			// per stream body (HTTP/2) would weigh as the server's.
			before := runtime.NumGoroutine()
			streams := make([]*sse.Reader, n)
			for i := range n {
				streams[i], _ = listenWith(t, c, fd.url, i+1)
			}
			if h2c {
				testkit.WaitFor(t, 10*time.Second, "every listen parked", func() bool { return fd.front.Stats().HTTP2Parked == n })
			} else {
				testkit.WaitFor(t, 10*time.Second, "every listen parked", func() bool { return fd.h.ParkedListens() == n })
			}
			grown := runtime.NumGoroutine() - before
			t.Logf("%d listens: %d more goroutines", n, grown)
			// net/http's client keeps two goroutines per HTTP/1.1
			// connection and one per HTTP/2 stream; the server, none.
			clientOwn := 2 * n
			if h2c {
				clientOwn = n + 2
			}
			if grown > clientOwn+n/3 {
				t.Errorf("%d listens grew the goroutines by %d; the client alone takes about %d", n, grown, clientOwn)
			}
			fd.srv.RemoveTools("coffee")
			for _, r := range streams {
				waitFor(t, r, mcp.NotifyToolsListChanged)
			}
			ended := make(chan error, 1)
			go func() { ended <- fd.stop() }()
			for _, r := range streams {
				waitFor(t, r, `"resultType":"complete"`)
			}
			if err := <-ended; err != nil {
				t.Fatalf("Serve returned %v, want nil", err)
			}
		})
	}
}

// TestServeRefusesPastACapNamingIt: past the connections allowed from one
// address, a new one is refused with a 503 that names the cap.
func TestServeRefusesPastACapNamingIt(t *testing.T) {
	fd := startFrontDoor(t, streamhttp.WithConnLimits(1, 0))
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	_, held := listenWith(t, &http.Client{Transport: tr}, fd.url, 1) // holds the one connection allowed
	defer held.Close()
	nc, err := net.Dial("tcp", strings.TrimPrefix(strings.TrimSuffix(fd.url, "/mcp"), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_, _ = io.WriteString(nc, "GET /mcp HTTP/1.1\r\nHost: x\r\n\r\n")
	_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, _ := io.ReadAll(nc)
	if !bytes.HasPrefix(b, []byte("HTTP/1.1 503")) || !bytes.Contains(b, []byte("address")) {
		t.Fatalf("a connection past the cap got %q, want a 503 naming the per-address cap", b)
	}
}

// TestServeTLS: over TLS, HTTP/2 is chosen by ALPN and a listen is
// served, parked on its stream by tidings' HTTP/2 server; with
// WithNetHTTP2, net/http's HTTP/2 serves it, and tidings' sees no stream.
func TestServeTLS(t *testing.T) {
	cert := httptest.NewTLSServer(http.NotFoundHandler())
	defer cert.Close()
	for _, netHTTP2 := range []bool{false, true} {
		opts := []streamhttp.ServeOption{streamhttp.WithTLS(&tls.Config{Certificates: cert.TLS.Certificates})}
		if netHTTP2 {
			opts = append(opts, streamhttp.WithNetHTTP2())
		}
		fd := startFrontDoor(t, opts...)
		url := strings.Replace(fd.url, "http://", "https://", 1)
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: true}
		c := &http.Client{Transport: tr}
		r, body := listenWith(t, c, url, 1)
		if netHTTP2 {
			if st := fd.front.Stats(); st.HTTP2Streams != 0 || st.HTTP2Parked != 0 {
				t.Errorf("with WithNetHTTP2, tidings' HTTP/2 server holds %d streams, %d parked", st.HTTP2Streams, st.HTTP2Parked)
			}
		} else {
			testkit.WaitFor(t, 10*time.Second, "the listen parked on its stream", func() bool { return fd.front.Stats().HTTP2Parked == 1 })
		}
		fd.srv.RemoveTools("coffee")
		waitFor(t, r, mcp.NotifyToolsListChanged)
		_ = body.Close()
		resp, err := c.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Errorf("over TLS the client spoke HTTP/%d, want 2", resp.ProtoMajor)
		}
		tr.CloseIdleConnections()
		if err := fd.stop(); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Serve: %v", err)
		}
	}
}

// TestServeShutdownIsBounded: a handler that does not return when ctx
// ends holds Serve no longer than WithShutdownTimeout, and Serve says
// the connections did not close.
func TestServeShutdownIsBounded(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	mux := http.NewServeMux()
	mux.HandleFunc("/hang", func(http.ResponseWriter, *http.Request) {
		close(entered)
		<-release
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- streamhttp.Serve(ctx, ln, mux, streamhttp.WithShutdownTimeout(100*time.Millisecond)) }()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	asked := make(chan error, 1)
	go func() {
		resp, err := (&http.Client{Transport: tr}).Get("http://" + ln.Addr().String() + "/hang")
		if err == nil {
			_ = resp.Body.Close()
		}
		asked <- err
	}()
	<-entered
	cancel()
	select {
	case err := <-served:
		if err == nil || !strings.Contains(err.Error(), "closing connections") {
			t.Fatalf("Serve returned %v, want the connections it could not close in time", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve still waits 5s after its context ended, past its 100ms shutdown timeout")
	}
	if err := <-asked; err == nil {
		t.Error("the request cut at shutdown got an answer")
	}
}
