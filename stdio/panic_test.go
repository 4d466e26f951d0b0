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
