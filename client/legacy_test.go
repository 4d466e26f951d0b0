package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// These tests run the client against a server that speaks only
// 2025-11-25: our dual-era handler behind a wrapper that refuses every
// 2026-07-28 request the way servers of that era do.

// refusal is how a 2025-11-25 server answers server/discover.
type refusal int

const (
	// refuseJSON answers 400 with a JSON-RPC -32000 error, as the
	// TypeScript SDK v1 does for a request without a session.
	refuseJSON refusal = iota
	// refuseText answers 404 with a plain text body, as a router that
	// knows no such method might.
	refuseText
	// refuseVersion answers 400 with -32022 and the older revisions in
	// data.supported, as the go-sdk's default (stateful) handler does.
	refuseVersion
	// refuseVersionOld is refuseVersion with 2025-06-18 as the newest
	// revision listed.
	refuseVersionOld
	// refuseVersionNone is refuseVersion listing no revision the client
	// speaks.
	refuseVersionNone
	// answerOldDiscover answers server/discover with a result listing
	// only older revisions, and every other 2026-07-28 request as
	// refuseVersion, as the go-sdk's default (stateful) handler does.
	answerOldDiscover
)

// refusedVersions is what data.supported lists for a version refusal.
func refusedVersions(how refusal) string {
	switch how {
	case refuseVersionOld:
		return `["2025-06-18","2025-03-26"]`
	case refuseVersionNone:
		return `["2024-11-05"]`
	}
	return `["2025-11-25","2025-06-18","2025-03-26"]`
}

// legacyOnly hides the modern half of next: any POST for server/discover
// or carrying the 2026-07-28 _meta is refused; modern counts them.
func legacyOnly(next http.Handler, how refusal, modern *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var env struct {
				Method string `json:"method"`
				Params struct {
					Meta map[string]json.RawMessage `json:"_meta"`
				} `json:"params"`
			}
			_ = json.Unmarshal(body, &env)
			if env.Method == mcp.MethodDiscover || env.Params.Meta[mcp.MetaProtocolVersion] != nil {
				modern.Add(1)
				switch how {
				case refuseJSON:
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusBadRequest)
					_, _ = io.WriteString(w, `{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: Server not initialized"},"id":null}`)
				case refuseText:
					http.Error(w, "404 page not found", http.StatusNotFound)
				case answerOldDiscover:
					w.Header().Set("Content-Type", "application/json")
					if env.Method == mcp.MethodDiscover {
						_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"supportedVersions":["2025-11-25","2025-06-18"],"capabilities":{"tools":{}},"serverInfo":{"name":"old","version":"1"}}}`)
						return
					}
					w.WriteHeader(http.StatusBadRequest)
					_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"unsupported protocol version","data":{"supported":["2025-11-25"]}}}`)
				default:
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusBadRequest)
					_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"unsupported protocol version","data":{"supported":`+refusedVersions(how)+`,"requested":"2026-07-28"}}}`)
				}
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// legacyFix is a 2025-11-25-only server on loopback, with every request
// recorded.
type legacyFix struct {
	srv    *server.Server
	h      *streamhttp.Handler
	rec    *recorder
	url    string
	modern atomic.Int32 // refused modern requests
	doc    *textResource
}

// endSession ends a session on the server, as another party's DELETE
// would, without the client knowing.
func (f *legacyFix) endSession(t testing.TB, id string) {
	t.Helper()
	req := httptest.NewRequest(http.MethodDelete, "http://127.0.0.1/", nil)
	req.Header.Set(mcp.HeaderSessionID, id)
	w := httptest.NewRecorder()
	f.h.ServeHTTP(w, req)
	if w.Code != http.StatusOK {
		t.Fatalf("DELETE of session %s: status %d", id, w.Code)
	}
}

// newLegacyFix serves a server with tools a and b, a prompt, the resource
// res://doc and a tool that needs the user's name.
func newLegacyFix(t testing.TB, how refusal, sopts ...server.Option) *legacyFix {
	t.Helper()
	return newLegacyFixHandler(t, how, nil, sopts...)
}

// newLegacyFixHandler is newLegacyFix with options for the HTTP handler.
func newLegacyFixHandler(t testing.TB, how refusal, hopts []streamhttp.Option, sopts ...server.Option) *legacyFix {
	t.Helper()
	f := &legacyFix{
		srv: server.New(mcp.Implementation{Name: "old-server", Version: "2025.11"}, append([]server.Option{server.WithLogger(quietLogger())}, sopts...)...),
		doc: &textResource{body: "v1"},
	}
	addTools(t, f.srv, "a", "b")
	must(t, f.srv.AddPrompt(mcp.Prompt{Name: "hello"}, func(_ context.Context, r *server.PromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []mcp.PromptMessage{{Role: "user", Content: mcp.TextContent("hello " + r.Arguments["who"])}}}, nil
	}))
	must(t, f.srv.AddResource(mcp.Resource{URI: "res://doc"}, f.doc.handler))
	must(t, f.srv.AddTool(mcp.Tool{Name: "whoami", InputSchema: jsontext.Value(`{"type":"object"}`)}, func(_ context.Context, r *server.ToolRequest) (*mcp.CallToolResult, error) {
		a, ok := r.InputResponses["name"]
		if !ok {
			return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"name": {
				Method: mcp.MethodElicit,
				Params: jsontext.Value(`{"mode":"form","message":"Your name?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}}}}`),
			}}}
		}
		var res mcp.ElicitResult
		if err := json.Unmarshal(a, &res); err != nil {
			return nil, err
		}
		return text(fmt.Sprintf("%s %s", res.Action, res.Content["name"])), nil
	}))
	f.h = streamhttp.New(f.srv, hopts...)
	f.rec = &recorder{next: legacyOnly(f.h, how, &f.modern)}
	ts := httptest.NewServer(f.rec)
	f.url = ts.URL
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
	})
	return f
}

