package streamhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// A server over Streamable HTTP. The handler checks Host and Origin
// against loopback unless told otherwise, so a server on another address
// names the hosts it answers to with WithAllowedHosts.
func ExampleNew() {
	srv := server.New(mcp.Implementation{Name: "example", Version: "1.0.0"}, server.WithoutServerInfo())
	err := srv.AddTool(mcp.Tool{Name: "hello"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("hello")}}, nil
	})
	if err != nil {
		panic(err)
	}
	// In a real server: http.ListenAndServe("127.0.0.1:8080", mux) with
	// mux.Handle("/mcp", streamhttp.New(srv)).
	ts := httptest.NewServer(streamhttp.New(srv))
	defer ts.Close()

	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hello",` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, _ := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "tools/call")
	req.Header.Set("Mcp-Name", "hello")
	resp, err := ts.Client().Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(b))
	// Output:
	// 200 {"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello"}],"resultType":"complete"}}
}
