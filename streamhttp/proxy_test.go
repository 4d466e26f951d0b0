package streamhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/sse"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// These tests put servers behind a real httputil.ReverseProxy on loopback.
//
// net/http's HTTP/1 server closes a request's body when its handler
// starts the response (what is left of the body is drained and closed in
// chunkWriter.writeHeader), unless the handler enabled full duplex. A
// ReverseProxy hands the inbound body to its Transport, whose write loop
// copies the declared length to the upstream and then reads once more, to
// check that the body is not longer (transferWriter.writeBody). An
// upstream that answers as soon as it has the body can get its response
// headers back through the proxy before that last read: the proxy writes
// them to its client, its server closes the inbound body, the last read
// fails with "invalid Read on closed Body", and the write loop closes the
// upstream connection under the response still being copied. The client
// is left with a cut body, and the proxy logs "read error during body
// copy: use of closed network connection".

// proxySetup is one way of running a ReverseProxy in front of a server.
type proxySetup struct {
	name string
	// wrap turns the proxy into the handler its http.Server runs.
	wrap func(proxy http.Handler) http.Handler
}

// plainProxy runs the ReverseProxy as it is: it loses streamed answers
// now and then.
func plainProxy() proxySetup {
	return proxySetup{"plain", func(p http.Handler) http.Handler { return p }}
}

// workingProxies are the set-ups the package documentation recommends.
func workingProxies() []proxySetup {
	return []proxySetup{
		{"full duplex", func(p http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// HTTP/2 is always full duplex and says ErrNotSupported.
				_ = http.NewResponseController(w).EnableFullDuplex()
				p.ServeHTTP(w, r)
			})
		}},
		{"buffered request body", func(p http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 4<<20))
				if err != nil {
					http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
					return
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
				p.ServeHTTP(w, r)
			})
		}},
	}
}

// proxy is a ReverseProxy in front of one upstream, on loopback.
type proxy struct {
	ts     *httptest.Server
	client *http.Client
	log    *testkit.SyncBuffer // the proxy's ErrorLog
}

// startProxy serves setup's proxy to upstream. rewrite, when set, runs
// after the request is pointed at the upstream.
func startProxy(t testing.TB, upstream string, setup proxySetup, rewrite func(*httputil.ProxyRequest)) *proxy {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	transport := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute}
	p := &proxy{log: &testkit.SyncBuffer{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(u)
			if rewrite != nil {
				rewrite(pr)
			}
		},
		FlushInterval: -1,
		Transport:     transport,
		ErrorLog:      log.New(p.log, "", 0),
	}
	p.ts = httptest.NewServer(setup.wrap(rp))
	p.client = p.ts.Client()
	t.Cleanup(func() {
		p.ts.CloseClientConnections()
		p.ts.Close()
		p.client.CloseIdleConnections()
		transport.CloseIdleConnections()
	})
	return p
}

// lastRead holds a proxied request body's read past its declared length
// (the Transport's check that the body is no longer) until release is
// closed, and closes clean if that read then ends the body as it should.
// It puts the read after the proxy has started its response: one of the
// orders a loaded machine produces now and then, made certain.
type lastRead struct {
	body    io.ReadCloser
	left    int64
	release <-chan struct{}
	clean   chan struct{}
	held    bool
}

func (b *lastRead) Read(p []byte) (int, error) {
	if b.left > 0 {
		if int64(len(p)) > b.left {
			p = p[:b.left]
		}
		n, err := b.body.Read(p)
		b.left -= int64(n)
		return n, err
	}
	if b.held {
		return b.body.Read(p)
	}
	b.held = true
	<-b.release
	n, err := b.body.Read(p)
	if n == 0 && err == io.EOF {
		close(b.clean)
	}
	return n, err
}

func (b *lastRead) Close() error { return b.body.Close() }

// holdLastRead returns a rewrite that installs a lastRead on the one
// request it proxies, and the channel that closes when that read ended
// the body cleanly.
func holdLastRead(release <-chan struct{}) (func(*httputil.ProxyRequest), <-chan struct{}) {
	clean := make(chan struct{})
	return func(pr *httputil.ProxyRequest) {
		pr.Out.Body = &lastRead{body: pr.Out.Body, left: pr.Out.ContentLength, release: release, clean: clean}
	}, clean
}

