package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/client"
	"tidings/gateway"
	"tidings/internal/testrig/testkit"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// taskUpstream serves, on loopback, a server whose tools go on as tasks:
// "slow" completes once release is closed, "wait" only when cancelled,
// "quick" at once, and "ask" asks for a name, then greets it. gets counts the tasks/get
// it answers.
func taskUpstream(t *testing.T) (url string, release chan struct{}, gets *atomic.Int64) {
	t.Helper()
	release, gets = make(chan struct{}), new(atomic.Int64)
	counter := func(next server.MethodHandler) server.MethodHandler {
		return func(ctx context.Context, req *server.Request) error {
			if req.Method == mcp.MethodTasksGet {
				gets.Add(1)
			}
			return next(ctx, req)
		}
	}
	srv := server.New(mcp.Implementation{Name: "tasks", Version: "1"}, server.WithTaskPollInterval(20*time.Millisecond), server.WithMiddleware(counter))
	add := func(name string, work server.ToolHandler) {
		err := srv.AddTool(mcp.Tool{Name: name, InputSchema: jsontext.Value(`{"type":"object"}`)}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			return req.RunAsTask(ctx, work)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	add("slow", func(ctx context.Context, _ *server.ToolRequest) (*mcp.CallToolResult, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("done")}}, nil
	})
	add("quick", func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("quick")}}, nil
	})
	add("wait", func(ctx context.Context, _ *server.ToolRequest) (*mcp.CallToolResult, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	add("ask", func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		raw, ok := req.InputResponses["name"]
		if !ok {
			return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"name": {Method: mcp.MethodElicit, Params: jsontext.Value(
				`{"mode":"form","message":"name?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}}}}`)}}}
		}
		var a struct {
			Content struct {
				Name string `json:"name"`
			} `json:"content"`
		}
		_ = json.Unmarshal(raw, &a)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("hello " + a.Content.Name)}}, nil
	})
	return serveOnLoopback(t, srv, streamhttp.New(srv)), release, gets
}

// tasksCaps declares the tasks extension, and form elicitation.
var tasksCaps = mcp.ClientCaps{Elicitation: &mcp.ElicitationCaps{},
	Extensions: map[string]jsontext.Value{mcp.ExtensionTasks: jsontext.Value("{}")}}

// caller is one principal's client of the gateway (X-User, see
// startGateway, or authz, the Authorization header, where the gateway
// checks tokens), asking with the tasks extension declared.
type caller struct {
	t     *testing.T
	c     *client.Client
	url   string
	user  string
	authz string
}

func newCaller(t *testing.T, url, user string) *caller {
	c := client.NewHTTP(url, client.WithHeader("X-User", user))
	t.Cleanup(func() { _ = c.Close() })
	return &caller{t: t, c: c, url: url, user: user}
}

