package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/bus"
	"tidings/internal/testrig/testkit"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// taskCaps declare the tasks extension, and form elicitation for the
// questions tasks ask.
var taskCaps = P{"extensions": P{mcp.ExtensionTasks: P{}}, "elicitation": P{}}

// tasked returns params whose _meta declares taskCaps.
func tasked(params P) P {
	out := P{"_meta": P{mcp.MetaClientCapabilities: taskCaps}}
	for k, v := range params {
		out[k] = v
	}
	return out
}

// taskServer returns a harness whose server offers tasks and is shut
// down when the test ends, which stops whatever work is still running.
func taskServer(t testing.TB, opts ...server.Option) *harness {
	t.Helper()
	h := newHarness(t, append([]server.Option{server.WithCapabilities(server.Tasks)}, opts...)...)
	t.Cleanup(func() { shutdown(t, h.srv) })
	return h
}

func shutdown(t testing.TB, srv *server.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// as returns a harness on the same server for another principal.
func (h *harness) as(principal string) *harness {
	return &harness{t: h.t, srv: h.srv, principal: principal}
}

// addTaskTool registers a tool whose handler hands work to a task.
func addTaskTool(t testing.TB, srv *server.Server, name string, work server.ToolHandler, opts ...server.ItemOption) {
	t.Helper()
	h := func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return req.RunAsTask(ctx, work)
	}
	if err := srv.AddTool(textTool(name), h, opts...); err != nil {
		t.Fatal(err)
	}
}

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(s)}}
}

// createKeys are the members a CreateTaskResult may have.
var createKeys = []string{"_meta", "createdAt", "lastUpdatedAt", "pollIntervalMs", "resultType", "status", "taskId", "ttlMs"}

// create calls tool name as a task and returns the task's id, having
// checked that the answer is a task handle and nothing more.
func (h *harness) create(t testing.TB, name string, args P) string {
	t.Helper()
	r, _ := h.call("create", mcp.MethodToolsCall, tasked(P{"name": name, "arguments": args}))
	if r.Error != nil {
		t.Fatalf("tools/call %s: error %d %s", name, r.Error.Code, r.Error.Message)
	}
	res := r.Result
	if res["resultType"] != mcp.ResultTask {
		t.Fatalf("tools/call %s: resultType %v, want a task: %s", name, res["resultType"], r.raw)
	}
	for k := range res {
		if !slices.Contains(createKeys, k) {
			t.Errorf("CreateTaskResult carries %q: %s", k, r.raw)
		}
	}
	for _, k := range createKeys {
		if _, ok := res[k]; !ok {
			t.Errorf("CreateTaskResult lacks %q: %s", k, r.raw)
		}
	}
	if res["status"] != string(mcp.TaskWorking) {
		t.Errorf("a new task is %v, want working", res["status"])
	}
	id, _ := res["taskId"].(string)
	if id == "" {
		t.Fatalf("no taskId: %s", r.raw)
	}
	return id
}

// task returns what tasks/get reports of id.
func (h *harness) task(t testing.TB, id string) map[string]any {
	t.Helper()
	r, _ := h.call("get", mcp.MethodTasksGet, tasked(P{"taskId": id}))
	return r.ok(t)
}

// waitTask polls tasks/get of id until cond holds of it.
func (h *harness) waitTask(t testing.TB, id, what string, cond func(map[string]any) bool) map[string]any {
	t.Helper()
	var last map[string]any
	testkit.WaitFor(t, waitLimit, what, func() bool {
		last = h.task(t, id)
		return cond(last)
	})
	return last
}

func isStatus(s mcp.TaskStatus) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["status"] == string(s) }
}

// resultText returns the first text of a task's inlined result.
func resultText(t testing.TB, task map[string]any) string {
	t.Helper()
	res, _ := task["result"].(map[string]any)
	content, _ := res["content"].([]any)
	if len(content) == 0 {
		t.Fatalf("task result without content: %v", task)
	}
	text, _ := content[0].(map[string]any)["text"].(string)
	return text
}

// blocker is work that waits for release or for its context, telling
// when it starts and how its context ended.
type blocker struct {
	started chan *server.ToolRequest
	release chan struct{}
	ended   chan error
}

func newBlocker() *blocker {
	return &blocker{started: make(chan *server.ToolRequest, 8), release: make(chan struct{}), ended: make(chan error, 8)}
}

func (b *blocker) work(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	b.started <- req
	select {
	case <-b.release:
		b.ended <- nil
		return textResult("released"), nil
	case <-ctx.Done():
		b.ended <- context.Cause(ctx)
		return nil, context.Cause(ctx)
	}
}

func (b *blocker) waitStart(t testing.TB) *server.ToolRequest {
	t.Helper()
	select {
	case r := <-b.started:
		return r
	case <-time.After(waitLimit):
		t.Fatal("the work did not start")
		return nil
	}
}

func (b *blocker) waitEnd(t testing.TB) error {
	t.Helper()
	select {
	case err := <-b.ended:
		return err
	case <-time.After(waitLimit):
		t.Fatal("the work did not end")
		return nil
	}
}

// recv receives from ch, or fails the test after waitLimit.
func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}

