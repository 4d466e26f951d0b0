package client_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"tidings/client"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// ExampleWithTaskStatus calls a tool the server runs as a task. CallTool
// follows the task and returns its result like any other; WithTaskStatus
// shows the task on its way, here its id being known.
func ExampleWithTaskStatus() {
	srv := server.New(mcp.Implementation{Name: "reports", Version: "1.0.0"})
	_ = srv.AddTool(mcp.Tool{Name: "report"}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return req.RunAsTask(ctx, func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			_ = req.Progress(1, nil, "counting pages")
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("42 pages")}}, nil
		})
	}, server.RequireTasks())
	ts := httptest.NewServer(streamhttp.New(srv))
	defer ts.Close()
	defer srv.Shutdown(context.Background())

	c := client.NewHTTP(ts.URL)
	defer c.Close()
	var taskID string
	res, err := c.CallTool(context.Background(), "report", nil, client.WithTaskStatus(func(t mcp.Task) {
		if taskID == "" {
			taskID = t.TaskID
			fmt.Println("running as a task:", t.Status)
		}
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(*res.Content[0].Text, taskID != "")
	// Output:
	// running as a task: working
	// 42 pages true
}
