package server_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// benchCall parses one 2026-07-28 request that declares the tasks
// extension, with params (without braces) after its _meta.
func benchCall(b *testing.B, method, params string) *engine.Call {
	b.Helper()
	raw := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":1,"method":%q,"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":%q,"io.modelcontextprotocol/clientCapabilities":{"extensions":{%q:{}}}}%s}}`,
		method, mcp.Version, mcp.ExtensionTasks, params)
	msg, err := jsonrpc.Decode(raw, 0)
	if err != nil {
		b.Fatal(err)
	}
	c, rep := engine.Parse(msg)
	if rep != nil {
		b.Fatalf("%s refused: %s", method, rep.Body)
	}
	return c
}

// serveBench serves c once and returns its result, failing on an error.
func serveBench(b *testing.B, srv *server.Server, c *engine.Call) jsontext.Value {
	rep := engine.Of(srv).Serve(context.Background(), c, "", nil, nullStream{})
	defer rep.Release()
	var resp struct {
		Result jsontext.Value `json:"result"`
	}
	if rep.Err != nil || jsonrpc.UnmarshalParams(rep.Body, &resp) != nil || len(resp.Result) == 0 {
		b.Fatalf("%s: %v %s", c.Msg.Method, rep.Err, rep.Body)
	}
	return resp.Result
}

// BenchmarkTasks measures the task methods against a tools/list of one
// tool on the same server, the cheapest request there is, as the
// baseline: tasks/get of a finished task (one store read and the
// DetailedTask), and a whole task's life (the call that creates it, the
// work's goroutine, and tasks/get until it has completed). The store is
// the in-process one, so the figures are the server's own cost.
func BenchmarkTasks(b *testing.B) {
	srv := server.New(testInfo, server.WithCapabilities(server.Tasks))
	if err := srv.AddTool(textTool("base"), echoHandler("base")); err != nil {
		b.Fatal(err)
	}
	err := srv.AddTool(mcp.Tool{Name: "job", InputSchema: jsontext.Value(`{"type":"object"}`)},
		func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			return req.RunAsTask(ctx, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("done")}}, nil
			})
		})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	create := benchCall(b, mcp.MethodToolsCall, `,"name":"job"`)
	taskOf := func() string {
		var h mcp.Task
		if err := jsonrpc.UnmarshalParams(serveBench(b, srv, create), &h); err != nil || h.TaskID == "" {
			b.Fatalf("no task handle: %v", err)
		}
		return h.TaskID
	}
	// waitDone polls tasks/get until the task has completed.
	waitDone := func(get *engine.Call) {
		for {
			var t mcp.Task
			if err := jsonrpc.UnmarshalParams(serveBench(b, srv, get), &t); err != nil {
				b.Fatal(err)
			}
			if t.Status.Terminal() {
				if t.Status != mcp.TaskCompleted {
					b.Fatalf("task ended %s", t.Status)
				}
				return
			}
		}
	}

	b.Run("tools-list", func(b *testing.B) {
		c := benchCall(b, mcp.MethodToolsList, "")
		b.ReportAllocs()
		for b.Loop() {
			serveBench(b, srv, c)
		}
	})
	b.Run("tasks-get", func(b *testing.B) {
		get := benchCall(b, mcp.MethodTasksGet, fmt.Sprintf(`,"taskId":%q`, taskOf()))
		waitDone(get)
		b.ReportAllocs()
		for b.Loop() {
			serveBench(b, srv, get)
		}
	})
	b.Run("task-life", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			waitDone(benchCall(b, mcp.MethodTasksGet, fmt.Sprintf(`,"taskId":%q`, taskOf())))
		}
	})
}