// TestTaskCreateResult: a call that declares the extension is answered
// with a flat CreateTaskResult — status working, RFC 3339 timestamps,
// integer ttlMs and pollIntervalMs, nothing else — and the task is
// stored before that answer, so that a tasks/get right after finds it.
// A call without the extension runs the same work synchronously.
func TestTaskCreateResult(t *testing.T) {
	h := taskServer(t, server.WithTaskTTL(90*time.Second), server.WithTaskPollInterval(250*time.Millisecond))
	b := newBlocker()
	addTaskTool(t, h.srv, "job", b.work)

	id := h.create(t, "job", nil)
	got := h.task(t, id) // no wait: the create was durable
	if got["taskId"] != id || got["status"] != string(mcp.TaskWorking) {
		t.Fatalf("tasks/get right after the create = %v", got)
	}
	for _, k := range []string{"createdAt", "lastUpdatedAt"} {
		if _, err := time.Parse(time.RFC3339Nano, fmt.Sprint(got[k])); err != nil {
			t.Errorf("%s = %v: %v", k, got[k], err)
		}
	}
	if fmt.Sprint(got["ttlMs"]) != "90000" || fmt.Sprint(got["pollIntervalMs"]) != "250" {
		t.Errorf("ttlMs %v, pollIntervalMs %v; want 90000 and 250", got["ttlMs"], got["pollIntervalMs"])
	}
	for _, k := range []string{"result", "error", "inputRequests", "requestState"} {
		if _, ok := got[k]; ok {
			t.Errorf("a working task carries %q: %v", k, got)
		}
	}
	req := b.waitStart(t)
	if req.TaskID() != id || req.Name != "job" || req.Principal != "" {
		t.Errorf("the work's request: task %q name %q principal %q", req.TaskID(), req.Name, req.Principal)
	}
	close(b.release)
	done := h.waitTask(t, id, "the task to complete", isStatus(mcp.TaskCompleted))
	if text := resultText(t, done); text != "released" {
		t.Errorf("result text %q", text)
	}

	// Without the extension the work is the call's.
	r, _ := h.call(2, mcp.MethodToolsCall, P{"name": "job"})
	if res := r.ok(t); res["taskId"] != nil || fmt.Sprint(res["content"]) != "[map[text:released type:text]]" {
		t.Errorf("synchronous call = %s", r.raw)
	}
	if req := b.waitStart(t); req.TaskID() != "" {
		t.Errorf("TaskID outside a task = %q", req.TaskID())
	}
}

// TestTaskAdvertising: the extension is advertised under
// capabilities.extensions (never capabilities.tasks) exactly when a task
// option, WithCapabilities(Tasks) or a RequireTasks tool says so; a
// server that does not offer tasks runs RunAsTask's work synchronously
// and knows no tasks methods.
func TestTaskAdvertising(t *testing.T) {
	advertised := func(h *harness) bool {
		r, _ := h.call(1, mcp.MethodDiscover, nil)
		caps := r.ok(t)["capabilities"].(map[string]any)
		if _, ok := caps["tasks"]; ok {
			t.Errorf("capabilities.tasks advertised: %s", r.raw)
		}
		ext, _ := caps["extensions"].(map[string]any)
		v, ok := ext[mcp.ExtensionTasks]
		if ok && fmt.Sprint(v) != "map[]" {
			t.Errorf("the tasks extension is advertised as %v, want {}", v)
		}
		return ok
	}
	plain := newHarness(t)
	addTaskTool(t, plain.srv, "job", func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return textResult("at once"), nil
	})
	if advertised(plain) {
		t.Error("a server with no task option advertises tasks")
	}
	r, _ := plain.call(2, mcp.MethodToolsCall, tasked(P{"name": "job"}))
	if res := r.ok(t); res["taskId"] != nil {
		t.Errorf("a server that does not offer tasks made one: %s", r.raw)
	}
	r, _ = plain.call(3, mcp.MethodTasksGet, tasked(P{"taskId": "x"}))
	r.fails(t, jsonrpc.CodeMethodNotFound)

	for name, opt := range map[string]server.Option{
		"WithCapabilities":     server.WithCapabilities(server.Tasks),
		"WithTaskTTL":          server.WithTaskTTL(time.Minute),
		"WithTaskPollInterval": server.WithTaskPollInterval(time.Second),
	} {
		if h := newHarness(t, opt); !advertised(h) {
			t.Errorf("%s: tasks not advertised", name)
		}
	}
	required := newHarness(t)
	mustAddTool(t, required.srv, textTool("plain"), echoHandler("p"))
	if advertised(required) {
		t.Fatal("tasks advertised before any tool requires them")
	}
	addTaskTool(t, required.srv, "job", func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return textResult("done"), nil
	}, server.RequireTasks())
	if !advertised(required) {
		t.Error("a RequireTasks tool does not make the server advertise tasks")
	}
	shutdown(t, required.srv)
}

