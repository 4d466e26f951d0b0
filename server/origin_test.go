package server_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// fixedOrigin serves tools t0…t(n-1), two to a page, and counts what it
// is asked.
type fixedOrigin struct {
	n     int
	lists atomic.Int64
	calls atomic.Int64
}

func (o *fixedOrigin) List(_ context.Context, req *server.ListRequest) (*server.ListPage, error) {
	o.lists.Add(1)
	start := 0
	if req.Cursor != nil {
		start, _ = strconv.Atoi(string(req.Cursor))
	}
	page := &server.ListPage{Cache: server.CachePolicy{TTL: time.Second, Scope: mcp.ScopePrivate}}
	for i := start; i < min(start+2, o.n); i++ {
		page.Items = append(page.Items, jsontext.Value(`{"name":"t`+strconv.Itoa(i)+`","inputSchema":{"type":"object"}}`))
	}
	if start+2 < o.n {
		page.Next = []byte(strconv.Itoa(start + 2))
	}
	return page, nil
}

func (o *fixedOrigin) CallTool(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	o.calls.Add(1)
	if req.Name == "ask" && req.InputResponses == nil {
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"q": {Method: "roots/list"}}, State: []byte("upstream-state")}
	}
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(req.Name + " " + string(req.State()))}}, nil
}

func (o *fixedOrigin) GetPrompt(context.Context, *server.PromptRequest) (*mcp.GetPromptResult, error) {
	return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "Unknown prompt", nil)
}

func (o *fixedOrigin) ReadResource(context.Context, *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
	return nil, server.ErrResourceNotFound
}

func (o *fixedOrigin) Complete(context.Context, *server.CompleteRequest) (*mcp.Completion, error) {
	return &mcp.Completion{}, nil
}

func (o *fixedOrigin) ToolSchema(string, string) (jsontext.Value, bool) { return nil, false }
func (o *fixedOrigin) Follow(string, []string) func()                   { return func() {} }
func (o *fixedOrigin) Forget(server.List, string)                       {}

// TestOriginAnswersInPlaceOfTheRegistries: with WithOrigin, lists come
// from the origin page by page under cursors the server seals, a forged
// cursor is refused before the origin is asked, its requestState is
// sealed and comes back verified, and ListChanged tells listeners.
func TestOriginAnswersInPlaceOfTheRegistries(t *testing.T) {
	o := &fixedOrigin{n: 3}
	h := newHarness(t, server.WithOrigin(o), server.WithCapabilities(server.Tools))
	h.principal = "alice"
	res, _ := h.call(1, mcp.MethodToolsList, P{"_meta": defaultMeta()})
	page := res.ok(t)
	if tools := page["tools"].([]any); len(tools) != 2 || page["cacheScope"] != "private" {
		t.Fatalf("first page %v", page)
	}
	cursor := page["nextCursor"].(string)
	if cursor == "2" {
		t.Fatal("the origin's cursor went out unsealed")
	}
	res, _ = h.call(2, mcp.MethodToolsList, P{"_meta": defaultMeta(), "cursor": cursor})
	if tools := res.ok(t)["tools"].([]any); len(tools) != 1 {
		t.Fatalf("second page %v", tools)
	}
	asked := o.lists.Load()
	h.principal = "bob"
	res, _ = h.call(3, mcp.MethodToolsList, P{"_meta": defaultMeta(), "cursor": cursor})
	res.fails(t, jsonrpc.CodeInvalidParams)
	res, _ = h.call(4, mcp.MethodToolsList, P{"_meta": defaultMeta(), "cursor": "AAAA"})
	res.fails(t, jsonrpc.CodeInvalidParams)
	if o.lists.Load() != asked {
		t.Fatal("the origin was asked with a cursor that is not the caller's")
	}

	res, _ = h.call(5, mcp.MethodToolsCall, P{"_meta": P{mcp.MetaProtocolVersion: mcp.Version,
		mcp.MetaClientCapabilities: P{"roots": P{}}}, "name": "ask", "arguments": P{}})
	state, _ := res.Result["requestState"].(string)
	if res.Result["resultType"] != mcp.ResultInputRequired || state == "" || state == "upstream-state" {
		t.Fatalf("input required: %s", res.raw)
	}
	res, _ = h.call(6, mcp.MethodToolsCall, P{"_meta": P{mcp.MetaProtocolVersion: mcp.Version,
		mcp.MetaClientCapabilities: P{"roots": P{}}}, "name": "ask", "arguments": P{},
		"inputResponses": P{"q": P{"roots": []any{}}}, "requestState": state})
	if text := res.ok(t)["content"].([]any)[0].(map[string]any)["text"]; text != "ask upstream-state" {
		t.Fatalf("the retry ran with %v", text)
	}

	l := h.startListen(7, P{"_meta": defaultMeta(), "notifications": P{"toolsListChanged": true}})
	l.rec.waitCount(t, 1) // the acknowledgement
	h.srv.ListChanged(server.ListTools)
	l.rec.waitUntil(t, "tools/list_changed", func(ns []notif) bool { return countMethod(ns, mcp.NotifyToolsListChanged) == 1 })
}

// TestChangeForOnePrincipal: ListChangedFor and ResourceUpdatedFor tell
// the listens of that principal alone; a resource update told to all
// afterwards shows nothing was pending for the other (a listen sends in
// order).
func TestChangeForOnePrincipal(t *testing.T) {
	h := newHarness(t, server.WithOrigin(&fixedOrigin{n: 1}), server.WithCapabilities(server.Tools, server.Resources))
	filter := P{"_meta": defaultMeta(), "notifications": P{"toolsListChanged": true, "resourceSubscriptions": []string{"res://marker"}}}
	alice := (&harness{t: t, srv: h.srv, principal: "alice"}).startListen("a", filter)
	alice.ack(t)
	bob := (&harness{t: t, srv: h.srv, principal: "bob"}).startListen("b", filter)
	bob.ack(t)
	h.srv.ListChangedFor("alice", server.ListTools)
	h.srv.ResourceUpdatedFor("alice", "res://marker")
	alice.rec.waitUntil(t, "alice told", func(ns []notif) bool {
		return countMethod(ns, mcp.NotifyToolsListChanged) == 1 && countMethod(ns, mcp.NotifyResourceUpdated) == 1
	})
	h.srv.ResourceUpdated("res://marker")
	ns := bob.rec.waitUntil(t, "bob's marker", func(ns []notif) bool { return countMethod(ns, mcp.NotifyResourceUpdated) > 0 })
	if l, r := countMethod(ns, mcp.NotifyToolsListChanged), countMethod(ns, mcp.NotifyResourceUpdated); l != 0 || r != 1 {
		t.Fatalf("bob was told of %d list changes and %d updates; only the last update is his", l, r)
	}
}
