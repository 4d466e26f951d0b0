package clustertest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/bus"
	"tidings/internal/sse"
	"tidings/internal/testrig/clustertest"
	"tidings/internal/testrig/testlb"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// This file proves that a task lives on the cluster, not on a replica:
// started through one replica, followed over a listen on another, polled
// through a third, answered and cancelled through whichever the balancer
// picks, on NATS and on Redis, behind nginx and the Go ReverseProxy.
// Every request goes through the balancer; a middleware on each replica
// notes which one served it, and the tests steer each request to the
// replica they mean by the balancer's strict round robin, then check
// that it landed there. Nothing is left to chance.

// taskEnv is three replicas sharing one task store, behind a balancer.
type taskEnv struct {
	t      *testing.T
	c      *clustertest.Cluster
	lb     *testlb.LB
	url    string // the balancer's /mcp
	hc     *http.Client
	served *journal
	// br is the broker, which a test may take down and bring back (the
	// local bus has none: nil).
	br interface {
		Down()
		Up()
	}
	// after is the rotation the balancer follows: after[i] is the replica
	// that takes the request after one that replica i took.
	after []int
	// last is the replica that took the last request sent.
	last int
	ids  int64
	// broken is set by a test that breaks the cluster on purpose (loses
	// messages on the bus, kills a replica): its buses are not held to a
	// clean run.
	broken bool

	// rounds hears of every round of the "ask" tool's work, and gate lets
	// the round go on: each round waits for a token before it returns.
	rounds chan round
	gate   chan struct{}
	// jobs hears of the start of the "job" tool's work, and ended of how
	// its context ended.
	jobs  chan string
	ended chan jobEnd
}

// round is one round of the "ask" work: where it ran and the answer it
// was given ("" in the first).
type round struct {
	replica, answer string
}

// jobEnd is how the "job" work's context ended, and where.
type jobEnd struct {
	replica     string
	err, cause  error
	byOwnChoice bool // released by the test rather than stopped
}

// served is one request as a replica's middleware saw it.
type served struct {
	replica   int
	method    string
	name      string
	principal string
}

// journal is every request the replicas served, by JSON-RPC id.
type journal struct {
	mu   sync.Mutex
	byID map[string]served
}

// note records req as served by replica i.
func (j *journal) note(i int, req *server.Request) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.byID[req.ID.Raw()] = served{replica: i, method: req.Method, name: req.Name, principal: req.Principal}
}

// of returns what served the request of id.
func (j *journal) of(id string) (served, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	s, ok := j.byID[id]
	return s, ok
}

// middleware notes every request replica i serves, before it is served:
// a listen is noted before its acknowledgement is sent.
func (j *journal) middleware(i int) server.Middleware {
	return func(next server.MethodHandler) server.MethodHandler {
		return func(ctx context.Context, req *server.Request) error {
			j.note(i, req)
			return next(ctx, req)
		}
	}
}

// The replicas the scenario gives a part each.
const (
	runner   = 0 // takes the tools/call, and runs the work
	listener = 1 // holds the listen, and takes the tasks/update
	poller   = 2 // takes the tasks/get, and the tasks/cancel
)

// forEachTaskSetUp runs fn over NATS and Redis, behind nginx and behind
// the Go ReverseProxy, each with three replicas of its own sharing the
// broker's task store; and over the local bus of one process, whose
// replicas share one bus.LocalTasks, behind the Go proxy. The replicas
// re-read a running task only once an hour, and renew its lease as
// seldom: the runner hears of an answer or a cancel made through another
// replica over the bus, or the test times out.
func forEachTaskSetUp(t *testing.T, fn func(t *testing.T, e *taskEnv), bopts ...bus.Option) {
	for _, b := range append(buses(), busKind{"local", func(testing.TB) interface{ URL() string } { return noBroker{} }}) {
		for _, lb := range balancers() {
			if b.name == "local" && lb.name != "goproxy" {
				continue // what the local bus shows does not hang on the balancer
			}
			t.Run(b.name+"/"+lb.name, func(t *testing.T) {
				br := b.start(t)
				outage, _ := br.(interface {
					Down()
					Up()
				})
				e := newTaskEnv(t, br.URL(), outage, lb.start, bopts)
				fn(t, e)
				if e.broken {
					return
				}
				for _, r := range e.c.Replicas {
					if st := r.Bus.Stats(); st.Gaps+st.Resyncs+st.Stale+st.Dropped+st.Invalid != 0 || !st.Connected {
						t.Errorf("replica %s: %+v, want a clean run", r.Name, st)
					}
				}
			})
		}
	}
}