// TestTaskMethodsGating: tasks/get, tasks/update and tasks/cancel need
// the extension in the request's own capabilities (-32021 naming it),
// then a taskId; an unknown task is -32602 on all three; tasks/result
// and tasks/list, gone from the extension, are unknown methods.
func TestTaskMethodsGating(t *testing.T) {
	h := taskServer(t)
	for _, m := range []string{mcp.MethodTasksGet, mcp.MethodTasksUpdate, mcp.MethodTasksCancel} {
		r, _ := h.call(1, m, P{"taskId": "x", "inputResponses": P{}})
		r.fails(t, mcp.CodeMissingRequiredCapability)
		want := map[string]any{"requiredCapabilities": map[string]any{"extensions": map[string]any{mcp.ExtensionTasks: map[string]any{}}}}
		if got := r.data(t); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: -32021 data %v, want %v", m, got, want)
		}
		r, _ = h.call(2, m, tasked(P{"taskId": "tasks-nonexistent", "inputResponses": P{}}))
		r.fails(t, jsonrpc.CodeInvalidParams)
		if r.Error.Message != "Failed to retrieve task: Task not found" {
			t.Errorf("%s unknown task: message %q", m, r.Error.Message)
		}
		r, _ = h.call(3, m, tasked(P{"inputResponses": P{}}))
		r.fails(t, jsonrpc.CodeInvalidParams)
		r, _ = h.call(4, m, tasked(P{"taskId": 7, "inputResponses": P{}}))
		r.fails(t, jsonrpc.CodeInvalidParams)
	}
	r, _ := h.call(5, mcp.MethodTasksUpdate, tasked(P{"taskId": "x"}))
	r.fails(t, jsonrpc.CodeInvalidParams)
	for _, m := range []string{"tasks/result", "tasks/list"} {
		r, _ := h.call(6, m, tasked(P{"taskId": "x"}))
		r.fails(t, jsonrpc.CodeMethodNotFound)
	}
}

// TestTaskRequireTasks: a RequireTasks tool refuses a call without the
// extension with -32021 before its handler runs, and serves one with it.
func TestTaskRequireTasks(t *testing.T) {
	h := taskServer(t)
	ran := make(chan struct{}, 4)
	addTaskTool(t, h.srv, "only", func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		ran <- struct{}{}
		return textResult("ok"), nil
	}, server.RequireTasks())
	r, _ := h.call(1, mcp.MethodToolsCall, P{"name": "only"})
	r.fails(t, mcp.CodeMissingRequiredCapability)
	if ext := fmt.Sprint(r.data(t)["requiredCapabilities"]); ext != "map[extensions:map["+mcp.ExtensionTasks+":map[]]]" {
		t.Errorf("-32021 data names %s", ext)
	}
	select {
	case <-ran:
		t.Fatal("the handler ran for a call that may not have a task")
	default:
	}
	id := h.create(t, "only", nil)
	h.waitTask(t, id, "the task to complete", isStatus(mcp.TaskCompleted))
}

// TestTaskPrincipalIsolation: a task is its creator's. Another principal
// gets, updates and cancels it as if it did not exist, and a listen of
// theirs that names it is not granted it and hears nothing of it.
func TestTaskPrincipalIsolation(t *testing.T) {
	h := taskServer(t)
	mustAddTool(t, h.srv, textTool("plain"), echoHandler("p"))
	alice, bob := h.as("alice"), h.as("bob")
	b := newBlocker()
	addTaskTool(t, h.srv, "job", b.work)
	id := alice.create(t, "job", nil)
	b.waitStart(t)

	for _, m := range []string{mcp.MethodTasksGet, mcp.MethodTasksUpdate, mcp.MethodTasksCancel} {
		r, _ := bob.call(1, m, tasked(P{"taskId": id, "inputResponses": P{}}))
		r.fails(t, jsonrpc.CodeInvalidParams)
		if r.Error.Message != "Failed to retrieve task: Task not found" {
			t.Errorf("%s of another's task: %q, want the unknown task's message", m, r.Error.Message)
		}
	}
	l := bob.startListen("bob", tasked(P{"notifications": P{"taskIds": []string{id}, "toolsListChanged": true}}))
	if g := l.ack(t); g["taskIds"] != nil {
		t.Errorf("bob was granted alice's task: %v", g)
	}
	if got := alice.task(t, id); got["status"] != string(mcp.TaskWorking) {
		t.Fatalf("bob's cancel reached alice's task: %v", got)
	}
	close(b.release)
	alice.waitTask(t, id, "the task to complete", isStatus(mcp.TaskCompleted))
	mustAddTool(t, h.srv, textTool("later"), echoHandler("l"))
	ns := l.rec.waitUntil(t, "the tools change", func(ns []notif) bool { return countMethod(ns, mcp.NotifyToolsListChanged) > 0 })
	if n := countMethod(ns, mcp.NotifyTasks); n != 0 {
		t.Errorf("bob heard %d notifications of alice's task:\n%s", n, dump(ns))
	}
}

// accept is an elicitation answer that accepts with v.
func accept(v string) P { return P{"action": "accept", "content": P{"v": v}} }

// elicit is a form elicitation asking for v.
func elicit(msg string) mcp.InputRequest {
	return mcp.InputRequest{Method: mcp.MethodElicit, Params: jsontext.Value(
		`{"mode":"form","message":` + fmt.Sprintf("%q", msg) + `,"requestedSchema":{"type":"object","properties":{"v":{"type":"string"}}}}`)}
}

