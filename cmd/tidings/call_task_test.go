package main

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// taskServer serves a tool that runs as a task: each message on steps
// becomes its status message, and closing steps completes it. ended
// receives why the work stopped early, if it did.
func taskServer(t *testing.T, steps <-chan string, ended chan<- error) string {
	t.Helper()
	srv := server.New(mcp.Implementation{Name: "tasks", Version: "1"}, server.WithTaskPollInterval(30*time.Second))
	err := srv.AddTool(mcp.Tool{Name: "slow", InputSchema: jsontext.Value(`{"type":"object"}`)}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return req.RunAsTask(ctx, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			for n := 1.0; ; n++ {
				select {
				case msg, ok := <-steps:
					if !ok {
						return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("all done")}}, nil
					}
					_ = req.Progress(n, nil, msg)
				case <-ctx.Done():
					ended <- context.Cause(ctx)
					return nil, ctx.Err()
				}
			}
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(streamhttp.New(srv))
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
		_ = srv.Shutdown(context.Background())
	})
	return ts.URL
}

// runCallCmd runs "tidings call" in the background with stdout and
// stderr that the test reads as they fill.
func runCallCmd(ctx context.Context, args ...string) (stdout, stderr *testkit.SyncBuffer, done <-chan error) {
	cmd := newRootCmd()
	stdout, stderr = &testkit.SyncBuffer{}, &testkit.SyncBuffer{}
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	cmd.SetArgs(append([]string{"call"}, args...))
	ch := make(chan error, 1)
	go func() { ch <- cmd.ExecuteContext(ctx) }()
	return stdout, stderr, ch
}

func waitDone(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(wait):
		t.Fatal("tidings call did not end")
		return nil
	}
}

// TestCallTaskStatus: a call the server runs as a task shows the task id
// and each status change on stderr as they happen (one line each, stderr
// not being a terminal), and the result on stdout.
func TestCallTaskStatus(t *testing.T) {
	steps := make(chan string)
	url := taskServer(t, steps, make(chan error, 1))
	stdout, stderr, done := runCallCmd(t.Context(), url+"/mcp", "call", "slow")
	testkit.WaitFor(t, wait, "the task id", func() bool { return strings.HasPrefix(stderr.String(), "task ") })
	steps <- "reading the files"
	testkit.WaitFor(t, wait, "the first step", func() bool { return strings.Contains(stderr.String(), "working: reading the files\n") })
	steps <- "writing the summary"
	testkit.WaitFor(t, wait, "the second step", func() bool { return strings.Contains(stderr.String(), "working: writing the summary\n") })
	if stdout.String() != "" {
		t.Errorf("stdout before the end: %q", stdout.String())
	}
	close(steps)
	if err := waitDone(t, done); err != nil {
		t.Fatalf("tidings call: %v (stderr %q)", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "task ") || lines[1] != "working" ||
		lines[2] != "working: reading the files" || lines[3] != "working: writing the summary" || lines[4] != "completed" {
		t.Errorf("stderr = %q", lines)
	}
	if !strings.Contains(stdout.String(), `"text": "all done"`) {
		t.Errorf("stdout = %q, want the result", stdout.String())
	}
}

// TestCallTaskInterrupted: ending the call (Ctrl-C cancels its context)
// cancels the task on the server.
func TestCallTaskInterrupted(t *testing.T) {
	steps := make(chan string)
	ended := make(chan error, 1)
	url := taskServer(t, steps, ended)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, stderr, done := runCallCmd(ctx, url+"/mcp", "call", "slow")
	steps <- "working hard"
	testkit.WaitFor(t, wait, "the step", func() bool { return strings.Contains(stderr.String(), "working hard") })
	cancel()
	if err := waitDone(t, done); !errors.Is(err, context.Canceled) {
		t.Errorf("tidings call = %v, want it cancelled", err)
	}
	select {
	case <-ended:
	case <-time.After(wait):
		t.Fatal("the task went on after the call was interrupted")
	}
}
