package streamhttp_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/sse"
	"tidings/internal/testrig/schematest"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// These tests speak the 2025-11-25 wire to the same endpoint as modern
// clients, the way the TypeScript SDK v1 does: initialize without any
// version header, a session id on every later request, a GET stream for
// notifications, DELETE to end.

const legacyWait = 10 * time.Second

// legacyBody builds a JSON-RPC message without _meta (id nil: a
// notification).
func legacyBody(id any, method string, params any) []byte {
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if id != nil {
		msg["id"] = id
	}
	if params != nil {
		msg["params"] = params
	}
	b, _ := json.Marshal(msg)
	return b
}

// legacyHeaders are the headers of a session request: no Mcp-Method, and
// the version header only once a session exists.
func legacyHeaders(sid string) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		h.Set(mcp.HeaderSessionID, sid)
		h.Set(mcp.HeaderProtocolVersion, mcp.LegacyVersion)
	}
	return h
}

// legacyInitialize opens a session over HTTP as the SDK does and returns
// its id: initialize, then notifications/initialized (202).
func legacyInitialize(t testing.TB, f *fixture, caps map[string]any) string {
	t.Helper()
	if caps == nil {
		caps = map[string]any{}
	}
	r := f.post(t, legacyBody(0, mcp.MethodInitialize, map[string]any{
		"protocolVersion": mcp.LegacyVersion,
		"capabilities":    caps,
		"clientInfo":      map[string]any{"name": "legacy-http-test", "version": "1.0.0"},
	}), legacyHeaders(""))
	if r.status != http.StatusOK {
		t.Fatalf("initialize: status %d, body %s", r.status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("initialize: Content-Type %q", ct)
	}
	schematest.ValidateLegacyResponse(t, mcp.MethodInitialize, r.body)
	res := legacyResult(t, r.body)
	if string(res["protocolVersion"]) != `"`+mcp.LegacyVersion+`"` {
		t.Errorf("initialize: protocolVersion %s", res["protocolVersion"])
	}
	sid := r.header.Get(mcp.HeaderSessionID)
	if sid == "" {
		t.Fatal("initialize: no Mcp-Session-Id header")
	}
	for i := 0; i < len(sid); i++ {
		if sid[i] < 0x21 || sid[i] > 0x7e {
			t.Fatalf("Mcp-Session-Id %q has byte %#x outside visible ASCII", sid, sid[i])
		}
	}
	n := f.post(t, legacyBody(nil, mcp.NotifyInitialized, nil), legacyHeaders(sid))
	if n.status != http.StatusAccepted || len(n.body) != 0 {
		t.Fatalf("notifications/initialized: status %d body %q, want 202 and no body", n.status, n.body)
	}
	return sid
}

// legacyResult decodes a JSON-RPC result and checks that it carries none
// of the 2026-07-28 result fields.
func legacyResult(t testing.TB, body []byte) map[string]json.RawMessage {
	t.Helper()
	e := decodeEnvelope(t, body)
	if e.Error != nil {
		t.Fatalf("unexpected error %d %q", e.Error.Code, e.Error.Message)
	}
	var res map[string]json.RawMessage
	if err := json.Unmarshal(e.Result, &res); err != nil {
		t.Fatalf("result is not an object: %s", body)
	}
	for _, k := range []string{"resultType", "ttlMs", "cacheScope"} {
		if _, has := res[k]; has {
			t.Errorf("2025-11-25 result carries %s: %s", k, body)
		}
	}
	return res
}

// call posts one session request answered with plain JSON, validates it
// against the 2025-11-25 schema and returns the result.
func (f *fixture) call(t testing.TB, sid string, id any, method string, params any) map[string]json.RawMessage {
	t.Helper()
	r := f.post(t, legacyBody(id, method, params), legacyHeaders(sid))
	if r.status != http.StatusOK || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("%s: status %d (%s), body %s", method, r.status, r.header.Get("Content-Type"), r.body)
	}
	schematest.ValidateLegacyResponse(t, method, r.body)
	return legacyResult(t, r.body)
}

// legacyEvent is one SSE event of a legacy stream.
type legacyEvent struct {
	envelope
	raw []byte
}

