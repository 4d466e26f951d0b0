package streamhttp_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"

	"tidings/client"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// A program's whole server: the Handler mounted where the program wants
// it, served with what tidings serve has — parked listens, tidings'
// HTTP/2, connection caps and timeouts — until ctx ends, when every
// listen ends with its complete result and ListenAndServe returns nil.
// A program calls streamhttp.ListenAndServe(ctx, "127.0.0.1:8080", mux)
// with a ctx that ends on a signal; so that this example runs, it serves
// a listener on a free port with Serve, makes one call and cancels.
func ExampleListenAndServe() {
	srv := server.New(mcp.Implementation{Name: "example", Version: "1.0.0"})
	err := srv.AddTool(mcp.Tool{Name: "hello"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("hello")}}, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", streamhttp.New(srv))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- streamhttp.Serve(ctx, ln, mux) }()

	c := client.NewHTTP("http://" + ln.Addr().String() + "/mcp")
	res, err := c.CallTool(context.Background(), "hello", nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(*res.Content[0].Text)
	c.Close()

	cancel()
	fmt.Println("served:", <-served)
	// Output:
	// hello
	// served: <nil>
}
