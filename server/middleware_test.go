package server_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tidings/internal/engine"
	"tidings/internal/legacy"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// seenLog records what a middleware saw of each request.
type seenLog struct {
	mu      sync.Mutex
	entries []string
}

func (l *seenLog) add(s string) {
	l.mu.Lock()
	l.entries = append(l.entries, s)
	l.mu.Unlock()
}

func (l *seenLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

// recording logs method, name, principal and outcome code of every
// request, and refuses tools/call of "forbidden" without calling next.
func recording(log *seenLog) server.Middleware {
	return func(next server.MethodHandler) server.MethodHandler {
		return func(ctx context.Context, req *server.Request) error {
			if req.Method == mcp.MethodToolsCall && req.Name == "forbidden" {
				log.add(req.Method + " " + req.Name + " refused")
				return jsonrpc.NewError(-32001, "Forbidden by policy", nil)
			}
			err := next(ctx, req)
			var code jsonrpc.Code
			var je *jsonrpc.Error
			if errors.As(err, &je) {
				code = je.Code
			}
			log.add(fmt.Sprintf("%s %s %s %d", req.Method, req.Name, req.Principal, code))
			return err
		}
	}
}

// TestMiddlewareWrapsEveryMethod: middleware sees every method of both
// eras with its name, principal and outcome, and can refuse a request
// before its handler runs.
func TestMiddlewareWrapsEveryMethod(t *testing.T) {
	log := &seenLog{}
	order := &seenLog{}
	outer := func(next server.MethodHandler) server.MethodHandler {
		return func(ctx context.Context, req *server.Request) error {
			order.add("outer")
			return next(ctx, req)
		}
	}
	h := newHarness(t, server.WithMiddleware(outer, recording(log)))
	h.principal = "alice"
	ran := 0
	mustAddTool(t, h.srv, textTool("echo"), echoHandler("hi"))
	mustAddTool(t, h.srv, textTool("forbidden"), func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		ran++
		return nil, nil
	})

	r, _ := h.call(1, mcp.MethodToolsList, P{})
	r.ok(t)
	r, _ = h.call(2, mcp.MethodToolsCall, P{"name": "echo"})
	r.ok(t)
	r, _ = h.call(3, mcp.MethodToolsCall, P{"name": "nope"})
	r.fails(t, -32602)
	r, _ = h.call(4, mcp.MethodToolsCall, P{"name": "forbidden"})
	r.fails(t, -32001)
	if ran != 0 {
		t.Errorf("a refused tool's handler ran %d times", ran)
	}
	l := h.startListen(5, P{"notifications": P{"toolsListChanged": true}})
	l.ack(t)
	l.stop(t)

	// The same policy for a 2025-11-25 session.
	tbl := legacy.NewTable(engine.Of(h.srv), 10, 10, time.Hour)
	srv := &lsrv{Server: h.srv, tbl: tbl}
	ss := openSession(t, srv, nil)
	lr, _ := serve(t, srv, ss, 6, mcp.MethodToolsCall, map[string]any{"name": "forbidden"})
	lr.fails(t, -32001)
	lr, _ = serve(t, srv, ss, 7, mcp.MethodPing, nil)
	lr.ok(t)

	want := []string{
		"tools/list  alice 0",
		"tools/call echo alice 0",
		"tools/call nope alice -32602",
		"tools/call forbidden refused",
		"subscriptions/listen  alice 0",
		"initialize   0",
		"tools/call forbidden refused",
		"ping   0",
	}
	if got := log.all(); !slices.Equal(got, want) {
		t.Errorf("middleware saw\n%q\nwant\n%q", got, want)
	}
	if n := len(order.all()); n != len(want) {
		t.Errorf("the outer middleware ran %d times, want %d (it wraps the inner one)", n, len(want))
	}
}

// TestHandlerPanicIsAnError: a panicking handler becomes -32603 for its
// own request, is logged, and the server goes on serving.
func TestHandlerPanicIsAnError(t *testing.T) {
	h := newHarness(t)
	mustAddTool(t, h.srv, textTool("boom"), func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		panic("a bug in the handler")
	})
	mustAddTool(t, h.srv, textTool("echo"), echoHandler("still here"))
	r, _ := h.call(1, mcp.MethodToolsCall, P{"name": "boom"})
	r.fails(t, -32603)
	if strings.Contains(string(r.raw), "a bug in the handler") {
		t.Errorf("the panic's text reached the client: %s", r.raw)
	}
	r, _ = h.call(2, mcp.MethodToolsCall, P{"name": "echo"})
	r.ok(t)
}

