package stdio_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"tidings/mcp"
	"tidings/server"
	"tidings/stdio"
)

// A server on a process's stdin and stdout, the way a host starts a local
// MCP server. Here the input is one request on a string, and Serve
// returns at its end once it is answered.
func ExampleServe() {
	srv := server.New(mcp.Implementation{Name: "example", Version: "1.0.0"}, server.WithoutServerInfo())
	err := srv.AddTool(mcp.Tool{Name: "hello"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("hello")}}, nil
	})
	if err != nil {
		panic(err)
	}
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	in := strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"hello",` + meta + `}}` + "\n")
	// In a real server: stdio.Serve(ctx, srv, os.Stdin, os.Stdout).
	if err := stdio.Serve(context.Background(), srv, in, os.Stdout); err != nil {
		fmt.Println(err)
	}
	// Output:
	// {"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello"}],"resultType":"complete"}}
}