// newTaskEnv starts three replicas on the bus at url, serving the task
// tests' tools, behind the balancer lb starts.
func newTaskEnv(t *testing.T, url string, outage interface {
	Down()
	Up()
}, lb func(testing.TB, ...string) *testlb.LB, bopts []bus.Option) *taskEnv {
	e := &taskEnv{t: t, served: &journal{byID: map[string]served{}},
		rounds: make(chan round, 8), gate: make(chan struct{}),
		jobs: make(chan string, 8), ended: make(chan jobEnd, 8), br: outage}
	e.c = clustertest.Start(t, clustertest.Options{
		Bus: url, Tasks: true, BusOptions: bopts,
		Server: []server.Option{server.WithTaskPollInterval(time.Hour), server.WithTaskLease(time.Hour)},
		ReplicaServer: func(r *clustertest.Replica) []server.Option {
			return []server.Option{server.WithMiddleware(e.served.middleware(int(r.Name[0] - 'A')))}
		},
		Setup: e.serve,
	})
	e.lb = lb(t, e.c.Upstreams()...)
	e.url = e.lb.URL() + "/mcp"
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	t.Cleanup(tr.CloseIdleConnections)
	e.hc = &http.Client{Transport: tr}
	e.learnRotation()
	return e
}

// noBroker stands for the local bus, which has no URL.
type noBroker struct{}

func (noBroker) URL() string { return "" }

// serve registers the tools and resources of the task tests on r.
//
// "ask" goes asynchronous at once; its work waits for the gate, then asks
// for "q" and, given an answer, waits for the gate again and completes
// with "told <answer>". "job" runs until its context ends (or the test
// releases it with the gate), and says how it ended. Each replica has a
// resource res://sentinel/<name>, which it alone announces.
func (e *taskEnv) serve(r *clustertest.Replica) error {
	ask := func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		answer := answerOf(req, "q")
		e.rounds <- round{r.Name, answer}
		select {
		case <-e.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if answer == "" {
			return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"q": elicitation("q?")}}
		}
		return text("told " + answer), nil
	}
	job := func(ctx context.Context, _ *server.ToolRequest) (*mcp.CallToolResult, error) {
		e.jobs <- r.Name
		select {
		case <-e.gate:
			e.ended <- jobEnd{replica: r.Name, byOwnChoice: true}
			return text("released"), nil
		case <-ctx.Done():
			e.ended <- jobEnd{replica: r.Name, err: ctx.Err(), cause: context.Cause(ctx)}
			// An error: a result, even now, would complete the task.
			return nil, context.Cause(ctx)
		}
	}
	for name, work := range map[string]server.ToolHandler{"ask": ask, "job": job} {
		err := r.Server.AddTool(mcp.Tool{Name: name, InputSchema: jsontext.Value(`{"type":"object"}`)},
			func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
				return req.RunAsTask(ctx, work)
			})
		if err != nil {
			return err
		}
	}
	uri := "res://sentinel/" + r.Name
	return r.Server.AddResource(mcp.Resource{URI: uri, Name: uri}, func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "text/plain", "sentinel")}}, nil
	})
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(s)}}
}

// elicitation is a form elicitation asking for a string v.
func elicitation(msg string) mcp.InputRequest {
	return mcp.InputRequest{Method: mcp.MethodElicit, Params: jsontext.Value(
		`{"mode":"form","message":` + strconv.Quote(msg) + `,"requestedSchema":{"type":"object","properties":{"v":{"type":"string"}}}}`)}
}

// answerOf returns the v of the answer under key, "" when there is none.
func answerOf(req *server.ToolRequest, key string) string {
	var a struct {
		Content struct {
			V string `json:"v"`
		} `json:"content"`
	}
	_ = json.Unmarshal(req.InputResponses[key], &a)
	return a.Content.V
}

