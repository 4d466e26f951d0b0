package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// A tool that goes on as a task. A client that declares the tasks
// extension gets the task's handle at once, then follows the task over a
// listen until it completes; a client that does not gets the report
// when it is ready, from the same handler.
func ExampleToolRequest_RunAsTask() {
	srv := server.New(mcp.Implementation{Name: "reports", Version: "1.0.0"}, server.WithCapabilities(server.Tasks))
	proceed := make(chan struct{})
	build := func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		select { // the long part of the work
		case <-proceed:
		case <-ctx.Done(): // a cancel, the TTL, or the server's shutdown
			return nil, ctx.Err()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("the report is ready")}}, nil
	}
	_ = srv.AddTool(mcp.Tool{Name: "report"}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return req.RunAsTask(ctx, build)
	})
	ts := httptest.NewServer(streamhttp.New(srv))
	defer ts.Close()
	defer func() { _ = srv.Shutdown(context.Background()) }() // stops the work of unfinished tasks

	post := func(method, name, params string) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"`+method+`","params":{`+
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":`+
			`{"extensions":{"io.modelcontextprotocol/tasks":{}}}},`+params+`}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version)
		req.Header.Set(mcp.HeaderMethod, method)
		if name != "" {
			req.Header.Set(mcp.HeaderName, name)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		return resp
	}
	var task struct {
		Result struct {
			ResultType string `json:"resultType"`
			TaskID     string `json:"taskId"`
			Status     string `json:"status"`
		} `json:"result"`
	}
	resp := post("tools/call", "report", `"name":"report"`)
	_ = json.NewDecoder(resp.Body).Decode(&task)
	resp.Body.Close()
	fmt.Println("tools/call answered:", task.Result.ResultType, task.Result.Status)

	resp = post("subscriptions/listen", "", `"notifications":{"taskIds":["`+task.Result.TaskID+`"]}`)
	defer resp.Body.Close()
	events := bufio.NewScanner(resp.Body)
	next := func() (n struct {
		Method string `json:"method"`
		Params struct {
			Status string `json:"status"`
			Result *struct {
				Content []struct {
					Text string `json:"text"`
				} `json:"content"`
			} `json:"result"`
		} `json:"params"`
	}) {
		for events.Scan() {
			if data, ok := strings.CutPrefix(events.Text(), "data: "); ok {
				_ = json.Unmarshal([]byte(data), &n)
				return n
			}
		}
		return n
	}
	fmt.Println(next().Method)
	fmt.Println("the task is", next().Params.Status)
	close(proceed)
	done := next()
	fmt.Println("the task is", done.Params.Status+":", done.Params.Result.Content[0].Text)
	// Output:
	// tools/call answered: task working
	// notifications/subscriptions/acknowledged
	// the task is working
	// the task is completed: the report is ready
}
