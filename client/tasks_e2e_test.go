package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/bus"
	"tidings/internal/testrig/testlb"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// These tests follow tasks of a real tidings server over loopback HTTP.

// slowPoll is a poll interval too long to matter within a test: a task
// that ends in time ended through a notification, or through a poll the
// follower made on its own account (after a grant or a drop).
const slowPoll = 30 * time.Second

// taskStates records the states WithTaskStatus reports, for tests to
// wait on.
type taskStates struct {
	mu     sync.Mutex
	states []mcp.Task
	poke   chan struct{}
}

func newTaskStates() *taskStates { return &taskStates{poke: make(chan struct{}, 1)} }

func (s *taskStates) add(t mcp.Task) {
	s.mu.Lock()
	s.states = append(s.states, t)
	s.mu.Unlock()
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

func (s *taskStates) all() []mcp.Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.states)
}

// waitFor waits until a state matches, and returns it.
func (s *taskStates) waitFor(t testing.TB, what string, match func(mcp.Task) bool) mcp.Task {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		for _, st := range s.all() {
			if match(st) {
				return st
			}
		}
		select {
		case <-s.poke:
		case <-deadline:
			t.Fatalf("timed out waiting for %s; states: %+v", what, s.all())
		}
	}
}

func messageIs(msg string) func(mcp.Task) bool {
	return func(t mcp.Task) bool { return t.StatusMessage == msg }
}

// callResult is what a CallTool run in the background returned.
type callResult struct {
	res *mcp.CallToolResult
	err error
}

// callAsync runs CallTool in the background; wait for its outcome with
// await.
func callAsync(ctx context.Context, c *Client, name string, args any, opts ...CallOption) <-chan callResult {
	ch := make(chan callResult, 1)
	go func() {
		res, err := c.CallTool(ctx, name, args, opts...)
		ch <- callResult{res, err}
	}()
	return ch
}

func await(t testing.TB, ch <-chan callResult) callResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(waitTimeout):
		t.Fatal("timed out waiting for CallTool")
		return callResult{}
	}
}

func resultText(t testing.TB, r callResult) string {
	t.Helper()
	if r.err != nil {
		t.Fatalf("CallTool: %v", r.err)
	}
	if len(r.res.Content) != 1 || r.res.Content[0].Text == nil {
		t.Fatalf("result = %+v, want one text", r.res)
	}
	return *r.res.Content[0].Text
}

// stepTool registers a tool that runs as a task: each message sent on
// steps becomes the task's status message (through Progress), and closing
// steps completes it with "done". ended, when set, receives why the
// work's context ended, if it did.
func stepTool(t testing.TB, srv *server.Server, name string, steps <-chan string, ended chan<- error, opts ...server.ItemOption) {
	t.Helper()
	must(t, srv.AddTool(mcp.Tool{Name: name, InputSchema: jsontext.Value(`{"type":"object"}`)}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return req.RunAsTask(ctx, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			for n := 1.0; ; n++ {
				select {
				case msg, ok := <-steps:
					if !ok {
						return text("done"), nil
					}
					_ = req.Progress(n, nil, msg)
				case <-ctx.Done():
					if ended != nil {
						ended <- context.Cause(ctx)
					}
					return nil, ctx.Err()
				}
			}
		})
	}, opts...))
}

// step sends msg to a stepTool.
func step(t testing.TB, steps chan<- string, msg string) {
	t.Helper()
	select {
	case steps <- msg:
	case <-time.After(waitTimeout):
		t.Fatalf("timed out handing %q to the task", msg)
	}
}

func taskFixture(t testing.TB, poll time.Duration, hopts ...fixtureOpts) *fixture {
	t.Helper()
	o := fixtureOpts{}
	if len(hopts) > 0 {
		o = hopts[0]
	}
	o.sopts = append(o.sopts, server.WithTaskPollInterval(poll))
	return newFixture(t, nil, o)
}

