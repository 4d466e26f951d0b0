package server_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/engine"
	"tidings/mcp"
	"tidings/server"
)

// fullServer has one of everything, so every method is advertised.
func fullServer(t testing.TB, opts ...server.Option) *harness {
	h := newHarness(t, opts...)
	mustAddTool(t, h.srv, textTool("echo"), echoHandler("hello"))
	mustAddPrompt(t, h.srv, mcp.Prompt{Name: "greet", Arguments: []mcp.PromptArgument{{Name: "who", Required: true}}}, simplePrompt)
	mustAddResource(t, h.srv, "mem://a", textResource("mem://a", "A"))
	if err := h.srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "mem://users/{id}", Name: "user"},
		func(ctx context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "", "user "+req.Vars["id"])}}, nil
		}); err != nil {
		t.Fatal(err)
	}
	h.srv.SetCompletionHandler(func(ctx context.Context, req *server.CompleteRequest) (*mcp.Completion, error) {
		return &mcp.Completion{Values: []string{req.Argument.Value + "1", req.Argument.Value + "2"}}, nil
	})
	return h
}

// everyMethod lists a well-formed request for each method a full server
// answers with a complete result.
func everyMethod() []struct {
	method string
	params P
} {
	return []struct {
		method string
		params P
	}{
		{mcp.MethodDiscover, P{}},
		{mcp.MethodToolsList, P{}},
		{mcp.MethodToolsCall, P{"name": "echo", "arguments": P{}}},
		{mcp.MethodPromptsList, P{}},
		{mcp.MethodPromptsGet, P{"name": "greet", "arguments": P{"who": "x"}}},
		{mcp.MethodResourcesList, P{}},
		{mcp.MethodResourcesTemplates, P{}},
		{mcp.MethodResourcesRead, P{"uri": "mem://a"}},
		{mcp.MethodComplete, P{"ref": P{"type": "ref/prompt", "name": "greet"}, "argument": P{"name": "who", "value": "a"}}},
	}
}

// TestEnvelope covers ENV-3 and ENV-5: every result carries resultType
// "complete" and the response echoes the id with its JSON type, whether a
// string, a small integer, a string of digits or an integer beyond
// float64 precision.
func TestEnvelope(t *testing.T) {
	h := fullServer(t)
	ids := []any{7, "7", "req-α", json.RawMessage(`9007199254740993`), 0, -3}
	for _, m := range everyMethod() {
		for _, id := range ids {
			r, _ := h.call(id, m.method, m.params)
			r.ok(t)
			if _, ok := r.Result["resultType"]; !ok {
				t.Errorf("%s: result without resultType (ENV-5)", m.method)
			}
		}
	}
	// Errors echo the id too.
	r, _ := h.call("err-1", "no/such/method", P{})
	r.fails(t, -32601)
	r, _ = h.call(json.RawMessage(`9007199254740993`), mcp.MethodToolsCall, P{"name": "nope"})
	r.fails(t, -32602)
	if !strings.Contains(string(r.raw), `"id":9007199254740993`) {
		t.Errorf("large integer id not echoed exactly: %s", r.raw)
	}
}

// TestNotificationGetsNoReply covers ENV-4.
func TestNotificationGetsNoReply(t *testing.T) {
	h := fullServer(t)
	rec := newRecorder(t)
	rep := h.serveRaw(context.Background(), encodeRequest(t, nil, mcp.NotifyCancelled, P{"requestId": 1}), rec)
	if rep.Body != nil {
		t.Errorf("notification answered: %s", rep.Body)
	}
	if n := len(rec.messages()); n != 0 {
		t.Errorf("notification produced %d stream messages", n)
	}
}

// TestServerInfo covers META-4: serverInfo in every result's _meta, merged
// with what a handler puts there, and absent when switched off.
func TestServerInfo(t *testing.T) {
	h := fullServer(t)
	mustAddTool(t, h.srv, textTool("meta"), func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("m")}, Meta: mcp.Meta{"example.com/trace": jsontext.Value(`"abc"`)}}, nil
	})
	checkInfo := func(method string, res map[string]any) {
		t.Helper()
		meta, _ := res["_meta"].(map[string]any)
		si, _ := meta[mcp.MetaServerInfo].(map[string]any)
		if si["name"] != testInfo.Name || si["version"] != testInfo.Version {
			t.Errorf("%s: _meta serverInfo = %v, want %v (META-4)", method, meta[mcp.MetaServerInfo], testInfo)
		}
	}
	for _, m := range everyMethod() {
		r, _ := h.call(1, m.method, m.params)
		checkInfo(m.method, r.ok(t))
	}
	r, _ := h.call(1, mcp.MethodToolsCall, P{"name": "meta"})
	res := r.ok(t)
	checkInfo("tools/call with handler _meta", res)
	if meta := res["_meta"].(map[string]any); meta["example.com/trace"] != "abc" {
		t.Errorf("handler _meta lost: %v", meta)
	}

	quiet := newHarness(t, server.WithoutServerInfo())
	mustAddTool(t, quiet.srv, textTool("echo"), echoHandler("x"))
	for _, m := range []string{mcp.MethodDiscover, mcp.MethodToolsList} {
		r, _ := quiet.call(1, m, P{})
		if meta, ok := r.ok(t)["_meta"].(map[string]any); ok && meta[mcp.MetaServerInfo] != nil {
			t.Errorf("%s: serverInfo sent although switched off", m)
		}
	}
}

