package client_test

import (
	"context"
	"testing"
	"time"

	"tidings/client"
	"tidings/client/inmem"
	"tidings/mcp"
	"tidings/server"
)

// opaque hides a Transport's concrete type, so New sees it as any third
// party's.
type opaque struct{ client.Transport }

// TestNewThirdPartyTransport: a client over a Transport from outside the
// package calls tools and follows changes through its listen.
func TestNewThirdPartyTransport(t *testing.T) {
	srv := server.New(mcp.Implementation{Name: "third", Version: "1.0.0"})
	if err := srv.AddTool(mcp.Tool{Name: "t0"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	c := client.New(opaque{inmem.New(srv)}, client.WithTimeout(10*time.Second))
	defer c.Close()
	ctx := context.Background()
	changed := make(chan client.Event, 16)
	w := c.Watch(ctx, client.WatchOptions{Tools: true, OnEvent: func(e client.Event) {
		if e.Kind == client.ToolsChanged {
			changed <- e
		}
	}})
	defer w.Close()
	wait := func() client.Event {
		t.Helper()
		select {
		case e := <-changed:
			return e
		case <-time.After(10 * time.Second):
			t.Fatal("no ToolsChanged event")
			return client.Event{}
		}
	}
	wait() // the first read
	if err := srv.AddTool(mcp.Tool{Name: "t1"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("one")}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if e := wait(); len(e.Added) != 1 || e.Added[0] != "t1" {
		t.Errorf("ToolsChanged = %+v, want Added [t1]", e)
	}
	res, err := c.CallTool(ctx, "t1", nil)
	if err != nil || *res.Content[0].Text != "one" {
		t.Fatalf("CallTool = %+v, %v", res, err)
	}
}
