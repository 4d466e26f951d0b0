// Command mcpgo-server is an MCP server built on mcp-go
// (github.com/mark3labs/mcp-go), a peer for tidings' interop tests. It
// offers a tool echo, which answers with the text it is given, and every
// -flicker period adds or removes a tool flicker, so that the server keeps
// sending notifications/tools/list_changed (-flicker-first: the tool is
// there from the start, for a server spawned for one request). With
// -change it offers instead a tool change, with which a test makes each
// change when it chooses: {"what":"add"} and {"what":"remove"} add and
// remove flicker, and {"what":"reshape"} flips the input schema of a tool
// shape between two forms while its name stays (see peer.Changer).
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
	change := flag.Bool("change", false, "offer the tools change and shape, with which a caller adds and removes flicker and reshapes shape (no -flicker timer then)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("mcpgo-server: ")
	p, err := peer.ChangeFlags(*change, *period)
	if err != nil {
		log.Fatal(err)
	}
	if err := run(*addr, *stdio, p, *first, *change); err != nil {
		log.Fatal(err)
	}
}

// run serves until a signal, or the end of stdin with stdio.
func run(addr string, stdio bool, period time.Duration, first, change bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := newServer()
	if change {
		addChange(srv)
	}
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

// addChange adds the change tool, and shape in its narrow form.
func addChange(srv *server.MCPServer) {
	ch := &peer.Changer{
		Add:    func() { addFlicker(srv) },
		Remove: func() { srv.DeleteTools(peer.FlickerTool) },
		Reshape: func(s peer.Shape) {
			// AddTool replaces the tool of that name and announces it.
			opts := []mcp.ToolOption{
				mcp.WithDescription("Answers with the form of its input schema."),
				mcp.WithString("text", mcp.Required(), mcp.Description("the text to send back")),
			}
			if s == peer.Wide {
				opts = append(opts, mcp.WithInteger("times", mcp.Description("how many times")))
			}
			srv.AddTool(mcp.NewTool(peer.ShapeTool, opts...), func(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return mcp.NewToolResultText(string(s)), nil
			})
		},
	}
	ch.Reshape(peer.Narrow)
	change := mcp.NewTool(peer.ChangeTool,
		mcp.WithDescription("Changes this server's tools."),
		mcp.WithString("what", mcp.Required(), mcp.Enum(peer.ChangeAdd, peer.ChangeRemove, peer.ChangeReshape)))
	srv.AddTool(change, func(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		what, err := req.RequireString("what")
		if err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		done, err := ch.Do(what)
		if err != nil {
			return mcp.NewToolResultError(err.Error()), nil
		}
		return mcp.NewToolResultText(done), nil
	})
}