// legacyPump reads a stream's events on its own goroutine until it ends;
// every event is kept, so tests can look back at all of them.
type legacyPump struct {
	mu     sync.Mutex
	events []legacyEvent
	poke   chan struct{}
	done   chan struct{}
	err    error // why the stream ended, valid after done
	body   io.Closer
}

func newPump(t testing.TB, resp *http.Response) *legacyPump {
	p := &legacyPump{poke: make(chan struct{}, 1), done: make(chan struct{}), body: resp.Body}
	rd := sse.NewReader(resp.Body, 0)
	go func() {
		defer close(p.done)
		for {
			ev, err := rd.Next()
			if err != nil {
				p.err = err
				return
			}
			var e legacyEvent
			if err := json.Unmarshal(ev.Data, &e.envelope); err != nil {
				p.err = fmt.Errorf("event is not JSON: %q", ev.Data)
				return
			}
			e.raw = bytes.Clone(ev.Data)
			p.mu.Lock()
			p.events = append(p.events, e)
			p.mu.Unlock()
			select {
			case p.poke <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(p.close)
	return p
}

func (p *legacyPump) close() {
	p.body.Close()
	<-p.done
}

func (p *legacyPump) all() []legacyEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]legacyEvent(nil), p.events...)
}

// waitFor waits until an event matches and returns it.
func (p *legacyPump) waitFor(t testing.TB, what string, match func(legacyEvent) bool) legacyEvent {
	t.Helper()
	deadline := time.NewTimer(legacyWait)
	defer deadline.Stop()
	for {
		for _, e := range p.all() {
			if match(e) {
				return e
			}
		}
		select {
		case <-p.poke:
		case <-p.done:
			for _, e := range p.all() {
				if match(e) {
					return e
				}
			}
			t.Fatalf("stream ended (%v) before %s; got %s", p.err, what, p.dump())
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s; got %s", what, p.dump())
		}
	}
}

// ended waits for the stream to end.
func (p *legacyPump) ended(t testing.TB) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(legacyWait):
		t.Fatal("the stream did not end")
	}
}

func (p *legacyPump) count(match func(legacyEvent) bool) int {
	n := 0
	for _, e := range p.all() {
		if match(e) {
			n++
		}
	}
	return n
}

func (p *legacyPump) dump() string {
	var sb strings.Builder
	for _, e := range p.all() {
		sb.WriteString("\n  ")
		sb.Write(e.raw)
	}
	return sb.String()
}

func methodIs(m string) func(legacyEvent) bool {
	return func(e legacyEvent) bool { return e.Method == m }
}

func updateOf(uri string) func(legacyEvent) bool {
	return func(e legacyEvent) bool {
		var p struct {
			URI string `json:"uri"`
		}
		_ = json.Unmarshal(e.Params, &p)
		return e.Method == mcp.NotifyResourceUpdated && p.URI == uri
	}
}

// getStream opens the session's GET stream; the response must be an SSE
// stream.
func (f *fixture) getStream(t testing.TB, sid string) *legacyPump {
	t.Helper()
	resp := f.get(t, sid)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		t.Fatalf("GET: status %d (%s), body %s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	return newPump(t, resp)
}

// get sends the GET of a session.
func (f *fixture) get(t testing.TB, sid string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.ts.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(mcp.HeaderSessionID, sid)
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.LegacyVersion)
	resp, err := f.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// sessionRequest sends a bodiless GET or DELETE for a session and reads
// the whole response.
func (f *fixture) sessionRequest(t testing.TB, method, sid string) reply {
	t.Helper()
	req, err := http.NewRequest(method, f.ts.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(mcp.HeaderSessionID, sid)
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.LegacyVersion)
	return f.do(t, req)
}

// addLegacyFixtures registers what the legacy tests use beyond the
// standard fixture: resources res://x and res://y, and a tool that asks
// the client who it is.
func addLegacyFixtures(t testing.TB, srv *server.Server) {
	t.Helper()
	for _, u := range []string{"res://x", "res://y"} {
		if err := srv.AddResource(mcp.Resource{URI: u, Name: u}, func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "text/plain", "content of "+req.URI)}}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	err := srv.AddTool(mcp.Tool{Name: "ask", InputSchema: jsontext.Value(`{"type":"object"}`)},
		func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			answer, ok := req.InputResponses["who"]
			if !ok {
				return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"who": {
					Method: mcp.MethodElicit,
					Params: jsontext.Value(`{"mode":"form","message":"Who are you?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}`),
				}}}
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
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(a.Action + ": " + a.Content.Name)}}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
}

