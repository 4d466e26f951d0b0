// Command benchpeer is one MCP server of the process-level benchmarks
// (internal/procbench): the same 50 tools, with the same input schema,
// served by tidings, by mcp-go, or by a bare server that only answers
// every request with bytes it was given — the floor under any server
// over the same pipes or loopback HTTP. Each runs in a process of its
// own, as a user runs a server, so that a ratio between two of them is
// what a host that starts or calls them sees.
//
//	benchpeer -impl tidings -stdio
//	benchpeer -impl mcpgo -stdio
//	benchpeer -impl bare -answer FILE -stdio   # each line read is answered with FILE's one line
//	benchpeer -impl tidings -addr 127.0.0.1:0  # prints "mcp endpoint: URL"
//	benchpeer -impl bare -answer FILE -addr 127.0.0.1:0
//
// The end of stdin ends a stdio server; SIGINT or SIGTERM end any.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	mcpgomcp "github.com/mark3labs/mcp-go/mcp"
	mcpgoserver "github.com/mark3labs/mcp-go/server"

	"tidings/mcp"
	"tidings/server"
	"tidings/stdio"
	"tidings/streamhttp"
)

// Tools is how many tools each server offers; tools/list answers them
// all in one page.
const Tools = 50

// schema is every tool's input schema.
const schema = `{"type":"object","properties":{"path":{"type":"string"},"query":{"type":"string"},"limit":{"type":"integer","minimum":1}},"required":["query"]}`

func main() {
	impl := flag.String("impl", "tidings", "the server: tidings, mcpgo or bare")
	useStdio := flag.Bool("stdio", false, "speak over stdin and stdout instead of HTTP")
	addr := flag.String("addr", "127.0.0.1:0", "serve Streamable HTTP at http://ADDR/mcp (port 0 picks a free one)")
	answer := flag.String("answer", "", "with -impl bare: the file whose bytes answer every request")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("benchpeer: ")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *impl, *useStdio, *addr, *answer); err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
}

func run(ctx context.Context, impl string, useStdio bool, addr, answerFile string) error {
	switch impl {
	case "tidings":
		srv, err := tidingsServer()
		if err != nil {
			return err
		}
		if useStdio {
			return stdio.Serve(ctx, srv, os.Stdin, os.Stdout)
		}
		ln, err := listen(addr)
		if err != nil {
			return err
		}
		mux := http.NewServeMux()
		mux.Handle("/mcp", streamhttp.New(srv))
		return streamhttp.Serve(ctx, ln, mux)
	case "mcpgo":
		srv := mcpgoServer()
		if !useStdio {
			return errors.New("-impl mcpgo serves -stdio only")
		}
		return mcpgoserver.NewStdioServer(srv).Listen(ctx, os.Stdin, os.Stdout)
	case "bare":
		body, err := os.ReadFile(answerFile)
		if err != nil {
			return fmt.Errorf("-impl bare needs -answer FILE: %w", err)
		}
		if useStdio {
			return bareLines(os.Stdin, os.Stdout, body)
		}
		ln, err := listen(addr)
		if err != nil {
			return err
		}
		return bareHTTP(ctx, ln, body)
	}
	return fmt.Errorf("-impl %q: want tidings, mcpgo or bare", impl)
}

// listen opens addr and prints its endpoint's URL, for the benchmark
// that started the process.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	fmt.Printf("mcp endpoint: http://%s/mcp\n", ln.Addr())
	return ln, nil
}

// toolName names tool i of every server.
func toolName(i int) string { return fmt.Sprintf("search_files_%02d", i) }

func tidingsServer() (*server.Server, error) {
	srv := server.New(mcp.Implementation{Name: "benchpeer", Version: "1.0.0"})
	for i := range Tools {
		err := srv.AddTool(mcp.Tool{
			Name:        toolName(i),
			Description: "Searches the files under a path for text and returns matching lines with their locations.",
			InputSchema: []byte(schema),
		}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("ok")}}, nil
		})
		if err != nil {
			return nil, err
		}
	}
	return srv, nil
}

func mcpgoServer() *mcpgoserver.MCPServer {
	srv := mcpgoserver.NewMCPServer("benchpeer", "1.0.0", mcpgoserver.WithToolCapabilities(true))
	for i := range Tools {
		tool := mcpgomcp.NewToolWithRawSchema(toolName(i),
			"Searches the files under a path for text and returns matching lines with their locations.", json.RawMessage(schema))
		srv.AddTool(tool, func(context.Context, mcpgomcp.CallToolRequest) (*mcpgomcp.CallToolResult, error) {
			return mcpgomcp.NewToolResultText("ok"), nil
		})
	}
	return srv
}

// bareLines answers each line of in with answer, as one line.
func bareLines(in io.Reader, out io.Writer, answer []byte) error {
	answer = append(bytes.TrimRight(answer, "\n"), '\n')
	r := bufio.NewReaderSize(in, 1<<20)
	w := bufio.NewWriter(out)
	for {
		if _, err := r.ReadSlice('\n'); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if _, err := w.Write(answer); err != nil {
			return err
		}
		if r.Buffered() == 0 {
			if err := w.Flush(); err != nil {
				return err
			}
		}
	}
}

// bareHTTP answers every request on ln with answer, as JSON, until ctx
// ends.
func bareHTTP(ctx context.Context, ln net.Listener, answer []byte) error {
	length := strconv.Itoa(len(answer))
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		h["Content-Length"] = []string{length}
		_, _ = w.Write(answer)
	})}
	go func() {
		<-ctx.Done()
		hs.Close()
	}()
	if err := hs.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return ctx.Err()
}
