package gateway_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/client"
	"tidings/gateway"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// uiExtension is MCP Apps' extension: a tool names, in its
// _meta.ui.resourceUri, a ui:// resource that a host shows.
const uiExtension = "io.modelcontextprotocol/ui"

// TestExtensionsPassThrough: an upstream that offers MCP Apps is seen
// through the gateway as offering it; its tool's reference to its ui://
// resource holds (the URI unchanged and readable there); and a caller
// that declares the extension is declared as such to the upstream, one
// that does not is not.
func TestExtensionsPassThrough(t *testing.T) {
	srv := server.New(mcp.Implementation{Name: "apps", Version: "1"}, server.WithExtension(uiExtension, nil))
	err := srv.AddTool(mcp.Tool{Name: "card", InputSchema: jsontext.Value(`{"type":"object"}`),
		Meta: mcp.Meta{"ui": jsontext.Value(`{"resourceUri":"ui://widget/card.html"}`)}},
		func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			said := "the caller did not declare MCP Apps"
			if _, ok := req.Capabilities.Extensions[uiExtension]; ok {
				said = "the caller declared MCP Apps"
			}
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(said)}}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	html := "<p>card</p>"
	err = srv.AddResource(mcp.Resource{URI: "ui://widget/card.html", Name: "card", MimeType: "text/html;profile=mcp-app"},
		func(context.Context, *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{{URI: "ui://widget/card.html", Text: &html}}}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	upURL := serveOnLoopback(t, srv, streamhttp.New(srv))
	_, url := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "apps", URL: upURL}}})
	c := client.NewHTTP(url)
	defer c.Close()
	ctx := context.Background()

	d, err := c.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Capabilities.Extensions[uiExtension]; !ok {
		t.Fatalf("the gateway offers the extensions %v, without %s", d.Capabilities.Extensions, uiExtension)
	}
	ts, err := c.Tools(ctx)
	if err != nil || len(ts) != 1 {
		t.Fatalf("tools %v, %v", ts, err)
	}
	var ui struct {
		ResourceURI string `json:"resourceUri"`
	}
	if err := json.Unmarshal(ts[0].Meta["ui"], &ui); err != nil || ui.ResourceURI != "ui://widget/card.html" {
		t.Fatalf("the tool's _meta.ui is %s", ts[0].Meta["ui"])
	}
	res, err := c.ReadResource(ctx, ui.ResourceURI)
	if err != nil || *res.Contents[0].Text != html {
		t.Fatalf("reading the tool's ui resource through the gateway: %+v, %v", res, err)
	}
	call := func(caps mcp.ClientCaps) string {
		t.Helper()
		raw, err := c.Request(ctx, mcp.MethodToolsCall, map[string]any{"name": ts[0].Name, "arguments": map[string]any{}}, client.WithCapabilities(caps))
		if err != nil {
			t.Fatal(err)
		}
		var out mcp.CallToolResult
		if err := jsonrpc.UnmarshalParams(raw, &out); err != nil {
			t.Fatal(err)
		}
		return *out.Content[0].Text
	}
	if got := call(mcp.ClientCaps{Extensions: map[string]jsontext.Value{uiExtension: jsontext.Value(`{"mimeTypes":["text/html;profile=mcp-app"]}`)}}); got != "the caller declared MCP Apps" {
		t.Errorf("a caller that declares MCP Apps: %s", got)
	}
	if got := call(mcp.ClientCaps{}); got != "the caller did not declare MCP Apps" {
		t.Errorf("a caller that does not: %s", got)
	}
}