// streamThrough POSTs body through p, reads the first SSE event, runs
// after, and returns the rest of the response body and how reading it
// ended.
func streamThrough(t *testing.T, p *proxy, body []byte, hdr http.Header, after func()) (first sse.Event, rest []byte, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.ts.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatalf("POST through the proxy: %v", err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q; want 200 text/event-stream", resp.StatusCode, ct)
	}
	r := sse.NewReader(resp.Body, 0)
	first, err = r.Next()
	if err != nil {
		t.Fatalf("reading the first event: %v", err)
	}
	after()
	rest, err = io.ReadAll(resp.Body)
	return first, rest, err
}

// TestReverseProxyClosesRequestBody shows the race with a handler that is
// not this package's: an upstream that streams two events, the second
// once the proxy's Transport has finished with the request body. Behind
// the plain proxy the second is lost whenever the Transport's last read
// comes after the proxy started its response; behind the working set-ups
// it never is. Should a Go release stop closing the body, the plain case
// fails, and the package documentation's "Behind a proxy" wants updating.
func TestReverseProxyClosesRequestBody(t *testing.T) {
	type setupCase struct {
		setup proxySetup
		cut   bool // whether the proxy cuts the stream
	}
	cases := []setupCase{{plainProxy(), true}}
	for _, w := range workingProxies() {
		cases = append(cases, setupCase{w, false})
	}
	for _, tc := range cases {
		setup := tc.setup
		t.Run(setup.name, func(t *testing.T) {
			release := make(chan struct{})
			rewrite, clean := holdLastRead(release)
			upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if _, err := io.ReadAll(r.Body); err != nil {
					t.Errorf("upstream reading the body: %v", err)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				fmt.Fprint(w, "data: first\n\n")
				_ = http.NewResponseController(w).Flush()
				select {
				case <-clean:
					fmt.Fprint(w, "data: last\n\n")
				case <-r.Context().Done(): // the proxy closed the connection
				}
			}))
			t.Cleanup(upstream.Close)
			p := startProxy(t, upstream.URL, setup, rewrite)

			first, rest, err := streamThrough(t, p, []byte(`{"ask":"anything"}`), http.Header{"Content-Type": {"application/json"}},
				func() { close(release) })
			if string(first.Data) != "first" {
				t.Fatalf("first event %q, want first", first.Data)
			}
			whole := err == nil && string(rest) == "data: last\n\n"
			if tc.cut {
				if whole {
					t.Fatalf("the plain proxy delivered the whole stream; net/http no longer closes the request body under the Transport (see the package documentation, Behind a proxy)")
				}
				if !strings.Contains(p.log.String(), "use of closed network connection") {
					t.Errorf("proxy log %q, want the closed upstream connection", p.log.String())
				}
				return
			}
			if !whole {
				t.Fatalf("rest of the stream %q (%v), want the last event and a clean end; proxy log %q", rest, err, p.log.String())
			}
		})
	}
}

// proxiedServer is a tidings server with the answers that were cut behind
// a plain proxy: progress then a result, progress then an input_required
// result, and large bodies, streamed and not.
type proxiedServer struct {
	ts *httptest.Server
	// gate is what the "gated" tool waits for between its progress
	// notification and its answer.
	gate chan (<-chan struct{})
}

// largeResult is the size of the "large" answers: far more than the
// buffers between the server and the proxy's client hold.
const largeResult = 128 << 10

