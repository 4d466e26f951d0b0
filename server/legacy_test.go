package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/engine"
	"tidings/internal/legacy"
	"tidings/internal/testrig/schematest"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// These tests drive the 2025-11-25 adapter over the server in-process,
// the way a transport does: a session table opens sessions, each session
// serves its requests (no _meta), and its stream carries its
// notifications.

// lsrv is a server with a session table, as Streamable HTTP keeps one.
type lsrv struct {
	*server.Server
	tbl *legacy.Table
}

func (s *lsrv) Initialize(c *engine.Call) (*legacy.Session, engine.Reply) {
	ss, rep, _ := s.tbl.Open(context.Background(), c, "")
	return ss, rep
}

func (s *lsrv) ServeLegacy(ctx context.Context, ss *legacy.Session, c *engine.Call, _ string, out engine.Stream) engine.Reply {
	return ss.Serve(ctx, c, out)
}

func (s *lsrv) ServeSessionStream(ctx context.Context, ss *legacy.Session, out engine.Stream, start func() error) error {
	return ss.Stream(ctx, out, start)
}

func (s *lsrv) Session(id string) (*legacy.Session, bool) { return s.tbl.Get(id, "") }
func (s *lsrv) SessionCount() int                         { return s.tbl.Len() }
func (s *lsrv) EndSession(id string) bool                 { return s.tbl.End(id) }

// legacyOut is an engine.Stream for a legacy request or session stream. It
// checks every message against the 2025-11-25 schema and keeps it.
type legacyOut struct {
	t    testing.TB
	mu   sync.Mutex
	msgs []legacyMsg
	poke chan struct{}
	// keepAlives counts KeepAlive calls.
	keepAlives int
}

// legacyMsg is one message the server sent on its own.
type legacyMsg struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params map[string]any  `json:"params"`
	raw    []byte
}

func newLegacyOut(t testing.TB) *legacyOut {
	return &legacyOut{t: t, poke: make(chan struct{}, 1)}
}

func (o *legacyOut) Send(msg []byte) error {
	b := bytes.Clone(msg)
	schematest.ValidateLegacyServerMessage(o.t, b)
	var m legacyMsg
	if err := json.Unmarshal(b, &m); err != nil {
		o.t.Errorf("undecodable message %s: %v", b, err)
		return nil
	}
	m.raw = bytes.Clone(b) // Send may not keep b
	o.mu.Lock()
	o.msgs = append(o.msgs, m)
	o.mu.Unlock()
	select {
	case o.poke <- struct{}{}:
	default:
	}
	return nil
}

func (o *legacyOut) KeepAlive() error {
	o.mu.Lock()
	o.keepAlives++
	o.mu.Unlock()
	select {
	case o.poke <- struct{}{}:
	default:
	}
	return nil
}

// waitKeepAlives waits until at least n keep-alives were sent.
func (o *legacyOut) waitKeepAlives(t testing.TB, n int) {
	t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		o.mu.Lock()
		k := o.keepAlives
		o.mu.Unlock()
		if k >= n {
			return
		}
		select {
		case <-o.poke:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %d keep-alives (got %d)", n, k)
		}
	}
}

func (o *legacyOut) keepAliveCount() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.keepAlives
}

func (o *legacyOut) all() []legacyMsg {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]legacyMsg(nil), o.msgs...)
}

// waitFor waits until a message matches and returns it.
func (o *legacyOut) waitFor(t testing.TB, what string, match func(legacyMsg) bool) legacyMsg {
	t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		for _, m := range o.all() {
			if match(m) {
				return m
			}
		}
		select {
		case <-o.poke:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s; got:\n%s", what, o.dump())
		}
	}
}

func (o *legacyOut) dump() string {
	var sb strings.Builder
	for _, m := range o.all() {
		sb.Write(m.raw)
		sb.WriteByte('\n')
	}
	return sb.String()
}

// count returns how many messages match.
func (o *legacyOut) count(match func(legacyMsg) bool) int {
	n := 0
	for _, m := range o.all() {
		if match(m) {
			n++
		}
	}
	return n
}

func isMethod(method string) func(legacyMsg) bool {
	return func(m legacyMsg) bool { return m.Method == method }
}

func isUpdate(uri string) func(legacyMsg) bool {
	return func(m legacyMsg) bool {
		return m.Method == mcp.NotifyResourceUpdated && m.Params["uri"] == uri
	}
}

// legacyCall parses a 2025-11-25 message (no _meta unless params bring
// one). The transport would have done the same.
func legacyCall(t testing.TB, srv *lsrv, id any, method string, params any) *engine.Call {
	t.Helper()
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if id != nil {
		msg["id"] = id
	}
	if params != nil {
		msg["params"] = params
	}
	b, err := json.Marshal(msg)
	if err != nil {
		t.Fatal(err)
	}
	m, err := jsonrpc.Decode(b, 0)
	if err != nil {
		t.Fatalf("test message does not decode: %v\n%s", err, b)
	}
	c, rep := engine.Parse(m)
	if rep != nil {
		t.Fatalf("Parse refused %s: %s", b, rep.Body)
	}
	return c
}

