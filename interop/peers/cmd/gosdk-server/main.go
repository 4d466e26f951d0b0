// Command gosdk-server is an MCP server built on the official Go SDK
// (github.com/modelcontextprotocol/go-sdk), a peer for tidings' interop
// tests. It offers a tool echo, which answers with the text it is given,
// and every -flicker period adds or removes a tool flicker, so that the
// server keeps sending notifications/tools/list_changed (-flicker-first:
// the tool is there from the start, for a server spawned for one request).
// With -log-lists it prints peer.ListsLine to stdout for each tools/list
// it answers, for a test to count. With -change it offers instead a tool change, with which a test makes
// each change when it chooses: {"what":"add"} and {"what":"remove"} add
// and remove flicker, and {"what":"reshape"} flips the input schema of a
// tool shape between two forms while its name stays (see peer.Changer).
//
// It speaks Streamable HTTP through the SDK's StreamableHTTPHandler in its
// default, stateful configuration (sessions, initialize); -stateless sets
// the handler's Stateless option; -stdio speaks over stdin and stdout
// instead. Serving HTTP, it prints the endpoint's URL to stdout:
//
//	gosdk-server -addr 127.0.0.1:0 -flicker 300ms
//	mcp endpoint: http://127.0.0.1:41234/mcp
//
// SIGINT or SIGTERM end it, as does the end of stdin with -stdio.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"tidings/interop/peers/internal/peer"
)

// echoArgs is the echo tool's input; the SDK derives its schema.
type echoArgs struct {
	Text string `json:"text" jsonschema:"the text to send back"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "serve Streamable HTTP at http://ADDR/mcp (port 0 picks a free one)")
	stdio := flag.Bool("stdio", false, "speak over stdin and stdout instead of HTTP")
	stateless := flag.Bool("stateless", false, "serve HTTP with StreamableHTTPOptions.Stateless set")
	period := flag.Duration("flicker", time.Second, "how often the flicker tool is added or removed (0: never)")
	first := flag.Bool("flicker-first", false, "add the flicker tool at start, before the first period")
	change := flag.Bool("change", false, "offer the tools change and shape, with which a caller adds and removes flicker and reshapes shape (no -flicker timer then)")
	logLists := flag.Bool("log-lists", false, "print a line to stdout for each tools/list answered, so that a test counts them")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("gosdk-server: ")
	if *stdio && *stateless {
		log.Fatal("-stateless configures the HTTP handler; it means nothing with -stdio")
	}
	p, err := peer.ChangeFlags(*change, *period)
	if err != nil {
		log.Fatal(err)
	}
	if err := run(*addr, *stdio, *stateless, p, *first, *change, *logLists); err != nil {
		log.Fatal(err)
	}
}

// run serves until a signal, or the end of stdin with stdio.
func run(addr string, stdio, stateless bool, period time.Duration, first, change, logLists bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	srv := newServer()
	if logLists {
		srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				if method == "tools/list" {
					fmt.Println(peer.ListsLine)
				}
				return next(ctx, method, req)
			}
		})
	}
	if change {
		addChange(srv)
	}
	stopFlicker := peer.StartFlicker(ctx, period, first, func() { addFlicker(srv) }, func() { srv.RemoveTools(peer.FlickerTool) })
	defer stopFlicker()
	if stdio {
		err := srv.Run(ctx, &mcp.StdioTransport{})
		if ctx.Err() != nil || errors.Is(err, mcp.ErrConnectionClosed) {
			return nil // a signal, or the client closed stdin
		}
		return err
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: stateless})
	return peer.ServeHTTP(ctx, addr, h, os.Stdout)
}

// newServer returns the server with its stable tool, echo.
func newServer() *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "gosdk-peer", Version: "1.0.0"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: "Answer with the text given."},
		func(_ context.Context, _ *mcp.CallToolRequest, in echoArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
	return srv
}

// addFlicker adds the tool that comes and goes.
func addFlicker(srv *mcp.Server) {
	mcp.AddTool(srv, &mcp.Tool{Name: peer.FlickerTool, Description: "Here one moment, gone the next."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "still here"}}}, nil, nil
		})
}

// changeArgs is the change tool's input.
type changeArgs struct {
	What string `json:"what" jsonschema:"add, remove or reshape"`
}

// The two forms of the shape tool's input; the SDK derives each schema.
type (
	narrowArgs struct {
		Text string `json:"text" jsonschema:"the text to send back"`
	}
	wideArgs struct {
		Text  string `json:"text" jsonschema:"the text to send back"`
		Times int    `json:"times,omitempty" jsonschema:"how many times"`
	}
)

// addChange adds the change tool, and shape in its narrow form.
func addChange(srv *mcp.Server) {
	ch := &peer.Changer{
		Add:    func() { addFlicker(srv) },
		Remove: func() { srv.RemoveTools(peer.FlickerTool) },
		Reshape: func(s peer.Shape) {
			// AddTool replaces the tool of that name and announces it.
			answer := func() (*mcp.CallToolResult, any, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(s)}}}, nil, nil
			}
			t := &mcp.Tool{Name: peer.ShapeTool, Description: "Answers with the form of its input schema."}
			if s == peer.Wide {
				mcp.AddTool(srv, t, func(context.Context, *mcp.CallToolRequest, wideArgs) (*mcp.CallToolResult, any, error) {
					return answer()
				})
				return
			}
			mcp.AddTool(srv, t, func(context.Context, *mcp.CallToolRequest, narrowArgs) (*mcp.CallToolResult, any, error) {
				return answer()
			})
		},
	}
	ch.Reshape(peer.Narrow)
	mcp.AddTool(srv, &mcp.Tool{Name: peer.ChangeTool, Description: "Changes this server's tools."},
		func(_ context.Context, _ *mcp.CallToolRequest, in changeArgs) (*mcp.CallToolResult, any, error) {
			done, err := ch.Do(in.What)
			if err != nil {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}, nil, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: done}}}, nil, nil
		})
}