// TestRequiredMeta covers META-2: a request without protocolVersion or
// clientCapabilities gets -32602 (400 on HTTP), whatever the method.
func TestRequiredMeta(t *testing.T) {
	h := fullServer(t)
	cases := []struct {
		name   string
		params P
	}{
		{"no _meta", P{"_meta": omit}},
		{"no protocolVersion", P{"_meta": P{mcp.MetaProtocolVersion: omit}}},
		{"no clientCapabilities", P{"_meta": P{mcp.MetaClientCapabilities: omit}}},
		{"null clientCapabilities", P{"_meta": P{mcp.MetaClientCapabilities: nil}}},
	}
	for _, m := range append(everyMethod(), struct {
		method string
		params P
	}{mcp.MethodListen, P{"notifications": P{}}}) {
		for _, c := range cases {
			params := P{}
			for k, v := range m.params {
				params[k] = v
			}
			for k, v := range c.params {
				params[k] = v
			}
			r, rec := h.call("m2", m.method, params)
			r.fails(t, -32602)
			if r.reply.Outcome != engine.Refused {
				t.Errorf("%s %s: outcome %d, want Refused (HTTP 400)", m.method, c.name, r.reply.Outcome)
			}
			if n := len(rec.messages()); n != 0 {
				t.Errorf("%s %s: %d stream messages before the error", m.method, c.name, n)
			}
		}
	}
	// A request with no params at all lacks _meta too.
	rec := newRecorder(t)
	rep := h.serveRaw(context.Background(), []byte(`{"jsonrpc":"2.0","id":5,"method":"tools/list"}`), rec)
	decodeResponse(t, mcp.MethodToolsList, 5, rep).fails(t, -32602)
	// _meta of the wrong type is invalid params, with the id echoed.
	rep = h.serveRaw(context.Background(), []byte(`{"jsonrpc":"2.0","id":"w","method":"tools/list","params":{"_meta":5}}`), rec)
	decodeResponse(t, mcp.MethodToolsList, "w", rep).fails(t, -32602)
}

// TestUnsupportedVersion covers VER-2: -32022 with data.supported and
// data.requested, for unknown and for legacy versions.
func TestUnsupportedVersion(t *testing.T) {
	h := fullServer(t)
	for _, v := range []string{"2099-01-01", mcp.LegacyVersion, ""} {
		for _, m := range everyMethod() {
			r, _ := h.call(1, m.method, P{"_meta": P{mcp.MetaProtocolVersion: v}})
			r.fails(t, -32022)
			if r.reply.Outcome != engine.Refused {
				t.Errorf("outcome %d, want Refused (HTTP 400)", r.reply.Outcome)
			}
			d := r.data(t)
			if d["requested"] != v {
				t.Errorf("data.requested = %v, want %q", d["requested"], v)
			}
			sup, _ := d["supported"].([]any)
			if !slices.Contains(sup, any(mcp.Version)) {
				t.Errorf("data.supported = %v, want it to list %s", d["supported"], mcp.Version)
			}
		}
	}
}

