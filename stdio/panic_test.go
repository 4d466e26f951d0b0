package stdio_test

import (
	"context"
	"log/slog"
	"testing"

	"tidings/mcp"
	"tidings/server"
	"tidings/stdio"
)

// TestHandlerPanicKeepsServing: a tool handler that panics is answered
// with -32603, and the connection serves the next request.
func TestHandlerPanicKeepsServing(t *testing.T) {
	srv := server.New(mcp.Implementation{Name: "t", Version: "1"}, server.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
	if err := srv.AddTool(mcp.Tool{Name: "boom"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		panic("a bug in the handler")
	}); err != nil {
		t.Fatal(err)
	}
	c := start(t, srv)
	c.send(1, mcp.MethodToolsCall, P{"name": "boom"})
	if l, _ := c.response(1); l.Error == nil || l.Error.Code != -32603 {
		t.Fatalf("panicking tool answered %s, want -32603", l.raw)
	}
	c.send(2, mcp.MethodToolsList, P{})
	if l, _ := c.response(2); l.Result == nil {
		t.Fatalf("after the panic, tools/list answered %s", l.raw)
	}
}

// TestPrincipalOption: WithPrincipal names the connection's caller for
// visibility: a tool only alice may see is listed and callable over a
// connection started as alice, and unknown over an anonymous one.
func TestPrincipalOption(t *testing.T) {
	srv := server.New(mcp.Implementation{Name: "t", Version: "1"}, server.WithVisibility(func(p string, _ server.List, key string) bool {
		return key != "mine" || p == "alice"
	}))
	if err := srv.AddTool(mcp.Tool{Name: "mine"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("yours")}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		opts  []stdio.Option
		found bool
	}{{[]stdio.Option{stdio.WithPrincipal("alice")}, true}, {nil, false}} {
		conn := start(t, srv, c.opts...)
		conn.send(1, mcp.MethodToolsCall, P{"name": "mine"})
		l, _ := conn.response(1)
		if got := l.Error == nil; got != c.found {
			t.Errorf("principal option %v: call answered %s", c.opts != nil, l.raw)
		}
	}
}

// TestChangeReachesOnlyItsPrincipal: two stdio connections to one server,
// one started as alice and one anonymous, both listening. Adding a tool
// only alice may see is told on alice's connection alone; a resource
// update right after shows nothing was pending on the other.
func TestChangeReachesOnlyItsPrincipal(t *testing.T) {
	srv := server.New(mcp.Implementation{Name: "t", Version: "1"}, server.WithVisibility(func(p string, l server.List, key string) bool {
		return l != server.ListTools || key != "secret" || p == "alice"
	}))
	if err := srv.AddResource(mcp.Resource{URI: "res://m"}, func(_ context.Context, r *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(r.URI, "", "m")}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddTool(mcp.Tool{Name: "open"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	alice := start(t, srv, stdio.WithPrincipal("alice"))
	anon := start(t, srv)
	filter := P{"notifications": P{"toolsListChanged": true, "resourceSubscriptions": []string{"res://m"}}}
	for _, c := range []*conn{alice, anon} {
		c.send("l", mcp.MethodListen, filter)
		c.waitUntil("the acknowledgement", func(ls []line) bool { return count(ls, mcp.NotifyAcknowledged) == 1 })
	}
	if err := srv.AddTool(mcp.Tool{Name: "secret"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	alice.waitUntil("alice told of the tool", func(ls []line) bool { return count(ls, mcp.NotifyToolsListChanged) == 1 })
	srv.ResourceUpdated("res://m")
	ls := anon.waitUntil("the update", func(ls []line) bool { return count(ls, mcp.NotifyResourceUpdated) == 1 })
	if n := count(ls, mcp.NotifyToolsListChanged); n != 0 {
		t.Errorf("the anonymous connection was told of a tool only alice may see")
	}
}