// got returns the answer under key, "" when there is none.
func got(req *server.ToolRequest, key string) string {
	var a struct {
		Content struct {
			V string `json:"v"`
		} `json:"content"`
	}
	_ = json.Unmarshal(req.InputResponses[key], &a)
	return a.Content.V
}

// TestTaskInputRounds: a task asks for input in rounds. Its requests
// appear under keys unique over the task's life; a partial update keeps
// it input_required with only the unanswered keys, unknown and answered
// keys are ignored, and once all are answered it is working again and
// the work runs with the answers under its own keys and its State.
func TestTaskInputRounds(t *testing.T) {
	h := taskServer(t, server.WithTaskPollInterval(time.Hour)) // only events wake the runner
	rounds := make(chan *server.ToolRequest, 4)
	addTaskTool(t, h.srv, "quiz", func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		rounds <- req
		switch string(req.State()) {
		case "":
			return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"a": elicit("a?"), "b": elicit("b?")}, State: []byte("one")}
		case "one":
			return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"a": elicit("a again?")},
				State: []byte("two:" + got(req, "a") + got(req, "b"))}
		}
		return textResult(string(req.State()) + "+" + got(req, "a")), nil
	})
	id := h.create(t, "quiz", nil)
	recv(t, rounds, "round 1")
	task := h.waitTask(t, id, "input_required", isStatus(mcp.TaskInputRequired))
	keys := func(task map[string]any) []string {
		reqs, _ := task["inputRequests"].(map[string]any)
		var ks []string
		for k := range reqs {
			ks = append(ks, k)
		}
		slices.Sort(ks)
		return ks
	}
	if ks := keys(task); !slices.Equal(ks, []string{"a.1", "b.1"}) {
		t.Fatalf("round 1 asks under %v", ks)
	}
	update := func(responses P) {
		t.Helper()
		r, _ := h.call("u", mcp.MethodTasksUpdate, tasked(P{"taskId": id, "inputResponses": responses}))
		if res := r.ok(t); len(res) != 2 || res["_meta"] == nil {
			t.Errorf("tasks/update acknowledged with %s, want an empty result", r.raw)
		}
	}
	update(P{"a.1": accept("A"), "nonsense": accept("x"), "a": accept("x")})
	task = h.task(t, id)
	if task["status"] != string(mcp.TaskInputRequired) || !slices.Equal(keys(task), []string{"b.1"}) {
		t.Fatalf("after a partial update: %v", task)
	}
	update(P{"a.1": accept("changed my mind")}) // answered already: ignored
	update(P{"b.1": accept("B")})
	req := recv(t, rounds, "round 2")
	if got(req, "a") != "A" || got(req, "b") != "B" || len(req.InputResponses) != 2 || string(req.State()) != "one" {
		t.Fatalf("round 2 runs with %v, state %q", req.InputResponses, req.State())
	}
	task = h.waitTask(t, id, "round 2's question", isStatus(mcp.TaskInputRequired))
	if ks := keys(task); !slices.Equal(ks, []string{"a.2"}) {
		t.Fatalf("round 2 asks under %v, want a key not used before", ks)
	}
	update(P{"a.1": accept("stale"), "a.2": accept("A2")})
	done := h.waitTask(t, id, "the task to complete", isStatus(mcp.TaskCompleted))
	if text := resultText(t, done); text != "two:AB+A2" {
		t.Errorf("result %q, want two:AB+A2", text)
	}
	update(P{"a.2": accept("late")}) // a finished task ignores answers
}

// TestTaskInputCapabilities: a task may ask only for input the creating
// request's capabilities allow; otherwise it fails with the -32021 its
// call would have had.
func TestTaskInputCapabilities(t *testing.T) {
	h := taskServer(t)
	addTaskTool(t, h.srv, "sampler", func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{
			"s": {Method: mcp.MethodCreateMessage, Params: jsontext.Value(`{"messages":[],"maxTokens":5}`)},
		}}
	})
	id := h.create(t, "sampler", nil)
	task := h.waitTask(t, id, "the task to fail", isStatus(mcp.TaskFailed))
	e, _ := task["error"].(map[string]any)
	if fmt.Sprint(e["code"]) != fmt.Sprint(mcp.CodeMissingRequiredCapability) || !strings.Contains(fmt.Sprint(e["data"]), "sampling") {
		t.Errorf("error %v, want -32021 naming sampling", e)
	}
}

