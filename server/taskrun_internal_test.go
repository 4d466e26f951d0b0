package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"tidings/jsonrpc"
	"tidings/mcp"
)

// settledAs applies set to a working record and returns it.
func settledAs(set func(*taskRecord)) *taskRecord {
	now := time.Now()
	rec := &taskRecord{V: taskRecordVersion, Owner: strings.Repeat("0", 64), Status: mcp.TaskWorking,
		Created: now, Updated: now, TTLMs: 1, PollMs: 1}
	if set != nil {
		set(rec)
	}
	return rec
}

// TestTaskRunnerErrors: only what the work returns becomes a tool's
// result; an error of the runner's own (the store's, say) fails the task
// with a plain -32603 that says nothing of the infrastructure, and a
// cancelled or vanished task records nothing.
func TestTaskRunnerErrors(t *testing.T) {
	tr := &taskRun{s: &Server{log: slog.New(slog.DiscardHandler)}, first: &ToolRequest{Request: Request{Name: "job"}}, ctx: context.Background()}
	storeErr := fmt.Errorf("server: write task: %w", errors.New("dial tcp 10.1.2.3:6379: connection refused"))

	rec := settledAs(tr.failure(storeErr))
	if rec.Status != mcp.TaskFailed || string(rec.Error) != `{"code":-32603,"message":"Internal error"}` {
		t.Errorf("a store error settled the task %s with %s, want failed with a plain -32603", rec.Status, rec.Error)
	}
	rec = settledAs(tr.failure(jsonrpc.NewError(-32021, "Missing capability", nil)))
	if rec.Status != mcp.TaskFailed || !strings.Contains(string(rec.Error), "-32021") {
		t.Errorf("a JSON-RPC error of the runner settled the task %s with %s", rec.Status, rec.Error)
	}
	for _, err := range []error{errTaskCancelled, errTaskNotFound, errTaskGone, errTaskExpired} {
		if set := tr.failure(err); set != nil {
			t.Errorf("%v: settles the task as %v, want nothing recorded", err, settledAs(set))
		}
	}
	rec = settledAs(tr.outcome(nil, storeErr))
	if rec.Status != mcp.TaskCompleted || !strings.Contains(string(rec.Result), `"isError":true`) {
		t.Errorf("the work's own error settled the task %s with %s, want an isError result", rec.Status, rec.Result)
	}
}

// TestTaskNotFoundIsOneError: the server's own not-found and an origin's
// are one error, so errors.Is finds either.
func TestTaskNotFoundIsOneError(t *testing.T) {
	if !errors.Is(fmt.Errorf("load: %w", errTaskNotFound), ErrTaskNotFound) || !errors.Is(fmt.Errorf("get: %w", ErrTaskNotFound), errTaskNotFound) {
		t.Fatal("errTaskNotFound and ErrTaskNotFound are two errors")
	}
}
