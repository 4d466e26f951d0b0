package stdio_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"testing"

	"tidings/mcp"
	"tidings/server"
	"tidings/stdio"
)

// BenchmarkRoundTrip measures one tools/call and one tools/list page (of
// 50 tools) each way over a stdio connection on in-process pipes: framing,
// decoding, checks, dispatch and encoding, without a process boundary.
func BenchmarkRoundTrip(b *testing.B) {
	srv := server.New(mcp.Implementation{Name: "bench", Version: "1"})
	for i := range 50 {
		err := srv.AddTool(mcp.Tool{Name: fmt.Sprintf("tool_%02d", i), Description: "a tool for the benchmark"},
			func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("ok")}}, nil
			})
		if err != nil {
			b.Fatal(err)
		}
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- stdio.Serve(context.Background(), srv, inR, outW) }()
	lines := bufio.NewReaderSize(outR, 1<<20)
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	for _, bc := range []struct{ name, req string }{
		{"call", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tool_07",` + meta + `}}` + "\n"},
		{"list", `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{` + meta + `}}` + "\n"},
	} {
		req := []byte(bc.req)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := inW.Write(req); err != nil {
					b.Fatal(err)
				}
				if _, err := lines.ReadSlice('\n'); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	inW.Close()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	outR.Close()
}