// task sends method about the task id and decodes its result into a
// task; the error is the gateway's refusal.
func (c *caller) task(method, id string, extra map[string]any) (mcp.Task, error) {
	c.t.Helper()
	params := map[string]any{"taskId": id}
	for k, v := range extra {
		params[k] = v
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	res, err := c.c.Request(ctx, method, params, client.WithCapabilities(tasksCaps))
	if err != nil {
		return mcp.Task{}, err
	}
	var tk mcp.Task
	if err := json.Unmarshal(res, &tk); err != nil {
		c.t.Fatalf("%s: %v", method, err)
	}
	return tk, nil
}

// start calls tool and returns the task it went on as.
func (c *caller) start(tool string) mcp.Task {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	res, err := c.c.Request(ctx, mcp.MethodToolsCall, map[string]any{"name": tool, "arguments": map[string]any{}}, client.WithCapabilities(tasksCaps))
	if err != nil {
		c.t.Fatalf("tools/call %s: %v", tool, err)
	}
	var tk struct {
		ResultType string `json:"resultType"`
		mcp.Task
	}
	if err := json.Unmarshal(res, &tk); err != nil || tk.ResultType != mcp.ResultTask || tk.TaskID == "" {
		c.t.Fatalf("tools/call %s answered %s (%v), not a task", tool, res, err)
	}
	return tk.Task
}

// waitFor polls the task until its status is want.
func (c *caller) waitFor(id string, want mcp.TaskStatus) mcp.Task {
	c.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		tk, err := c.task(mcp.MethodTasksGet, id, nil)
		if err != nil {
			c.t.Fatalf("tasks/get: %v", err)
		}
		if tk.Status == want {
			return tk
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("task %s stayed %s, want %s", id, tk.Status, want)
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
}

// notFound checks that err is the refusal of an unknown task.
func notFound(t *testing.T, what string, err error) *jsonrpc.Error {
	t.Helper()
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams || !strings.Contains(je.Message, "Task not found") {
		t.Fatalf("%s: got %v, want the unknown task's -32602", what, err)
	}
	return je
}

// listenTasks opens a subscriptions/listen following ids as c, and
// returns its messages, one decoded JSON-RPC message each.
func (c *caller) listenTasks(ids ...string) <-chan map[string]json.RawMessage {
	c.t.Helper()
	b, _ := json.Marshal(ids)
	return c.listen(`{"taskIds":` + string(b) + `}`)
}

// listen opens a subscriptions/listen with the filter notifications as
// c, and returns its messages, one decoded JSON-RPC message each; the
// channel is closed when the listen's stream ends.
func (c *caller) listen(notifications string) <-chan map[string]json.RawMessage {
	c.t.Helper()
	body := `{"jsonrpc":"2.0","id":7,"method":"subscriptions/listen","params":{"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":` +
		`{"extensions":{"io.modelcontextprotocol/tasks":{}}}},"notifications":` + notifications + `}}`
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version)
	req.Header.Set(mcp.HeaderMethod, mcp.MethodListen)
	if c.authz != "" {
		req.Header.Set("Authorization", c.authz)
	} else {
		req.Header.Set("X-User", c.user)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		c.t.Fatal(err)
	}
	out := make(chan map[string]json.RawMessage, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var m map[string]json.RawMessage
			if json.Unmarshal([]byte(data), &m) == nil {
				select {
				case out <- m:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	c.t.Cleanup(func() {
		cancel()
		resp.Body.Close()
		<-done
	})
	return out
}

// next returns the listen's next message of method.
func next(t *testing.T, msgs <-chan map[string]json.RawMessage, method string) json.RawMessage {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("the listen ended before a %s", method)
			}
			var got string
			_ = json.Unmarshal(m["method"], &got)
			if got == method {
				return m["params"]
			}
		case <-timeout:
			t.Fatalf("no %s within %v", method, waitTimeout)
		}
	}
}

// granted returns the task ids the listen's acknowledgement grants.
func granted(t *testing.T, msgs <-chan map[string]json.RawMessage) []string {
	t.Helper()
	var ack struct {
		Notifications mcp.SubscriptionFilter `json:"notifications"`
	}
	if err := json.Unmarshal(next(t, msgs, mcp.NotifyAcknowledged), &ack); err != nil {
		t.Fatal(err)
	}
	return ack.Notifications.TaskIDs
}

// followsWorking checks that the listen was granted the task id alone,
// and first told that it is working.
func followsWorking(t *testing.T, msgs <-chan map[string]json.RawMessage, id string) {
	t.Helper()
	if got := granted(t, msgs); len(got) != 1 || got[0] != id {
		t.Fatalf("the listen was granted %v, want [%s]", got, id)
	}
	if first := nextStatus(t, msgs); first.TaskID != id || first.Status != mcp.TaskWorking {
		t.Fatalf("first told %s %s, want %s working", first.TaskID, first.Status, id)
	}
}

// nextStatus returns the next notifications/tasks of the listen.
func nextStatus(t *testing.T, msgs <-chan map[string]json.RawMessage) mcp.Task {
	t.Helper()
	var tk mcp.Task
	if err := json.Unmarshal(next(t, msgs, mcp.NotifyTasks), &tk); err != nil {
		t.Fatal(err)
	}
	return tk
}

// TestTaskPassesThroughTheGateway: a call the upstream runs as a task
// goes down as one, under an id of the gateway's own; tasks/get finds
// it under that id, working and then completed with the upstream's
// result.
func TestTaskPassesThroughTheGateway(t *testing.T) {
	url, release, _ := taskUpstream(t)
	_, gw := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "up", URL: url}}})
	alice := newCaller(t, gw, "alice")

	tk := alice.start("up_slow")
	if tk.Status != mcp.TaskWorking {
		t.Fatalf("created %s, want working", tk.Status)
	}
	got, err := alice.task(mcp.MethodTasksGet, tk.TaskID, nil)
	if err != nil {
		t.Fatalf("tasks/get: %v", err)
	}
	if got.TaskID != tk.TaskID || got.Status != mcp.TaskWorking {
		t.Fatalf("tasks/get: %s %s, want %s working", got.TaskID, got.Status, tk.TaskID)
	}
	close(release)
	done := alice.waitFor(tk.TaskID, mcp.TaskCompleted)
	var res mcp.CallToolResult
	if err := json.Unmarshal(done.Result, &res); err != nil || len(res.Content) != 1 || *res.Content[0].Text != "done" {
		t.Fatalf("completed with %s (%v)", done.Result, err)
	}
	if done.TaskID != tk.TaskID {
		t.Fatalf("completed task told as %s, want %s", done.TaskID, tk.TaskID)
	}
}

