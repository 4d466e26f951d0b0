package client_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"tidings/client"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// greet answers with a fixed text.
func greet(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("hello")}}, nil
}

func names(tools []mcp.Tool) []string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = t.Name
	}
	return out
}

// ExampleNewHTTP talks to a Streamable HTTP server on loopback: the first
// call finds out which protocol it speaks, and the tool list is then
// served from the cache for as long as the server says it stays fresh.
// NewHTTP takes the options every constructor takes (Option) and those
// only HTTP has (HTTPOption), such as headers; WithStderr, a
// CommandOption, would not compile here.
func ExampleNewHTTP() {
	srv := server.New(mcp.Implementation{Name: "demo", Version: "1.0.0"})
	_ = srv.AddTool(mcp.Tool{Name: "greet"}, greet)
	_ = srv.AddTool(mcp.Tool{Name: "add"}, greet)
	ts := httptest.NewServer(streamhttp.New(srv))
	defer ts.Close()

	c := client.NewHTTP(ts.URL,
		client.WithClientInfo(mcp.Implementation{Name: "example", Version: "1.0.0"}), // an Option
		client.WithTimeout(10*time.Second),                                           // an Option
		client.WithHeader("X-Team", "docs"),                                          // an HTTPOption
	)
	defer c.Close()
	ctx := context.Background()
	tools, err := c.Tools(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(names(tools))
	res, err := c.CallTool(ctx, "greet", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(*res.Content[0].Text)
	// Output:
	// [add greet]
	// hello
}

// ExampleClient_Watch follows a server's tool list: the watcher reports
// the list once it is connected, then every real change.
func ExampleClient_Watch() {
	srv := server.New(mcp.Implementation{Name: "demo", Version: "1.0.0"})
	_ = srv.AddTool(mcp.Tool{Name: "greet"}, greet)
	ts := httptest.NewServer(streamhttp.New(srv))
	defer ts.Close()
	c := client.NewHTTP(ts.URL)
	defer c.Close()

	events := make(chan client.Event, 16)
	w := c.Watch(context.Background(), client.WatchOptions{Tools: true, OnEvent: func(e client.Event) { events <- e }})
	defer w.Close()
	next := func(kind client.EventKind) (client.Event, bool) {
		timeout := time.After(10 * time.Second)
		for {
			select {
			case e := <-events:
				if e.Kind == kind {
					return e, true
				}
			case <-timeout:
				fmt.Println("no", kind, "event")
				return client.Event{}, false
			}
		}
	}
	if _, ok := next(client.Connected); !ok {
		return
	}
	fmt.Println("connected")
	e, ok := next(client.ToolsChanged)
	if !ok {
		return
	}
	fmt.Println("tools:", e.Added)
	_ = srv.AddTool(mcp.Tool{Name: "farewell"}, greet)
	if e, ok = next(client.ToolsChanged); ok {
		fmt.Println("added:", e.Added)
	}
	// Output:
	// connected
	// tools: [greet]
	// added: [farewell]
}

// ExampleClient_As serves two authorization contexts over one client, as
// a gateway does: each view sends its own Authorization header, and the
// server's answers, private to each caller here, are never shared.
func ExampleClient_As() {
	srv := server.New(mcp.Implementation{Name: "demo", Version: "1.0.0"},
		server.WithVisibility(func(principal string, _ server.List, key string) bool {
			return key != "admin" || principal == "Bearer alice"
		}))
	_ = srv.AddTool(mcp.Tool{Name: "greet"}, greet)
	_ = srv.AddTool(mcp.Tool{Name: "admin"}, greet)
	h := streamhttp.New(srv, streamhttp.WithPrincipal(func(r *http.Request) string { return r.Header.Get("Authorization") }))
	ts := httptest.NewServer(h)
	defer ts.Close()

	c := client.NewHTTP(ts.URL, client.WithAuthorization("Bearer bob"))
	defer c.Close()
	alice := c.As("Bearer alice")
	ctx := context.Background()
	for _, v := range []struct {
		who string
		c   *client.Client
	}{{"bob", c}, {"alice", alice}} {
		tools, err := v.c.Tools(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(v.who, names(tools))
	}
	// Output:
	// bob [greet]
	// alice [admin greet]
}

// ExampleNewCommand runs a stdio server as a subprocess and calls its
// tool. NewCommand takes the options every constructor takes (Option) and
// those only a spawned process has (CommandOption), such as its
// environment and where its stderr goes; WithHeader, an HTTPOption, would
// not compile here. The server is this example's own binary, started
// again as a server (see exampleServerEnv); a program names its server's
// command instead, such as "tidings" with the arguments "serve", "--stdio".
func ExampleNewCommand() {
	ctx := context.Background()
	c, err := client.NewCommand(ctx, os.Args[0], []string{"-test.run=^$"},
		client.WithTimeout(10*time.Second),          // an Option
		client.WithEnv(exampleServerEnv+"=greeter"), // a CommandOption
		client.WithStderr(os.Stderr),                // a CommandOption
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	res, err := c.CallTool(ctx, "greet", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(*res.Content[0].Text)
	// Output:
	// hello
}