func newProxiedServer(t testing.TB) *proxiedServer {
	t.Helper()
	s := &proxiedServer{gate: make(chan (<-chan struct{}), 1)}
	srv := server.New(mcp.Implementation{Name: "proxied", Version: "1.0.0"})
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(s)}}
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	// answer is the end of a call to tool "then".
	answer := func(then string) (*mcp.CallToolResult, error) {
		switch then {
		case "ask":
			return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{
				"roots": {Method: mcp.MethodRootsList, Params: jsontext.Value(`{}`)},
			}}
		case "large":
			return text(strings.Repeat("x", largeResult)), nil
		}
		return text(then + " done"), nil
	}
	must(srv.AddTool(mcp.Tool{Name: "steps"}, func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		total := 3.0
		for i := 1.0; i <= total; i++ {
			if err := req.Progress(i, &total, "step"); err != nil {
				return nil, err
			}
		}
		return answer("steps")
	}))
	for _, name := range []string{"ask", "large"} {
		must(srv.AddTool(mcp.Tool{Name: name}, func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			if err := req.Progress(1, nil, "working"); err != nil {
				return nil, err
			}
			return answer(name)
		}))
	}
	must(srv.AddTool(mcp.Tool{Name: "gated"}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		var args struct {
			Then string `json:"then"`
		}
		if err := json.Unmarshal(req.Arguments, &args); err != nil {
			return nil, fmt.Errorf("gated arguments: %w", err)
		}
		if err := req.Progress(1, nil, "waiting"); err != nil {
			return nil, err
		}
		select {
		case g := <-s.gate:
			select {
			case <-g:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return answer(args.Then)
	}))
	s.ts = httptest.NewServer(streamhttp.New(srv))
	t.Cleanup(func() {
		s.ts.CloseClientConnections()
		s.ts.Close()
	})
	return s
}

// toolCall is a tools/call of name with args (a JSON object), with a
// progress token when progress is set. The client declares roots, so
// that a tool may ask for them.
func toolCall(id int, name, args string, progress bool) ([]byte, http.Header) {
	meta := `{"io.modelcontextprotocol/protocolVersion":"` + mcp.Version + `","io.modelcontextprotocol/clientCapabilities":{"roots":{}}`
	if progress {
		meta += fmt.Sprintf(`,"progressToken":%d`, id)
	}
	meta += "}"
	return requestMeta(id, mcp.MethodToolsCall, meta, `"name":`+quote(name)+`,"arguments":`+args), headers(mcp.MethodToolsCall, name)
}

// TestBehindReverseProxyGated holds the Transport's last read of the
// request body until the client has the first progress notification,
// so that the proxy has started its response before it: the answer must
// still arrive whole, be it a result, an input_required result or a
// large result.
func TestBehindReverseProxyGated(t *testing.T) {
	for _, setup := range workingProxies() {
		for _, c := range proxiedCalls() {
			if !c.progress {
				continue
			}
			t.Run(setup.name+"/"+c.tool, func(t *testing.T) {
				s := newProxiedServer(t)
				release := make(chan struct{})
				rewrite, clean := holdLastRead(release)
				s.gate <- clean
				p := startProxy(t, s.ts.URL, setup, rewrite)
				body, hdr := toolCall(1, "gated", `{"then":`+quote(c.tool)+`}`, true)
				first, rest, err := streamThrough(t, p, body, hdr, func() { close(release) })
				if e := decodeEnvelope(t, first.Data); e.Method != mcp.NotifyProgress {
					t.Fatalf("first event %.200s, want progress", first.Data)
				}
				if err != nil {
					t.Fatalf("rest of the stream: %v (%d bytes); proxy log %q", err, len(rest), p.log.String())
				}
				events := readEvents(t, rest)
				if len(events) != 1 {
					t.Fatalf("%d events after the progress, want the response alone", len(events))
				}
				if msg := wholeAnswer(events[0], 1, c); msg != "" {
					t.Fatal(msg)
				}
			})
		}
	}
}

// readEvents decodes every SSE event of a complete stream.
func readEvents(t testing.TB, b []byte) []envelope {
	t.Helper()
	r := sse.NewReader(bytes.NewReader(b), 0)
	var out []envelope
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("reading events: %v in %q", err, b)
		}
		out = append(out, decodeEnvelope(t, ev.Data))
	}
}

// proxiedCall is one shape of answer the loop asks for.
type proxiedCall struct {
	tool     string
	progress bool
	// notes is how many notifications precede the response; result is
	// found in it, and resultType is its resultType.
	notes      int
	result     string
	resultType string
}