// TestTaskIsTheCallersAlone: another caller, an id forged from a real
// one and one made up are all told what an unknown task is told, for
// get, update and cancel alike, and the task goes on untouched.
func TestTaskIsTheCallersAlone(t *testing.T) {
	url, _, _ := taskUpstream(t)
	_, gw := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "up", URL: url}}})
	alice, bob := newCaller(t, gw, "alice"), newCaller(t, gw, "bob")
	tk := alice.start("up_wait")

	forged := []byte(tk.TaskID)
	forged[len(forged)/2] ^= 1
	var first *jsonrpc.Error
	for _, tc := range []struct {
		who *caller
		id  string
	}{{bob, tk.TaskID}, {alice, string(forged)}, {alice, "up/" + tk.TaskID}, {alice, "nothing"}} {
		for _, m := range []string{mcp.MethodTasksGet, mcp.MethodTasksCancel, mcp.MethodTasksUpdate} {
			_, err := tc.who.task(m, tc.id, map[string]any{"inputResponses": map[string]any{}})
			je := notFound(t, tc.who.user+" "+m+" "+tc.id, err)
			if first == nil {
				first = je
			} else if je.Message != first.Message {
				t.Fatalf("%s %s: %q, where an unknown task is %q", tc.who.user, m, je.Message, first.Message)
			}
		}
	}
	if got, err := alice.task(mcp.MethodTasksGet, tk.TaskID, nil); err != nil || got.Status != mcp.TaskWorking {
		t.Fatalf("after the others' tries, alice's task is %s (%v), want working", got.Status, err)
	}
}

// TestTaskCancelGoesUpstream: tasks/cancel reaches the upstream, whose
// task then reads cancelled.
func TestTaskCancelGoesUpstream(t *testing.T) {
	url, _, _ := taskUpstream(t)
	_, gw := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "up", URL: url}}})
	alice := newCaller(t, gw, "alice")
	tk := alice.start("up_wait")
	if _, err := alice.task(mcp.MethodTasksCancel, tk.TaskID, nil); err != nil {
		t.Fatalf("tasks/cancel: %v", err)
	}
	alice.waitFor(tk.TaskID, mcp.TaskCancelled)
}

// TestTaskInputGoesDownAndAnswersUp: a task's requests for input reach
// the caller through tasks/get, and its answers, through tasks/update,
// the upstream's task, which then completes with them.
func TestTaskInputGoesDownAndAnswersUp(t *testing.T) {
	url, _, _ := taskUpstream(t)
	_, gw := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "up", URL: url}}})
	alice := newCaller(t, gw, "alice")
	tk := alice.start("up_ask")
	asked := alice.waitFor(tk.TaskID, mcp.TaskInputRequired)
	if len(asked.InputRequests) != 1 {
		t.Fatalf("input_required with %v, want one request", asked.InputRequests)
	}
	answers := map[string]any{}
	for k, r := range asked.InputRequests {
		if r.Method != mcp.MethodElicit {
			t.Fatalf("asked %s, want %s", r.Method, mcp.MethodElicit)
		}
		answers[k] = map[string]any{"action": "accept", "content": map[string]any{"name": "Ada"}}
	}
	if _, err := alice.task(mcp.MethodTasksUpdate, tk.TaskID, map[string]any{"inputResponses": answers}); err != nil {
		t.Fatalf("tasks/update: %v", err)
	}
	done := alice.waitFor(tk.TaskID, mcp.TaskCompleted)
	var res mcp.CallToolResult
	if err := json.Unmarshal(done.Result, &res); err != nil || len(res.Content) != 1 || *res.Content[0].Text != "hello Ada" {
		t.Fatalf("completed with %s (%v)", done.Result, err)
	}
}

