package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"go.uber.org/goleak"

	"tidings/internal/engine"
	"tidings/internal/testrig/schematest"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitLimit bounds every wait in these tests; it is a deadline for a
// failure report, never a way to let something happen.
const waitLimit = 10 * time.Second

var testInfo = mcp.Implementation{Name: "tidings-test", Version: "0.0.1"}

// recorder is a engine.Stream that keeps every message and checks each
// against the schema as it arrives: a stream carries only notifications.
type recorder struct {
	t      testing.TB
	mu     sync.Mutex
	msgs   [][]byte
	poke   chan struct{}
	closed bool // set once the request is over; later sends are a bug
	// hook, when set, runs before a message is recorded; an error fails
	// the send (a broken peer) and the message is not recorded.
	hook       func(msg []byte) error
	keepAlives int
}

func newRecorder(t testing.TB) *recorder {
	return &recorder{t: t, poke: make(chan struct{}, 1)}
}

func (r *recorder) Send(msg []byte) error {
	b := bytes.Clone(msg)
	if r.hook != nil {
		if err := r.hook(b); err != nil {
			return err
		}
	}
	schematest.ValidateNotification(r.t, b)
	r.mu.Lock()
	if r.closed {
		r.t.Errorf("message sent after the request ended: %s", b)
	}
	r.msgs = append(r.msgs, bytes.Clone(b)) // Send may not keep b
	r.mu.Unlock()
	select {
	case r.poke <- struct{}{}:
	default:
	}
	return nil
}

func (r *recorder) KeepAlive() error {
	r.mu.Lock()
	r.keepAlives++
	r.mu.Unlock()
	select {
	case r.poke <- struct{}{}:
	default:
	}
	return nil
}

// end marks the request as over: any later Send is reported.
func (r *recorder) end() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}

func (r *recorder) messages() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.msgs...)
}

// waitUntil waits until cond holds for the messages recorded so far.
func (r *recorder) waitUntil(t testing.TB, what string, cond func([]notif) bool) []notif {
	t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		ns := decodeNotifs(t, r.messages())
		if cond(ns) {
			return ns
		}
		select {
		case <-r.poke:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s; got %d messages:\n%s", what, len(ns), dump(ns))
		}
	}
}

// waitCount waits until at least n messages were recorded.
func (r *recorder) waitCount(t testing.TB, n int) []notif {
	t.Helper()
	return r.waitUntil(t, fmt.Sprintf("%d messages", n), func(ns []notif) bool { return len(ns) >= n })
}

// notif is a decoded notification.
type notif struct {
	Method string         `json:"method"`
	Params map[string]any `json:"params"`
	raw    []byte
}