// TestLegacyHTTPLifecycle walks one session from initialize to DELETE.
func TestLegacyHTTPLifecycle(t *testing.T) {
	f := newFixture(t, nil)
	addLegacyFixtures(t, f.srv)
	sid := legacyInitialize(t, f, nil)
	if n := f.h.SessionCount(); n != 1 {
		t.Errorf("SessionCount = %d, want 1", n)
	}

	for _, m := range []struct {
		method string
		params any
	}{{mcp.MethodPing, nil}, {mcp.MethodLoggingSetLevel, map[string]any{"level": "debug"}}} {
		r := f.post(t, legacyBody(1, m.method, m.params), legacyHeaders(sid))
		if r.status != http.StatusOK {
			t.Fatalf("%s: status %d", m.method, r.status)
		}
		schematest.ValidateLegacyResponse(t, m.method, r.body)
		if e := decodeEnvelope(t, r.body); string(e.Result) != "{}" || string(e.ID) != "1" {
			t.Errorf("%s: %s, want result exactly {} for id 1", m.method, r.body)
		}
	}
	if tools := string(f.call(t, sid, 2, mcp.MethodToolsList, nil)["tools"]); !strings.Contains(tools, `"echo"`) {
		t.Errorf("tools/list = %s", tools)
	}
	// A session request needs no Mcp-Method or Mcp-Name headers, nor _meta.
	if c := string(f.call(t, sid, 3, mcp.MethodToolsCall, map[string]any{"name": "coffee", "arguments": map[string]any{}})["content"]); !strings.Contains(c, "coffee") {
		t.Errorf("tools/call coffee = %s", c)
	}
	if c := string(f.call(t, sid, 4, mcp.MethodResourcesRead, map[string]any{"uri": "res://x"})["contents"]); !strings.Contains(c, "content of res://x") {
		t.Errorf("resources/read = %s", c)
	}
	f.call(t, sid, 5, mcp.MethodPromptsGet, map[string]any{"name": "greet"})

	// A progress token turns the answer into an SSE stream with progress
	// first, the result last.
	s := f.open(t, context.Background(), legacyBody(6, mcp.MethodToolsCall, map[string]any{"name": "progress", "_meta": map[string]any{"progressToken": "p6"}}), legacyHeaders(sid))
	ev := s.next(t)
	if ev.Method != mcp.NotifyProgress || !strings.Contains(string(ev.Params), `"p6"`) {
		t.Fatalf("first event = %+v, want progress for p6", ev)
	}
	if ev = s.next(t); string(ev.ID) != "6" || ev.Result == nil {
		t.Fatalf("second event = %+v, want the result", ev)
	}

	// The version a request declares wins over the session it names
	// (STL-1): a 2026-07-28 version header makes it a stateless request,
	// refused here for its missing _meta.
	h := legacyHeaders(sid)
	h.Set(mcp.HeaderProtocolVersion, mcp.Version)
	wantError(t, f.post(t, legacyBody(7, mcp.MethodToolsList, nil), h), http.StatusBadRequest, -32602)
	// A session is initialized once.
	wantError(t, f.post(t, legacyBody(8, mcp.MethodInitialize, map[string]any{"protocolVersion": mcp.LegacyVersion, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "x", "version": "1"}}), legacyHeaders(sid)), http.StatusBadRequest, -32600)
	// PUT is not a session method.
	if r := f.sessionRequest(t, http.MethodPut, sid); r.status != http.StatusMethodNotAllowed {
		t.Errorf("PUT: status %d, want 405", r.status)
	}

	// DELETE ends the session; everything after it is 404.
	if r := f.sessionRequest(t, http.MethodDelete, sid); r.status != http.StatusOK {
		t.Fatalf("DELETE: status %d, body %s", r.status, r.body)
	}
	if n := f.h.SessionCount(); n != 0 {
		t.Errorf("SessionCount = %d after DELETE, want 0", n)
	}
	wantError(t, f.post(t, legacyBody(9, mcp.MethodToolsList, nil), legacyHeaders(sid)), http.StatusNotFound, -32600)
	if r := f.sessionRequest(t, http.MethodGet, sid); r.status != http.StatusNotFound {
		t.Errorf("GET after DELETE: status %d, want 404", r.status)
	}
	if r := f.sessionRequest(t, http.MethodDelete, sid); r.status != http.StatusNotFound {
		t.Errorf("second DELETE: status %d, want 404", r.status)
	}
}