// TestTaskCancel: tasks/cancel acknowledges with an empty result, makes
// the task cancelled at once, stops the work's context, and keeps the
// task cancelled whatever the stopped work returns. Cancelling a
// finished task is acknowledged alike and changes nothing.
func TestTaskCancel(t *testing.T) {
	h := taskServer(t, server.WithTaskPollInterval(time.Hour)) // only events wake the runner
	b := newBlocker()
	addTaskTool(t, h.srv, "job", b.work)
	cancel := func(id string) {
		t.Helper()
		r, _ := h.call("c", mcp.MethodTasksCancel, tasked(P{"taskId": id}))
		if res := r.ok(t); len(res) != 2 || res["_meta"] == nil {
			t.Errorf("tasks/cancel acknowledged with %s, want an empty result", r.raw)
		}
	}
	id := h.create(t, "job", nil)
	b.waitStart(t)
	cancel(id)
	task := h.task(t, id)
	if task["status"] != string(mcp.TaskCancelled) || task["statusMessage"] == nil {
		t.Fatalf("right after the cancel: %v", task)
	}
	if err := b.waitEnd(t); err == nil {
		t.Fatal("the cancelled work was released rather than stopped")
	}
	// The stopped work returned a result, which must not win.
	for range 3 {
		if task := h.task(t, id); task["status"] != string(mcp.TaskCancelled) {
			t.Fatalf("the stopped work overwrote the cancel: %v", task)
		}
	}
	cancel(id)
	if task := h.task(t, id); task["status"] != string(mcp.TaskCancelled) {
		t.Fatalf("after a second cancel: %v", task)
	}

	id = h.create(t, "job", nil)
	b.waitStart(t)
	b.release <- struct{}{}
	h.waitTask(t, id, "the task to complete", isStatus(mcp.TaskCompleted))
	cancel(id)
	if task := h.task(t, id); task["status"] != string(mcp.TaskCompleted) {
		t.Fatalf("cancelling a completed task changed it: %v", task)
	}

	// A task waiting for input is cancelled too.
	addTaskTool(t, h.srv, "ask", func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"q": elicit("?")}}
	})
	id = h.create(t, "ask", nil)
	h.waitTask(t, id, "input_required", isStatus(mcp.TaskInputRequired))
	cancel(id)
	if task := h.task(t, id); task["status"] != string(mcp.TaskCancelled) || task["inputRequests"] != nil {
		t.Fatalf("cancelled while waiting for input: %v", task)
	}
}

// TestTaskOutcomes: how the work ends settles the task as a call's
// outcome would: results (isError ones too) and plain errors complete
// it, JSON-RPC errors and panics fail it with the error inlined, and a
// result that breaks the tool's output schema fails it with -32603.
func TestTaskOutcomes(t *testing.T) {
	h := taskServer(t)
	cases := []struct {
		name   string
		work   server.ToolHandler
		output string
		status mcp.TaskStatus
		check  func(t *testing.T, task map[string]any)
	}{
		{name: "result", work: func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			return textResult("fine"), nil
		}, status: mcp.TaskCompleted, check: func(t *testing.T, task map[string]any) {
			if resultText(t, task) != "fine" || task["result"].(map[string]any)["isError"] != nil {
				t.Errorf("result %v", task["result"])
			}
		}},
		{name: "tool-error", work: func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{mcp.TextContent("no luck")}}, nil
		}, status: mcp.TaskCompleted, check: func(t *testing.T, task map[string]any) {
			if task["result"].(map[string]any)["isError"] != true {
				t.Errorf("result %v, want isError", task["result"])
			}
		}},
		{name: "plain-error", work: func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			return nil, errors.New("disk full")
		}, status: mcp.TaskCompleted, check: func(t *testing.T, task map[string]any) {
			if resultText(t, task) != "disk full" || task["result"].(map[string]any)["isError"] != true {
				t.Errorf("result %v, want isError with the error's text", task["result"])
			}
		}},
		{name: "rpc-error", work: func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			return nil, jsonrpc.NewError(-32001, "upstream refused", map[string]int{"retryAfter": 5})
		}, status: mcp.TaskFailed, check: func(t *testing.T, task map[string]any) {
			if e := fmt.Sprint(task["error"]); e != "map[code:-32001 data:map[retryAfter:5] message:upstream refused]" {
				t.Errorf("error %s", e)
			}
			if task["statusMessage"] != "upstream refused" {
				t.Errorf("statusMessage %v", task["statusMessage"])
			}
		}},
		{name: "panic", work: func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			panic("boom")
		}, status: mcp.TaskFailed, check: func(t *testing.T, task map[string]any) {
			if e, _ := task["error"].(map[string]any); fmt.Sprint(e["code"]) != "-32603" {
				t.Errorf("error %v, want -32603", task["error"])
			}
		}},
		{name: "bad-structured", output: `{"type":"object","required":["n"]}`, work: func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{StructuredContent: jsontext.Value(`{"m":1}`)}, nil
		}, status: mcp.TaskFailed},
		{name: "good-structured", output: `{"type":"object","required":["n"]}`, work: func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{StructuredContent: jsontext.Value(`{"n":1}`), Content: []mcp.Content{mcp.TextContent(`{"n":1}`)}}, nil
		}, status: mcp.TaskCompleted},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tool := textTool(c.name)
			if c.output != "" {
				tool.OutputSchema = jsontext.Value(c.output)
			}
			work := c.work
			if err := h.srv.AddTool(tool, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
				return req.RunAsTask(ctx, work)
			}); err != nil {
				t.Fatal(err)
			}
			id := h.create(t, c.name, nil)
			task := h.waitTask(t, id, "the task to finish", func(m map[string]any) bool {
				return mcp.TaskStatus(fmt.Sprint(m["status"])).Terminal()
			})
			if task["status"] != string(c.status) {
				t.Fatalf("status %v, want %s: %v", task["status"], c.status, task)
			}
			if c.check != nil {
				c.check(t, task)
			}
		})
	}
}

