package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// waitTimeout bounds every wait in these tests. Waits poll or block on
// channels; the bound only turns a hang into a failure.
const waitTimeout = 10 * time.Second

// quietLogger discards the client's warnings, so expected ones (dropped
// tools, reconnects) do not clutter test output.
func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// observe calls check every millisecond for a window of real time, with
// the time elapsed so far. It measures behaviour over time (how often
// something happens); it is not used to wait for an event.
func observe(t testing.TB, window time.Duration, check func(elapsed time.Duration)) {
	t.Helper()
	start := time.Now()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		elapsed := time.Since(start)
		check(elapsed)
		if elapsed >= window {
			return
		}
		<-tick.C
	}
}

// ---- recording what reaches the server ----

// seen is one HTTP request as the server received it.
type seen struct {
	Header http.Header
	Body   []byte
	Method string // JSON-RPC method from the body
	ID     string // raw JSON-RPC id
	Params map[string]json.RawMessage
	// Response is what the server wrote back (the whole body; for SSE the
	// raw stream), filled in once the handler has returned.
	Response []byte
}

// meta decodes the request's _meta loosely.
func (s seen) meta(t testing.TB) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(s.Params["_meta"], &m); err != nil {
		t.Fatalf("%s: _meta is not an object: %v (%s)", s.Method, err, s.Body)
	}
	return m
}

// recorder wraps a handler, records every request and can hold chosen
// responses back (see gate).
type recorder struct {
	next http.Handler
	gate *gate

	mu   sync.Mutex
	reqs []seen
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	req.Body = io.NopCloser(bytes.NewReader(body))
	s := seen{Header: req.Header.Clone(), Body: body}
	var env struct {
		ID     json.RawMessage            `json:"id"`
		Method string                     `json:"method"`
		Params map[string]json.RawMessage `json:"params"`
	}
	_ = json.Unmarshal(body, &env)
	s.Method, s.ID, s.Params = env.Method, string(env.ID), env.Params
	r.mu.Lock()
	i := len(r.reqs)
	r.reqs = append(r.reqs, s)
	r.mu.Unlock()
	tw := &teeWriter{ResponseWriter: w}
	defer func() {
		r.mu.Lock()
		r.reqs[i].Response = append([]byte{}, tw.buf.Bytes()...) // non-nil once answered
		r.mu.Unlock()
	}()
	if r.gate != nil && r.gate.holds(s.Method) {
		r.gate.serve(tw, req, r.next)
		return
	}
	r.next.ServeHTTP(tw, req)
}

// teeWriter keeps a copy of a response body. Unwrap lets
// http.ResponseController reach the real writer's deadlines.
type teeWriter struct {
	http.ResponseWriter
	buf bytes.Buffer
}

func (w *teeWriter) Write(b []byte) (int, error) {
	w.buf.Write(b)
	return w.ResponseWriter.Write(b)
}

func (w *teeWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *teeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// count returns how many requests of method arrived ("" for all).
func (r *recorder) count(method string) int { return len(r.requests(method)) }

// answered returns how many requests of method have been answered (their
// handler has returned).
func (r *recorder) answered(method string) int {
	n := 0
	for _, s := range r.requests(method) {
		if s.Response != nil {
			n++
		}
	}
	return n
}

// requests returns the recorded requests of method ("" for all).
func (r *recorder) requests(method string) []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []seen
	for _, s := range r.reqs {
		if method == "" || s.Method == method {
			out = append(out, s)
		}
	}
	return out
}

// gate holds back the responses of chosen methods: the server computes the
// answer at once (so it reflects the state at that moment), and the gate
// delivers it only when the test releases it. This is "a response in
// flight". Only for methods answered with one JSON body.
type gate struct {
	methods []string
	armed   atomic.Bool
	arrived chan string   // the method of each held response
	release chan struct{} // each receive lets one held response go
	opened  chan struct{} // closed by open: everything goes
	once    sync.Once
}

func newGate(methods ...string) *gate {
	return &gate{methods: methods, arrived: make(chan string, 1000), release: make(chan struct{}), opened: make(chan struct{})}
}

func (g *gate) holds(method string) bool { return g.armed.Load() && slices.Contains(g.methods, method) }

