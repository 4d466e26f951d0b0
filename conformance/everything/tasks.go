package main

import (
	"context"
	"fmt"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// The tools in this file are the fixtures of the tasks extension
// scenarios: each goes asynchronous with RunAsTask where the suite
// expects a task, and runs synchronously for a request that did not
// declare the extension (unless it is registered with RequireTasks).

// addTaskTools registers the tasks fixtures.
func addTaskTools(srv *server.Server) error {
	tools := []struct {
		name, desc, schema string
		h                  server.ToolHandler
		opts               []server.ItemOption
	}{
		{"greet", "Greets someone, synchronously.",
			`{"type":"object","properties":{"name":{"type":"string"}}}`, greet, nil},
		{"slow_compute", "Sleeps for the given number of seconds, as a task, then answers.",
			`{"type":"object","properties":{"seconds":{"type":"number","minimum":0},"label":{"type":"string"}}}`, slowCompute, nil},
		{"failing_job", "Fails with a tool error after about a second; runs only as a task.", "", failingJob,
			[]server.ItemOption{server.RequireTasks()}},
		{"protocol_error_job", "A task that fails with a JSON-RPC error.", "", protocolErrorJob, nil},
		{"confirm_delete", "Asks the user to confirm a deletion, as a task.",
			`{"type":"object","properties":{"filename":{"type":"string"}}}`, confirmDelete, nil},
		{"multi_input", "A task that asks two questions at once.", "", multiInput, nil},
		{"test_tool_with_task", "Asks for the user's name, then greets them from a task; runs only as a task.", "",
			toolWithTask, []server.ItemOption{server.RequireTasks()}},
	}
	for _, t := range tools {
		if t.schema == "" {
			t.schema = `{"type":"object"}`
		}
		if err := srv.AddTool(mcp.Tool{Name: t.name, Description: t.desc, InputSchema: jsontext.Value(t.schema)}, t.h, t.opts...); err != nil {
			return err
		}
	}
	return nil
}

func greet(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	var args struct {
		Name string `json:"name"`
	}
	_ = json.Unmarshal(req.Arguments, &args)
	if args.Name == "" {
		args.Name = "World"
	}
	return text("Hello, " + args.Name + "!"), nil
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// slowCompute sleeps as a task. A cancelled task's work stops at once;
// the task is already cancelled, whatever the work returns.
func slowCompute(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	var args struct {
		Seconds float64 `json:"seconds"`
		Label   string  `json:"label"`
	}
	_ = json.Unmarshal(req.Arguments, &args)
	return req.RunAsTask(ctx, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		_ = req.Progress(0, nil, "computing "+args.Label)
		if err := sleep(ctx, time.Duration(args.Seconds*float64(time.Second))); err != nil {
			return nil, err
		}
		return text(fmt.Sprintf("Computed %q in %gs", args.Label, args.Seconds)), nil
	})
}

func failingJob(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	return req.RunAsTask(ctx, func(ctx context.Context, _ *server.ToolRequest) (*mcp.CallToolResult, error) {
		if err := sleep(ctx, time.Second); err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{mcp.TextContent("The job failed, as it always does.")}}, nil
	})
}

func protocolErrorJob(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	return req.RunAsTask(ctx, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "The job broke down", map[string]any{"job": "protocol_error_job"})
	})
}

// confirmDelete asks once; run synchronously (without the extension) the
// same question is an input_required result instead.
func confirmDelete(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	var args struct {
		Filename string `json:"filename"`
	}
	_ = json.Unmarshal(req.Arguments, &args)
	return req.RunAsTask(ctx, func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		content, ok, err := elicited(&req.Request, "confirm")
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{
				"confirm": elicitRequest("Delete "+args.Filename+"?", `{"confirm":{"type":"boolean"}}`, "confirm"),
			}}
		}
		if content == nil || field(content, "confirm") != "true" {
			return text("Kept " + args.Filename), nil
		}
		return text("Deleted " + args.Filename), nil
	})
}

// multiInput asks two questions at once, so that the client can answer
// them one at a time.
func multiInput(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	return req.RunAsTask(ctx, func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		name, okName, err := elicited(&req.Request, "name")
		if err != nil {
			return nil, err
		}
		confirm, okConfirm, err := elicited(&req.Request, "confirm")
		if err != nil {
			return nil, err
		}
		if !okName || !okConfirm {
			return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{
				"name":    elicitRequest("What is your name?", nameProps, "name"),
				"confirm": elicitRequest("Shall we go on?", `{"confirm":{"type":"boolean"}}`, "confirm"),
			}}
		}
		return text(fmt.Sprintf("Thanks, %s (confirmed: %s)", field(name, "name"), field(confirm, "confirm"))), nil
	})
}

// toolWithTask gathers the user's name in a synchronous round, then goes
// on as a task whose result greets them.
func toolWithTask(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	content, ok, err := elicited(&req.Request, "user_name")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{
			"user_name": elicitRequest("What is your name?", nameProps, "name"),
		}}
	}
	name := field(content, "name")
	return req.RunAsTask(ctx, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return text("Hello, " + name + ", from a task!"), nil
	})
}