// TestTaskComposition: a tool gathers input in synchronous rounds
// (input_required with requestState, no task), then goes on as a task;
// the task's work has the gathered answers and the State, and its result
// shows them.
func TestTaskComposition(t *testing.T) {
	h := taskServer(t)
	addFn := func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		name := got(req, "name")
		if name == "" {
			return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"name": elicit("name?")}, State: []byte("asked")}
		}
		return req.RunAsTask(ctx, func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			return textResult("hello " + got(req, "name") + " (" + string(req.State()) + ")"), nil
		})
	}
	if err := h.srv.AddTool(textTool("greet"), addFn, server.RequireTasks()); err != nil {
		t.Fatal(err)
	}
	r, _ := h.call(1, mcp.MethodToolsCall, tasked(P{"name": "greet"}))
	first := r.Result
	if first["resultType"] != mcp.ResultInputRequired || first["taskId"] != nil || first["requestState"] == nil {
		t.Fatalf("round 1 = %s", r.raw)
	}
	r, _ = h.call(2, mcp.MethodToolsCall, tasked(P{"name": "greet", "requestState": first["requestState"],
		"inputResponses": P{"name": accept("Alice")}}))
	if r.Result["resultType"] != mcp.ResultTask || r.Result["requestState"] != nil || r.Result["inputRequests"] != nil {
		t.Fatalf("round 2 = %s", r.raw)
	}
	id := r.Result["taskId"].(string)
	done := h.waitTask(t, id, "the task to complete", isStatus(mcp.TaskCompleted))
	if text := resultText(t, done); text != "hello Alice (asked)" {
		t.Errorf("result %q", text)
	}
}

// TestTaskProgressAndLog: inside a task Progress sets the statusMessage
// and sends no notifications/progress, and Log sends nothing, even when
// the creating request asked for both.
func TestTaskProgressAndLog(t *testing.T) {
	h := taskServer(t)
	step := make(chan struct{})
	addTaskTool(t, h.srv, "job", func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		if err := req.Progress(1, nil, "half way"); err != nil {
			return nil, err
		}
		_ = req.Log("error", "job", "nobody hears this")
		select {
		case <-step:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return textResult("done"), nil
	})
	rec := newRecorder(t)
	meta := P{mcp.MetaClientCapabilities: taskCaps, mcp.MetaProgressToken: "p1", mcp.MetaLogLevel: "debug"}
	rep := h.serveRaw(context.Background(), encodeRequest(t, 1, mcp.MethodToolsCall, P{"name": "job", "_meta": meta}), rec)
	r := decodeResponse(t, mcp.MethodToolsCall, 1, rep)
	id, _ := r.Result["taskId"].(string)
	if id == "" {
		t.Fatalf("no task: %s", r.raw)
	}
	h.waitTask(t, id, "the statusMessage", func(m map[string]any) bool { return m["statusMessage"] == "half way" })
	close(step)
	h.waitTask(t, id, "the task to complete", isStatus(mcp.TaskCompleted))
	rec.end()
	if msgs := rec.messages(); len(msgs) != 0 {
		t.Errorf("a task sent %d messages on its creating request's stream: %s", len(msgs), msgs)
	}
}

// TestTaskListen: a listen naming tasks (SUB-18) needs the extension; it
// is granted only the caller's existing tasks, hears each one's state
// first and then every change, each notification being the DetailedTask
// tasks/get would return, tagged with the subscription id.
func TestTaskListen(t *testing.T) {
	h := taskServer(t)
	r, _ := h.call(1, mcp.MethodListen, P{"notifications": P{"taskIds": []string{"x"}}})
	r.reply.Release() // as a transport does, or Shutdown waits for it
	r.fails(t, mcp.CodeMissingRequiredCapability)
	if ext := fmt.Sprint(r.data(t)["requiredCapabilities"]); ext != "map[extensions:map["+mcp.ExtensionTasks+":map[]]]" {
		t.Errorf("-32021 data names %s", ext)
	}
	many := make([]string, 101)
	for i := range many {
		many[i] = fmt.Sprint("t", i)
	}
	r, _ = h.call(2, mcp.MethodListen, tasked(P{"notifications": P{"taskIds": many}}))
	r.reply.Release()
	r.fails(t, jsonrpc.CodeInvalidParams)

	step1, step2 := make(chan struct{}), make(chan struct{})
	wait := func(ctx context.Context, ch chan struct{}) error {
		select {
		case <-ch:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	addTaskTool(t, h.srv, "job", func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		if got(req, "q") == "" {
			if err := wait(ctx, step1); err != nil {
				return nil, err
			}
			_ = req.Progress(1, nil, "thinking")
			if err := wait(ctx, step2); err != nil {
				return nil, err
			}
			return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"q": elicit("q?")}}
		}
		return textResult("answer " + got(req, "q")), nil
	})
	id := h.create(t, "job", nil)
	l := h.startListen("L", tasked(P{"notifications": P{"taskIds": []string{"unknown", id, id}}}))
	if g := l.ack(t); fmt.Sprint(g["taskIds"]) != "["+id+"]" {
		t.Fatalf("granted %v, want only [%s]", g["taskIds"], id)
	}
	statuses := func(ns []notif) []string {
		var out []string
		for _, n := range ns {
			if n.Method == mcp.NotifyTasks {
				l.checkTag(t, n)
				if n.Params["taskId"] != id {
					t.Errorf("notification of task %v", n.Params["taskId"])
				}
				out = append(out, fmt.Sprint(n.Params["status"], "/", n.Params["statusMessage"]))
			}
		}
		return out
	}
	lastIs := func(prefix string) func([]notif) bool {
		return func(ns []notif) bool {
			s := statuses(ns)
			return len(s) > 0 && strings.HasPrefix(s[len(s)-1], prefix)
		}
	}
	ns := l.rec.waitUntil(t, "the task's current state", func(ns []notif) bool { return len(statuses(ns)) >= 1 })
	if s := statuses(ns); s[0] != "working/<nil>" {
		t.Fatalf("first notification: %v", s)
	}
	close(step1)
	l.rec.waitUntil(t, "the status message", lastIs("working/thinking"))
	close(step2)
	ns = l.rec.waitUntil(t, "input_required", lastIs("input_required"))
	if reqs, _ := ns[len(ns)-1].Params["inputRequests"].(map[string]any); reqs["q.1"] == nil {
		t.Errorf("input_required notification without its requests: %s", ns[len(ns)-1].raw)
	}
	r, _ = h.call(3, mcp.MethodTasksUpdate, tasked(P{"taskId": id, "inputResponses": P{"q.1": accept("42")}}))
	r.ok(t)
	ns = l.rec.waitUntil(t, "completed", lastIs("completed"))
	last := ns[len(ns)-1]
	final := h.task(t, id)
	delete(final, "resultType")
	delete(final, "_meta")
	params := last.Params
	delete(params, "_meta")
	if fmt.Sprint(params) != fmt.Sprint(final) {
		t.Errorf("the last notification\n%v\nis not what tasks/get reports\n%v", params, final)
	}
	l.stop(t)
}