// TestLegacyHTTPRefusals checks requests that name no usable session.
func TestLegacyHTTPRefusals(t *testing.T) {
	f := newFixture(t, nil)
	// An unknown session: 404 for every method.
	wantError(t, f.post(t, legacyBody(1, mcp.MethodToolsList, nil), legacyHeaders("no-such-session")), http.StatusNotFound, -32600)
	if r := f.sessionRequest(t, http.MethodGet, "no-such-session"); r.status != http.StatusNotFound {
		t.Errorf("GET of an unknown session: %d, want 404", r.status)
	}
	if r := f.sessionRequest(t, http.MethodDelete, "no-such-session"); r.status != http.StatusNotFound {
		t.Errorf("DELETE of an unknown session: %d, want 404", r.status)
	}
	// A request that declares 2026-07-28 is served statelessly, whatever
	// session it names (STL-1): the unknown session does not matter.
	h := headers(mcp.MethodToolsList, "")
	h.Set(mcp.HeaderSessionID, "no-such-session")
	if res := wantResult(t, f.post(t, request(2, mcp.MethodToolsList, ""), h)); string(res["resultType"]) != `"complete"` {
		t.Errorf("a 2026-07-28 request naming a session was not served statelessly: %v", res)
	}
	// No session and no _meta: only initialize may open one.
	wantError(t, f.post(t, legacyBody(3, mcp.MethodToolsList, nil), legacyHeaders("")), http.StatusBadRequest, -32600)
	// A GET without a session is not a thing in either era.
	req, _ := http.NewRequest(http.MethodGet, f.ts.URL, nil)
	req.Header.Set("Accept", "text/event-stream")
	if r := f.do(t, req); r.status != http.StatusMethodNotAllowed {
		t.Errorf("GET without a session: %d, want 405", r.status)
	}
	if n := f.h.SessionCount(); n != 0 {
		t.Errorf("SessionCount = %d, want 0", n)
	}

	// The conformance suite's DNS-rebinding probe: initialize with the
	// version and method headers set, then notifications/initialized.
	h = legacyHeaders("")
	h.Set(mcp.HeaderProtocolVersion, mcp.LegacyVersion)
	h.Set(mcp.HeaderMethod, mcp.MethodInitialize)
	r := f.post(t, legacyBody(1, mcp.MethodInitialize, map[string]any{"protocolVersion": mcp.LegacyVersion, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "probe", "version": "1"}}), h)
	sid := r.header.Get(mcp.HeaderSessionID)
	if r.status != http.StatusOK || sid == "" {
		t.Fatalf("initialize with version headers: %d, session %q, body %s", r.status, sid, r.body)
	}
	h = legacyHeaders(sid)
	h.Set(mcp.HeaderMethod, mcp.NotifyInitialized)
	if r := f.post(t, legacyBody(nil, mcp.NotifyInitialized, nil), h); r.status != http.StatusAccepted {
		t.Errorf("notifications/initialized with Mcp-Method: %d, want 202", r.status)
	}
	// A modern-only handler knows nothing of sessions.
	m := newFixture(t, nil, streamhttp.WithoutLegacy())
	r = m.post(t, legacyBody(1, mcp.MethodInitialize, map[string]any{"protocolVersion": mcp.LegacyVersion, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "x", "version": "1"}}), legacyHeaders(""))
	if r.status < 400 || r.header.Get(mcp.HeaderSessionID) != "" {
		t.Errorf("WithoutLegacy: initialize answered %d with session %q", r.status, r.header.Get(mcp.HeaderSessionID))
	}
	if m.h.SessionCount() != 0 {
		t.Error("WithoutLegacy: a session was opened")
	}
}