// TestTaskE2EListen: a task whose states the client learns through its
// listen: once the listen is open, a status message and the result arrive
// without a poll (the server's interval is too long to matter), however
// long after the request timeout.
func TestTaskE2EListen(t *testing.T) {
	f := taskFixture(t, slowPoll)
	steps := make(chan string)
	stepTool(t, f.srv, "slow", steps, nil)
	const timeout = 250 * time.Millisecond
	c := primed(t, f, WithTimeout(timeout))
	states := newTaskStates()
	var progress []string
	ch := callAsync(context.Background(), c, "slow", nil, WithTaskStatus(states.add),
		WithProgress(func(_ float64, _ *float64, msg string) { progress = append(progress, msg) }))
	first := states.waitFor(t, "the task", func(mcp.Task) bool { return true })
	if first.Status != mcp.TaskWorking || first.TaskID == "" {
		t.Fatalf("first state = %+v", first)
	}
	waitUntil(t, "the listen", func() bool { return f.rec.count(mcp.MethodListen) == 1 })
	// The request timeout does not bound the listen.
	observe(t, 2*timeout, func(time.Duration) {
		if f.rec.answered(mcp.MethodListen) != 0 {
			t.Fatal("the listen ended")
		}
	})
	step(t, steps, "halfway")
	states.waitFor(t, "the status message", messageIs("halfway"))
	gets := f.rec.count(mcp.MethodTasksGet)
	close(steps)
	if got := resultText(t, await(t, ch)); got != "done" {
		t.Errorf("result = %q", got)
	}
	listens := f.rec.requests(mcp.MethodListen)
	if len(listens) != 1 || !strings.Contains(string(listens[0].Params["notifications"]), first.TaskID) {
		t.Errorf("listens = %d (%v), want one for the task", len(listens), listens)
	}
	if n := f.rec.count(mcp.MethodTasksGet); n != gets || n > 1 {
		t.Errorf("tasks/get = %d (%d before the end), want at most the one after the grant", n, gets)
	}
	all := states.all()
	if last := all[len(all)-1]; last.Status != mcp.TaskCompleted {
		t.Errorf("last state = %+v", last)
	}
	if !slices.Contains(progress, "halfway") {
		t.Errorf("progress messages = %q, want the status message", progress)
	}
}

// noListen is a gateway that passes everything on but refuses listens,
// as one that cannot keep streams open might.
func noListen(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(mcp.HeaderMethod) == mcp.MethodListen {
			w.Header().Set("Content-Type", "application/json")
			var req rawRequest
			_ = json.NewDecoder(r.Body).Decode(&req)
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"listens are not passed on here"}}`, req.ID)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// TestTaskE2EPolled: where no listen can be had, the task is polled at
// the interval the server suggests until it ends. The request timeout
// bounds each poll, not the task, which lasts longer.
func TestTaskE2EPolled(t *testing.T) {
	f := taskFixture(t, 100*time.Millisecond)
	url := newFixtureHandler(t, noListen(f.rec))
	steps := make(chan string)
	stepTool(t, f.srv, "slow", steps, nil)
	const timeout = 250 * time.Millisecond
	c := rawClient(t, url, WithTimeout(timeout))
	states := newTaskStates()
	start := time.Now()
	ch := callAsync(context.Background(), c, "slow", nil, WithTaskStatus(states.add))
	step(t, steps, "started")
	states.waitFor(t, "the status message", messageIs("started"))
	waitUntil(t, "polls for longer than the request timeout", func() bool {
		return f.rec.answered(mcp.MethodTasksGet) >= 3 && time.Since(start) > 2*timeout
	})
	close(steps)
	if got := resultText(t, await(t, ch)); got != "done" {
		t.Errorf("result = %q", got)
	}
	for _, g := range f.rec.requests(mcp.MethodTasksGet) {
		var id string
		_ = json.Unmarshal(g.Params["taskId"], &id)
		if id == "" || g.Header.Get(mcp.HeaderName) != id {
			t.Errorf("tasks/get for %q carries Mcp-Name %q", id, g.Header.Get(mcp.HeaderName))
		}
	}
}

// TestTaskE2EInput: a task that asks for input is answered through the
// elicitation handler, once, and completes with the answer.
func TestTaskE2EInput(t *testing.T) {
	f := taskFixture(t, slowPoll)
	must(t, f.srv.AddTool(mcp.Tool{Name: "greet", InputSchema: jsontext.Value(`{"type":"object"}`)}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return req.RunAsTask(ctx, func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			raw, ok := req.InputResponses["name"]
			if !ok {
				return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{
					"name": {Method: mcp.MethodElicit, Params: jsontext.Value(`{"mode":"form","message":"Your name?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}}}}`)},
				}}
			}
			var e mcp.ElicitResult
			if err := json.Unmarshal(raw, &e); err != nil {
				return nil, err
			}
			var name string
			_ = json.Unmarshal(e.Content["name"], &name)
			return text("hello " + name), nil
		})
	}))
	var asked atomic.Int32
	c := primed(t, f, WithElicitation(func(_ context.Context, p jsontext.Value) (*mcp.ElicitResult, error) {
		asked.Add(1)
		if !strings.Contains(string(p), "Your name?") {
			return nil, fmt.Errorf("unexpected request %s", p)
		}
		return &mcp.ElicitResult{Action: "accept", Content: map[string]jsontext.Value{"name": jsontext.Value(`"Ada"`)}}, nil
	}))
	states := newTaskStates()
	ch := callAsync(context.Background(), c, "greet", nil, WithTaskStatus(states.add))
	if got := resultText(t, await(t, ch)); got != "hello Ada" {
		t.Errorf("result = %q", got)
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("elicitation handler called %d times, want 1", n)
	}
	if n := f.rec.count(mcp.MethodTasksUpdate); n != 1 {
		t.Errorf("tasks/update = %d, want 1", n)
	}
	states.waitFor(t, "input_required", func(t mcp.Task) bool { return t.Status == mcp.TaskInputRequired })
}

