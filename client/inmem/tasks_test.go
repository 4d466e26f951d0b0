package inmem_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/client"
	"tidings/client/inmem"
	"tidings/mcp"
	"tidings/server"
)

// TestTaskOverStdio: a call the server runs as a task is followed over
// stdio framing too, its listen sharing the one connection with the
// other requests: a status change and the result arrive as
// notifications, and the call returns the task's result.
func TestTaskOverStdio(t *testing.T) {
	srv := server.New(mcp.Implementation{Name: "mem", Version: "1.0.0"}, server.WithTaskPollInterval(30*time.Second))
	steps := make(chan string)
	err := srv.AddTool(mcp.Tool{Name: "slow", InputSchema: jsontext.Value(`{"type":"object"}`)}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return req.RunAsTask(ctx, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			for {
				select {
				case msg, ok := <-steps:
					if !ok {
						return text("finished"), nil
					}
					_ = req.Progress(1, nil, msg)
				case <-ctx.Done():
					// Shutdown ends a task that a failed test left running.
					return nil, ctx.Err()
				}
			}
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	// After the client's Close (deferred below, so it runs first): the
	// server's task store and whatever task still runs are ended too, and
	// the package's goleak check sees what they would leave behind.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
	})
	c := client.New(inmem.New(srv), client.WithTimeout(10*time.Second))
	defer c.Close()
	seen := make(chan mcp.Task, 16)
	done := make(chan error, 1)
	go func() {
		res, err := c.CallTool(context.Background(), "slow", nil, client.WithTaskStatus(func(st mcp.Task) { seen <- st }))
		if err == nil && *res.Content[0].Text != "finished" {
			t.Errorf("result = %+v", res)
		}
		done <- err
	}()
	next := func() mcp.Task {
		t.Helper()
		select {
		case st := <-seen:
			return st
		case <-time.After(10 * time.Second):
			t.Fatal("timed out waiting for a task state")
			return mcp.Task{}
		}
	}
	if st := next(); st.Status != mcp.TaskWorking {
		t.Fatalf("first state = %+v", st)
	}
	steps <- "halfway"
	if st := next(); st.StatusMessage != "halfway" {
		t.Fatalf("second state = %+v", st)
	}
	close(steps)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("CallTool did not return")
	}
}