func proxiedCalls() []proxiedCall {
	return []proxiedCall{
		{"steps", true, 3, "steps done", mcp.ResultComplete},
		{"ask", true, 1, `"roots"`, mcp.ResultInputRequired},
		{"large", true, 1, strings.Repeat("x", largeResult), mcp.ResultComplete},
		{"large", false, 0, strings.Repeat("x", largeResult), mcp.ResultComplete},
	}
}

// TestBehindReverseProxy sends 200 calls of the shapes that were cut
// behind a plain proxy, four at a time, through each working set-up: every
// answer must arrive whole, and the proxy must log nothing. (With client,
// proxy and server in one process the race is rare; it is the gated
// tests that make it certain. Across processes, as with the conformance
// suite's Node client, it comes every few dozen requests.)
func TestBehindReverseProxy(t *testing.T) {
	for _, setup := range workingProxies() {
		t.Run(setup.name, func(t *testing.T) {
			s := newProxiedServer(t)
			p := startProxy(t, s.ts.URL, setup, nil)
			if failed := proxyLoop(t, p, 200, 4); failed > 0 {
				t.Fatalf("%d of 200 answers were not whole; proxy log %q", failed, p.log.String())
			}
			if l := p.log.String(); l != "" {
				t.Fatalf("proxy log %q, want nothing", l)
			}
		})
	}
}

// proxyLoop sends n calls through p from workers goroutines and returns
// how many answers were not whole, reporting the first few.
func proxyLoop(t *testing.T, p *proxy, n, workers int) int {
	t.Helper()
	calls := proxiedCalls()
	var (
		mu       sync.Mutex
		failed   int
		reported int
	)
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failed++
		if reported < 5 {
			reported++
			t.Logf(format, args...)
		}
	}
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				c := calls[i%len(calls)]
				if msg := proxiedCallOnce(p, i+1, c); msg != "" {
					fail("call %d (%s, progress %v): %s", i+1, c.tool, c.progress, msg)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return failed
}

// proxiedCallOnce makes one call and says what is wrong with its answer
// ("" when it is whole).
func proxiedCallOnce(p *proxy, id int, c proxiedCall) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	body, hdr := toolCall(id, c.tool, `{}`, c.progress)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.ts.URL, bytes.NewReader(body))
	if err != nil {
		return err.Error()
	}
	req.Header = hdr
	resp, err := p.client.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Sprintf("reading the body (%d bytes in): %v", len(b), err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("status %d: %.200s", resp.StatusCode, b)
	}
	var msgs [][]byte
	if ct := resp.Header.Get("Content-Type"); ct == "text/event-stream" {
		r := sse.NewReader(bytes.NewReader(b), 0)
		for {
			ev, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Sprintf("reading events: %v", err)
			}
			msgs = append(msgs, ev.Data)
		}
	} else {
		msgs = [][]byte{b}
	}
	if len(msgs) != c.notes+1 {
		return fmt.Sprintf("%d messages, want %d notifications and the response: %.300q", len(msgs), c.notes, b)
	}
	var e envelope
	if err := json.Unmarshal(msgs[len(msgs)-1], &e); err != nil {
		return fmt.Sprintf("the last message is not JSON-RPC: %v", err)
	}
	return wholeAnswer(e, id, c)
}

// wholeAnswer says what is wrong with e as the answer to call id of
// shape c ("" when nothing is).
func wholeAnswer(e envelope, id int, c proxiedCall) string {
	if string(e.ID) != strconv.Itoa(id) || e.Result == nil {
		return fmt.Sprintf("not the result of %d: id %s, error %+v", id, e.ID, e.Error)
	}
	if !bytes.Contains(e.Result, []byte(`"resultType":"`+c.resultType+`"`)) || !bytes.Contains(e.Result, []byte(c.result)) {
		return fmt.Sprintf("the result of %d is not the %s answer of %s: %.200s", id, c.resultType, c.tool, e.Result)
	}
	return ""
}