// TestTaskE2EFailed: a task that fails ends the call with its JSON-RPC
// error, the same error the call gets when the server answers it at once.
func TestTaskE2EFailed(t *testing.T) {
	f := taskFixture(t, slowPoll)
	must(t, f.srv.AddTool(mcp.Tool{Name: "broken", InputSchema: jsontext.Value(`{"type":"object"}`)}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return req.RunAsTask(ctx, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			return nil, &jsonrpc.Error{Code: -32050, Message: "upstream gone", Data: jsontext.Value(`{"upstream":"db"}`)}
		})
	}))
	states := newTaskStates()
	taskErr := await(t, callAsync(context.Background(), primed(t, f), "broken", nil, WithTaskStatus(states.add))).err
	syncErr := await(t, callAsync(context.Background(), primed(t, f, WithoutTasks()), "broken", nil)).err
	var a, b *RPCError
	if !errors.As(taskErr, &a) || !errors.As(syncErr, &b) {
		t.Fatalf("errors = %v (task), %v (at once); want RPC errors", taskErr, syncErr)
	}
	if a.Code != -32050 || a.Message != b.Message || a.Code != b.Code || string(a.Data) != string(b.Data) {
		t.Errorf("task error = %+v, at once = %+v", a, b)
	}
	if len(states.all()) == 0 {
		t.Error("the call with tasks ran no task")
	}
}

// TestTaskE2ECancelledElsewhere: a task cancelled by someone else (here
// another client) ends the call with ErrTaskCancelled.
func TestTaskE2ECancelledElsewhere(t *testing.T) {
	f := taskFixture(t, slowPoll)
	ended := make(chan error, 1)
	steps := make(chan string)
	stepTool(t, f.srv, "slow", steps, ended)
	c := primed(t, f)
	states := newTaskStates()
	ch := callAsync(context.Background(), c, "slow", nil, WithTaskStatus(states.add))
	step(t, steps, "started")
	task := states.waitFor(t, "the status message", messageIs("started"))
	other := primed(t, f)
	if _, err := other.Request(context.Background(), mcp.MethodTasksCancel, map[string]any{"taskId": task.TaskID}); err != nil {
		t.Fatal(err)
	}
	r := await(t, ch)
	if !errors.Is(r.err, ErrTaskCancelled) {
		t.Errorf("CallTool = %+v, %v; want ErrTaskCancelled", r.res, r.err)
	}
	select {
	case <-ended:
	case <-time.After(waitTimeout):
		t.Error("the task's work went on")
	}
	if n := f.rec.count(mcp.MethodTasksCancel); n != 1 {
		t.Errorf("tasks/cancel = %d, want only the other client's", n)
	}
}