// TestLogRequests: the request log names method, name and outcome, and
// never an argument value.
func TestLogRequests(t *testing.T) {
	var buf strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return buf.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := newHarness(t, server.WithMiddleware(server.LogRequests(logger)))
	mustAddTool(t, h.srv, textTool("echo"), echoHandler("hi"))
	r, _ := h.call(1, mcp.MethodToolsCall, P{"name": "echo", "arguments": P{"password": "hunter2"}})
	r.ok(t)
	r, _ = h.call(2, mcp.MethodToolsCall, P{"name": "nope"})
	r.fails(t, -32602)
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	for _, want := range []string{"method=tools/call", "name=echo", "outcome=ok", "name=nope", "code=-32602", "duration="} {
		if !strings.Contains(out, want) {
			t.Errorf("request log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("request log shows an argument value:\n%s", out)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestMiddlewareGuardsSessions: a middleware that refuses everything but
// initialize leaves a 2025-11-25 session nothing to use — no ping, no
// subscription, no notification stream — so the earlier era is no way
// around a policy.
func TestMiddlewareGuardsSessions(t *testing.T) {
	deny := func(next server.MethodHandler) server.MethodHandler {
		return func(ctx context.Context, req *server.Request) error {
			if req.Method == mcp.MethodInitialize {
				return next(ctx, req)
			}
			return jsonrpc.NewError(-32001, "Forbidden by policy", nil)
		}
	}
	h := newHarness(t, server.WithMiddleware(deny))
	mustAddResource(t, h.srv, "res://x", textResource("res://x", "x"))
	srv := &lsrv{Server: h.srv, tbl: legacy.NewTable(engine.Of(h.srv), 10, 10, time.Hour)}
	ss := openSession(t, srv, nil)
	for i, method := range []string{mcp.MethodPing, mcp.MethodLoggingSetLevel, mcp.MethodResourcesSubscribe, mcp.MethodResourcesRead} {
		r, _ := serve(t, srv, ss, i+1, method, map[string]any{"uri": "res://x", "level": "info"})
		r.fails(t, -32001)
	}
	started := false
	err := srv.ServeSessionStream(context.Background(), ss, newLegacyOut(t), func() error { started = true; return nil })
	var refused *legacy.RefusedError
	if !errors.As(err, &refused) || refused.Err.Code != -32001 || started {
		t.Errorf("session stream: err %v, started %v; want it refused before it starts", err, started)
	}
}

// TestRequireScopes: scopes declared where a tool, prompt, resource or
// template is registered are what RequiredScopes reports and what
// middleware finds on the request; other items and methods declare none.
func TestRequireScopes(t *testing.T) {
	var seen []string
	var mu sync.Mutex
	record := func(next server.MethodHandler) server.MethodHandler {
		return func(ctx context.Context, req *server.Request) error {
			mu.Lock()
			seen = append(seen, fmt.Sprintf("%s %s %v", req.Method, req.Name, req.Scopes))
			mu.Unlock()
			return next(ctx, req)
		}
	}
	h := newHarness(t, server.WithMiddleware(record))
	if err := h.srv.AddTool(textTool("t"), echoHandler("x"), server.RequireScopes("tools:t")); err != nil {
		t.Fatal(err)
	}
	mustAddTool(t, h.srv, textTool("free"), echoHandler("y"))
	if err := h.srv.AddPrompt(mcp.Prompt{Name: "p"}, simplePrompt, server.RequireScopes("prompts")); err != nil {
		t.Fatal(err)
	}
	mustAddResource(t, h.srv, "res://r", textResource("res://r", "r"), server.RequireScopes("read:r"))
	if err := h.srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "res://t/{id}"}, textResource("", "t"), server.RequireScopes("read:t")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, name string
		want         []string
	}{
		{mcp.MethodToolsCall, "t", []string{"tools:t"}},
		{mcp.MethodToolsCall, "free", nil},
		{mcp.MethodPromptsGet, "p", []string{"prompts"}},
		{mcp.MethodResourcesRead, "res://r", []string{"read:r"}},
		{mcp.MethodResourcesRead, "res://t/7", []string{"read:t"}},
		{mcp.MethodToolsList, "", nil},
	} {
		if got := h.srv.RequiredScopes("", c.method, c.name); !slices.Equal(got, c.want) {
			t.Errorf("RequiredScopes(%s, %s) = %v, want %v", c.method, c.name, got, c.want)
		}
	}
	h.srv.SetCompletionHandler(func(context.Context, *server.CompleteRequest) (*mcp.Completion, error) {
		return &mcp.Completion{}, nil
	})
	r, _ := h.call(1, mcp.MethodToolsCall, P{"name": "t"})
	r.ok(t)
	r, _ = h.call(2, mcp.MethodResourcesRead, P{"uri": "res://t/7"})
	r.ok(t)
	// What a request only refers to counts too: a completion's prompt or
	// template, the resources a listen follows.
	r, _ = h.call(3, mcp.MethodComplete, P{"ref": P{"type": "ref/prompt", "name": "p"}, "argument": P{"name": "a", "value": ""}})
	r.ok(t)
	r, _ = h.call(4, mcp.MethodComplete, P{"ref": P{"type": "ref/resource", "uri": "res://t/{id}"}, "argument": P{"name": "id", "value": ""}})
	r.ok(t)
	l := h.startListen(5, P{"notifications": P{"resourceSubscriptions": []string{"res://r", "res://t/1"}}})
	l.ack(t)
	l.stop(t)
	srv := &lsrv{Server: h.srv, tbl: legacy.NewTable(engine.Of(h.srv), 10, 10, time.Hour)}
	lr, _ := serve(t, srv, openSession(t, srv, nil), 6, mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://r"})
	lr.ok(t)
	mu.Lock()
	defer mu.Unlock()
	seen = slices.DeleteFunc(seen, func(s string) bool { return strings.HasPrefix(s, "initialize") })
	want := []string{
		"tools/call t [tools:t]",
		"resources/read res://t/7 [read:t]",
		"completion/complete  [prompts]",
		"completion/complete  [read:t]",
		"subscriptions/listen  [read:r read:t]",
		"resources/subscribe  [read:r]",
	}
	if !slices.Equal(seen, want) {
		t.Errorf("middleware saw %q, want %q", seen, want)
	}
}

// TestRequiredScopesFollowVisibility: the scopes reported for a read are
// those of the template that will serve it for that caller — a template
// the caller may not see is passed over as the read passes it over — and
// an item the caller may not see reports none, revealing nothing.
func TestRequiredScopesFollowVisibility(t *testing.T) {
	h := newHarness(t, server.WithVisibility(func(p string, l server.List, key string) bool {
		return !(l == server.ListTemplates && key == "mem://{+path}") || p == "alice"
	}))
	// "mem://{+path}" sorts first and matches everything; only alice sees it.
	if err := h.srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "mem://{+path}"}, textResource("", "open"), server.RequireScopes("alice-only")); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "mem://{x}"}, textResource("", "admin"), server.RequireScopes("admin")); err != nil {
		t.Fatal(err)
	}
	if got := h.srv.RequiredScopes("bob", mcp.MethodResourcesRead, "mem://foo"); !slices.Equal(got, []string{"admin"}) {
		t.Errorf("bob's read: %v, want [admin] (the template that serves him)", got)
	}
	if got := h.srv.RequiredScopes("alice", mcp.MethodResourcesRead, "mem://foo"); !slices.Equal(got, []string{"alice-only"}) {
		t.Errorf("alice's read: %v, want [alice-only]", got)
	}
}

// TestRequireScopesRefusesNonScopes: a declared scope must be an OAuth
// scope-token, since challenges quote it as it is.
func TestRequireScopesRefusesNonScopes(t *testing.T) {
	h := newHarness(t)
	for _, bad := range []string{"", "a b", `say"hi`, `back\\slash`, "tab\t", "é"} {
		if err := h.srv.AddTool(textTool("t"), echoHandler("x"), server.RequireScopes(bad)); err == nil {
			t.Errorf("scope %q accepted", bad)
		}
	}
	if err := h.srv.AddTool(textTool("t"), echoHandler("x"), server.RequireScopes("tools:call", "a/b.c")); err != nil {
		t.Errorf("valid scopes refused: %v", err)
	}
}
