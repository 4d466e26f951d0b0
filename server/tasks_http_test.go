package server_test

import (
	"encoding/json"
	"testing"

	"tidings/internal/testrig/schematest"
	"tidings/mcp"
)

// TestTaskOverHTTP: over Streamable HTTP a task is created, polled and
// cancelled with Mcp-Name carrying its id, as a balancer routes on it; an
// Mcp-Name other than params.taskId, or none, is a header mismatch
// (-32020), on each of the three methods.
func TestTaskOverHTTP(t *testing.T) {
	h := taskServer(t)
	b := newBlocker()
	addTaskTool(t, h.srv, "job", b.work)
	w := serveHTTP(t, h.srv)
	w.caps = `{"extensions":{"` + mcp.ExtensionTasks + `":{}}}`

	r := w.rpc(mcp.MethodToolsCall, "job", map[string]any{"arguments": map[string]any{}})
	if err := schematest.CheckResponse(mcp.MethodToolsCall, r.raw); err != nil {
		t.Fatalf("the task handle: %v\n%s", err, r.raw)
	}
	var handle struct {
		ResultType string `json:"resultType"`
		TaskID     string `json:"taskId"`
	}
	if err := json.Unmarshal(r.Result, &handle); err != nil || handle.ResultType != mcp.ResultTask || handle.TaskID == "" {
		t.Fatalf("tools/call = %s (%v)", r.raw, err)
	}
	id := handle.TaskID
	b.waitStart(t)

	r = w.rpc(mcp.MethodTasksGet, id, map[string]any{"taskId": id})
	if r.Error != nil {
		t.Fatalf("tasks/get: %s", r.raw)
	}
	if err := schematest.CheckResponse(mcp.MethodTasksGet, r.raw); err != nil {
		t.Errorf("tasks/get: %v\n%s", err, r.raw)
	}
	for _, m := range []string{mcp.MethodTasksGet, mcp.MethodTasksUpdate, mcp.MethodTasksCancel} {
		params := map[string]any{"taskId": id, "inputResponses": map[string]any{}}
		for _, name := range []string{"another-task", ""} {
			r := w.rpc(m, name, params)
			if r.Error == nil || r.Error.Code != mcp.CodeHeaderMismatch {
				t.Errorf("%s with Mcp-Name %q for task %s: %s, want -32020", m, name, id, r.raw)
			}
		}
	}
	if len(b.ended) != 0 {
		t.Fatal("a refused request reached the task")
	}

	r = w.rpc(mcp.MethodTasksCancel, id, map[string]any{"taskId": id})
	if r.Error != nil {
		t.Fatalf("tasks/cancel: %s", r.raw)
	}
	if err := schematest.CheckResponse(mcp.MethodTasksCancel, r.raw); err != nil {
		t.Errorf("tasks/cancel: %v\n%s", err, r.raw)
	}
	if err := b.waitEnd(t); err == nil {
		t.Error("the work was released, not stopped by the cancel")
	}
}