// TestTaskE2EContextCancel: a call whose context ends cancels its task on
// the server, and returns the context's error.
func TestTaskE2EContextCancel(t *testing.T) {
	f := taskFixture(t, slowPoll)
	ended := make(chan error, 1)
	steps := make(chan string)
	stepTool(t, f.srv, "slow", steps, ended)
	c := primed(t, f)
	states := newTaskStates()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := callAsync(ctx, c, "slow", nil, WithTaskStatus(states.add))
	step(t, steps, "started")
	task := states.waitFor(t, "the status message", messageIs("started"))
	cancel()
	if r := await(t, ch); !errors.Is(r.err, context.Canceled) {
		t.Errorf("CallTool = %+v, %v; want context.Canceled", r.res, r.err)
	}
	select {
	case <-ended:
	case <-time.After(waitTimeout):
		t.Fatal("the task's work was not stopped")
	}
	raw, err := primed(t, f).Request(context.Background(), mcp.MethodTasksGet, map[string]any{"taskId": task.TaskID})
	must(t, err)
	var got mcp.Task
	must(t, json.Unmarshal(raw, &got))
	if got.Status != mcp.TaskCancelled {
		t.Errorf("task after the call's cancel = %+v, want cancelled", got)
	}
}

// TestTaskE2EWithoutTasks: a client without the extension cannot call a
// tool that only runs as a task: the server refuses with -32021.
func TestTaskE2EWithoutTasks(t *testing.T) {
	f := taskFixture(t, slowPoll)
	steps := make(chan string)
	close(steps)
	stepTool(t, f.srv, "tasky", steps, nil, server.RequireTasks())
	err := await(t, callAsync(context.Background(), primed(t, f, WithoutTasks()), "tasky", nil)).err
	var rpc *RPCError
	if !errors.As(err, &rpc) || rpc.Code != mcp.CodeMissingRequiredCapability || !strings.Contains(string(rpc.Data), mcp.ExtensionTasks) {
		t.Errorf("err = %v, want -32021 naming the tasks extension", err)
	}
	if got := resultText(t, await(t, callAsync(context.Background(), primed(t, f), "tasky", nil))); got != "done" {
		t.Errorf("with tasks: %q", got)
	}
}

// replica is one of several tidings servers sharing a task store and a
// bus group, on its own loopback address.
type replica struct {
	f    *fixture
	addr string
}

func startReplica(t testing.TB, ln net.Listener, store bus.TaskStore, group *bus.Local, steps <-chan string) *replica {
	t.Helper()
	srv := server.New(mcp.Implementation{Name: "replica", Version: "1.0.0"},
		server.WithLogger(quietLogger()), server.WithBus(bus.New(group.Conn())),
		server.WithTaskStore(store), server.WithTaskPollInterval(slowPoll),
		// Replicas share the secret that keys the owners of tasks.
		server.WithSecret([]byte("the secret the replicas of a test share")))
	stepTool(t, srv, "slow", steps, nil)
	f := newFixture(t, srv, fixtureOpts{ln: ln})
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return &replica{f: f, addr: ln.Addr().String()}
}

// sharedStore is a task store that several servers share and none of
// them closes (Shutdown closes a server's store): the test owns it.
type sharedStore struct{ bus.TaskStore }

func (sharedStore) Close() error { return nil }

