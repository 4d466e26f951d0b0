package server_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"time"

	"tidings/bus"
	"tidings/client"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// Two replicas of one server share a bus and a state (here in-process;
// in a deployment, brokers.Open and brokers.OpenState on one broker URL,
// from package tidings/bus/brokers). A tool
// disabled through replica A is gone from replica B's list too, and a
// client watching B is told, and reads a list that already shows it.
func ExampleWithSharedState() {
	group, state := bus.NewLocal(), bus.NewLocalState()
	secret := []byte("an example key of 32 bytes or more") // the same on every replica
	replica := func() (*server.Server, *httptest.Server) {
		srv := server.New(mcp.Implementation{Name: "tools", Version: "1.0.0"},
			server.WithBus(bus.New(group.Conn())), server.WithSharedState(state), server.WithSecret(secret))
		noop := func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		}
		_ = srv.AddTool(mcp.Tool{Name: "deploy"}, noop)
		_ = srv.AddTool(mcp.Tool{Name: "status"}, noop)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.SyncState(ctx) // serve the shared state from the first request
		return srv, httptest.NewServer(streamhttp.New(srv))
	}
	a, tsA := replica()
	b, tsB := replica()
	defer func() {
		for _, r := range []struct {
			srv *server.Server
			ts  *httptest.Server
		}{{a, tsA}, {b, tsB}} {
			_ = r.srv.Shutdown(context.Background()) // closes the bus and the state
			r.ts.Close()
		}
	}()

	c := client.NewHTTP(tsB.URL)
	defer c.Close()
	events := make(chan client.Event, 8)
	w := c.Watch(context.Background(), client.WatchOptions{Tools: true, OnEvent: func(e client.Event) {
		if e.Kind == client.ToolsChanged {
			events <- e
		}
	}})
	defer w.Close()
	fmt.Println("B lists", (<-events).Added)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := a.Disable(ctx, server.Tool("deploy")); err != nil {
		fmt.Println("not in the shared state yet:", err)
	}
	fmt.Println("B's watcher: removed", (<-events).Removed)
	// Output:
	// B lists [deploy status]
	// B's watcher: removed [deploy]
}