// TestListenFollowsTaskThroughTheGateway: a listen that follows a task
// by the gateway's id is told its state at once and again when it
// changes upstream, under that id; another caller's listen is granted
// nothing of it.
func TestListenFollowsTaskThroughTheGateway(t *testing.T) {
	url, release, gets := taskUpstream(t)
	_, gw := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "up", URL: url}}})
	alice, bob := newCaller(t, gw, "alice"), newCaller(t, gw, "bob")
	tk := alice.start("up_slow")

	if got := granted(t, bob.listenTasks(tk.TaskID)); len(got) != 0 {
		t.Fatalf("bob's listen was granted %v of alice's task", got)
	}

	before := gets.Load()
	msgs := alice.listenTasks(tk.TaskID)
	followsWorking(t, msgs, tk.TaskID)
	// The task says nothing more until it completes: a state told once
	// is not told again, though the gateway's first look upstream finds
	// what the listen began with and has it read again. Four reads (the
	// listen's, the first look, the read it has made, a second look) are
	// waited for, so that the task completes after them.
	deadline := time.Now().Add(waitTimeout)
	for gets.Load() < before+4 {
		if time.Now().After(deadline) {
			t.Fatalf("the gateway read the task %d times upstream, want 4", gets.Load()-before)
		}
		time.Sleep(5 * time.Millisecond) // polling with a deadline
	}
	close(release)
	st := nextStatus(t, msgs)
	if st.TaskID != tk.TaskID || st.Status != mcp.TaskCompleted || len(st.Result) == 0 {
		t.Fatalf("then told %s %s with result %s, want %s completed with one", st.TaskID, st.Status, st.Result, tk.TaskID)
	}
}

// TestListenFollowsTaskThroughAReload: a reload that replaces the
// task's upstream (same id, other settings) does not leave the poll on
// the closed client: the listen is still told when the task completes.
func TestListenFollowsTaskThroughAReload(t *testing.T) {
	url, release, gets := taskUpstream(t)
	cfg := gateway.Config{Upstreams: []gateway.Upstream{{ID: "up", URL: url}}}
	g, gw := startGateway(t, cfg)
	alice := newCaller(t, gw, "alice")
	tk := alice.start("up_slow")
	before := gets.Load()
	msgs := alice.listenTasks(tk.TaskID)
	if first := nextStatus(t, msgs); first.Status != mcp.TaskWorking {
		t.Fatalf("first told %s, want working", first.Status)
	}
	// The reload comes once the poll has read the task through the old
	// upstream and gone quiet: five reads (the listen's, the poll's first
	// look, the listen's read again that it has made, two more looks),
	// so that no read of the listen's is under way when the old client
	// is closed.
	testkit.WaitFor(t, waitTimeout, "the gateway polling the task", func() bool { return gets.Load() >= before+5 })

	cfg.Upstreams = []gateway.Upstream{{ID: "up", URL: url, Exclude: []string{"nothing"}}}
	if err := g.Reload(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	close(release)
	st := nextStatus(t, msgs)
	if st.TaskID != tk.TaskID || st.Status != mcp.TaskCompleted {
		t.Fatalf("then told %s %s, want %s completed", st.TaskID, st.Status, tk.TaskID)
	}
}

// TestTaskReadThroughAReload: a listen's read of its task that is on
// its way upstream when a reload replaces the upstream, closing its
// client, is asked again of the upstream that replaced it: the listen
// is granted the task and told its state, where it used to end with an
// internal error.
func TestTaskReadThroughAReload(t *testing.T) {
	url, release, _ := taskUpstream(t)
	defer close(release)
	hp := holdOne(t, url, mcp.MethodTasksGet)
	cfg := gateway.Config{Upstreams: []gateway.Upstream{{ID: "up", URL: hp.url}}}
	g, gw := startGateway(t, cfg)
	alice := newCaller(t, gw, "alice")
	tk := alice.start("up_slow")

	// The listen is answered once its read is, so the reload comes from
	// apart, once the read is held upstream.
	reloaded := hp.reloadWhenHeld(g, replacing(hp.url))
	msgs := alice.listenTasks(tk.TaskID)
	if err := <-reloaded; err != nil {
		t.Fatal(err)
	}
	followsWorking(t, msgs, tk.TaskID)
}

// replacing is a reload of the one upstream "up" at url that replaces
// it: the same server, with a config that differs.
func replacing(url string) gateway.Config {
	return gateway.Config{Upstreams: []gateway.Upstream{{ID: "up", URL: url, Exclude: []string{"nothing"}}}}
}

// holdingProxy stands between the gateway and a task upstream: once
// armed, it holds the next request of its method until the gateway's
// client leaves, as an upstream would that was replaced mid-request.
type holdingProxy struct {
	url  string
	hold atomic.Bool
	held chan struct{}
}

// holdOne serves a holdingProxy in front of url for requests of method.
func holdOne(t *testing.T, url, method string) *holdingProxy {
	t.Helper()
	target, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	hp := &holdingProxy{held: make(chan struct{}, 1)}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(mcp.HeaderMethod) == method && hp.hold.CompareAndSwap(true, false) {
			hp.held <- struct{}{}
			// Read whole, so that the server notices the client leave.
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done() // until the gateway's client is closed
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	hp.url = hs.URL
	return hp
}

// reloadWhenHeld arms hp and, once it holds a request, reloads g with
// next; the reload's error, or why it never came, arrives on the
// channel.
func (hp *holdingProxy) reloadWhenHeld(g *gateway.Gateway, next gateway.Config) <-chan error {
	hp.hold.Store(true)
	reloaded := make(chan error, 1)
	go func() {
		select {
		case <-hp.held:
		case <-time.After(waitTimeout):
			reloaded <- errors.New("the request to hold never reached the upstream")
			return
		}
		reloaded <- g.Reload(context.Background(), next)
	}()
	return reloaded
}

// TestTasksAreOfferedOnlyWhereAnUpstreamRunsThem: the gateway advertises
// the extension when an upstream does, and otherwise neither advertises
// nor serves it.
func TestTasksAreOfferedOnlyWhereAnUpstreamRunsThem(t *testing.T) {
	ctx := context.Background()
	url, _, _ := taskUpstream(t)
	plain := startUpstream(t, mcp.ScopePublic, "echo")
	for _, tc := range []struct {
		url  string
		want bool
	}{{url, true}, {plain.url, false}} {
		_, gw := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "up", URL: tc.url}}})
		c := client.NewHTTP(gw)
		d, err := c.Discover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, got := d.Capabilities.Extensions[mcp.ExtensionTasks]; got != tc.want {
			t.Fatalf("in front of %s, the gateway advertises tasks: %v, want %v", tc.url, got, tc.want)
		}
		if !tc.want {
			_, err := c.Request(ctx, mcp.MethodTasksGet, map[string]any{"taskId": "x"}, client.WithCapabilities(tasksCaps))
			var je *jsonrpc.Error
			if !errors.As(err, &je) || je.Code != jsonrpc.CodeMethodNotFound {
				t.Fatalf("tasks/get without tasks upstream: %v, want method not found", err)
			}
		}
		_ = c.Close()
	}
}