// legacyResponse is a decoded 2025-11-25 response.
type legacyResponse struct {
	raw    []byte
	ID     json.RawMessage            `json:"id"`
	Result map[string]json.RawMessage `json:"result"`
	Error  *struct {
		Code    jsonrpc.Code `json:"code"`
		Message string       `json:"message"`
	} `json:"error"`
}

func decodeLegacy(t testing.TB, method string, body []byte) *legacyResponse {
	t.Helper()
	if body == nil {
		t.Fatalf("%s: no response", method)
	}
	b := bytes.Clone(body)
	schematest.ValidateLegacyResponse(t, method, b)
	r := &legacyResponse{raw: b}
	if err := json.Unmarshal(b, r); err != nil {
		t.Fatalf("%s: undecodable response %s: %v", method, b, err)
	}
	return r
}

// ok asserts a result without any 2026-07-28 field and returns it.
func (r *legacyResponse) ok(t testing.TB) map[string]json.RawMessage {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("unexpected error %d %q: %s", r.Error.Code, r.Error.Message, r.raw)
	}
	for _, k := range []string{"resultType", "ttlMs", "cacheScope"} {
		if _, has := r.Result[k]; has {
			t.Errorf("2025-11-25 result carries %s: %s", k, r.raw)
		}
	}
	if m, has := r.Result["_meta"]; has && bytes.Contains(m, []byte(mcp.MetaServerInfo)) {
		t.Errorf("2025-11-25 result carries %s in _meta: %s", mcp.MetaServerInfo, r.raw)
	}
	return r.Result
}

func (r *legacyResponse) fails(t testing.TB, code jsonrpc.Code) {
	t.Helper()
	if r.Error == nil {
		t.Fatalf("got a result, want error %d: %s", code, r.raw)
	}
	if r.Error.Code != code {
		t.Fatalf("error code = %d (%s), want %d", r.Error.Code, r.Error.Message, code)
	}
}

// openSession runs initialize with the given client capabilities and
// checks the InitializeResult against the 2025-11-25 schema.
func openSession(t testing.TB, srv *lsrv, caps map[string]any) *legacy.Session {
	t.Helper()
	if caps == nil {
		caps = map[string]any{}
	}
	c := legacyCall(t, srv, 0, mcp.MethodInitialize, map[string]any{
		"protocolVersion": mcp.LegacyVersion,
		"capabilities":    caps,
		"clientInfo":      map[string]any{"name": "legacy-test", "version": "1.0.0"},
	})
	ss, rep := srv.Initialize(c)
	res := decodeLegacy(t, mcp.MethodInitialize, rep.Body).ok(t)
	if ss == nil {
		t.Fatal("initialize opened no session")
	}
	if got := string(res["protocolVersion"]); got != `"`+mcp.LegacyVersion+`"` {
		t.Errorf("protocolVersion = %s, want %q", got, mcp.LegacyVersion)
	}
	return ss
}

// serve runs one request of a session to its end.
func serve(t testing.TB, srv *lsrv, ss *legacy.Session, id any, method string, params any) (*legacyResponse, *legacyOut) {
	t.Helper()
	out := newLegacyOut(t)
	rep := srv.ServeLegacy(context.Background(), ss, legacyCall(t, srv, id, method, params), "", out)
	return decodeLegacy(t, method, rep.Body), out
}

// sessionStream runs a session's notification stream until stop.
type sessionStream struct {
	out    *legacyOut
	cancel context.CancelFunc
	done   chan error
}

// openStream starts ServeSessionStream and returns once the stream is
// open (start has run).
func openStream(t testing.TB, srv *lsrv, ss *legacy.Session) *sessionStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	st := &sessionStream{out: newLegacyOut(t), cancel: cancel, done: make(chan error, 1)}
	started := make(chan struct{})
	go func() {
		st.done <- srv.ServeSessionStream(ctx, ss, st.out, func() error { close(started); return nil })
	}()
	select {
	case <-started:
	case err := <-st.done:
		cancel()
		t.Fatalf("stream did not open: %v", err)
	case <-time.After(waitLimit):
		t.Fatal("stream did not open")
	}
	t.Cleanup(func() { st.stop(t) })
	return st
}

// stop ends the stream and waits for it, so every message it would send
// is in out afterwards.
func (st *sessionStream) stop(t testing.TB) []legacyMsg {
	t.Helper()
	st.cancel()
	select {
	case err := <-st.done:
		if err != nil {
			t.Errorf("stream ended with %v", err)
		}
		st.done <- nil // later stops return at once
	case <-time.After(waitLimit):
		t.Fatal("stream did not end after cancel")
	}
	return st.out.all()
}

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

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

// legacyServer has a tool, a prompt, a template, completions and two
// resources.
func legacyServer(t testing.TB, opts ...server.Option) *lsrv {
	t.Helper()
	return legacyServerLimits(t, 10000, 30*time.Minute, opts...)
}