// TestTaskShutdown: Shutdown stops running tasks, which end failed with
// an internal error (listeners hear it before their listen ends) unless
// their work returned a result all the same, which completes them; it
// waits for their goroutines, and refuses tasks afterwards.
func TestTaskShutdown(t *testing.T) {
	h := newHarness(t, server.WithCapabilities(server.Tasks))
	b := newBlocker()
	addTaskTool(t, h.srv, "job", b.work)
	addTaskTool(t, h.srv, "ask", func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"q": elicit("?")}}
	})
	polite := make(chan struct{})
	addTaskTool(t, h.srv, "polite", func(ctx context.Context, _ *server.ToolRequest) (*mcp.CallToolResult, error) {
		close(polite)
		<-ctx.Done()
		return textResult("done as the server stopped"), nil
	})
	running := h.create(t, "job", nil)
	b.waitStart(t)
	finished := h.create(t, "polite", nil)
	<-polite
	waiting := h.create(t, "ask", nil)
	h.waitTask(t, waiting, "input_required", isStatus(mcp.TaskInputRequired))
	l := h.startListen("L", tasked(P{"notifications": P{"taskIds": []string{running}}}))
	l.ack(t)
	l.rec.waitCount(t, 2)

	shutdown(t, h.srv)
	if err := b.waitEnd(t); err == nil {
		t.Error("the work was released rather than stopped")
	}
	for _, id := range []string{running, waiting} {
		task := h.task(t, id)
		e, _ := task["error"].(map[string]any)
		if task["status"] != string(mcp.TaskFailed) || fmt.Sprint(e["code"]) != "-32603" || !strings.Contains(fmt.Sprint(e["message"]), "shut down") {
			t.Errorf("after Shutdown: %v", task)
		}
	}
	if task := h.task(t, finished); task["status"] != string(mcp.TaskCompleted) || resultText(t, task) != "done as the server stopped" {
		t.Errorf("work that returned a result as Shutdown stopped it: %v", task)
	}
	rep := l.wait(t)
	if !rep.ListenEnded {
		t.Errorf("the listen did not end gracefully: %s", rep.Body)
	}
	ns := decodeNotifs(t, l.rec.messages())
	if last := ns[len(ns)-1]; last.Method != mcp.NotifyTasks || last.Params["status"] != string(mcp.TaskFailed) {
		t.Errorf("the listen's last notification: %s\n%s", last.raw, dump(ns))
	}
	r, _ := h.call(9, mcp.MethodToolsCall, tasked(P{"name": "job"}))
	r.fails(t, jsonrpc.CodeInternalError)
}

// TestTaskShutdownGivesUp: Shutdown waits for a task's work only until
// its context ends, and says so; the work, when it does end, is not
// left running.
func TestTaskShutdownGivesUp(t *testing.T) {
	h := newHarness(t, server.WithCapabilities(server.Tasks))
	stuck := make(chan struct{})
	ended := make(chan struct{})
	addTaskTool(t, h.srv, "stuck", func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		defer close(ended)
		<-stuck // deaf to its context
		return textResult("late"), nil
	})
	id := h.create(t, "stuck", nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := h.srv.Shutdown(ctx); err == nil || !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown with a stuck task = %v, want the context's error", err)
	}
	close(stuck)
	<-ended
	testkit.WaitFor(t, waitLimit, "the stuck task to settle", func() bool {
		r, _ := h.call("g", mcp.MethodTasksGet, tasked(P{"taskId": id}))
		return r.Error == nil && r.Result["status"] != string(mcp.TaskWorking) || r.Error != nil
	})
	shutdown(t, h.srv)
}