// TestTasksDeclaredNullAreNotOffered: an upstream whose capabilities
// give the tasks extension a null value has declared nothing, and the
// gateway does not advertise tasks in front of it.
func TestTasksDeclaredNullAreNotOffered(t *testing.T) {
	url, _, _ := taskUpstream(t)
	target, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	var nulled atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.ModifyResponse = func(resp *http.Response) error {
		if resp.Request.Header.Get(mcp.HeaderMethod) != mcp.MethodDiscover {
			return nil
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return err
		}
		declared := []byte(`"` + mcp.ExtensionTasks + `":{}`)
		if bytes.Contains(b, declared) {
			nulled.Add(1)
			b = bytes.ReplaceAll(b, declared, []byte(`"`+mcp.ExtensionTasks+`":null`))
		}
		resp.Body = io.NopCloser(bytes.NewReader(b))
		resp.ContentLength = int64(len(b))
		resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
		return nil
	}
	hs := httptest.NewServer(proxy)
	t.Cleanup(hs.Close)

	_, gw := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "up", URL: hs.URL}}})
	if nulled.Load() == 0 {
		t.Fatal("the upstream's discover answer declared no tasks extension to make null")
	}
	c := client.NewHTTP(gw)
	t.Cleanup(func() { _ = c.Close() })
	d, err := c.Discover(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, got := d.Capabilities.Extensions[mcp.ExtensionTasks]; got {
		t.Fatal("the gateway advertises tasks in front of an upstream that declared them null")
	}
}