// legacyServerLimits is legacyServer with a session table of the given
// bounds.
func legacyServerLimits(t testing.TB, max int, idle time.Duration, opts ...server.Option) *lsrv {
	t.Helper()
	h := newHarness(t, opts...)
	mustAddTool(t, h.srv, textTool("echo"), echoHandler("echoed"))
	mustAddPrompt(t, h.srv, mcp.Prompt{Name: "greet"}, simplePrompt)
	mustAddResource(t, h.srv, "res://x", textResource("res://x", "x"))
	mustAddResource(t, h.srv, "res://y", textResource("res://y", "y"))
	if err := h.srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "res://t/{id}", Name: "t"}, textResource("", "t")); err != nil {
		t.Fatal(err)
	}
	h.srv.SetCompletionHandler(func(context.Context, *server.CompleteRequest) (*mcp.Completion, error) {
		return &mcp.Completion{Values: []string{"one"}}, nil
	})
	return &lsrv{Server: h.srv, tbl: legacy.NewTable(engine.Of(h.srv), max, max, idle)}
}

func TestLegacyInitialize(t *testing.T) {
	srv := legacyServer(t, server.WithInstructions("be kind"))
	c := legacyCall(t, srv, "init", mcp.MethodInitialize, map[string]any{
		"protocolVersion": mcp.LegacyVersion,
		"capabilities":    map[string]any{"elicitation": map[string]any{}},
		"clientInfo":      map[string]any{"name": "c", "version": "1"},
	})
	ss, rep := srv.Initialize(c)
	r := decodeLegacy(t, mcp.MethodInitialize, rep.Body)
	res := r.ok(t)
	if string(r.ID) != `"init"` {
		t.Errorf("id = %s, want \"init\"", r.ID)
	}
	var caps mcp.ServerCaps
	if err := json.Unmarshal(res["capabilities"], &caps); err != nil {
		t.Fatal(err)
	}
	if caps.Tools == nil || !caps.Tools.ListChanged || caps.Resources == nil || !caps.Resources.Subscribe ||
		!caps.Resources.ListChanged || caps.Prompts == nil || caps.Completions == nil {
		t.Errorf("capabilities = %s, want tools/prompts/resources with listChanged, resources.subscribe, completions", res["capabilities"])
	}
	if string(res["instructions"]) != `"be kind"` {
		t.Errorf("instructions = %s", res["instructions"])
	}
	if !strings.Contains(string(res["serverInfo"]), `"tidings-test"`) {
		t.Errorf("serverInfo = %s", res["serverInfo"])
	}

	// The session id: visible ASCII only, long enough not to be guessed,
	// different for every session.
	id := ss.ID()
	if len(id) < 16 {
		t.Errorf("session id %q is too short to be unguessable", id)
	}
	for i := 0; i < len(id); i++ {
		if id[i] < 0x21 || id[i] > 0x7e {
			t.Fatalf("session id %q has byte %#x outside visible ASCII", id, id[i])
		}
	}
	if other := openSession(t, srv, nil); other.ID() == id {
		t.Error("two sessions share an id")
	}
	if got, ok := srv.Session(id); !ok || got != ss {
		t.Error("the session is not found by its id")
	}
	if n := srv.SessionCount(); n != 2 {
		t.Errorf("SessionCount = %d, want 2", n)
	}

	// Versions: a known earlier one is echoed, an unknown one gets ours.
	for v, want := range map[string]string{"2025-06-18": "2025-06-18", "2024-11-05": mcp.LegacyVersion, "2099-01-01": mcp.LegacyVersion} {
		c := legacyCall(t, srv, 1, mcp.MethodInitialize, map[string]any{"protocolVersion": v, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "c", "version": "1"}})
		ss, rep := srv.Initialize(c)
		res := decodeLegacy(t, mcp.MethodInitialize, rep.Body).ok(t)
		if string(res["protocolVersion"]) != `"`+want+`"` {
			t.Errorf("client %s: protocolVersion = %s, want %s", v, res["protocolVersion"], want)
		}
		if ss.Version() != want {
			t.Errorf("client %s: session version = %s, want %s", v, ss.Version(), want)
		}
	}

	// initialize without a protocolVersion opens nothing.
	before := srv.SessionCount()
	ss, rep = srv.Initialize(legacyCall(t, srv, 2, mcp.MethodInitialize, map[string]any{"capabilities": map[string]any{}}))
	if ss != nil {
		t.Error("initialize without protocolVersion opened a session")
	}
	decodeLegacy(t, mcp.MethodInitialize, rep.Body).fails(t, jsonrpc.CodeInvalidParams)
	if srv.SessionCount() != before {
		t.Error("a refused initialize changed the session count")
	}
}

