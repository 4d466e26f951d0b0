package gateway_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/client"
	"tidings/gateway"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// Example puts two servers behind one gateway: their tools are listed
// under their prefixes, and a call goes to the server of the tool.
func Example() {
	upstream := func(name string, tools ...string) *httptest.Server {
		srv := server.New(mcp.Implementation{Name: name, Version: "1"})
		for _, tool := range tools {
			err := srv.AddTool(mcp.Tool{Name: tool, InputSchema: jsontext.Value(`{"type":"object"}`)},
				func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
					return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(name + " ran " + tool)}}, nil
				})
			if err != nil {
				log.Fatal(err)
			}
		}
		return httptest.NewServer(streamhttp.New(srv))
	}
	docs, tickets := upstream("docs", "search"), upstream("tickets", "search", "open")
	defer docs.Close()
	defer tickets.Close()

	ctx := context.Background()
	g, err := gateway.New(ctx, gateway.Config{Upstreams: []gateway.Upstream{
		{ID: "docs", URL: docs.URL},
		{ID: "tickets", URL: tickets.URL},
	}})
	if err != nil {
		log.Fatal(err)
	}
	defer g.Close()
	front := httptest.NewServer(streamhttp.New(g.Server()))
	defer front.Close()
	defer func() { _ = g.Server().Shutdown(ctx) }()

	c := client.NewHTTP(front.URL)
	defer c.Close()
	tools, err := c.Tools(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range tools {
		fmt.Println(t.Name)
	}
	res, err := c.CallTool(ctx, "tickets_search", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(*res.Content[0].Text)
	// Output:
	// docs_search
	// tickets_open
	// tickets_search
	// tickets ran search
}