// TestTaskConcurrentUpdates: answers sent at once through two servers
// sharing a store are all kept, since each is a compare-and-swap.
func TestTaskConcurrentUpdates(t *testing.T) {
	store := bus.NewLocalTasks()
	a := taskServer(t, server.WithTaskStore(store), server.WithSecret(replicaSecret), server.WithTaskPollInterval(5*time.Millisecond))
	b := taskServer(t, server.WithTaskStore(store), server.WithSecret(replicaSecret))
	const n = 40
	addTaskTool(t, a.srv, "many", func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		if len(req.InputResponses) == 0 {
			reqs := make(map[string]mcp.InputRequest, n)
			for i := range n {
				reqs[fmt.Sprint("k", i)] = elicit("?")
			}
			return nil, &server.InputRequired{Requests: reqs}
		}
		return textResult(fmt.Sprint(len(req.InputResponses))), nil
	})
	id := a.create(t, "many", nil)
	a.waitTask(t, id, "input_required", isStatus(mcp.TaskInputRequired))
	var wg sync.WaitGroup
	for i := range n {
		h := a
		if i%2 == 1 {
			h = b
		}
		wg.Go(func() {
			rep := h.serveRaw(context.Background(), encodeRequest(t, i, mcp.MethodTasksUpdate,
				tasked(P{"taskId": id, "inputResponses": P{fmt.Sprint("k", i, ".1"): accept("x")}})), newRecorder(t))
			if rep.Err != nil {
				t.Errorf("update %d: %s", i, rep.Body)
			}
			rep.Release()
		})
	}
	wg.Wait()
	done := a.waitTask(t, id, "the task to complete", isStatus(mcp.TaskCompleted))
	if text := resultText(t, done); text != fmt.Sprint(n) {
		t.Errorf("the work got %s answers, want %d", text, n)
	}
}

type runKey struct{}

// TestTaskRunAsTaskContext: RunAsTask runs work with the context it is
// given: on the request, with the handler's own deadline and values; in
// a task, with its values but not its end. A second RunAsTask on one
// request is refused with -32603 rather than starting a task no client
// hears of.
func TestTaskRunAsTaskContext(t *testing.T) {
	h := taskServer(t)
	type seen struct {
		value       any
		hasDeadline bool
		task        string
	}
	seenc := make(chan seen, 2)
	if err := h.srv.AddTool(textTool("ctx"), func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		ctx, cancel := context.WithTimeout(context.WithValue(ctx, runKey{}, "mine"), time.Hour)
		defer cancel()
		return req.RunAsTask(ctx, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			_, dl := ctx.Deadline()
			seenc <- seen{ctx.Value(runKey{}), dl, req.TaskID()}
			return textResult("ok"), nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	r, _ := h.call(1, mcp.MethodToolsCall, P{"name": "ctx"})
	r.ok(t)
	if s := recv(t, seenc, "the synchronous work"); s.value != "mine" || !s.hasDeadline || s.task != "" {
		t.Errorf("synchronous work saw %+v, want the handler's value and deadline", s)
	}
	id := h.create(t, "ctx", nil)
	s := recv(t, seenc, "the task's work")
	if s.value != "mine" || s.task != id {
		t.Errorf("the task's work saw %+v, want the handler's value in task %s", s, id)
	}
	h.waitTask(t, id, "the task to complete", isStatus(mcp.TaskCompleted))

	var twice sync.WaitGroup
	if err := h.srv.AddTool(textTool("twice"), func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		noop := func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) { return textResult("ran"), nil }
		twice.Add(1)
		defer twice.Done()
		_, _ = req.RunAsTask(ctx, noop) // a task, or the work run here
		return req.RunAsTask(ctx, noop)
	}); err != nil {
		t.Fatal(err)
	}
	r, _ = h.call(2, mcp.MethodToolsCall, tasked(P{"name": "twice"}))
	r.fails(t, jsonrpc.CodeInternalError)
	r, _ = h.call(3, mcp.MethodToolsCall, P{"name": "twice"})
	r.fails(t, jsonrpc.CodeInternalError)
	twice.Wait()
}

// TestTaskTooLarge: a result, or requests for input, too large for a
// task's record fail the task at once with -32603 saying so, where the
// store's refusal left it working until its TTL.
func TestTaskTooLarge(t *testing.T) {
	h := taskServer(t)
	huge := strings.Repeat("x", bus.MaxTaskRecord)
	addTaskTool(t, h.srv, "result", func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return textResult(huge), nil
	})
	addTaskTool(t, h.srv, "ask", func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"q": elicit(huge)}}
	})
	for tool, msg := range map[string]string{
		"result": "Internal error: the task's result is too large",
		"ask":    "Internal error: the task's requests for input are too large",
	} {
		id := h.create(t, tool, nil)
		task := h.waitTask(t, id, "the task to fail", isStatus(mcp.TaskFailed))
		e, _ := task["error"].(map[string]any)
		if fmt.Sprint(e["code"]) != "-32603" || e["message"] != msg {
			t.Errorf("%s: error %v, want -32603 %q", tool, task["error"], msg)
		}
	}
}