// TestEarlierEraCallerGetsTheResult: a 2025-11-25 caller, for whom the
// extension has no form, is never answered with a task, even one that
// declared the extension in its initialize: the gateway asks the
// upstream for none, and the call is answered with the result.
func TestEarlierEraCallerGetsTheResult(t *testing.T) {
	url, _, _ := taskUpstream(t)
	_, gw := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "up", URL: url}}})
	session := ""
	post := func(body string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, gw, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set(mcp.HeaderProtocolVersion, "2025-11-25")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
			session = id
		}
		var b strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				b.WriteString(data)
			} else if strings.HasPrefix(sc.Text(), "{") {
				b.WriteString(sc.Text())
			}
		}
		return b.String()
	}
	post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",` +
		`"capabilities":{"extensions":{"io.modelcontextprotocol/tasks":{}}},"clientInfo":{"name":"old","version":"1"}}}`)
	if session == "" {
		t.Fatal("no session")
	}
	post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	got := post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"up_quick","arguments":{}}}`)
	if !strings.Contains(got, `"text":"quick"`) {
		t.Fatalf("2025-11-25 call answered %s, want the tool's result", got)
	}
}

// TestTaskUpdateThroughAReload: a tasks/update on its way upstream when
// a reload replaces the upstream, closing its client, is not sent again
// (the answers may have been taken): its caller is told that the reload
// came in between and to read the task before answering again, where
// it heard only that the upstream failed. The task still asks, and the
// answers sent again complete it.
func TestTaskUpdateThroughAReload(t *testing.T) {
	url, _, _ := taskUpstream(t)
	hp := holdOne(t, url, mcp.MethodTasksUpdate)
	cfg := gateway.Config{Upstreams: []gateway.Upstream{{ID: "up", URL: hp.url}}}
	g, gw := startGateway(t, cfg)
	alice := newCaller(t, gw, "alice")
	tk := alice.start("up_ask")
	asked := alice.waitFor(tk.TaskID, mcp.TaskInputRequired)
	answers := map[string]any{}
	for k := range asked.InputRequests {
		answers[k] = map[string]any{"action": "accept", "content": map[string]any{"name": "Ada"}}
	}

	reloaded := hp.reloadWhenHeld(g, replacing(hp.url))
	_, err := alice.task(mcp.MethodTasksUpdate, tk.TaskID, map[string]any{"inputResponses": answers})
	if rerr := <-reloaded; rerr != nil {
		t.Fatal(rerr)
	}
	var je *jsonrpc.Error
	if !errors.As(err, &je) || !strings.Contains(je.Message, "reload") || !strings.Contains(je.Message, "tasks/get") {
		t.Fatalf("tasks/update cut by a reload: %v, want an error that names the reload and tasks/get", err)
	}
	alice.waitFor(tk.TaskID, mcp.TaskInputRequired)
	if _, err := alice.task(mcp.MethodTasksUpdate, tk.TaskID, map[string]any{"inputResponses": answers}); err != nil {
		t.Fatalf("tasks/update again: %v", err)
	}
	alice.waitFor(tk.TaskID, mcp.TaskCompleted)
}

// TestTaskUpdateThroughARemoval: a tasks/update on its way upstream when
// a reload removes the upstream is answered as for any task the gateway
// does not know: not found, not an invitation to read the task.
func TestTaskUpdateThroughARemoval(t *testing.T) {
	url, _, _ := taskUpstream(t)
	hp := holdOne(t, url, mcp.MethodTasksUpdate)
	other := startUpstream(t, mcp.ScopePublic, "echo")
	cfg := gateway.Config{Upstreams: []gateway.Upstream{{ID: "up", URL: hp.url}, {ID: "other", URL: other.url}}}
	g, gw := startGateway(t, cfg)
	alice := newCaller(t, gw, "alice")
	tk := alice.start("up_ask")
	alice.waitFor(tk.TaskID, mcp.TaskInputRequired)

	reloaded := hp.reloadWhenHeld(g, gateway.Config{Upstreams: []gateway.Upstream{{ID: "other", URL: other.url}}})
	_, err := alice.task(mcp.MethodTasksUpdate, tk.TaskID, map[string]any{"inputResponses": map[string]any{}})
	if rerr := <-reloaded; rerr != nil {
		t.Fatal(rerr)
	}
	var je *jsonrpc.Error
	if !errors.As(err, &je) || je.Code != jsonrpc.CodeInvalidParams || strings.Contains(je.Message, "reload") {
		t.Fatalf("tasks/update cut by the removal of its upstream: %v, want the task not found", err)
	}
}
