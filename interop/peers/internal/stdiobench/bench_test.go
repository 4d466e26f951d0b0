package stdiobench_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	mcpgomcp "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"

	"tidings/mcp"
	"tidings/server"
	"tidings/stdio"
)

// tools is how many tools each server offers: tools/list answers all of
// them in one page.
const tools = 50

// peer is one stdio server on in-process pipes: a request is written as
// one line and its answer read as one.
type peer struct {
	in    *io.PipeWriter
	lines *bufio.Reader
	out   *io.PipeReader
	done  chan error
}

// start serves serve on fresh pipes.
func start(serve func(ctx context.Context, in io.Reader, out io.Writer) error) *peer {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &peer{in: inW, out: outR, lines: bufio.NewReaderSize(outR, 1<<20), done: make(chan error, 1)}
	go func() {
		err := serve(context.Background(), inR, outW)
		outW.Close()
		p.done <- err
	}()
	return p
}

// roundTrip writes req and returns the time until its answer is read.
func (p *peer) roundTrip(b *testing.B, req []byte) time.Duration {
	t0 := time.Now()
	if _, err := p.in.Write(req); err != nil {
		b.Fatal(err)
	}
	line, err := p.lines.ReadSlice('\n')
	if err != nil {
		b.Fatal(err)
	}
	took := time.Since(t0)
	if !bytes.Contains(line, []byte(`"result"`)) {
		b.Fatalf("not a result: %s", line)
	}
	return took
}

func (p *peer) stop(b *testing.B) {
	p.in.Close()
	if err := <-p.done; err != nil && err != io.EOF && err != context.Canceled {
		b.Error(err)
	}
	p.out.Close()
}

func tidingsServer(b *testing.B) *peer {
	srv := server.New(mcp.Implementation{Name: "bench", Version: "1"})
	for i := range tools {
		err := srv.AddTool(mcp.Tool{Name: fmt.Sprintf("tool_%02d", i), Description: "a tool for the benchmark"},
			func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("ok")}}, nil
			})
		if err != nil {
			b.Fatal(err)
		}
	}
	return start(func(ctx context.Context, in io.Reader, out io.Writer) error { return stdio.Serve(ctx, srv, in, out) })
}

func mcpgoServer() *peer {
	srv := mcpgoserver.NewMCPServer("bench", "1", mcpgoserver.WithToolCapabilities(true))
	for i := range tools {
		srv.AddTool(mcpgomcp.NewTool(fmt.Sprintf("tool_%02d", i), mcpgomcp.WithDescription("a tool for the benchmark")),
			func(context.Context, mcpgomcp.CallToolRequest) (*mcpgomcp.CallToolResult, error) {
				return mcpgomcp.NewToolResultText("ok"), nil
			})
	}
	stdioSrv := mcpgoserver.NewStdioServer(srv)
	return start(func(ctx context.Context, in io.Reader, out io.Writer) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		return stdioSrv.Listen(ctx, in, out)
	})
}

// BenchmarkStdioVsMCPGo sends the same tools/call and tools/list (of 50
// tools) over stdio to a tidings server and to an mcp-go v1.2.1 one, in
// turns, each op one round trip to each: x-mcpgo is how many times
// tidings' rate mcp-go's is, measured in the same moments, so that a
// machine whose other processes come and go slows both alike.
func BenchmarkStdioVsMCPGo(b *testing.B) {
	const meta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`
	for _, bc := range []struct{ name, req string }{
		{"call", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tool_07",` + meta + `}}` + "\n"},
		{"list", `{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{` + meta + `}}` + "\n"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			ours, theirs := tidingsServer(b), mcpgoServer()
			defer ours.stop(b)
			defer theirs.stop(b)
			req := []byte(bc.req)
			var took, theirsTook time.Duration
			i := 0
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if i%2 == 0 {
					took += ours.roundTrip(b, req)
					theirsTook += theirs.roundTrip(b, req)
				} else {
					theirsTook += theirs.roundTrip(b, req)
					took += ours.roundTrip(b, req)
				}
				i++
			}
			b.ReportMetric(float64(took)/float64(i), "tidings-ns/op")
			b.ReportMetric(float64(theirsTook)/float64(i), "mcpgo-ns/op")
			b.ReportMetric(float64(theirsTook)/float64(took), "x-mcpgo")
		})
	}
}