func (f *legacyFix) client(t testing.TB, opts ...HTTPOption) *Client {
	t.Helper()
	c := NewHTTP(f.url, append([]HTTPOption{WithLogger(quietLogger()), WithTimeout(waitTimeout)}, opts...)...)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// sessionIDs returns the distinct Mcp-Session-Id values the client sent.
func (f *legacyFix) sessionIDs() []string {
	var ids []string
	for _, s := range f.rec.requests("") {
		if id := s.Header.Get(mcp.HeaderSessionID); id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	return ids
}

// TestLegacyEra checks the probe and the fallback, for both kinds of
// refusal, and the wire of every later request.
func TestLegacyEra(t *testing.T) {
	for _, how := range []refusal{refuseJSON, refuseText} {
		t.Run([]string{"400 JSON-RPC -32000", "404 text"}[how], func(t *testing.T) {
			f := newLegacyFix(t, how)
			c := f.client(t)
			ctx := t.Context()
			era, err := c.Era(ctx)
			if err != nil || era != EraLegacy {
				t.Fatalf("Era = %q, %v; want %s", era, err, EraLegacy)
			}
			tools, err := c.Tools(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if got := names(tools); !slices.Equal(got, []string{"a", "b", "whoami"}) {
				t.Errorf("tools = %v", got)
			}
			if era, _ := c.Era(ctx); era != EraLegacy {
				t.Errorf("Era changed to %s", era)
			}

			reqs := f.rec.requests("")
			if len(reqs) < 4 || reqs[0].Method != mcp.MethodDiscover || reqs[1].Method != mcp.MethodInitialize || reqs[2].Method != mcp.NotifyInitialized {
				var ms []string
				for _, r := range reqs {
					ms = append(ms, r.Method)
				}
				t.Fatalf("requests = %v, want server/discover, initialize, notifications/initialized, ...", ms)
			}
			if n := f.modern.Load(); n != 1 {
				t.Errorf("%d modern requests reached the old server, want only the probe", n)
			}
			init := reqs[1]
			if init.Header.Get(mcp.HeaderSessionID) != "" || init.Header.Get(mcp.HeaderMethod) != "" {
				t.Errorf("initialize headers = %v, want no session and no Mcp-Method", init.Header)
			}
			if string(init.Params["protocolVersion"]) != `"`+mcp.LegacyVersion+`"` || !bytes.Contains(init.Params["clientInfo"], []byte(`"tidings"`)) {
				t.Errorf("initialize params = %s", init.Body)
			}
			sids := f.sessionIDs()
			if len(sids) != 1 {
				t.Fatalf("session ids = %v, want one", sids)
			}
			for _, r := range reqs[2:] {
				if r.Header.Get(mcp.HeaderSessionID) != sids[0] || r.Header.Get(mcp.HeaderProtocolVersion) != mcp.LegacyVersion {
					t.Errorf("%s: session %q version %q", r.Method, r.Header.Get(mcp.HeaderSessionID), r.Header.Get(mcp.HeaderProtocolVersion))
				}
				if r.Header.Get(mcp.HeaderMethod) != "" {
					t.Errorf("%s carries Mcp-Method", r.Method)
				}
				if m := r.Params["_meta"]; bytes.Contains(m, []byte("io.modelcontextprotocol/")) {
					t.Errorf("%s carries protocol _meta: %s", r.Method, m)
				}
			}

			// Discover answers from what initialize said.
			d, err := c.Discover(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(d.SupportedVersions, []string{mcp.LegacyVersion}) || d.ServerInfo == nil || d.ServerInfo.Name != "old-server" || d.Capabilities.Tools == nil {
				t.Errorf("Discover = %+v", d)
			}
			if n := f.rec.count(mcp.MethodInitialize); n != 1 {
				t.Errorf("initialize sent %d times, want once", n)
			}
			if n := f.rec.count(mcp.MethodDiscover); n != 1 {
				t.Errorf("server/discover sent %d times, want once (the era is cached)", n)
			}
		})
	}
}

// TestLegacyCalls checks the typed calls against an old server,
// including input the server asks for with a request of its own.
func TestLegacyCalls(t *testing.T) {
	f := newLegacyFix(t, refuseJSON)
	asked := make(chan string, 1)
	c := f.client(t, WithElicitation(func(_ context.Context, params jsontext.Value) (*mcp.ElicitResult, error) {
		var p struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(params, &p)
		asked <- p.Message
		return &mcp.ElicitResult{Action: "accept", Content: map[string]jsontext.Value{"name": jsontext.Value(`"Ada"`)}}, nil
	}))
	ctx := t.Context()

	r, err := c.CallTool(ctx, "a", map[string]any{})
	if err != nil || len(r.Content) != 1 || *r.Content[0].Text != "a" {
		t.Fatalf("CallTool a = %+v, %v", r, err)
	}
	rr, err := c.ReadResource(ctx, "res://doc")
	if err != nil || contentText(t, rr) != "v1" {
		t.Fatalf("ReadResource = %+v, %v", rr, err)
	}
	p, err := c.GetPrompt(ctx, "hello", map[string]string{"who": "you"})
	if err != nil || len(p.Messages) != 1 || *p.Messages[0].Content.Text != "hello you" {
		t.Fatalf("GetPrompt = %+v, %v", p, err)
	}
	r, err = c.CallTool(ctx, "whoami", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if got := *r.Content[0].Text; got != `accept "Ada"` {
		t.Errorf("whoami = %q, want the elicited name", got)
	}
	select {
	case m := <-asked:
		if m != "Your name?" {
			t.Errorf("elicitation message = %q", m)
		}
	default:
		t.Error("the elicitation handler was not called")
	}
	// The answer went back as a JSON-RPC response in the session.
	var answered bool
	for _, s := range f.rec.requests("") {
		if s.Method == "" && bytes.Contains(s.Body, []byte(`"result"`)) && bytes.Contains(s.Body, []byte(`"Ada"`)) {
			answered = true
			if s.Header.Get(mcp.HeaderSessionID) == "" {
				t.Error("the answer to elicitation/create carried no session id")
			}
		}
	}
	if !answered {
		t.Error("no JSON-RPC response carrying the answer reached the server")
	}
	if _, err := c.CallTool(ctx, "nope", map[string]any{}); err == nil {
		t.Error("calling an unknown tool succeeded")
	}
	// Methods of the other era are refused locally.
	if _, err := c.Request(ctx, mcp.MethodListen, map[string]any{}); err == nil {
		t.Error("subscriptions/listen succeeded against an old server")
	}
}

// TestLegacyWatcher follows an old server through its GET stream.
func TestLegacyWatcher(t *testing.T) {
	f := newLegacyFix(t, refuseJSON)
	c := f.client(t)
	ctx := t.Context()

	// Without a live stream nothing announces changes: answers are stale
	// at once and every read goes to the server.
	if _, err := c.Tools(ctx); err != nil {
		t.Fatal(err)
	}
	if st := c.Freshness(mcp.MethodToolsList, "").State; st != Stale {
		t.Errorf("tools/list without a watcher is %v, want stale", st)
	}
	lists := f.rec.count(mcp.MethodToolsList)
	if _, err := c.Tools(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.rec.count(mcp.MethodToolsList); n != lists+1 {
		t.Errorf("second Tools without a watcher: %d lists, want %d (a re-read)", n, lists+1)
	}

	w, log := watch(t, c, WatchOptions{Tools: true, URIs: []string{"res://doc"}, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	ev, _ := log.waitFor(t, "connected", kindIs(Connected))
	if !ev.Granted.ToolsListChanged || !slices.Equal(ev.Granted.ResourceSubscriptions, []string{"res://doc"}) {
		t.Errorf("granted = %+v", ev.Granted)
	}
	// The first reads report everything, in no particular order.
	var firstTools, firstDoc bool
	log.waitFor(t, "the first reads", func(e Event) bool {
		firstTools = firstTools || e.Kind == ToolsChanged
		firstDoc = firstDoc || e.Kind == ResourceUpdated
		return firstTools && firstDoc
	})
	if w.State() != Live {
		t.Errorf("state = %v, want live", w.State())
	}
	if n := f.rec.count(mcp.MethodResourcesSubscribe); n != 1 {
		t.Errorf("resources/subscribe sent %d times, want 1", n)
	}
	var gets int
	for _, s := range f.rec.requests("") {
		if s.Method == "" && len(s.Body) == 0 && s.Header.Get("Accept") == "text/event-stream" {
			gets++
		}
	}
	if gets != 1 {
		t.Errorf("%d GET streams opened, want 1", gets)
	}

	// While the stream is up, answers are fresh.
	if _, err := c.Tools(ctx); err != nil {
		t.Fatal(err)
	}
	if st := c.Freshness(mcp.MethodToolsList, "").State; st != Fresh {
		t.Errorf("tools/list with a live watcher is %v, want fresh", st)
	}
	lists = f.rec.count(mcp.MethodToolsList)
	if _, err := c.Tools(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.rec.count(mcp.MethodToolsList); n != lists {
		t.Errorf("Tools with a live watcher went to the server (%d lists, want %d)", n, lists)
	}

	addTools(t, f.srv, "late")
	ev, _ = log.waitFor(t, "the new tool", func(e Event) bool { return e.Kind == ToolsChanged && len(e.Added) > 0 })
	if !slices.Equal(ev.Added, []string{"late"}) || len(ev.Removed)+len(ev.Changed) != 0 {
		t.Errorf("ToolsChanged = %+v, want late added", ev)
	}
	tools, err := c.Tools(ctx)
	if err != nil || !slices.Contains(names(tools), "late") {
		t.Errorf("Tools after the change = %v, %v", names(tools), err)
	}

	f.doc.set("v2")
	f.srv.ResourceUpdated("res://doc")
	ev, _ = log.waitFor(t, "the update of res://doc", func(e Event) bool { return e.Kind == ResourceUpdated && len(e.Changed) > 0 })
	if ev.URI != "res://doc" || !slices.Equal(ev.Changed, []string{"res://doc"}) {
		t.Errorf("ResourceUpdated = %+v", ev)
	}
	if rr, err := c.ReadResource(ctx, "res://doc"); err != nil || contentText(t, rr) != "v2" {
		t.Errorf("ReadResource after the update = %v, %v", rr, err)
	}

	// Once the watcher is gone, nothing announces changes any more: what
	// it kept fresh is stale again.
	w.Close()
	if st := c.Freshness(mcp.MethodToolsList, "").State; st != Stale {
		t.Errorf("tools/list after the watcher closed is %v, want stale", st)
	}
	if st := c.Freshness(mcp.MethodResourcesRead, "res://doc").State; st != Stale {
		t.Errorf("res://doc after the watcher closed is %v, want stale", st)
	}
	if _, err := c.Tools(ctx); err != nil {
		t.Fatal(err)
	}
	if st := c.Freshness(mcp.MethodToolsList, "").State; st != Stale {
		t.Errorf("tools/list read after the watcher closed is %v, want stale", st)
	}
}

// TestLegacyUnfollowedStaysStale checks that a live watcher vouches only
// for what its stream announces: a resource nobody subscribed to is never
// kept fresh.
func TestLegacyUnfollowedStaysStale(t *testing.T) {
	f := newLegacyFix(t, refuseJSON)
	other := &textResource{body: "o1"}
	must(t, f.srv.AddResource(mcp.Resource{URI: "res://other"}, other.handler))
	c := f.client(t)
	_, log := watch(t, c, WatchOptions{Tools: true, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	log.waitFor(t, "connected", kindIs(Connected))
	rr, err := c.ReadResource(t.Context(), "res://other")
	if err != nil || contentText(t, rr) != "o1" {
		t.Fatalf("ReadResource = %v, %v", rr, err)
	}
	other.set("o2")
	f.srv.ResourceUpdated("res://other") // the session never subscribed: not announced
	rr, err = c.ReadResource(t.Context(), "res://other")
	if err != nil || contentText(t, rr) != "o2" {
		t.Errorf("ReadResource of an unfollowed resource = %q, %v; want the new o2, since nothing could announce its change", contentText(t, rr), err)
	}
}

// TestLegacySessionExpiry checks that a session the server forgot is
// replaced without the application noticing, for calls and for a watcher.
func TestLegacySessionExpiry(t *testing.T) {
	clk := newFakeClock()
	f := newLegacyFixHandler(t, refuseJSON, []streamhttp.Option{streamhttp.WithSessionLimits(100, time.Minute)}, server.WithClock(clk.Now))
	c := f.client(t)
	ctx := t.Context()
	if _, err := c.CallTool(ctx, "a", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2 * time.Minute)
	if r, err := c.CallTool(ctx, "b", map[string]any{}); err != nil || *r.Content[0].Text != "b" {
		t.Fatalf("CallTool after the session expired = %v, %v; want it re-initialized transparently", r, err)
	}
	if n := f.rec.count(mcp.MethodInitialize); n != 2 {
		t.Errorf("initialize sent %d times, want 2", n)
	}
	if ids := f.sessionIDs(); len(ids) != 2 {
		t.Errorf("session ids = %v, want the old and the new", ids)
	}
	if n := f.h.SessionCount(); n != 1 {
		t.Errorf("SessionCount = %d, want 1", n)
	}

	// The server ends the session under a watcher: its stream ends, and
	// the watcher opens a new session and stream and carries on.
	_, log := watch(t, c, WatchOptions{Tools: true, URIs: []string{"res://doc"}, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	log.waitFor(t, "connected", kindIs(Connected))
	ids := f.sessionIDs()
	f.endSession(t, ids[len(ids)-1])
	log.waitFor(t, "the drop", kindIs(Disconnected))
	log.waitFor(t, "connected again", kindIs(Connected))
	if ids := f.sessionIDs(); len(ids) != 3 {
		t.Errorf("session ids = %v, want a third", ids)
	}
	addTools(t, f.srv, "late")
	log.waitFor(t, "the new tool", func(e Event) bool { return e.Kind == ToolsChanged && slices.Contains(e.Added, "late") })
	f.doc.set("v2")
	f.srv.ResourceUpdated("res://doc")
	log.waitFor(t, "the update on the new session", func(e Event) bool { return e.Kind == ResourceUpdated && len(e.Changed) > 0 })
}

// TestDualEraServerIsModern checks that against our own server, which
// speaks both eras, the client stays modern and never opens a session.
func TestDualEraServerIsModern(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	addTools(t, f.srv, "a")
	c := f.client(t)
	ctx := t.Context()
	if era, err := c.Era(ctx); err != nil || era != EraModern {
		t.Fatalf("Era = %q, %v; want %s", era, err, EraModern)
	}
	if _, err := c.Tools(ctx); err != nil {
		t.Fatal(err)
	}
	_, log := watch(t, c, WatchOptions{Tools: true})
	log.waitFor(t, "connected", kindIs(Connected))
	if n := f.rec.count(mcp.MethodInitialize); n != 0 {
		t.Errorf("initialize sent %d times to a dual-era server", n)
	}
	for _, s := range f.rec.requests("") {
		if s.Header.Get(mcp.HeaderSessionID) != "" {
			t.Errorf("%s carried a session id", s.Method)
		}
		if s.Method == mcp.MethodResourcesSubscribe {
			t.Errorf("resources/subscribe sent to a modern server")
		}
	}
	if n := f.h.SessionCount(); n != 0 {
		t.Errorf("SessionCount = %d, want 0", n)
	}
}

// TestLegacyCloseEndsSession: closing a client ends its 2025-11-25 session
// on the server at once (DELETE) instead of leaving it to idle expiry.
func TestLegacyCloseEndsSession(t *testing.T) {
	f := newLegacyFix(t, refuseJSON)
	c := NewHTTP(f.url, WithLogger(quietLogger()), WithTimeout(waitTimeout))
	if _, err := c.Tools(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := f.h.SessionCount(); n != 1 {
		t.Fatalf("sessions = %d, want 1", n)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if n := f.h.SessionCount(); n != 0 {
		t.Errorf("sessions after Close = %d, want 0", n)
	}
}
