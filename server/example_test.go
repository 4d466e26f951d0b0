package server_test

import (
	"context"
	"fmt"

	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// exampleStream is a server.Stream that hands every message to a channel,
// where a transport would write it to the wire.
type exampleStream chan string

func (s exampleStream) Send(msg []byte) error { s <- string(msg); return nil }
func (s exampleStream) KeepAlive() error      { return nil }

// A server whose tools and resources change while a client listens. Every
// message on the listen stream carries the listen's request id as its
// subscriptionId, and a graceful shutdown ends the listen with a complete
// result. Each change here waits for the previous notification, because
// changes that arrive together are coalesced into one.
func Example_liveChanges() {
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	srv := server.New(mcp.Implementation{Name: "example", Version: "1.0.0"}, server.WithoutServerInfo())
	hello := func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("hello")}}, nil
	}
	must(srv.AddTool(mcp.Tool{Name: "hello"}, hello))
	must(srv.AddResource(mcp.Resource{URI: "config://app"},
		func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{
				mcp.TextContents(req.URI, "text/plain", "debug=false"),
			}}, nil
		}))

	// A client listens for tool list changes and for updates of the resource.
	msg, err := jsonrpc.Decode([]byte(`{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{
		"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},
		"notifications":{"toolsListChanged":true,"resourceSubscriptions":["config://app"]}}}`), jsonrpc.DefaultMaxDepth)
	must(err)
	call, rep := srv.Parse(msg)
	if rep != nil {
		panic(string(rep.Body))
	}
	out := make(exampleStream)
	done := make(chan server.Reply)
	go func() { done <- srv.Serve(context.Background(), call, "", out) }()
	fmt.Println(<-out) // the acknowledgement: what the server will send

	must(srv.AddTool(mcp.Tool{Name: "goodbye"}, hello))
	fmt.Println(<-out)

	srv.ResourceUpdated("config://app")
	fmt.Println(<-out)

	must(srv.Shutdown(context.Background()))
	fmt.Println(string((<-done).Body))
	// Output:
	// {"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":1},"notifications":{"toolsListChanged":true,"resourceSubscriptions":["config://app"]}}}
	// {"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":1}}}
	// {"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"config://app","_meta":{"io.modelcontextprotocol/subscriptionId":1}}}
	// {"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","_meta":{"io.modelcontextprotocol/subscriptionId":1}}}
}