// accepted is the answer to an elicitation of v.
func accepted(v string) map[string]any {
	return map[string]any{"action": "accept", "content": map[string]any{"v": v}}
}

// reply is a JSON-RPC response, read loosely.
type reply struct {
	raw    []byte
	Result map[string]any `json:"result"`
	Error  *struct {
		Code    jsonrpc.Code `json:"code"`
		Message string       `json:"message"`
	} `json:"error"`
}

// ok returns the result, failing the test on an error.
func (r reply) ok(t *testing.T, what string) map[string]any {
	t.Helper()
	if r.Error != nil || r.Result == nil {
		t.Fatalf("%s: %s", what, r.raw)
	}
	return r.Result
}

// message is one message of a listen's stream, read loosely.
type message struct {
	raw    []byte
	Method string         `json:"method"`
	Params map[string]any `json:"params"`
}

// post builds the POST of one request as user, with the headers a
// 2026-07-28 client sends and _meta declaring the tasks extension and
// form elicitation, and returns it with its JSON-RPC id.
func (e *taskEnv) post(ctx context.Context, user, method, name string, params map[string]any) (*http.Request, string) {
	e.t.Helper()
	e.ids++
	id := strconv.FormatInt(e.ids, 10)
	p := map[string]any{"_meta": map[string]any{
		mcp.MetaProtocolVersion: mcp.Version,
		mcp.MetaClientCapabilities: map[string]any{
			"extensions":  map[string]any{mcp.ExtensionTasks: map[string]any{}},
			"elicitation": map[string]any{},
		},
	}}
	for k, v := range params {
		p[k] = v
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": e.ids, "method": method, "params": p})
	if err != nil {
		e.t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version)
	req.Header.Set(mcp.HeaderMethod, method)
	if name != "" {
		req.Header.Set(mcp.HeaderName, name)
	}
	req.Header.Set(clustertest.PrincipalHeader, user)
	return req, id
}

// rpc sends one request through the balancer and returns its response
// and the replica that served it.
func (e *taskEnv) rpc(user, method, name string, params map[string]any) (reply, int) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Wait)
	defer cancel()
	req, id := e.post(ctx, user, method, name, params)
	resp, err := e.hc.Do(req)
	if err != nil {
		e.t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	var b []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The answer is the stream's one response; what comes before it
		// (progress, say) is not what these tests look at.
		rd := sse.NewReader(resp.Body, 1<<20)
		for {
			ev, err := rd.Next()
			if err != nil {
				e.t.Fatalf("%s: the stream ended without a response: %v", method, err)
			}
			if bytes.Contains(ev.Data, []byte(`"result"`)) || bytes.Contains(ev.Data, []byte(`"error"`)) {
				b = ev.Data
				break
			}
		}
	} else if b, err = io.ReadAll(resp.Body); err != nil {
		e.t.Fatalf("%s: %v", method, err)
	}
	var r reply
	if err := json.Unmarshal(b, &r); err != nil {
		e.t.Fatalf("%s: status %d, %v in %q", method, resp.StatusCode, err, b)
	}
	r.raw = b
	return r, e.landed(id, method, user)
}

// landed returns the replica that served the request of id, and
// remembers it as where the rotation stands.
func (e *taskEnv) landed(id, method, user string) int {
	e.t.Helper()
	s, ok := e.served.of(id)
	if !ok {
		e.t.Fatalf("%s (id %s) was answered, but no replica's middleware saw it", method, id)
	}
	if s.method != method || s.principal != user {
		e.t.Fatalf("request %s: the middleware saw %+v, want %s as %q", id, s, method, user)
	}
	e.last = s.replica
	return s.replica
}

// harmless is a request that changes nothing, to move the round robin on.
func (e *taskEnv) harmless() int {
	e.t.Helper()
	r, at := e.rpc("alice", mcp.MethodToolsList, "", map[string]any{})
	r.ok(e.t, "tools/list")
	return at
}