// TestLegacyHTTPExpiry checks that an idle session is forgotten on the
// server's clock.
func TestLegacyHTTPExpiry(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	f := newFixture(t, []server.Option{server.WithClock(clock)}, streamhttp.WithSessionLimits(10, time.Minute))
	sid := legacyInitialize(t, f, nil)
	advance(50 * time.Second)
	f.call(t, sid, 1, mcp.MethodPing, nil)
	advance(50 * time.Second) // 100s since initialize, 50s since the ping
	f.call(t, sid, 2, mcp.MethodPing, nil)
	advance(61 * time.Second)
	wantError(t, f.post(t, legacyBody(3, mcp.MethodPing, nil), legacyHeaders(sid)), http.StatusNotFound, -32600)
	if r := f.sessionRequest(t, http.MethodGet, sid); r.status != http.StatusNotFound {
		t.Errorf("GET of an expired session: %d, want 404", r.status)
	}
	if n := f.h.SessionCount(); n != 0 {
		t.Errorf("SessionCount = %d after expiry, want 0", n)
	}
}

// TestLegacyHTTPSessionCap opens many sessions over HTTP as one
// principal whose quota is the whole table: the count stays at the cap
// and the oldest is forgotten (404).
func TestLegacyHTTPSessionCap(t *testing.T) {
	const max = 50
	f := newFixture(t, nil, streamhttp.WithSessionLimits(max, time.Hour), streamhttp.WithSessionsPerPrincipal(max))
	first := legacyInitialize(t, f, nil)
	body := legacyBody(0, mcp.MethodInitialize, map[string]any{"protocolVersion": mcp.LegacyVersion, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "flood", "version": "1"}})
	for i := 0; i < 20*max; i++ {
		r := f.post(t, body, legacyHeaders(""))
		if r.status != http.StatusOK || r.header.Get(mcp.HeaderSessionID) == "" {
			t.Fatalf("initialize %d: status %d", i, r.status)
		}
		if n := f.h.SessionCount(); n > max {
			t.Fatalf("SessionCount = %d, above the cap %d", n, max)
		}
	}
	wantError(t, f.post(t, legacyBody(1, mcp.MethodPing, nil), legacyHeaders(first)), http.StatusNotFound, -32600)
}