func (g *gate) serve(w http.ResponseWriter, req *http.Request, next http.Handler) {
	rec := httptest.NewRecorder()
	next.ServeHTTP(rec, req)
	g.arrived <- req.Header.Get(mcp.HeaderMethod)
	select {
	case <-g.release:
	case <-g.opened:
	case <-req.Context().Done():
		return
	}
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// waitHeld waits until a response is held back.
func (g *gate) waitHeld(t testing.TB) {
	t.Helper()
	select {
	case <-g.arrived:
	case <-time.After(waitTimeout):
		t.Fatal("timed out waiting for a held response")
	}
}

// releaseOne lets one held response go.
func (g *gate) releaseOne(t testing.TB) {
	t.Helper()
	select {
	case g.release <- struct{}{}:
	case <-time.After(waitTimeout):
		t.Fatal("timed out releasing a held response")
	}
}

// open disarms the gate and lets every held response go.
func (g *gate) open() {
	g.armed.Store(false)
	g.once.Do(func() { close(g.opened) })
}

// ---- a real server on loopback ----

// fixture is a server behind a real loopback HTTP listener, with every
// request recorded.
type fixture struct {
	srv *server.Server
	h   *streamhttp.Handler
	rec *recorder
	ts  *httptest.Server
	url string
}

type fixtureOpts struct {
	sopts []server.Option
	hopts []streamhttp.Option
	gate  *gate
	ln    net.Listener // listen here instead of a fresh port
}

// newFixture serves srv (or a new empty server) over loopback HTTP. The
// server is torn down at test end.
func newFixture(t testing.TB, srv *server.Server, o fixtureOpts) *fixture {
	t.Helper()
	if srv == nil {
		srv = server.New(mcp.Implementation{Name: "fixture", Version: "1.0.0"}, append([]server.Option{server.WithLogger(quietLogger())}, o.sopts...)...)
	}
	h := streamhttp.New(srv, o.hopts...)
	f := &fixture{srv: srv, h: h, rec: &recorder{next: h, gate: o.gate}}
	f.ts = httptest.NewUnstartedServer(f.rec)
	if o.ln != nil {
		f.ts.Listener.Close()
		f.ts.Listener = o.ln
	}
	f.ts.Start()
	f.url = f.ts.URL
	t.Cleanup(f.stop)
	if o.gate != nil {
		t.Cleanup(o.gate.open)
	}
	return f
}

// stop cuts every connection and closes the listener. It is idempotent.
func (f *fixture) stop() { closeServer(f.ts) }

// closeServer stops a test server for good: no new connections, every
// open one cut (a listen included), and its handlers finished. A client
// that reconnects at once must not slip in between, which would leave
// httptest's Close waiting on a live stream: connections are cut again
// until Close is done.
func closeServer(ts *httptest.Server) {
	ts.Listener.Close()
	done := make(chan struct{})
	go func() {
		ts.Close()
		close(done)
	}()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		ts.CloseClientConnections()
		select {
		case <-done:
			return
		case <-tick.C:
		}
	}
}

// newFixtureHandler serves h on loopback until the test ends and returns
// its URL.
func newFixtureHandler(t testing.TB, h http.Handler) string {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(func() { closeServer(ts) })
	return ts.URL
}

// client returns a client for the fixture, closed at test end.
func (f *fixture) client(t testing.TB, opts ...HTTPOption) *Client {
	t.Helper()
	c := NewHTTP(f.url, append([]HTTPOption{WithLogger(quietLogger()), WithTimeout(waitTimeout)}, opts...)...)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(s)}}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// addTools registers tools that answer with their own name.
func addTools(t testing.TB, srv *server.Server, names ...string) {
	t.Helper()
	for _, n := range names {
		must(t, srv.AddTool(mcp.Tool{Name: n, Description: "tool " + n}, func(_ context.Context, r *server.ToolRequest) (*mcp.CallToolResult, error) {
			return text(r.Name), nil
		}))
	}
}

// textResource is a resource whose content the test can change.
type textResource struct {
	mu   sync.Mutex
	body string
}

func (r *textResource) set(s string) {
	r.mu.Lock()
	r.body = s
	r.mu.Unlock()
}

func (r *textResource) handler(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "text/plain", r.body)}}, nil
}

func names(tools []mcp.Tool) []string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = t.Name
	}
	return out
}

func contentText(t testing.TB, r *mcp.ReadResourceResult) string {
	t.Helper()
	if len(r.Contents) != 1 || r.Contents[0].Text == nil {
		t.Fatalf("contents = %+v, want one text entry", r.Contents)
	}
	return *r.Contents[0].Text
}

// ---- a fake clock ----

// fakeClock is a clock the test moves by hand, for TTL expiry.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// ---- watcher events ----

// eventLog collects a watcher's events for tests to wait on.
type eventLog struct {
	mu     sync.Mutex
	events []Event
	poke   chan struct{}
	next   int // first event not yet consumed by waitFor
}

func newEventLog() *eventLog { return &eventLog{poke: make(chan struct{}, 1)} }

func (l *eventLog) add(e Event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
	select {
	case l.poke <- struct{}{}:
	default:
	}
}