// TestLegacyEmptyResults checks the results that must be exactly {}.
func TestLegacyEmptyResults(t *testing.T) {
	srv := legacyServer(t)
	ss := openSession(t, srv, nil)
	for _, tc := range []struct {
		method string
		params any
	}{
		{mcp.MethodPing, nil},
		{mcp.MethodLoggingSetLevel, map[string]any{"level": "info"}},
		{mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://x"}},
		{mcp.MethodResourcesUnsubscribe, map[string]any{"uri": "res://x"}},
	} {
		r, out := serve(t, srv, ss, 7, tc.method, tc.params)
		r.ok(t)
		var env struct {
			Result json.RawMessage `json:"result"`
		}
		_ = json.Unmarshal(r.raw, &env)
		if string(env.Result) != "{}" {
			t.Errorf("%s: result = %s, want exactly {}", tc.method, env.Result)
		}
		if n := len(out.all()); n != 0 {
			t.Errorf("%s sent %d messages before its response", tc.method, n)
		}
	}
	r, _ := serve(t, srv, ss, 8, mcp.MethodLoggingSetLevel, map[string]any{"level": "loud"})
	r.fails(t, jsonrpc.CodeInvalidParams)
	r, _ = serve(t, srv, ss, 9, mcp.MethodResourcesSubscribe, map[string]any{})
	r.fails(t, jsonrpc.CodeInvalidParams)
	// Methods of the other era do not exist in a session.
	for _, m := range []string{mcp.MethodListen, mcp.MethodDiscover, "tasks/list"} {
		r, _ := serve(t, srv, ss, 10, m, map[string]any{})
		r.fails(t, jsonrpc.CodeMethodNotFound)
	}
}

// TestLegacyResultsPlain checks every result of a session against the
// 2025-11-25 schema, without resultType, ttlMs, cacheScope or serverInfo.
func TestLegacyResultsPlain(t *testing.T) {
	srv := legacyServer(t, server.WithPageSize(1))
	ss := openSession(t, srv, nil)
	cases := []struct {
		method string
		params any
		field  string
	}{
		{mcp.MethodToolsList, nil, "tools"},
		{mcp.MethodToolsCall, map[string]any{"name": "echo", "arguments": map[string]any{}}, "content"},
		{mcp.MethodPromptsList, nil, "prompts"},
		{mcp.MethodPromptsGet, map[string]any{"name": "greet", "arguments": map[string]any{"who": "x"}}, "messages"},
		{mcp.MethodResourcesList, nil, "resources"},
		{mcp.MethodResourcesTemplates, nil, "resourceTemplates"},
		{mcp.MethodResourcesRead, map[string]any{"uri": "res://x"}, "contents"},
		{mcp.MethodResourcesRead, map[string]any{"uri": "res://t/7"}, "contents"},
		{mcp.MethodComplete, map[string]any{"ref": map[string]any{"type": "ref/prompt", "name": "greet"}, "argument": map[string]any{"name": "who", "value": "o"}}, "completion"},
	}
	for _, tc := range cases {
		r, _ := serve(t, srv, ss, 1, tc.method, tc.params)
		res := r.ok(t)
		if _, ok := res[tc.field]; !ok {
			t.Errorf("%s: result has no %s: %s", tc.method, tc.field, r.raw)
		}
	}

	// Pagination works in a session: a page of one, then the next.
	r, _ := serve(t, srv, ss, 2, mcp.MethodResourcesList, nil)
	res := r.ok(t)
	var cursor string
	if err := json.Unmarshal(res["nextCursor"], &cursor); err != nil || cursor == "" {
		t.Fatalf("resources/list page 1: nextCursor = %s", res["nextCursor"])
	}
	r, _ = serve(t, srv, ss, 3, mcp.MethodResourcesList, map[string]any{"cursor": cursor})
	if got := string(r.ok(t)["resources"]); !strings.Contains(got, "res://y") {
		t.Errorf("resources/list page 2 = %s, want res://y", got)
	}

	// A handler's own _meta is kept.
	mustAddTool(t, srv.Server, textTool("meta"), func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("m")}, Meta: mcp.Meta{"example.com/k": jsontext.Value(`"v"`)}}, nil
	})
	r, _ = serve(t, srv, ss, 4, mcp.MethodToolsCall, map[string]any{"name": "meta"})
	if got := string(r.ok(t)["_meta"]); got != `{"example.com/k":"v"}` {
		t.Errorf("_meta = %s, want the handler's own", got)
	}
}

// TestLegacyLoggingAndProgress checks that a session's log level governs
// log messages on its requests, and that a progressToken gets progress.
func TestLegacyLoggingAndProgress(t *testing.T) {
	srv := legacyServer(t)
	mustAddTool(t, srv.Server, textTool("chatty"), func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		_ = req.Log(mcp.LogLevel("debug"), "t", "fine detail")
		_ = req.Log(mcp.LogLevel("warning"), "t", "careful")
		total := 2.0
		_ = req.Progress(1, &total, "half")
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("done")}}, nil
	})
	ss := openSession(t, srv, nil)
	r, out := serve(t, srv, ss, 1, mcp.MethodToolsCall, map[string]any{"name": "chatty"})
	r.ok(t)
	if n := len(out.all()); n != 0 {
		t.Errorf("before logging/setLevel and without a progressToken: %d messages:\n%s", n, out.dump())
	}
	r, _ = serve(t, srv, ss, 2, mcp.MethodLoggingSetLevel, map[string]any{"level": "info"})
	r.ok(t)
	r, out = serve(t, srv, ss, 3, mcp.MethodToolsCall, map[string]any{"name": "chatty", "_meta": map[string]any{"progressToken": "tok"}})
	r.ok(t)
	msgs := out.all()
	if len(msgs) != 2 || msgs[0].Method != mcp.NotifyMessage || msgs[0].Params["level"] != "warning" ||
		msgs[1].Method != mcp.NotifyProgress || msgs[1].Params["progressToken"] != "tok" {
		t.Errorf("messages = \n%s\nwant the warning (not the debug line) and one progress for tok", out.dump())
	}
	// Another session has its own level.
	other := openSession(t, srv, nil)
	_, out = serve(t, srv, other, 4, mcp.MethodToolsCall, map[string]any{"name": "chatty"})
	if n := len(out.all()); n != 0 {
		t.Errorf("a session without setLevel got %d log messages", n)
	}
}

