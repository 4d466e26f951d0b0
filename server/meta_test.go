package server_test

import (
	"context"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/mcp"
	"tidings/server"
)

// TestHandlerMeta: a handler's own _meta reaches the client merged with
// serverInfo into a single _meta member (a repeated member name is
// invalid JSON to strict peers), for tool, prompt and read results alike.
func TestHandlerMeta(t *testing.T) {
	h := newHarness(t)
	meta := mcp.Meta{"example.com/trace": jsontext.Value(`"t1"`)}
	mustAddTool(t, h.srv, textTool("traced"), func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("ok")}, Meta: meta}, nil
	})
	if err := h.srv.AddPrompt(mcp.Prompt{Name: "traced"}, func(context.Context, *server.PromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []mcp.PromptMessage{{Role: "user", Content: mcp.TextContent("hi")}}, Meta: meta}, nil
	}); err != nil {
		t.Fatal(err)
	}
	mustAddResource(t, h.srv, "mem://traced", func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "text/plain", "x")}, Meta: meta}, nil
	})
	for _, c := range []struct {
		method string
		params P
	}{
		{mcp.MethodToolsCall, P{"name": "traced"}},
		{mcp.MethodPromptsGet, P{"name": "traced"}},
		{mcp.MethodResourcesRead, P{"uri": "mem://traced"}},
	} {
		r, _ := h.call(1, c.method, c.params)
		m, _ := r.ok(t)["_meta"].(map[string]any)
		if m["example.com/trace"] != "t1" || m[mcp.MetaServerInfo] == nil {
			t.Errorf("%s: _meta = %v, want the handler's key and serverInfo", c.method, m)
		}
	}
}