// TestTaskE2EListenAcrossRestart: the task runs on replica A; the
// client's listen lands on replica B, which is killed mid-task, while
// the task moves on, and started again on the same address. The client
// listens again, through the balancer, on the new B, learns what it
// missed, and gets the result the task completes with on A.
func TestTaskE2EListenAcrossRestart(t *testing.T) {
	store := sharedStore{bus.NewLocalTasks()}
	group := bus.NewLocal()
	steps := make(chan string)
	lnA, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	lnB, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	a := startReplica(t, lnA, store, group, steps)
	b := startReplica(t, lnB, store, group, steps)
	lb := testlb.StartReverseProxy(t, "http://"+a.addr)
	c := rawClient(t, lb.URL()+"/mcp")
	_, err = c.Era(context.Background())
	must(t, err)

	states := newTaskStates()
	moved := false
	status := func(task mcp.Task) {
		if !moved {
			// The task runs on A; from now on everything goes to B.
			moved = true
			if err := lb.SetUpstreams("http://" + b.addr); err != nil {
				t.Error(err)
			}
		}
		states.add(task)
	}
	ch := callAsync(context.Background(), c, "slow", nil, WithTaskStatus(status))
	waitUntil(t, "the listen on B", func() bool { return b.f.rec.count(mcp.MethodListen) == 1 })
	step(t, steps, "step 1") // on A, told by B
	states.waitFor(t, "step 1", messageIs("step 1"))
	if n := a.f.rec.count(mcp.MethodListen); n != 0 {
		t.Fatalf("%d listens on A, want all on B", n)
	}
	aRequests := a.f.rec.count("")

	// B dies with the listen open; the task moves on meanwhile.
	b.f.stop()
	must(t, b.f.srv.Shutdown(context.Background()))
	step(t, steps, "step 2")
	var ln2 net.Listener
	waitUntil(t, "B's address to be free again", func() bool {
		ln2, err = net.Listen("tcp", b.addr)
		return err == nil
	})
	b2 := startReplica(t, ln2, store, group, steps)
	states.waitFor(t, "step 2, through the new B", messageIs("step 2"))
	waitUntil(t, "the listen on the new B", func() bool { return b2.f.rec.count(mcp.MethodListen) >= 1 })
	close(steps) // A completes the task; the new B tells the client
	if got := resultText(t, await(t, ch)); got != "done" {
		t.Errorf("result = %q", got)
	}
	if n := a.f.rec.count(""); n != aRequests {
		t.Errorf("%d requests reached A after the call moved to B", n-aRequests)
	}
	var msgs []string
	for _, st := range states.all() {
		msgs = append(msgs, string(st.Status)+":"+st.StatusMessage)
	}
	if want := []string{"working:", "working:step 1", "working:step 2", "completed:"}; !slices.Equal(msgs, want) {
		t.Errorf("states = %q, want %q", msgs, want)
	}
}

// TestRequestTakesATaskWhereItsCapabilitiesAskedForOne: Request returns
// the task handle of a tools/call whose WithCapabilities declared the
// extension, as a gateway asks on its caller's behalf, though the client
// itself declares no tasks.
func TestRequestTakesATaskWhereItsCapabilitiesAskedForOne(t *testing.T) {
	f := taskFixture(t, slowPoll)
	steps := make(chan string)
	defer close(steps)
	stepTool(t, f.srv, "slow", steps, nil)
	c := NewHTTP(f.url, WithoutTasks())
	defer c.Close()
	ctx := context.Background()
	caps := mcp.ClientCaps{Extensions: map[string]jsontext.Value{mcp.ExtensionTasks: jsontext.Value("{}")}}
	res, err := c.Request(ctx, mcp.MethodToolsCall, map[string]any{"name": "slow"}, WithCapabilities(caps))
	if err != nil {
		t.Fatalf("with the extension declared: %v", err)
	}
	var r struct {
		ResultType string `json:"resultType"`
		TaskID     string `json:"taskId"`
	}
	if err := json.Unmarshal(res, &r); err != nil || r.ResultType != mcp.ResultTask || r.TaskID == "" {
		t.Fatalf("with the extension declared: %s (%v), want a task handle", res, err)
	}
	if _, err := c.Request(ctx, mcp.MethodTasksCancel, map[string]any{"taskId": r.TaskID}, WithCapabilities(caps)); err != nil {
		t.Fatalf("tasks/cancel: %v", err)
	}
}