// all returns every event so far.
func (l *eventLog) all() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.events)
}

// waitFor consumes events until one matches and returns it; the events
// passed over are returned too, so tests can check what came before.
func (l *eventLog) waitFor(t testing.TB, what string, match func(Event) bool) (Event, []Event) {
	t.Helper()
	deadline := time.After(waitTimeout)
	var skipped []Event
	for {
		l.mu.Lock()
		for l.next < len(l.events) {
			e := l.events[l.next]
			l.next++
			if match(e) {
				l.mu.Unlock()
				return e, skipped
			}
			skipped = append(skipped, e)
		}
		l.mu.Unlock()
		select {
		case <-l.poke:
		case <-deadline:
			t.Fatalf("%s: timed out waiting for %s; events so far: %s", time.Now().Format("15:04:05.000"), what, describe(l.all()))
		}
	}
}

// waitAll consumes events until one of each kind has been seen, in any
// order.
func (l *eventLog) waitAll(t testing.TB, what string, kinds ...EventKind) {
	t.Helper()
	left := slices.Clone(kinds)
	for len(left) > 0 {
		l.waitFor(t, what, func(e Event) bool {
			if i := slices.Index(left, e.Kind); i >= 0 {
				left = slices.Delete(left, i, i+1)
				return true
			}
			return false
		})
	}
}

func kindIs(k EventKind) func(Event) bool { return func(e Event) bool { return e.Kind == k } }

func describe(es []Event) string {
	var b strings.Builder
	for _, e := range es {
		fmt.Fprintf(&b, "\n  %s %s", e.At.Format("15:04:05.000"), e.Kind)
		if e.URI != "" {
			fmt.Fprintf(&b, " uri=%s", e.URI)
		}
		if n := len(e.Added) + len(e.Removed) + len(e.Changed); n > 20 {
			fmt.Fprintf(&b, " +%d -%d ~%d", len(e.Added), len(e.Removed), len(e.Changed))
		} else if n > 0 {
			fmt.Fprintf(&b, " +%v -%v ~%v", e.Added, e.Removed, e.Changed)
		}
		if e.Kind == Disconnected {
			fmt.Fprintf(&b, " graceful=%v err=%v", e.Graceful, e.Err)
		}
		if e.Err != nil && e.Kind != Disconnected {
			fmt.Fprintf(&b, " err=%v", e.Err)
		}
	}
	return b.String()
}

// watch starts a watcher whose events go to the returned log; it is
// closed at test end (before the client and the server).
func watch(t testing.TB, c *Client, opts WatchOptions) (*Watcher, *eventLog) {
	t.Helper()
	log := newEventLog()
	opts.OnEvent = log.add
	w := c.Watch(context.Background(), opts)
	t.Cleanup(w.Close)
	return w, log
}

// ---- raw servers for behaviour our server never shows ----

// rawRequest is a request as a raw handler sees it.
type rawRequest struct {
	ID     json.RawMessage            `json:"id"`
	Method string                     `json:"method"`
	Params map[string]json.RawMessage `json:"params"`
}

// rawDiscover is a raw server's answer to server/discover.
const rawDiscover = `{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{"listChanged":true}},"resultType":"complete","ttlMs":0,"cacheScope":"public"}`

// rawServer answers each request with whatever fn returns: a result
// object (as JSON), or an error when errJSON is not empty. n counts the
// requests fn saw. server/discover (the client's era probe) is answered
// with rawDiscover without calling fn, unless withDiscover is set.
func rawServer(t testing.TB, fn func(n int, r rawRequest) (result string, errJSON string), withDiscover ...bool) (*httptest.Server, *recorder) {
	t.Helper()
	var n atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var r rawRequest
		body, _ := io.ReadAll(req.Body)
		if err := json.Unmarshal(body, &r); err != nil {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		var res, errJSON string
		if r.Method == mcp.MethodDiscover && len(withDiscover) == 0 {
			res = rawDiscover
		} else {
			res, errJSON = fn(int(n.Add(1)), r)
		}
		w.Header().Set("Content-Type", "application/json")
		if errJSON != "" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":%s}`, r.ID, errJSON)
			return
		}
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, r.ID, res)
	})
	rec := &recorder{next: h}
	ts := httptest.NewServer(rec)
	t.Cleanup(func() { closeServer(ts) })
	return ts, rec
}

func rawClient(t testing.TB, url string, opts ...HTTPOption) *Client {
	t.Helper()
	c := NewHTTP(url, append([]HTTPOption{WithLogger(quietLogger()), WithTimeout(waitTimeout)}, opts...)...)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// jsonValue is a shorthand for raw JSON in test tables.
func jsonValue(s string) jsontext.Value { return jsontext.Value(s) }