// subID returns the raw JSON of _meta.subscriptionId ("" when absent).
func (n notif) subID() string {
	var p struct {
		Params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	_ = json.Unmarshal(n.raw, &p)
	return string(p.Params.Meta[mcp.MetaSubscriptionID])
}

func decodeNotifs(t testing.TB, msgs [][]byte) []notif {
	t.Helper()
	out := make([]notif, 0, len(msgs))
	for _, m := range msgs {
		var n notif
		d := json.NewDecoder(bytes.NewReader(m))
		d.UseNumber()
		if err := d.Decode(&n); err != nil {
			t.Fatalf("undecodable message %s: %v", m, err)
		}
		n.raw = m
		out = append(out, n)
	}
	return out
}

func dump(ns []notif) string {
	var sb strings.Builder
	for _, n := range ns {
		sb.Write(n.raw)
		sb.WriteByte('\n')
	}
	return sb.String()
}

func countMethod(ns []notif, method string) int {
	c := 0
	for _, n := range ns {
		if n.Method == method {
			c++
		}
	}
	return c
}

// ---- requests ----

// omit, as a value in params or _meta, leaves the key out entirely.
type omitT struct{}

var omit = omitT{}

// P is a params object under construction.
type P map[string]any

// defaultMeta is the _meta every well-formed request carries.
func defaultMeta() P {
	return P{
		mcp.MetaProtocolVersion:    mcp.Version,
		mcp.MetaClientCapabilities: P{},
	}
}

// encodeRequest builds a request. params gets the default _meta unless
// it has its own "_meta" (a P, merged over the default, or omit); meta
// keys set to omit are removed.
func encodeRequest(t testing.TB, id any, method string, params P) []byte {
	t.Helper()
	out := P{}
	meta := defaultMeta()
	withMeta := true
	for k, v := range params {
		if k == "_meta" {
			switch m := v.(type) {
			case omitT:
				withMeta = false
			case P:
				for mk, mv := range m {
					if _, ok := mv.(omitT); ok {
						delete(meta, mk)
					} else {
						meta[mk] = mv
					}
				}
			default:
				out[k] = v
				withMeta = false
			}
			continue
		}
		if _, ok := v.(omitT); ok {
			continue
		}
		out[k] = v
	}
	if withMeta {
		out["_meta"] = meta
	}
	msg := map[string]any{"jsonrpc": "2.0", "method": method, "params": out}
	if id != nil {
		msg["id"] = id
	}
	b, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// response is a decoded response.
type response struct {
	raw    []byte
	reply  engine.Reply
	ID     json.RawMessage `json:"id"`
	Result map[string]any  `json:"result"`
	Error  *struct {
		Code    jsonrpc.Code    `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// harness drives a server in-process through Parse and Serve, as a
// transport would.
type harness struct {
	t         testing.TB
	srv       *server.Server
	principal string
}

// newHarness returns a server whose log goes to the test's output.
func newHarness(t testing.TB, opts ...server.Option) *harness {
	logger := slog.New(slog.NewTextHandler(t.Output(), nil))
	opts = append([]server.Option{server.WithLogger(logger)}, opts...)
	return &harness{t: t, srv: server.New(testInfo, opts...)}
}

// serveRaw runs one encoded request to its end on stream rec.
func (h *harness) serveRaw(ctx context.Context, raw []byte, rec *recorder) engine.Reply {
	h.t.Helper()
	msg, err := jsonrpc.Decode(raw, 0)
	if err != nil {
		h.t.Fatalf("test request does not decode: %v\n%s", err, raw)
	}
	c, rep := engine.Parse(msg)
	if rep != nil {
		return *rep
	}
	return engine.Of(h.srv).Serve(ctx, c, h.principal, nil, rec)
}

// call runs a request and returns its validated, decoded response and the
// stream it used.
func (h *harness) call(id any, method string, params P) (*response, *recorder) {
	h.t.Helper()
	rec := newRecorder(h.t)
	rep := h.serveRaw(context.Background(), encodeRequest(h.t, id, method, params), rec)
	rec.end()
	return decodeResponse(h.t, method, id, rep), rec
}

// decodeResponse checks the reply against the schema and ENV-3 (the id is
// echoed with its JSON type) and decodes it.
func decodeResponse(t testing.TB, method string, id any, rep engine.Reply) *response {
	t.Helper()
	if rep.Body == nil {
		t.Fatalf("%s: no response", method)
	}
	schematest.ValidateResponse(t, method, rep.Body)
	r := &response{raw: rep.Body, reply: rep}
	d := json.NewDecoder(bytes.NewReader(rep.Body))
	d.UseNumber()
	if err := d.Decode(r); err != nil {
		t.Fatalf("%s: undecodable response %s: %v", method, rep.Body, err)
	}
	if id != nil {
		want, _ := json.Marshal(id)
		if string(r.ID) != string(want) {
			t.Errorf("%s: response id = %s, want %s (ENV-3: echoed with its JSON type)", method, r.ID, want)
		}
	}
	if r.Result != nil {
		rt, _ := r.Result["resultType"].(string)
		task := rt == mcp.ResultTask && method == mcp.MethodToolsCall // a task handle (the tasks extension)
		if rt != mcp.ResultComplete && rt != mcp.ResultInputRequired && !task {
			t.Errorf("%s: resultType = %v (ENV-5)", method, r.Result["resultType"])
		}
	}
	return r
}

// ok asserts a complete result and returns it.
func (r *response) ok(t testing.TB) map[string]any {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("unexpected error %d %q: %s", r.Error.Code, r.Error.Message, r.raw)
	}
	if got := r.Result["resultType"]; got != mcp.ResultComplete {
		t.Fatalf("resultType = %v, want complete: %s", got, r.raw)
	}
	return r.Result
}

// fails asserts an error with the given code and returns it.
func (r *response) fails(t testing.TB, code jsonrpc.Code) *response {
	t.Helper()
	if r.Error == nil {
		t.Fatalf("got a result, want error %d: %s", code, r.raw)
	}
	if r.Error.Code != code {
		t.Fatalf("error code = %d (%s), want %d", r.Error.Code, r.Error.Message, code)
	}
	return r
}

// data decodes the error's data.
func (r *response) data(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Error.Data, &m); err != nil {
		t.Fatalf("error data %s: %v", r.Error.Data, err)
	}
	return m
}

// ---- registrations ----

func textTool(name string) mcp.Tool {
	return mcp.Tool{Name: name, Description: "test tool " + name, InputSchema: jsontext.Value(`{"type":"object"}`)}
}

func echoHandler(text string) server.ToolHandler {
	return func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(text)}}, nil
	}
}

func mustAddTool(t testing.TB, s *server.Server, tool mcp.Tool, h server.ToolHandler) {
	t.Helper()
	if err := s.AddTool(tool, h); err != nil {
		t.Fatal(err)
	}
}

func textResource(uri, text string) server.ResourceHandler {
	return func(ctx context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "text/plain", text)}}, nil
	}
}

func mustAddResource(t testing.TB, s *server.Server, uri string, h server.ResourceHandler, opts ...server.ItemOption) {
	t.Helper()
	if err := s.AddResource(mcp.Resource{URI: uri, Name: uri}, h, opts...); err != nil {
		t.Fatal(err)
	}
}

func simplePrompt(ctx context.Context, req *server.PromptRequest) (*mcp.GetPromptResult, error) {
	return &mcp.GetPromptResult{Messages: []mcp.PromptMessage{{Role: "user", Content: mcp.TextContent("hi " + req.Arguments["who"])}}}, nil
}

func mustAddPrompt(t testing.TB, s *server.Server, p mcp.Prompt, h server.PromptHandler) {
	t.Helper()
	if err := s.AddPrompt(p, h); err != nil {
		t.Fatal(err)
	}
}

// ---- listens ----

// listen runs a subscriptions/listen in the background.
type listen struct {
	id     any
	rec    *recorder
	cancel context.CancelFunc
	done   chan engine.Reply
}

func (h *harness) startListen(id any, params P) *listen {
	h.t.Helper()
	return h.startListenOn(id, params, newRecorder(h.t))
}

func (h *harness) startListenOn(id any, params P, rec *recorder) *listen {
	h.t.Helper()
	raw := encodeRequest(h.t, id, mcp.MethodListen, params)
	msg, err := jsonrpc.Decode(raw, 0)
	if err != nil {
		h.t.Fatal(err)
	}
	c, rep := engine.Parse(msg)
	if rep != nil {
		h.t.Fatalf("listen rejected by Parse: %s", rep.Body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &listen{id: id, rec: rec, cancel: cancel, done: make(chan engine.Reply, 1)}
	go func() {
		rep := engine.Of(h.srv).Serve(ctx, c, h.principal, nil, rec)
		rec.end()
		// As a transport would once the last message is written: the
		// reply goes back (Shutdown waits for that), its body kept here.
		kept := engine.Reply{Body: bytes.Clone(rep.Body), Outcome: rep.Outcome, ListenEnded: rep.ListenEnded, Err: rep.Err}
		rep.Release()
		l.done <- kept
	}()
	h.t.Cleanup(func() {
		cancel()
		select {
		case <-l.done:
		case <-time.After(waitLimit):
			h.t.Errorf("listen %v did not end after cancel", id)
		}
	})
	return l
}

// ack waits for the acknowledgement, checks that it is the first message
// and tagged with the listen id (SUB-3, SUB-6), and returns the grant.
func (l *listen) ack(t testing.TB) map[string]any {
	t.Helper()
	ns := l.rec.waitCount(t, 1)
	first := ns[0]
	if first.Method != mcp.NotifyAcknowledged {
		t.Fatalf("first message is %s, want the acknowledgement (SUB-3)", first.Method)
	}
	l.checkTag(t, first)
	g, _ := first.Params["notifications"].(map[string]any)
	if g == nil {
		t.Fatalf("ack without notifications: %s", first.raw)
	}
	return g
}

// checkTag asserts SUB-6: the subscriptionId equals the listen id with
// the same JSON type.
func (l *listen) checkTag(t testing.TB, n notif) {
	t.Helper()
	want, _ := json.Marshal(l.id)
	if got := n.subID(); got != string(want) {
		t.Errorf("%s tagged %q, want %s (SUB-6)", n.Method, got, want)
	}
}

// wait waits until the listen ends and returns its reply.
func (l *listen) wait(t testing.TB) engine.Reply {
	t.Helper()
	select {
	case rep := <-l.done:
		l.done <- rep // keep it for the cleanup
		return rep
	case <-time.After(waitLimit):
		t.Fatalf("listen %v did not end", l.id)
		return engine.Reply{}
	}
}

// stop cancels the listen as a client would and checks that it ends with
// no response.
func (l *listen) stop(t testing.TB) []notif {
	t.Helper()
	l.cancel()
	rep := l.wait(t)
	if rep.Body != nil {
		t.Errorf("client-cancelled listen got a response: %s", rep.Body)
	}
	return decodeNotifs(t, l.rec.messages())
}

// errAfter returns a hook that fails every send after the first n.
func errAfter(n int) func([]byte) error {
	var mu sync.Mutex
	count := 0
	return func([]byte) error {
		mu.Lock()
		defer mu.Unlock()
		count++
		if count > n {
			return errors.New("peer gone")
		}
		return nil
	}
}