// TestLegacyHTTPStream checks the GET stream: one per session, list
// changes, updates of subscribed resources only, and its end with the
// session.
func TestLegacyHTTPStream(t *testing.T) {
	f := newFixture(t, nil)
	addLegacyFixtures(t, f.srv)
	sid := legacyInitialize(t, f, nil)
	p := f.getStream(t, sid)

	// A second GET on the same session: 409, and the first stays open.
	wantError(t, f.sessionRequest(t, http.MethodGet, sid), http.StatusConflict, -32600)

	if err := f.srv.AddTool(mcp.Tool{Name: "late"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	e := p.waitFor(t, "tools/list_changed", methodIs(mcp.NotifyToolsListChanged))
	if e.ID != nil || len(e.Params) != 0 {
		t.Errorf("list_changed = %s, want a bare notification", e.raw)
	}

	f.call(t, sid, 1, mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://x"})
	f.srv.ResourceUpdated("res://x")
	p.waitFor(t, "the update of res://x", updateOf("res://x"))

	f.call(t, sid, 2, mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://y"})
	f.call(t, sid, 3, mcp.MethodResourcesUnsubscribe, map[string]any{"uri": "res://x"})
	f.srv.ResourceUpdated("res://x")
	f.srv.ResourceUpdated("res://doc") // never subscribed
	f.srv.ResourceUpdated("res://y")
	p.waitFor(t, "the update of res://y", updateOf("res://y"))
	if f.srv.RemoveTools("late") != 1 {
		t.Fatal("RemoveTools found nothing")
	}
	p.waitFor(t, "a second tools/list_changed", func(e legacyEvent) bool {
		return e.Method == mcp.NotifyToolsListChanged && p.count(methodIs(mcp.NotifyToolsListChanged)) >= 2
	})
	if n := p.count(updateOf("res://x")); n != 1 {
		t.Errorf("res://x updates = %d, want 1 (none after unsubscribe)", n)
	}
	if n := p.count(updateOf("res://doc")); n != 0 {
		t.Errorf("update of a resource the session never subscribed to")
	}
	for _, e := range p.all() {
		if err := schematest.CheckLegacyServerMessage(e.raw); err != nil {
			t.Errorf("GET stream: %v", err)
		}
		if bytes.Contains(e.raw, []byte(mcp.MetaSubscriptionID)) {
			t.Errorf("GET stream carries a subscriptionId: %s", e.raw)
		}
	}

	// DELETE ends the stream.
	if r := f.sessionRequest(t, http.MethodDelete, sid); r.status != http.StatusOK {
		t.Fatalf("DELETE: %d", r.status)
	}
	p.ended(t)
}

// TestLegacyHTTPIsolation puts a session and a modern listen side by side
// on one endpoint: neither hears what only the other asked for.
func TestLegacyHTTPIsolation(t *testing.T) {
	f := newFixture(t, nil)
	addLegacyFixtures(t, f.srv)
	sid := legacyInitialize(t, f, nil)
	f.call(t, sid, 1, mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://x"})
	f.call(t, sid, 2, mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://doc"})
	legacy := f.getStream(t, sid)

	// The listen asks for res://y alone.
	s := f.open(t, context.Background(), listenBody(21, `{"resourceSubscriptions":["res://y"]}`), headers(mcp.MethodListen, ""))
	if ack := s.next(t); ack.Method != mcp.NotifyAcknowledged {
		t.Fatalf("listen: first event %q", ack.Method)
	}
	modern := newPump(t, s.resp)

	f.srv.ResourceUpdated("res://x")   // only the session asked
	f.srv.ResourceUpdated("res://y")   // only the listen asked
	f.srv.ResourceUpdated("res://doc") // the session's marker
	if err := f.srv.AddTool(mcp.Tool{Name: "late"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	legacy.waitFor(t, "res://doc on the session stream", updateOf("res://doc"))
	legacy.waitFor(t, "tools/list_changed on the session stream", methodIs(mcp.NotifyToolsListChanged))
	modern.waitFor(t, "res://y on the listen", updateOf("res://y"))
	// One more change each side asked for, so anything queued before it
	// has been written.
	f.srv.ResourceUpdated("res://y")
	f.srv.ResourceUpdated("res://doc")
	modern.waitFor(t, "the second res://y", func(legacyEvent) bool { return modern.count(updateOf("res://y")) >= 2 })
	legacy.waitFor(t, "the second res://doc", func(legacyEvent) bool { return legacy.count(updateOf("res://doc")) >= 2 })

	for _, e := range modern.all() {
		if !updateOf("res://y")(e) || subscriptionID(t, e.Params) != "21" {
			t.Errorf("the listen for res://y got %s", e.raw)
		}
	}
	for _, e := range legacy.all() {
		if updateOf("res://y")(e) || bytes.Contains(e.raw, []byte(mcp.MetaSubscriptionID)) {
			t.Errorf("the session stream got %s", e.raw)
		}
	}
	if n := legacy.count(updateOf("res://x")); n != 1 {
		t.Errorf("session updates of res://x = %d, want 1", n)
	}

	// Modern requests are served statelessly beside the session.
	f.alive(t)
	if res := wantResult(t, f.post(t, request(30, mcp.MethodResourcesRead, `"uri":"res://x"`), headers(mcp.MethodResourcesRead, "res://x"))); res["ttlMs"] == nil {
		t.Errorf("modern resources/read lacks ttlMs: %v", res)
	}
	// A request that declares 2026-07-28 in _meta is served as such even
	// when it names the session (STL-1): its own version and
	// capabilities, never the session's, so it gets resultType and cache
	// hints.
	h := headers(mcp.MethodToolsList, "")
	h.Set(mcp.HeaderSessionID, sid)
	res := wantResult(t, f.post(t, request(31, mcp.MethodToolsList, ""), h))
	if string(res["resultType"]) != `"complete"` || res["ttlMs"] == nil {
		t.Errorf("2026-07-28 request naming a session served as the session's era: %v", res)
	}
	// A version header that disagrees with _meta is a header mismatch,
	// session or not.
	h.Set(mcp.HeaderProtocolVersion, mcp.LegacyVersion)
	wantError(t, f.post(t, request(32, mcp.MethodToolsList, ""), h), http.StatusBadRequest, -32020)
	if n := f.h.SessionCount(); n != 1 {
		t.Errorf("SessionCount = %d, want 1: modern requests open no sessions", n)
	}
}

// TestLegacyHTTPInputBridge checks that an InputRequired in a session
// becomes an elicitation/create request on the call's SSE stream, and the
// client's answer, POSTed on its own, resumes the tool.
func TestLegacyHTTPInputBridge(t *testing.T) {
	f := newFixture(t, nil)
	addLegacyFixtures(t, f.srv)
	sid := legacyInitialize(t, f, map[string]any{"elicitation": map[string]any{}})

	s := f.open(t, context.Background(), legacyBody(5, mcp.MethodToolsCall, map[string]any{"name": "ask", "arguments": map[string]any{}}), legacyHeaders(sid))
	call := newPump(t, s.resp)
	req := call.waitFor(t, "elicitation/create", methodIs(mcp.MethodElicit))
	if err := schematest.CheckLegacyServerMessage(req.raw); err != nil {
		t.Errorf("elicitation/create: %v", err)
	}
	if req.ID == nil {
		t.Fatalf("elicitation/create without an id: %s", req.raw)
	}

	// An answer without the session is not a session message.
	answer := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{"action":"accept","content":{"name":"Ada"}}}`, req.ID)
	wantError(t, f.post(t, answer, legacyHeaders("")), http.StatusBadRequest, -32600)
	// With the session: 202, and the tool completes on the first stream.
	if r := f.post(t, answer, legacyHeaders(sid)); r.status != http.StatusAccepted || len(r.body) != 0 {
		t.Fatalf("answer: status %d body %q, want 202", r.status, r.body)
	}
	res := call.waitFor(t, "the tool result", func(e legacyEvent) bool { return string(e.ID) == "5" })
	schematest.ValidateLegacyResponse(t, mcp.MethodToolsCall, res.raw)
	if !strings.Contains(string(res.Result), "accept: Ada") {
		t.Errorf("result = %s, want the answer", res.Result)
	}
	call.ended(t)

	// A client without the capability is not asked.
	bare := legacyInitialize(t, f, nil)
	r := f.post(t, legacyBody(6, mcp.MethodToolsCall, map[string]any{"name": "ask"}), legacyHeaders(bare))
	if e := decodeEnvelope(t, r.body); e.Error == nil {
		t.Errorf("input from a client without elicitation: %s, want an error", r.body)
	}
}

// TestLegacyHTTPCancel: in a session, a notifications/cancelled POSTed
// separately stops the request it names (2025-11-25 has no other way to
// cancel over HTTP), and no result follows for it.
func TestLegacyHTTPCancel(t *testing.T) {
	f := newFixture(t, nil)
	started, stopped := make(chan struct{}), make(chan struct{})
	if err := f.srv.AddTool(mcp.Tool{Name: "block"}, func(ctx context.Context, _ *server.ToolRequest) (*mcp.CallToolResult, error) {
		close(started)
		<-ctx.Done()
		close(stopped)
		return nil, ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
	sid := legacyInitialize(t, f, nil)
	done := make(chan reply, 1)
	go func() {
		done <- f.post(t, legacyBody(9, mcp.MethodToolsCall, map[string]any{"name": "block"}), legacyHeaders(sid))
	}()
	<-started
	// While 9 is in flight its id is taken: a cancellation must name one
	// request only.
	wantError(t, f.post(t, legacyBody(9, mcp.MethodToolsList, nil), legacyHeaders(sid)), http.StatusBadRequest, -32600)
	if r := f.post(t, legacyBody(nil, mcp.NotifyCancelled, map[string]any{"requestId": 9, "reason": "user"}), legacyHeaders(sid)); r.status != http.StatusAccepted {
		t.Fatalf("cancel: status %d", r.status)
	}
	select {
	case <-stopped:
	case <-time.After(legacyWait):
		t.Fatal("the cancelled tool kept running")
	}
	r := <-done
	if strings.Contains(string(r.body), `"result"`) {
		t.Errorf("a result followed the cancellation: %s", r.body)
	}
}

// TestLegacySessionBoundToPrincipal: a 2025-11-25 session belongs to the
// principal that opened it. Another principal holding its id is told it
// does not exist — for requests, its stream and its DELETE — while the
// owner goes on using it.
func TestLegacySessionBoundToPrincipal(t *testing.T) {
	f := newFixture(t, nil, streamhttp.WithPrincipal(func(r *http.Request) string { return r.Header.Get("X-User") }))
	as := func(user string, h http.Header) http.Header {
		h.Set("X-User", user)
		return h
	}
	r := f.post(t, legacyBody(0, mcp.MethodInitialize, map[string]any{
		"protocolVersion": mcp.LegacyVersion, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "t", "version": "1"},
	}), as("alice", legacyHeaders("")))
	sid := r.header.Get(mcp.HeaderSessionID)
	if r.status != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s", r.status, r.body)
	}
	wantError(t, f.post(t, legacyBody(1, mcp.MethodToolsList, nil), as("bob", legacyHeaders(sid))), http.StatusNotFound, -32600)
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		req, _ := http.NewRequest(method, f.ts.URL, nil)
		req.Header = as("bob", legacyHeaders(sid))
		if got := f.do(t, req); got.status != http.StatusNotFound {
			t.Errorf("bob's %s of alice's session: %d, want 404", method, got.status)
		}
	}
	if got := f.post(t, legacyBody(2, mcp.MethodToolsList, nil), as("alice", legacyHeaders(sid))); got.status != http.StatusOK {
		t.Fatalf("alice's own session: %d %s", got.status, got.body)
	} else {
		legacyResult(t, got.body)
	}
	if n := f.h.SessionCount(); n != 1 {
		t.Errorf("SessionCount = %d, want alice's session still there", n)
	}
}

// TestLegacyStreamKeepsItsSessionWarm: a session whose GET stream is
// open is in use however quiet; kept warm by its keep-alives, it does not
// stand at the cold end of a full table in front of idle sessions, which
// still expire and make room.
func TestLegacyStreamKeepsItsSessionWarm(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	f := newFixture(t, []server.Option{server.WithClock(clock), server.WithKeepAlive(10 * time.Millisecond)},
		streamhttp.WithSessionLimits(2, time.Minute))
	streaming := legacyInitialize(t, f, nil)
	idle := legacyInitialize(t, f, nil)
	resp := f.get(t, streaming)
	defer resp.Body.Close()
	keepAlives := make(chan struct{}, 1024)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), ":") {
				select {
				case keepAlives <- struct{}{}:
				default:
				}
			}
		}
	}()
	f.call(t, idle, 1, mcp.MethodPing, nil) // used after the stream opened: the warmer of the two
	advance(2 * time.Minute)
	for drained := false; !drained; {
		select {
		case <-keepAlives:
		default:
			drained = true
		}
	}
	// Of three more keep-alives, two were written after the clock moved,
	// and the first of those has refreshed the session.
	timeout := time.After(legacyWait)
	for range 3 {
		select {
		case <-keepAlives:
		case <-timeout:
			t.Fatal("no keep-alives on the open stream")
		}
	}
	if sid := legacyInitialize(t, f, nil); sid == "" {
		t.Fatal("no session opened")
	}
	wantError(t, f.post(t, legacyBody(2, mcp.MethodPing, nil), legacyHeaders(idle)), http.StatusNotFound, -32600)
	f.call(t, streaming, 3, mcp.MethodPing, nil)
}
