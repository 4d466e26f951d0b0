package server_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// A server whose tools and resources change while a client listens over
// Streamable HTTP. Every message on the listen stream carries the listen's
// request id as its subscriptionId, and a graceful shutdown ends the
// listen with a complete result. Each change here waits for the previous
// notification, because changes that arrive together are coalesced into
// one.
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
	ts := httptest.NewServer(streamhttp.New(srv))
	defer ts.Close()

	// A client listens for tool list changes and for updates of the resource.
	req, err := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{
		"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},
		"notifications":{"toolsListChanged":true,"resourceSubscriptions":["config://app"]}}}`))
	must(err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version)
	req.Header.Set(mcp.HeaderMethod, mcp.MethodListen)
	resp, err := http.DefaultClient.Do(req)
	must(err)
	defer resp.Body.Close()
	events := bufio.NewScanner(resp.Body)
	next := func() string { // the data of the next SSE event
		for events.Scan() {
			if data, ok := strings.CutPrefix(events.Text(), "data: "); ok {
				return data
			}
		}
		return ""
	}
	fmt.Println(next()) // the acknowledgement: what the server will send

	must(srv.AddTool(mcp.Tool{Name: "goodbye"}, hello))
	fmt.Println(next())

	srv.ResourceUpdated("config://app")
	fmt.Println(next())

	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(context.Background()) }()
	fmt.Println(next())
	must(<-shut)
	// Output:
	// {"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":1},"notifications":{"toolsListChanged":true,"resourceSubscriptions":["config://app"]}}}
	// {"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":1}}}
	// {"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"config://app","_meta":{"io.modelcontextprotocol/subscriptionId":1}}}
	// {"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","_meta":{"io.modelcontextprotocol/subscriptionId":1}}}
}
