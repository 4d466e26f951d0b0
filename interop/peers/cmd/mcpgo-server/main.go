// Command mcpgo-server is an MCP server built on mcp-go
// (github.com/mark3labs/mcp-go), a peer for tidings' interop tests. It
// offers a tool echo, which answers with the text it is given, and every
// -flicker period adds or removes a tool flicker, so that the server keeps
// sending notifications/tools/list_changed (-flicker-first: the tool is
// there from the start, for a server spawned for one request).
//
// It speaks Streamable HTTP through the SDK's StreamableHTTPServer in its
// default configuration, or with -stdio over stdin and stdout. Serving
// HTTP, it prints the endpoint's URL to stdout:
//
//	mcpgo-server -addr 127.0.0.1:0 -flicker 300ms
//	mcp endpoint: http://127.0.0.1:41234/mcp
//
// SIGINT or SIGTERM end it, as does the end of stdin with -stdio.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"

	"tidings/interop/peers/internal/peer"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "serve Streamable HTTP at http://ADDR/mcp (port 0 picks a free one)")
	stdio := flag.Bool("stdio", false, "speak over stdin and stdout instead of HTTP")
	period := flag.Duration("flicker", time.Second, "how often the flicker tool is added or removed (0: never)")
	first := flag.Bool("flicker-first", false, "add the flicker tool at start, before the first period")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("mcpgo-server: ")
	if err := run(*addr, *stdio, *period, *first); err != nil {
		log.Fatal(err)
	}
}

// run serves until a signal, or the end of stdin with stdio.
func run(addr string, stdio bool, period time.Duration, first bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := newServer()
	stopFlicker := peer.StartFlicker(ctx, period, first, func() { addFlicker(srv) }, func() { srv.DeleteTools(peer.FlickerTool) })
	defer stopFlicker()
	if stdio {
		err := server.NewStdioServer(srv).Listen(ctx, os.Stdin, os.Stdout)
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	return peer.ServeHTTP(ctx, addr, server.NewStreamableHTTPServer(srv), os.Stdout)
}

// newServer returns the server with its stable tool, echo, and the
// capability to announce changes of its tool list.
func newServer() *server.MCPServer {
	srv := server.NewMCPServer("mcpgo-peer", "1.0.0", server.WithToolCapabilities(true))
	echo := mcp.NewTool("echo",
		mcp.WithDescription("Answer with the text given."),
		mcp.WithString("text", mcp.Required(), mcp.Description("the text to send back")))
	srv.AddTool(echo, func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		text, err := req.RequireString("text")
		if err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		return mcp.NewToolResultText(text), nil
	})
	return srv
}

// addFlicker adds the tool that comes and goes.
func addFlicker(srv *server.MCPServer) {
	srv.AddTool(mcp.NewTool(peer.FlickerTool, mcp.WithDescription("Here one moment, gone the next.")),
		func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return mcp.NewToolResultText("still here"), nil
		})
}