// learnRotation sends harmless requests through the balancer and checks
// that it takes them round robin, strictly: each replica once in every
// run of three, in the same order every time. The steering of the tests
// rests on it.
func (e *taskEnv) learnRotation() {
	t := e.t
	t.Helper()
	n := len(e.c.Replicas)
	seq := make([]int, 3*n)
	for i := range seq {
		seq[i] = e.harmless()
	}
	e.after = make([]int, n)
	for i := range n {
		e.after[seq[i]] = seq[i+1]
	}
	seen := map[int]bool{}
	for i, r := range seq {
		seen[r] = true
		if i > 0 && e.after[seq[i-1]] != r {
			t.Fatalf("%s does not take requests round robin: replicas %v in turn", e.lb.URL(), seq)
		}
	}
	if len(seen) != n {
		t.Fatalf("%s took requests on replicas %v only", e.lb.URL(), seq)
	}
}

// to moves the round robin on with harmless requests until the next
// request lands on replica target.
func (e *taskEnv) to(target int) {
	e.t.Helper()
	for range len(e.c.Replicas) {
		if e.after[e.last] == target {
			return
		}
		e.harmless()
	}
	e.t.Fatalf("the rotation %v never comes to replica %d", e.after, target)
}

// on sends a request to replica target through the balancer and fails
// the test unless it was served there.
func (e *taskEnv) on(target int, user, method, name string, params map[string]any) reply {
	e.t.Helper()
	e.to(target)
	r, at := e.rpc(user, method, name, params)
	if at != target {
		e.t.Fatalf("%s landed on replica %s, not %s: the balancer is not round robin", method, e.c.Replicas[at].Name, e.c.Replicas[target].Name)
	}
	return r
}

// listen is a subscriptions/listen open through the balancer, read on a
// goroutine of its own until the test ends.
type listen struct {
	name    string
	replica int
	ack     message
	msgs    chan message
}