// TestLegacySessionExpiry checks idle expiry on the server's clock and
// explicit ends.
func TestLegacySessionExpiry(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	srv := legacyServerLimits(t, 100, time.Minute, server.WithClock(clk.Now))
	ss := openSession(t, srv, nil)
	id := ss.ID()

	clk.Advance(59 * time.Second)
	if _, ok := srv.Session(id); !ok {
		t.Fatal("session gone before its idle time")
	}
	// That use restarted the idle clock.
	clk.Advance(59 * time.Second)
	if _, ok := srv.Session(id); !ok {
		t.Fatal("session gone although it was used 59s ago")
	}
	clk.Advance(61 * time.Second)
	if _, ok := srv.Session(id); ok {
		t.Fatal("session still there after 61s idle (limit 1m)")
	}
	select {
	case <-ss.Ended():
	default:
		t.Error("an expired session's Ended channel is open")
	}
	if n := srv.SessionCount(); n != 0 {
		t.Errorf("SessionCount = %d after expiry, want 0", n)
	}

	// Expired sessions are also swept when new ones arrive.
	a := openSession(t, srv, nil)
	clk.Advance(2 * time.Minute)
	b := openSession(t, srv, nil)
	if n := srv.SessionCount(); n != 1 {
		t.Errorf("SessionCount = %d, want 1 (the expired one swept)", n)
	}
	select {
	case <-a.Ended():
	default:
		t.Error("the swept session did not end")
	}

	// EndSession ends it at once, and only once.
	if !srv.EndSession(b.ID()) {
		t.Error("EndSession of a live session reported false")
	}
	if srv.EndSession(b.ID()) {
		t.Error("EndSession of an ended session reported true")
	}
	if _, ok := srv.Session(b.ID()); ok {
		t.Error("an ended session is still found")
	}
	if _, ok := srv.Session("no-such-session"); ok {
		t.Error("an unknown id is found")
	}
}

// TestLegacyStreamKeepsSessionAlive checks that a session whose stream is
// open does not expire as idle, however quiet it is.
func TestLegacyStreamKeepsSessionAlive(t *testing.T) {
	clk := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	srv := legacyServerLimits(t, 100, time.Minute, server.WithClock(clk.Now), server.WithKeepAlive(time.Millisecond))
	ss := openSession(t, srv, nil)
	st := openStream(t, srv, ss)
	for range 3 {
		clk.Advance(50 * time.Second)
		// Two more keep-alives: the first one after the advance has
		// certainly refreshed the session by the time the second is sent.
		st.out.waitKeepAlives(t, st.out.keepAliveCount()+2)
	}
	if _, ok := srv.Session(ss.ID()); !ok {
		t.Fatal("a session with an open stream expired after 150s of quiet (idle limit 1m)")
	}
	st.stop(t)
	clk.Advance(61 * time.Second)
	if _, ok := srv.Session(ss.ID()); ok {
		t.Error("the session did not expire once its stream closed")
	}
}

