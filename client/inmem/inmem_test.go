package inmem_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"tidings/client"
	"tidings/client/inmem"
	"tidings/mcp"
	"tidings/server"
)

// TestMain fails the package when a test leaves a goroutine behind: Close
// must stop the server end too.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(s)}}
}

func newServer(t testing.TB) *server.Server {
	t.Helper()
	srv := server.New(mcp.Implementation{Name: "mem", Version: "1.0.0"})
	echo := func(_ context.Context, r *server.ToolRequest) (*mcp.CallToolResult, error) { return text(r.Name), nil }
	if err := srv.AddTool(mcp.Tool{Name: "echo"}, echo); err != nil {
		t.Fatal(err)
	}
	return srv
}

// TestCallsAndWatch: calls, lists and a listen all run over the pipes, and
// a change made on the server reaches the watcher.
func TestCallsAndWatch(t *testing.T) {
	srv := newServer(t)
	c := client.New(inmem.New(srv), client.WithTimeout(10*time.Second))
	defer func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	ctx := context.Background()
	if era, err := c.Era(ctx); err != nil || era != client.EraModern {
		t.Fatalf("Era = %q, %v", era, err)
	}
	res, err := c.CallTool(ctx, "echo", nil)
	if err != nil || *res.Content[0].Text != "echo" {
		t.Fatalf("CallTool = %+v, %v", res, err)
	}
	events := make(chan client.Event, 16)
	w := c.Watch(ctx, client.WatchOptions{Tools: true, OnEvent: func(e client.Event) { events <- e }})
	defer w.Close()
	next := func(want client.EventKind) client.Event {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case e := <-events:
				if e.Kind == want {
					return e
				}
			case <-deadline:
				t.Fatalf("no %s event", want)
			}
		}
	}
	next(client.Connected)
	next(client.ToolsChanged)
	if err := srv.AddTool(mcp.Tool{Name: "later"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return text("later"), nil
	}); err != nil {
		t.Fatal(err)
	}
	if e := next(client.ToolsChanged); !slices.Equal(e.Added, []string{"later"}) {
		t.Errorf("ToolsChanged = %+v, want Added [later]", e)
	}
}

// TestCloseEndsRequests: Close ends a request whose handler is still
// running, and the server end with it.
func TestCloseEndsRequests(t *testing.T) {
	srv := newServer(t)
	started := make(chan struct{})
	if err := srv.AddTool(mcp.Tool{Name: "block"}, func(ctx context.Context, _ *server.ToolRequest) (*mcp.CallToolResult, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
	c := client.New(inmem.New(srv))
	errc := make(chan error, 1)
	go func() {
		_, err := c.CallTool(context.Background(), "block", nil)
		errc <- err
	}()
	<-started
	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-errc; !errors.Is(err, client.ErrClosed) {
		t.Errorf("request in flight at Close: err = %v, want ErrClosed", err)
	}
}

// Example connects a client to a server in the same process.
func Example() {
	srv := server.New(mcp.Implementation{Name: "demo", Version: "1.0.0"})
	_ = srv.AddTool(mcp.Tool{Name: "greet"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("hello")}}, nil
	})
	c := client.New(inmem.New(srv))
	defer c.Close()

	res, err := c.CallTool(context.Background(), "greet", nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(*res.Content[0].Text)
	// Output: hello
}