// listenOn opens a listen as user through the balancer on replica
// target, and returns it once it has its acknowledgement.
func (e *taskEnv) listenOn(target int, name, user string, filter map[string]any) *listen {
	t := e.t
	t.Helper()
	e.to(target)
	ctx, cancel := context.WithCancel(context.Background())
	req, id := e.post(ctx, user, mcp.MethodListen, "", map[string]any{"notifications": filter})
	resp, err := e.hc.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("%s: %v", name, err)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("%s: status %d, %s: %s", name, resp.StatusCode, ct, b)
	}
	l := &listen{name: name, msgs: make(chan message, 64)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(l.msgs)
		rd := sse.NewReader(resp.Body, 1<<20)
		for {
			ev, err := rd.Next()
			if err != nil {
				return
			}
			m := message{raw: ev.Data}
			if err := json.Unmarshal(ev.Data, &m); err != nil {
				m.Method = "unreadable: " + err.Error()
			}
			select {
			case l.msgs <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	l.ack = l.next(t)
	if l.ack.Method != mcp.NotifyAcknowledged {
		t.Fatalf("%s: first message %s, want the acknowledgement", name, l.ack.raw)
	}
	l.replica = e.landed(id, mcp.MethodListen, user)
	if l.replica != target {
		t.Fatalf("%s landed on replica %s, not %s: the balancer is not round robin", name, e.c.Replicas[l.replica].Name, e.c.Replicas[target].Name)
	}
	return l
}

// next returns the listen's next message.
func (l *listen) next(t *testing.T) message {
	t.Helper()
	select {
	case m, ok := <-l.msgs:
		if !ok {
			t.Fatalf("%s: the stream ended", l.name)
		}
		return m
	case <-time.After(clustertest.Wait):
		t.Fatalf("%s: nothing heard in %v", l.name, clustertest.Wait)
	}
	return message{}
}

// granted returns the task ids the listen's acknowledgement grants.
func (l *listen) granted() []string {
	n, _ := l.ack.Params["notifications"].(map[string]any)
	ids, _ := n["taskIds"].([]any)
	var out []string
	for _, id := range ids {
		s, _ := id.(string)
		out = append(out, s)
	}
	return out
}

// expectTask checks that the listen's next message tells task id in
// status, and returns the task it tells.
func (l *listen) expectTask(t *testing.T, id string, status mcp.TaskStatus) map[string]any {
	t.Helper()
	m := l.next(t)
	if m.Method != mcp.NotifyTasks || m.Params["taskId"] != id || m.Params["status"] != string(status) {
		t.Fatalf("%s: %s, want task %s %s", l.name, m.raw, id, status)
	}
	return m.Params
}

// resultText returns the first text of a task's inlined result.
func resultText(task map[string]any) string {
	res, _ := task["result"].(map[string]any)
	content, _ := res["content"].([]any)
	if len(content) == 0 {
		return ""
	}
	s, _ := content[0].(map[string]any)["text"].(string)
	return s
}

// recv receives from ch, or fails the test after clustertest.Wait.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(clustertest.Wait):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

// open lets the waiting round of the work go on.
func (e *taskEnv) open() {
	e.t.Helper()
	select {
	case e.gate <- struct{}{}:
	case <-time.After(clustertest.Wait):
		e.t.Fatal("no work waited at the gate")
	}
}

// create calls tool through the balancer on replica target as user, and
// returns the id of the task it started.
func (e *taskEnv) create(target int, user, tool string) string {
	e.t.Helper()
	res := e.on(target, user, mcp.MethodToolsCall, tool, map[string]any{"name": tool, "arguments": map[string]any{}}).ok(e.t, "tools/call "+tool)
	id, _ := res["taskId"].(string)
	if res["resultType"] != mcp.ResultTask || res["status"] != string(mcp.TaskWorking) || id == "" {
		e.t.Fatalf("tools/call %s: %v, want a working task's handle", tool, res)
	}
	return id
}

// get is tasks/get of id on replica target, as alice.
func (e *taskEnv) get(target int, id string) map[string]any {
	e.t.Helper()
	return e.on(target, "alice", mcp.MethodTasksGet, id, map[string]any{"taskId": id}).ok(e.t, "tasks/get")
}

// expectStatus checks that tasks/get of id on replica target reports
// status, and returns the task.
func (e *taskEnv) expectStatus(target int, id string, status mcp.TaskStatus) map[string]any {
	e.t.Helper()
	task := e.get(target, id)
	if task["status"] != string(status) {
		e.t.Fatalf("tasks/get on %s: %v, want %s", e.c.Replicas[target].Name, task, status)
	}
	return task
}

// waitStatus polls tasks/get of id on replica target until it reports
// status: the work moves on by itself once let through the gate.
func (e *taskEnv) waitStatus(target int, id string, status mcp.TaskStatus) map[string]any {
	e.t.Helper()
	var task map[string]any
	clustertest.WaitFor(e.t, fmt.Sprintf("task %s to be %s through %s", id, status, e.c.Replicas[target].Name), func() bool {
		task = e.get(target, id)
		return task["status"] == string(status)
	})
	return task
}

// TestTaskAcrossReplicas: a task started through one replica is followed
// over a listen on a second and polled through a third, all through the
// balancer. The listen hears the task's state and then each change,
// working, input_required, working and completed with its result, and
// tasks/get on the third sees the same; the answer given through the
// second replica wakes the work, still running on the first, over the
// bus.
func TestTaskAcrossReplicas(t *testing.T) {
	forEachTaskSetUp(t, func(t *testing.T, e *taskEnv) {
		id := e.create(runner, "alice", "ask")
		if r := recv(t, e.rounds, "the work to start"); r.replica != e.c.Replicas[runner].Name || r.answer != "" {
			t.Fatalf("the first round: %+v, want it on the replica that took the call", r)
		}
		l := e.listenOn(listener, "alice's listen", "alice", map[string]any{"taskIds": []string{id}})
		if g := l.granted(); !slices.Equal(g, []string{id}) {
			t.Fatalf("the listen on %s granted %v, want [%s]: %s", e.c.Replicas[listener].Name, g, id, l.ack.raw)
		}
		l.expectTask(t, id, mcp.TaskWorking)
		e.expectStatus(poller, id, mcp.TaskWorking)

		e.open() // the work asks for q
		task := l.expectTask(t, id, mcp.TaskInputRequired)
		if _, ok := task["inputRequests"].(map[string]any)["q.1"]; !ok {
			t.Fatalf("the listen told %v, want the request q.1", task)
		}
		task = e.expectStatus(poller, id, mcp.TaskInputRequired)
		if _, ok := task["inputRequests"].(map[string]any)["q.1"]; !ok {
			t.Fatalf("tasks/get told %v, want the request q.1", task)
		}

		e.on(listener, "alice", mcp.MethodTasksUpdate, id,
			map[string]any{"taskId": id, "inputResponses": map[string]any{"q.1": accepted("B")}}).ok(t, "tasks/update")
		if r := recv(t, e.rounds, "the answer to wake the work"); r.replica != e.c.Replicas[runner].Name || r.answer != "B" {
			t.Fatalf("the second round: %+v, want it on the replica that took the call, with the answer", r)
		}
		l.expectTask(t, id, mcp.TaskWorking)
		e.expectStatus(poller, id, mcp.TaskWorking)

		e.open() // the work completes
		if text := resultText(l.expectTask(t, id, mcp.TaskCompleted)); text != "told B" {
			t.Errorf("the listen told the result %q", text)
		}
		if text := resultText(e.expectStatus(poller, id, mcp.TaskCompleted)); text != "told B" {
			t.Errorf("tasks/get told the result %q", text)
		}
	})
}

// TestTaskCancelAcrossReplicas: a tasks/cancel through another replica
// than the runner's ends the task as cancelled at once, and the runner,
// told over the bus, cancels its work's context; a listen on the third
// replica hears it, and tasks/get there agrees.
func TestTaskCancelAcrossReplicas(t *testing.T) {
	forEachTaskSetUp(t, func(t *testing.T, e *taskEnv) {
		id := e.create(runner, "alice", "job")
		if at := recv(t, e.jobs, "the work to start"); at != e.c.Replicas[runner].Name {
			t.Fatalf("the work runs on %s", at)
		}
		l := e.listenOn(listener, "alice's listen", "alice", map[string]any{"taskIds": []string{id}})
		if g := l.granted(); !slices.Equal(g, []string{id}) {
			t.Fatalf("the listen on %s granted %v, want [%s]: %s", e.c.Replicas[listener].Name, g, id, l.ack.raw)
		}
		l.expectTask(t, id, mcp.TaskWorking)
		e.on(poller, "alice", mcp.MethodTasksCancel, id, map[string]any{"taskId": id}).ok(t, "tasks/cancel")
		end := recv(t, e.ended, "the work to end")
		if end.byOwnChoice || end.replica != e.c.Replicas[runner].Name || !errors.Is(end.err, context.Canceled) {
			t.Fatalf("the work ended %+v, want its context cancelled on the runner", end)
		}
		t.Logf("the work's context ended with %v", end.cause)
		l.expectTask(t, id, mcp.TaskCancelled)
		e.expectStatus(listener, id, mcp.TaskCancelled)
	})
}

// TestTaskOfAnotherPrincipal: another principal is refused a task on
// every replica. tasks/get, tasks/update and tasks/cancel answer -32602
// as for a task that does not exist, and change nothing; a listen is not
// granted the task and hears nothing of it while it goes through its
// whole life (each replica's sentinel, announced after every change of
// the task, is all it hears).
func TestTaskOfAnotherPrincipal(t *testing.T) {
	forEachTaskSetUp(t, func(t *testing.T, e *taskEnv) {
		id := e.create(runner, "alice", "ask")
		recv(t, e.rounds, "the work to start")
		e.open()
		e.waitStatus(poller, id, mcp.TaskInputRequired)

		var sentinels []string
		for _, r := range e.c.Replicas {
			sentinels = append(sentinels, "res://sentinel/"+r.Name)
		}
		var theirs []*listen
		for i, r := range e.c.Replicas {
			for _, m := range []string{mcp.MethodTasksGet, mcp.MethodTasksUpdate, mcp.MethodTasksCancel} {
				res := e.on(i, "mallory", m, id, map[string]any{"taskId": id, "inputResponses": map[string]any{"q.1": accepted("M")}})
				if res.Error == nil || res.Error.Code != -32602 {
					t.Errorf("mallory's %s on %s: %s, want -32602", m, r.Name, res.raw)
				}
			}
			l := e.listenOn(i, "mallory's listen on "+r.Name, "mallory",
				map[string]any{"taskIds": []string{id}, "resourceSubscriptions": sentinels})
			if g := l.granted(); len(g) != 0 {
				t.Errorf("mallory's listen on %s was granted %v: %s", r.Name, g, l.ack.raw)
			}
			theirs = append(theirs, l)
		}
		// Nothing of mallory's changed the task; alice's answer does.
		e.expectStatus(poller, id, mcp.TaskInputRequired)
		e.on(listener, "alice", mcp.MethodTasksUpdate, id,
			map[string]any{"taskId": id, "inputResponses": map[string]any{"q.1": accepted("A")}}).ok(t, "tasks/update")
		recv(t, e.rounds, "the answer to wake the work")
		e.open()
		e.waitStatus(poller, id, mcp.TaskCompleted)
		// Each replica announces its sentinel after every change of the
		// task it published, and a bus keeps each sender's order: a
		// listen that hears all three has been told all it would be of
		// the task.
		for _, r := range e.c.Replicas {
			r.Server.ResourceUpdated("res://sentinel/" + r.Name)
		}
		for _, l := range theirs {
			heard := map[string]bool{}
			for len(heard) < len(sentinels) {
				m := l.next(t)
				uri, _ := m.Params["uri"].(string)
				if m.Method != mcp.NotifyResourceUpdated || !slices.Contains(sentinels, uri) {
					t.Fatalf("%s heard %s", l.name, m.raw)
				}
				heard[uri] = true
			}
		}
	})
}

// TestTaskPolledAtOnceElsewhere: a task is polled through the next
// replica right after the call that created it is answered, over and
// over: the stores are strongly consistent, so the task is there at
// once, wherever it was created.
func TestTaskPolledAtOnceElsewhere(t *testing.T) {
	forEachTaskSetUp(t, func(t *testing.T, e *taskEnv) {
		for i := range 3 * len(e.c.Replicas) {
			at := i % len(e.c.Replicas)
			id := e.create(at, "alice", "job")
			e.expectStatus(e.after[at], id, mcp.TaskWorking)
			e.on(e.after[e.after[at]], "alice", mcp.MethodTasksCancel, id, map[string]any{"taskId": id}).ok(t, "tasks/cancel")
			recv(t, e.jobs, "the work to start")
			if end := recv(t, e.ended, "the work to end"); end.byOwnChoice {
				t.Fatal("the work was released, not cancelled")
			}
		}
	})
}

// isTaskChange matches the bus messages that tell of a change of task id.
func isTaskChange(id string) func([]byte) bool {
	return func(msg []byte) bool {
		var m struct {
			Body struct {
				Type string `json:"type"`
				Task string `json:"task"`
			} `json:"body"`
		}
		return json.Unmarshal(msg, &m) == nil && m.Body.Type == "change" && m.Body.Task == id
	}
}

// TestTaskAnswerLostOnTheBus: the bus loses the news of an answer given
// through a replica other than the runner's. The runner, which re-reads
// the task only once an hour, finds the gap at the sender's next
// heartbeat, re-reads what it follows, and resumes the work; a listen on
// the third replica hears the change as well.
func TestTaskAnswerLostOnTheBus(t *testing.T) {
	forEachTaskSetUp(t, func(t *testing.T, e *taskEnv) {
		e.broken = true
		id := e.create(runner, "alice", "ask")
		recv(t, e.rounds, "the work to start")
		l := e.listenOn(poller, "alice's listen", "alice", map[string]any{"taskIds": []string{id}})
		l.expectTask(t, id, mcp.TaskWorking)
		e.open()
		l.expectTask(t, id, mcp.TaskInputRequired)
		sender := e.c.Replicas[listener]
		gaps := e.c.Replicas[runner].Bus.Stats().Gaps
		sender.Faults.Drop(1, isTaskChange(id))
		e.on(listener, "alice", mcp.MethodTasksUpdate, id,
			map[string]any{"taskId": id, "inputResponses": map[string]any{"q.1": accepted("lost")}}).ok(t, "tasks/update")
		if r := recv(t, e.rounds, "the runner to take up the answer"); r.replica != e.c.Replicas[runner].Name || r.answer != "lost" {
			t.Fatalf("the second round: %+v", r)
		}
		// The loss shows at the sender's next heartbeat, which may come
		// just after the runner took the answer up another way.
		clustertest.WaitFor(t, "the runner to see the gap the lost news left", func() bool {
			return e.c.Replicas[runner].Bus.Stats().Gaps > gaps
		})
		l.expectTask(t, id, mcp.TaskWorking)
		e.open()
		if text := resultText(l.expectTask(t, id, mcp.TaskCompleted)); text != "told lost" {
			t.Errorf("the result %q", text)
		}
	}, bus.WithHeartbeat(50*time.Millisecond))
}

// TestTaskRunnerKilled: the replica running a task dies. Its shutdown
// fails the task, and a listen on another replica hears so; tasks/get
// through the others reports it failed.
func TestTaskRunnerKilled(t *testing.T) {
	forEachTaskSetUp(t, func(t *testing.T, e *taskEnv) {
		id := e.create(runner, "alice", "job")
		recv(t, e.jobs, "the work to start")
		l := e.listenOn(listener, "alice's listen", "alice", map[string]any{"taskIds": []string{id}})
		l.expectTask(t, id, mcp.TaskWorking)
		e.broken = true
		if err := e.c.Replicas[runner].Kill(); err != nil {
			t.Fatal(err)
		}
		if end := recv(t, e.ended, "the work to end"); end.byOwnChoice {
			t.Fatal("the work was released, not stopped")
		}
		if task := l.expectTask(t, id, mcp.TaskFailed); !strings.Contains(fmt.Sprint(task["error"]), "shut down") {
			t.Errorf("the task failed with %v, want the shutdown", task["error"])
		}
		// The balancer passes the dead replica by.
		for range 2 * len(e.c.Replicas) {
			r, at := e.rpc("alice", mcp.MethodTasksGet, id, map[string]any{"taskId": id})
			if task := r.ok(t, "tasks/get"); at == runner || task["status"] != string(mcp.TaskFailed) {
				t.Fatalf("tasks/get on %s: %v", e.c.Replicas[at].Name, task)
			}
		}
	})
}

// TestTaskFinishedDuringOutage: the work of a task ends while the broker
// is down, so that its runner cannot record how it ended. Once the broker
// is back the task completes with the work's result, and a listen opened
// afterwards hears it.
func TestTaskFinishedDuringOutage(t *testing.T) {
	forEachTaskSetUp(t, func(t *testing.T, e *taskEnv) {
		if e.br == nil {
			t.Skip("the local bus has no broker to take down")
		}
		e.broken = true
		id := e.create(runner, "alice", "job")
		recv(t, e.jobs, "the work to start")
		e.br.Down()
		e.open() // the work ends, and its result has nowhere to go
		if end := recv(t, e.ended, "the work to end"); !end.byOwnChoice {
			t.Fatalf("the work was stopped: %+v", end)
		}
		e.br.Up()
		for _, r := range e.c.Replicas {
			clustertest.WaitFor(t, "replica "+r.Name+" to reconnect", func() bool { return r.Bus.Stats().Connected })
		}
		// Each replica's store reconnects in its own time: until then a
		// read through it fails (-32603).
		for i, r := range e.c.Replicas {
			var task map[string]any
			clustertest.WaitFor(t, "the task to complete, through "+r.Name, func() bool {
				task = e.on(i, "alice", mcp.MethodTasksGet, id, map[string]any{"taskId": id}).Result
				return task != nil && task["status"] == string(mcp.TaskCompleted)
			})
			if text := resultText(task); text != "released" {
				t.Errorf("the result %q, through %s", text, r.Name)
			}
		}
		l := e.listenOn(listener, "alice's listen", "alice", map[string]any{"taskIds": []string{id}})
		if text := resultText(l.expectTask(t, id, mcp.TaskCompleted)); text != "released" {
			t.Errorf("the listen told the result %q", text)
		}
	})
}