// TestLegacySessionFlood opens 100k sessions: the table stays at its cap,
// the least recently used go first, and memory stays bounded.
func TestLegacySessionFlood(t *testing.T) {
	const max = 1000
	srv := legacyServerLimits(t, max, time.Hour)
	keep := openSession(t, srv, nil)
	first := openSession(t, srv, nil)
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	base := heap()
	c := legacyCall(t, srv, 1, mcp.MethodInitialize, map[string]any{
		"protocolVersion": mcp.LegacyVersion, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "flood", "version": "1"},
	})
	var wg sync.WaitGroup
	var over sync.Once
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100_000/8; i++ {
				ss, rep := srv.Initialize(c)
				rep.Release()
				if ss == nil {
					over.Do(func() { t.Error("initialize failed during the flood") })
					return
				}
				if i%50 == 0 {
					// A session in steady use survives the flood.
					if _, ok := srv.Session(keep.ID()); !ok {
						over.Do(func() { t.Error("a session in use was evicted") })
					}
					if n := srv.SessionCount(); n > max {
						over.Do(func() { t.Errorf("SessionCount = %d, above the cap %d", n, max) })
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := srv.SessionCount(); n != max {
		t.Errorf("SessionCount = %d after the flood, want the cap %d", n, max)
	}
	if _, ok := srv.Session(first.ID()); ok {
		t.Error("the least recently used session survived 100k newer ones")
	}
	select {
	case <-first.Ended():
	default:
		t.Error("an evicted session did not end")
	}
	if grown := int64(heap()) - int64(base); grown > 32<<20 {
		t.Errorf("heap grew by %d MiB over 100k sessions with a cap of %d", grown>>20, max)
	}
}

// TestLegacyStream checks the session stream: list changes of every kind,
// updates of subscribed resources only, none after unsubscribe.
func TestLegacyStream(t *testing.T) {
	srv := legacyServer(t)
	ss := openSession(t, srv, nil)
	st := openStream(t, srv, ss)

	// A second stream on the same session is refused, before start.
	started := false
	err := srv.ServeSessionStream(context.Background(), ss, newLegacyOut(t), func() error { started = true; return nil })
	if !errors.Is(err, legacy.ErrStreamOpen) || started {
		t.Errorf("second stream: err = %v, started = %v; want ErrStreamOpen before start", err, started)
	}

	mustAddTool(t, srv.Server, textTool("late"), echoHandler("late"))
	m := st.out.waitFor(t, "tools/list_changed", isMethod(mcp.NotifyToolsListChanged))
	if m.ID != nil || len(m.Params) != 0 {
		t.Errorf("list_changed = %s, want a bare notification", m.raw)
	}
	mustAddPrompt(t, srv.Server, mcp.Prompt{Name: "late"}, simplePrompt)
	st.out.waitFor(t, "prompts/list_changed", isMethod(mcp.NotifyPromptsListChanged))
	mustAddResource(t, srv.Server, "res://late", textResource("res://late", "l"))
	st.out.waitFor(t, "resources/list_changed", isMethod(mcp.NotifyResourcesListChanged))

	// Subscribe, then a change right after the answer: it must arrive.
	r, _ := serve(t, srv, ss, 1, mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://x"})
	r.ok(t)
	srv.ResourceUpdated("res://x")
	st.out.waitFor(t, "the update of res://x", isUpdate("res://x"))

	// Unsubscribe, then changes of x and, as a marker, of y.
	r, _ = serve(t, srv, ss, 2, mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://y"})
	r.ok(t)
	r, _ = serve(t, srv, ss, 3, mcp.MethodResourcesUnsubscribe, map[string]any{"uri": "res://x"})
	r.ok(t)
	srv.ResourceUpdated("res://x")
	srv.ResourceUpdated("res://y")
	srv.ResourceUpdated("res://never-subscribed")
	st.out.waitFor(t, "the update of res://y", isUpdate("res://y"))
	msgs := st.stop(t)
	if n := st.out.count(isUpdate("res://x")); n != 1 {
		t.Errorf("res://x updates = %d, want 1 (none after unsubscribe)", n)
	}
	for _, m := range msgs {
		if m.Params["uri"] == "res://never-subscribed" {
			t.Errorf("update of a resource never subscribed: %s", m.raw)
		}
		if bytes.Contains(m.raw, []byte(mcp.MetaSubscriptionID)) || m.Method == mcp.NotifyAcknowledged {
			t.Errorf("listen traffic on the session stream: %s", m.raw)
		}
	}

	// The stream is free again once it ended, and the subscriptions made
	// while it was closed count when it reopens.
	r, _ = serve(t, srv, ss, 4, mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://x"})
	r.ok(t)
	st2 := openStream(t, srv, ss)
	srv.ResourceUpdated("res://x")
	st2.out.waitFor(t, "the update of res://x on the reopened stream", isUpdate("res://x"))

	// Ending the session ends its stream.
	srv.EndSession(ss.ID())
	select {
	case err := <-st2.done:
		if err != nil {
			t.Errorf("stream of an ended session: %v", err)
		}
		st2.done <- nil
	case <-time.After(waitLimit):
		t.Fatal("the stream outlived its session")
	}
}

// TestLegacySubscribeRace repeats subscribe-then-change and
// unsubscribe-then-change with the stream open: the answer to
// resources/subscribe promises every later change, the answer to
// resources/unsubscribe promises silence.
func TestLegacySubscribeRace(t *testing.T) {
	srv := legacyServer(t)
	ss := openSession(t, srv, nil)
	st := openStream(t, srv, ss)
	r, _ := serve(t, srv, ss, 0, mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://y"})
	r.ok(t)
	for i := range 200 {
		uri := fmt.Sprintf("res://r/%d", i)
		r, _ := serve(t, srv, ss, i, mcp.MethodResourcesSubscribe, map[string]any{"uri": uri})
		r.ok(t)
		srv.ResourceUpdated(uri)
		st.out.waitFor(t, "the update of "+uri, isUpdate(uri))
		r, _ = serve(t, srv, ss, i, mcp.MethodResourcesUnsubscribe, map[string]any{"uri": uri})
		r.ok(t)
		srv.ResourceUpdated(uri)
	}
	srv.ResourceUpdated("res://y")
	st.out.waitFor(t, "the marker update of res://y", isUpdate("res://y"))
	st.stop(t)
	for i := range 200 {
		uri := fmt.Sprintf("res://r/%d", i)
		if n := st.out.count(isUpdate(uri)); n != 1 {
			t.Fatalf("%s: %d updates, want exactly 1 (subscribed for one change)", uri, n)
		}
	}
}

// TestLegacyStreamIsolation checks both directions between a session
// stream and a modern listen on the same server.
func TestLegacyStreamIsolation(t *testing.T) {
	h := newHarness(t)
	srv := &lsrv{Server: h.srv, tbl: legacy.NewTable(engine.Of(h.srv), 10, 10, time.Hour)}
	mustAddResource(t, srv.Server, "res://x", textResource("res://x", "x"))
	mustAddResource(t, srv.Server, "res://y", textResource("res://y", "y"))
	mustAddResource(t, srv.Server, "res://z", textResource("res://z", "z"))

	ss := openSession(t, srv, nil)
	r, _ := serve(t, srv, ss, 1, mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://x"})
	r.ok(t)
	r, _ = serve(t, srv, ss, 2, mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://z"})
	r.ok(t)
	st := openStream(t, srv, ss)

	// The modern listen asks for y only: no list kinds, not x.
	l := h.startListen("L1", P{"notifications": P{"resourceSubscriptions": []string{"res://y"}}})
	l.ack(t)

	srv.ResourceUpdated("res://x") // only the session asked
	srv.ResourceUpdated("res://y") // only the listen asked
	srv.ResourceUpdated("res://z") // the session's marker
	mustAddTool(t, srv.Server, textTool("t"), echoHandler("t"))
	st.out.waitFor(t, "the update of res://z", isUpdate("res://z"))
	st.out.waitFor(t, "tools/list_changed", isMethod(mcp.NotifyToolsListChanged))
	l.rec.waitUntil(t, "the update of res://y", func(ns []notif) bool {
		return countMethod(ns, mcp.NotifyResourceUpdated) >= 1
	})

	legacy := st.stop(t)
	modern := l.stop(t)
	for _, n := range modern {
		switch {
		case n.Method == mcp.NotifyAcknowledged:
		case n.Method == mcp.NotifyResourceUpdated && n.Params["uri"] == "res://y":
			l.checkTag(t, n)
		default:
			t.Errorf("the listen for res://y got %s", n.raw)
		}
	}
	if got := countMethod(modern, mcp.NotifyResourceUpdated); got != 1 {
		t.Errorf("the listen got %d updates, want 1", got)
	}
	for _, m := range legacy {
		if m.Params["uri"] == "res://y" {
			t.Errorf("the session stream got the listen's resource: %s", m.raw)
		}
		if bytes.Contains(m.raw, []byte(mcp.MetaSubscriptionID)) || m.Method == mcp.NotifyAcknowledged {
			t.Errorf("listen traffic on the session stream: %s", m.raw)
		}
	}
	if n := st.out.count(isUpdate("res://x")); n != 1 {
		t.Errorf("session updates of res://x = %d, want 1", n)
	}

	// A modern request is served statelessly while sessions exist.
	res, _ := h.call(9, mcp.MethodToolsList, nil)
	res.ok(t)
}

// inputTool asks for an elicitation until it has the answer.
func inputTool(t testing.TB, srv *lsrv) {
	t.Helper()
	mustAddTool(t, srv.Server, textTool("ask"), func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		answer, ok := req.InputResponses["who"]
		if !ok {
			return nil, &server.InputRequired{
				Requests: map[string]mcp.InputRequest{"who": {
					Method: mcp.MethodElicit,
					Params: jsontext.Value(`{"mode":"form","message":"Who are you?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}}}}`),
				}},
				State: []byte("round-1"),
			}
		}
		var a struct {
			Action  string `json:"action"`
			Content struct {
				Name string `json:"name"`
			} `json:"content"`
		}
		if err := json.Unmarshal(answer, &a); err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(fmt.Sprintf("%s %s state=%s", a.Action, a.Content.Name, req.State()))}}, nil
	})
}

// answer builds the client's JSON-RPC response to a server request.
func answer(t testing.TB, id json.RawMessage, result string) *jsonrpc.Message {
	t.Helper()
	m, err := jsonrpc.Decode(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":%s}`, id, result), 0)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestLegacyInputBridge checks that an InputRequired becomes a
// server-to-client request on the call's own stream, and the client's
// answer resumes the handler.
func TestLegacyInputBridge(t *testing.T) {
	srv := legacyServer(t)
	inputTool(t, srv)
	ss := openSession(t, srv, map[string]any{"elicitation": map[string]any{}})

	out := newLegacyOut(t)
	done := make(chan []byte, 1)
	go func() {
		rep := srv.ServeLegacy(context.Background(), ss, legacyCall(t, srv, 5, mcp.MethodToolsCall, map[string]any{"name": "ask"}), "", out)
		done <- bytes.Clone(rep.Body)
	}()
	req := out.waitFor(t, "elicitation/create", isMethod(mcp.MethodElicit))
	if req.ID == nil {
		t.Fatalf("elicitation/create without an id: %s", req.raw)
	}
	if req.Params["message"] != "Who are you?" {
		t.Errorf("elicitation params = %v", req.Params)
	}
	// A stray response answers nothing.
	if ss.Deliver(answer(t, json.RawMessage(`"nobody"`), `{}`)) {
		t.Error("Deliver accepted a response to no request")
	}
	if !ss.Deliver(answer(t, req.ID, `{"action":"accept","content":{"name":"Ada"}}`)) {
		t.Fatal("Deliver did not find the waiting request")
	}
	var body []byte
	select {
	case body = <-done:
	case <-time.After(waitLimit):
		t.Fatal("the tool did not finish after the answer")
	}
	res := decodeLegacy(t, mcp.MethodToolsCall, body).ok(t)
	if got := string(res["content"]); !strings.Contains(got, "accept Ada state=round-1") {
		t.Errorf("content = %s, want the answer and the state", got)
	}

	// A client that refuses: the call ends with an error, not a hang.
	go func() {
		rep := srv.ServeLegacy(context.Background(), ss, legacyCall(t, srv, 6, mcp.MethodToolsCall, map[string]any{"name": "ask"}), "", out)
		done <- bytes.Clone(rep.Body)
	}()
	req = out.waitFor(t, "a second elicitation/create", func(m legacyMsg) bool {
		return m.Method == mcp.MethodElicit && string(m.ID) != string(req.ID)
	})
	m, err := jsonrpc.Decode(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"error":{"code":-1,"message":"user said no"}}`, req.ID), 0)
	if err != nil {
		t.Fatal(err)
	}
	ss.Deliver(m)
	select {
	case body = <-done:
	case <-time.After(waitLimit):
		t.Fatal("the tool did not finish after a refusal")
	}
	if r := decodeLegacy(t, mcp.MethodToolsCall, body); r.Error == nil && !strings.Contains(string(r.Result["isError"]), "true") {
		t.Errorf("refused elicitation: %s, want an error", body)
	}

	// The session ending while the server waits ends the call too.
	go func() {
		rep := srv.ServeLegacy(context.Background(), ss, legacyCall(t, srv, 7, mcp.MethodToolsCall, map[string]any{"name": "ask"}), "", out)
		done <- bytes.Clone(rep.Body)
	}()
	out.waitFor(t, "a third elicitation/create", func(m legacyMsg) bool {
		return m.Method == mcp.MethodElicit && out.count(isMethod(mcp.MethodElicit)) >= 3
	})
	srv.EndSession(ss.ID())
	select {
	case body = <-done:
	case <-time.After(waitLimit):
		t.Fatal("the tool still waits for an answer after the session ended")
	}
	decodeLegacy(t, mcp.MethodToolsCall, body)

	// Without the capability the server does not ask.
	bare := openSession(t, srv, nil)
	r, out := serve(t, srv, bare, 8, mcp.MethodToolsCall, map[string]any{"name": "ask"})
	if r.Error == nil {
		t.Errorf("input from a client without elicitation: %s, want an error", r.raw)
	}
	if n := len(out.all()); n != 0 {
		t.Errorf("the server asked a client that cannot answer:\n%s", out.dump())
	}
}

// TestLegacyInputRoundsBounded checks a handler that never stops asking:
// the legacy client gets an error, not a 2026-07-28 interim result it
// cannot read.
func TestLegacyInputRoundsBounded(t *testing.T) {
	srv := legacyServer(t)
	mustAddTool(t, srv.Server, textTool("insatiable"), func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"again": {
			Method: mcp.MethodElicit,
			Params: jsontext.Value(`{"mode":"form","message":"Again?","requestedSchema":{"type":"object","properties":{}}}`),
		}}}
	})
	ss := openSession(t, srv, map[string]any{"elicitation": map[string]any{}})
	out := newLegacyOut(t)
	done := make(chan []byte, 1)
	go func() {
		rep := srv.ServeLegacy(context.Background(), ss, legacyCall(t, srv, 1, mcp.MethodToolsCall, map[string]any{"name": "insatiable"}), "", out)
		done <- bytes.Clone(rep.Body)
	}()
	answered := map[string]bool{}
	for {
		select {
		case body := <-done:
			r := decodeLegacy(t, mcp.MethodToolsCall, body)
			if r.Error == nil && !strings.Contains(string(r.Result["isError"]), "true") {
				t.Errorf("after %d rounds: %s, want an error", len(answered), body)
			}
			if len(answered) < 2 || len(answered) > 16 {
				t.Errorf("the server asked %d times", len(answered))
			}
			return
		case <-out.poke:
			for _, m := range out.all() {
				if m.Method == mcp.MethodElicit && !answered[string(m.ID)] {
					answered[string(m.ID)] = true
					ss.Deliver(answer(t, m.ID, `{"action":"accept","content":{}}`))
				}
			}
		case <-time.After(waitLimit):
			t.Fatalf("no end after %d rounds", len(answered))
		}
	}
}

// TestLegacyMethodOfNoCapability: in a session, a method whose capability
// the server does not offer (prompts/list of a server without prompts)
// is not found, as in 2026-07-28 — never an answer without a body.
func TestLegacyMethodOfNoCapability(t *testing.T) {
	h := newHarness(t)
	mustAddTool(t, h.srv, textTool("echo"), echoHandler("echoed"))
	srv := &lsrv{Server: h.srv, tbl: legacy.NewTable(engine.Of(h.srv), 10, 10, time.Minute)}
	ss := openSession(t, srv, nil)
	for _, m := range []string{mcp.MethodPromptsList, mcp.MethodResourcesList, mcp.MethodComplete} {
		r, _ := serve(t, srv, ss, 1, m, map[string]any{})
		r.fails(t, jsonrpc.CodeMethodNotFound)
	}
}