// TestUnadvertisedMethods covers CAP-2: methods behind a capability the
// server does not advertise get -32601 (404 on HTTP), as do unknown and
// removed methods.
func TestUnadvertisedMethods(t *testing.T) {
	h := newHarness(t)
	mustAddTool(t, h.srv, textTool("echo"), echoHandler("x"))
	r, _ := h.call(1, mcp.MethodDiscover, P{})
	caps := r.ok(t)["capabilities"].(map[string]any)
	for _, k := range []string{"prompts", "resources", "completions"} {
		if _, ok := caps[k]; ok {
			t.Errorf("capability %s advertised by a server without any", k)
		}
	}
	for _, c := range []struct {
		method string
		params P
	}{
		{mcp.MethodPromptsList, P{}},
		{mcp.MethodPromptsGet, P{"name": "x"}},
		{mcp.MethodResourcesList, P{}},
		{mcp.MethodResourcesTemplates, P{}},
		{mcp.MethodResourcesRead, P{"uri": "mem://a"}},
		{mcp.MethodComplete, P{"ref": P{"type": "ref/prompt", "name": "x"}, "argument": P{"name": "a", "value": ""}}},
		{"no/such/method", P{}},
		{mcp.MethodPing, P{}},
		{mcp.MethodLoggingSetLevel, P{"level": "info"}},
		{mcp.MethodResourcesSubscribe, P{"uri": "mem://a"}},
	} {
		r, _ := h.call("c", c.method, c.params)
		r.fails(t, -32601)
		if r.reply.Outcome != engine.UnknownMethod {
			t.Errorf("%s: outcome %d, want UnknownMethod (HTTP 404)", c.method, r.reply.Outcome)
		}
	}
	// A server with nothing at all does not even offer tools.
	empty := newHarness(t)
	r, _ = empty.call(1, mcp.MethodToolsList, P{})
	r.fails(t, -32601)
	r, _ = empty.call(1, mcp.MethodToolsCall, P{"name": "x"})
	r.fails(t, -32601)
	// WithCapabilities advertises primitives before anything is registered.
	early := newHarness(t, server.WithCapabilities(server.Tools, server.Prompts, server.Resources))
	for _, m := range []string{mcp.MethodToolsList, mcp.MethodPromptsList, mcp.MethodResourcesList, mcp.MethodResourcesTemplates} {
		r, _ := early.call(1, m, P{})
		if got := len(r.ok(t)[listField(m)].([]any)); got != 0 {
			t.Errorf("%s on an empty server: %d items", m, got)
		}
	}
}

// TestDiscover covers DISC-1/2: supportedVersions, capabilities that match
// what is registered, instructions, cache hints.
func TestDiscover(t *testing.T) {
	h := fullServer(t, server.WithInstructions("Use echo to test."))
	r, rec := h.call("d", mcp.MethodDiscover, P{})
	res := r.ok(t)
	if n := len(rec.messages()); n != 0 {
		t.Errorf("discover wrote %d stream messages", n)
	}
	sv, _ := res["supportedVersions"].([]any)
	if !slices.Contains(sv, any(mcp.Version)) {
		t.Errorf("supportedVersions = %v", res["supportedVersions"])
	}
	if res["instructions"] != "Use echo to test." {
		t.Errorf("instructions = %v", res["instructions"])
	}
	caps := res["capabilities"].(map[string]any)
	for _, k := range []string{"tools", "prompts", "resources", "completions"} {
		if _, ok := caps[k]; !ok {
			t.Errorf("capability %s missing though registered: %v", k, caps)
		}
	}
	if tc, _ := caps["tools"].(map[string]any); tc["listChanged"] != true {
		t.Errorf("tools.listChanged = %v, want true (notifications are sent)", tc["listChanged"])
	}
	if rc, _ := caps["resources"].(map[string]any); rc["subscribe"] != true || rc["listChanged"] != true {
		t.Errorf("resources capability = %v", rc)
	}
	checkCache(t, mcp.MethodDiscover, res, time.Minute, mcp.ScopePublic)
	// Discover takes only _meta; unknown params do no harm.
	r, _ = h.call("d2", mcp.MethodDiscover, P{"extra": 1})
	r.ok(t)
}

// listField names the array in a list result.
func listField(method string) string {
	switch method {
	case mcp.MethodToolsList:
		return "tools"
	case mcp.MethodPromptsList:
		return "prompts"
	case mcp.MethodResourcesList:
		return "resources"
	case mcp.MethodResourcesTemplates:
		return "resourceTemplates"
	}
	panic("not a list method: " + method)
}

// checkCache asserts CACHE-1/3: ttlMs (a non-negative integer) and
// cacheScope with the expected values.
func checkCache(t testing.TB, what string, res map[string]any, ttl time.Duration, scope mcp.CacheScope) {
	t.Helper()
	n, ok := res["ttlMs"].(json.Number)
	if !ok {
		t.Errorf("%s: ttlMs = %v, want an integer (CACHE-1)", what, res["ttlMs"])
		return
	}
	v, err := n.Int64()
	if err != nil || v < 0 {
		t.Errorf("%s: ttlMs = %s, want an integer >= 0 (CACHE-3)", what, n)
	}
	if v != ttl.Milliseconds() {
		t.Errorf("%s: ttlMs = %d, want %d", what, v, ttl.Milliseconds())
	}
	if res["cacheScope"] != string(scope) {
		t.Errorf("%s: cacheScope = %v, want %s", what, res["cacheScope"], scope)
	}
}

// noCache asserts that a result carries no cache hints (CACHE-2).
func noCache(t testing.TB, what string, res map[string]any) {
	t.Helper()
	for _, k := range []string{"ttlMs", "cacheScope"} {
		if _, ok := res[k]; ok {
			t.Errorf("%s: carries %s, which it must not (CACHE-2)", what, k)
		}
	}
}
