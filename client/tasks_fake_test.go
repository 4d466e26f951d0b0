package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/mcp"
)

// TestTaskPollIntervalBounds: the interval a server suggests is kept
// within the client's floor and cap, and none means the default.
func TestTaskPollIntervalBounds(t *testing.T) {
	for _, c := range []struct {
		ms   int64
		want time.Duration
	}{
		{0, time.Second},
		{-5, time.Second},
		{1, 100 * time.Millisecond},
		{100, 100 * time.Millisecond},
		{250, 250 * time.Millisecond},
		{5000, 5 * time.Second},
		{30000, 30 * time.Second},
		{60000, time.Minute},
		{600000, 10 * time.Minute},
		{600001, 10 * time.Minute},
		{1 << 62, 10 * time.Minute},
	} {
		if got := taskPollInterval(c.ms); got != c.want {
			t.Errorf("taskPollInterval(%d) = %v, want %v", c.ms, got, c.want)
		}
	}
}

// TestJitterBounds: jitter stays within ±20% and does spread.
func TestJitterBounds(t *testing.T) {
	d := time.Second
	seen := map[time.Duration]bool{}
	for range 2000 {
		j := jitter(d)
		if j < 800*time.Millisecond || j > 1200*time.Millisecond {
			t.Fatalf("jitter(%v) = %v, outside ±20%%", d, j)
		}
		seen[j] = true
	}
	if len(seen) < 100 {
		t.Errorf("jitter gave only %d distinct values out of 2000", len(seen))
	}
	if j := jitter(0); j != 0 {
		t.Errorf("jitter(0) = %v", j)
	}
}

// TestTaskCapabilityDeclared: the tasks extension goes on tools/call and
// the tasks requests, not on others, and WithoutTasks takes it away.
func TestTaskCapabilityDeclared(t *testing.T) {
	c := NewHTTP("http://127.0.0.1:1/mcp")
	defer c.Close()
	if _, ok := c.Capabilities().Extensions[mcp.ExtensionTasks]; !ok {
		t.Errorf("Capabilities() = %+v, want the tasks extension", c.Capabilities())
	}
	for _, m := range []string{mcp.MethodToolsCall, mcp.MethodTasksGet, mcp.MethodTasksUpdate, mcp.MethodTasksCancel, mcp.MethodListen} {
		if _, ok := c.requestCaps(m).Extensions[mcp.ExtensionTasks]; !ok {
			t.Errorf("%s does not declare the tasks extension", m)
		}
	}
	for _, m := range []string{mcp.MethodToolsList, mcp.MethodPromptsGet, mcp.MethodResourcesRead, mcp.MethodInitialize} {
		if caps := c.requestCaps(m); caps.Extensions != nil {
			t.Errorf("%s declares extensions %v", m, caps.Extensions)
		}
	}
	off := NewHTTP("http://127.0.0.1:1/mcp", WithoutTasks())
	defer off.Close()
	if caps := off.Capabilities(); caps.Extensions != nil {
		t.Errorf("WithoutTasks: Capabilities() = %+v", caps)
	}
	if caps := off.requestCaps(mcp.MethodToolsCall); caps.Extensions != nil {
		t.Errorf("WithoutTasks: tools/call declares %v", caps.Extensions)
	}
}

// fakeTasks is a hand-made server of one task, for behaviour the test
// must control request by request: each tasks/get answers the next state
// from states (the last one repeats).
type fakeTasks struct {
	mu      sync.Mutex
	states  []string // task JSON without taskId and timestamps
	gets    int
	updates []map[string]json.RawMessage
	cancels int
	// getErr, when set, answers tasks/get with this error object: the
	// first getErrs of them, or all when getErrs is 0. failedGets counts
	// those it answered.
	getErr     string
	getErrs    int
	failedGets int
	// updateErr, when set, answers every tasks/update with this error
	// object.
	updateErr string
	// created, when set, is the task handle tools/call answers, instead
	// of a working task.
	created string
}

const fakeTaskID = "task-abc"

func (f *fakeTasks) task(body string) string {
	return fmt.Sprintf(`{"taskId":%q,"createdAt":"2026-07-28T12:00:00Z","lastUpdatedAt":"2026-07-28T12:00:00Z","ttlMs":null,%s}`, fakeTaskID, body)
}

func (f *fakeTasks) serve(_ int, r rawRequest) (string, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch r.Method {
	case mcp.MethodToolsList:
		return `{"tools":[{"name":"slow","inputSchema":{"type":"object"}}],"resultType":"complete"}`, ""
	case mcp.MethodToolsCall, mcp.MethodPromptsGet:
		t := f.task(`"status":"working","pollIntervalMs":100`)
		if f.created != "" {
			t = f.task(f.created)
		}
		return strings.Replace(t, "{", `{"resultType":"task",`, 1), ""
	case mcp.MethodTasksGet:
		if f.getErr != "" && (f.getErrs == 0 || f.failedGets < f.getErrs) {
			f.failedGets++
			return "", f.getErr
		}
		s := f.states[min(f.gets, len(f.states)-1)]
		f.gets++
		return strings.Replace(f.task(s), "{", `{"resultType":"complete",`, 1), ""
	case mcp.MethodTasksUpdate:
		f.updates = append(f.updates, r.Params)
		if f.updateErr != "" {
			return "", f.updateErr
		}
		return `{"resultType":"complete"}`, ""
	case mcp.MethodTasksCancel:
		f.cancels++
		return `{"resultType":"complete"}`, ""
	}
	return "", `{"code":-32601,"message":"no"}`
}

// TestTaskPolledInputDeduped: a task polled (the server offers no task
// notifications) shows the same input request on several polls; the
// client asks its handler once, sends the answer once with tasks/update,
// then gets the result. Every tasks request names the task in Mcp-Name
// and declares the extension.
func TestTaskPolledInputDeduped(t *testing.T) {
	elicit := `"inputRequests":{"name":{"method":"elicitation/create","params":{"mode":"form","message":"Name?","requestedSchema":{"type":"object"}}}}`
	f := &fakeTasks{states: []string{
		`"status":"working","statusMessage":"warming up","pollIntervalMs":100`,
		`"status":"input_required","pollIntervalMs":100,` + elicit,
		`"status":"input_required","pollIntervalMs":100,` + elicit,
		`"status":"input_required","pollIntervalMs":100,` + elicit,
		`"status":"working","statusMessage":"thanks","pollIntervalMs":100`,
		`"status":"completed","pollIntervalMs":100,"result":{"content":[{"type":"text","text":"hello Ada"}]}`,
	}}
	ts, rec := rawServer(t, f.serve)
	var asked atomic.Int32
	c := rawClient(t, ts.URL+"/mcp", WithElicitation(func(context.Context, jsontext.Value) (*mcp.ElicitResult, error) {
		asked.Add(1)
		return &mcp.ElicitResult{Action: "accept", Content: map[string]jsontext.Value{"name": jsontext.Value(`"Ada"`)}}, nil
	}))
	var states []string
	var progress []string
	res, err := c.CallTool(testCtx(t), "slow", nil,
		WithTaskStatus(func(task mcp.Task) { states = append(states, string(task.Status)+":"+task.StatusMessage) }),
		WithProgress(func(p float64, _ *float64, msg string) { progress = append(progress, fmt.Sprintf("%g %s", p, msg)) }))
	must(t, err)
	if len(res.Content) != 1 || *res.Content[0].Text != "hello Ada" {
		t.Fatalf("result = %+v", res)
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("elicitation handler asked %d times, want 1", n)
	}
	f.mu.Lock()
	updates := f.updates
	f.mu.Unlock()
	if len(updates) != 1 || string(updates[0]["taskId"]) != `"`+fakeTaskID+`"` || !strings.Contains(string(updates[0]["inputResponses"]), `"name":{"action":"accept"`) {
		t.Errorf("tasks/update requests = %s", updates)
	}
	want := []string{"working:", "working:warming up", "input_required:", "working:thanks", "completed:"}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Errorf("task states = %q, want %q", states, want)
	}
	if fmt.Sprint(progress) != "[1  2 warming up 3  4 thanks 5 ]" {
		t.Errorf("progress = %q", progress)
	}
	for _, m := range []string{mcp.MethodToolsCall, mcp.MethodTasksGet, mcp.MethodTasksUpdate} {
		reqs := rec.requests(m)
		if len(reqs) == 0 {
			t.Fatalf("no %s request", m)
		}
		for _, s := range reqs {
			if got := s.Header.Get(mcp.HeaderMethod); got != m {
				t.Errorf("%s: Mcp-Method = %q", m, got)
			}
			if m != mcp.MethodToolsCall {
				if got := s.Header.Get(mcp.HeaderName); got != fakeTaskID {
					t.Errorf("%s: Mcp-Name = %q, want the task id", m, got)
				}
			}
			var caps struct {
				Extensions map[string]json.RawMessage `json:"extensions"`
			}
			_ = json.Unmarshal(s.meta(t)["io.modelcontextprotocol/clientCapabilities"], &caps)
			if _, ok := caps.Extensions[mcp.ExtensionTasks]; !ok {
				t.Errorf("%s does not declare the tasks extension: %s", m, s.Body)
			}
		}
	}
}

// TestTaskForOtherMethodInvalid: a task handle is an invalid answer to
// anything but tools/call, and to a tools/call that did not declare the
// extension.
func TestTaskForOtherMethodInvalid(t *testing.T) {
	f := &fakeTasks{states: []string{`"status":"completed","result":{"content":[]}`}}
	ts, _ := rawServer(t, f.serve)
	c := rawClient(t, ts.URL+"/mcp")
	if _, err := c.GetPrompt(context.Background(), "p", nil); err == nil || !strings.Contains(err.Error(), "not a valid answer") {
		t.Errorf("prompts/get answered with a task: err = %v", err)
	}
	off := rawClient(t, ts.URL+"/mcp", WithoutTasks())
	if _, err := off.CallTool(testCtx(t), "slow", nil); err == nil || !strings.Contains(err.Error(), "not a valid answer") {
		t.Errorf("WithoutTasks, tools/call answered with a task: err = %v", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gets != 0 {
		t.Errorf("%d tasks/get for tasks that were invalid answers", f.gets)
	}
}

// TestTaskOutcomes: a failed task is the call's JSON-RPC error, a
// cancelled one ErrTaskCancelled, and a task asking for input the client
// has no handler for is cancelled, ending the call as MRTR would.
func TestTaskOutcomes(t *testing.T) {
	t.Run("failed", func(t *testing.T) {
		f := &fakeTasks{states: []string{`"status":"failed","error":{"code":-32603,"message":"rate limited","data":{"retry":5}}`}}
		ts, _ := rawServer(t, f.serve)
		_, err := rawClient(t, ts.URL+"/mcp").CallTool(testCtx(t), "slow", nil)
		var rpc *RPCError
		if !errors.As(err, &rpc) || rpc.Code != -32603 || rpc.Message != "rate limited" || string(rpc.Data) != `{"retry":5}` {
			t.Errorf("err = %#v, want the task's JSON-RPC error", err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		f := &fakeTasks{states: []string{`"status":"cancelled","statusMessage":"operator stopped it"`}}
		ts, _ := rawServer(t, f.serve)
		_, err := rawClient(t, ts.URL+"/mcp").CallTool(testCtx(t), "slow", nil)
		if !errors.Is(err, ErrTaskCancelled) || !strings.Contains(err.Error(), "operator stopped it") {
			t.Errorf("err = %v, want ErrTaskCancelled with the message", err)
		}
	})
	t.Run("no handler", func(t *testing.T) {
		f := &fakeTasks{states: []string{`"status":"input_required","inputRequests":{"k":{"method":"sampling/createMessage","params":{}}}`}}
		ts, _ := rawServer(t, f.serve)
		_, err := rawClient(t, ts.URL+"/mcp").CallTool(testCtx(t), "slow", nil)
		if err == nil || !strings.Contains(err.Error(), `input "k": no sampling handler`) {
			t.Errorf("err = %v", err)
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.cancels != 1 {
			t.Errorf("tasks/cancel sent %d times, want 1", f.cancels)
		}
	})
}

// TestTaskContextCancel: a call whose context ends while it follows its
// task cancels the task and returns the context's error.
func TestTaskContextCancel(t *testing.T) {
	f := &fakeTasks{states: []string{`"status":"working","pollIntervalMs":100`}}
	ts, rec := rawServer(t, f.serve)
	c := rawClient(t, ts.URL+"/mcp")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.CallTool(ctx, "slow", nil, WithTaskStatus(func(mcp.Task) {}))
		done <- err
	}()
	waitUntil(t, "a poll", func() bool { return rec.answered(mcp.MethodTasksGet) > 0 })
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("CallTool did not return after its context ended")
	}
	reqs := rec.requests(mcp.MethodTasksCancel)
	if len(reqs) != 1 || string(reqs[0].Params["taskId"]) != `"`+fakeTaskID+`"` || reqs[0].Header.Get(mcp.HeaderName) != fakeTaskID {
		t.Errorf("tasks/cancel requests = %+v", reqs)
	}
}

// TestTaskCreatedTerminal: a task handle is never more than the task's
// state, so a task that ended before tools/call answered is fetched with
// tasks/get for its result or error; its status is reported once.
func TestTaskCreatedTerminal(t *testing.T) {
	t.Run("completed", func(t *testing.T) {
		f := &fakeTasks{
			created: `"status":"completed","pollIntervalMs":100`,
			states:  []string{`"status":"completed","result":{"content":[{"type":"text","text":"quick"}]}`},
		}
		ts, _ := rawServer(t, f.serve)
		var states []mcp.TaskStatus
		res, err := rawClient(t, ts.URL+"/mcp").CallTool(testCtx(t), "slow", nil,
			WithTaskStatus(func(task mcp.Task) { states = append(states, task.Status) }))
		must(t, err)
		if *res.Content[0].Text != "quick" {
			t.Errorf("result = %+v", res)
		}
		if fmt.Sprint(states) != "[completed]" {
			t.Errorf("states = %v, want [completed]", states)
		}
		if n := f.getCount(); n != 1 {
			t.Errorf("%d tasks/get, want 1", n)
		}
	})
	t.Run("failed", func(t *testing.T) {
		f := &fakeTasks{
			created: `"status":"failed","statusMessage":"quota"`,
			states:  []string{`"status":"failed","statusMessage":"quota","error":{"code":-32000,"message":"quota exceeded"}`},
		}
		ts, _ := rawServer(t, f.serve)
		_, err := rawClient(t, ts.URL+"/mcp").CallTool(testCtx(t), "slow", nil)
		var rpc *RPCError
		if !errors.As(err, &rpc) || rpc.Code != -32000 || rpc.Message != "quota exceeded" {
			t.Errorf("err = %v, want the task's JSON-RPC error", err)
		}
	})
}

// TestTaskStopCancels: a call that stops following its task before the
// task ended, for any reason, cancels it, lest it run on at the server
// until its TTL with nobody to see its result.
func TestTaskStopCancels(t *testing.T) {
	elicit := `"inputRequests":{"k":{"method":"elicitation/create","params":{"mode":"form","message":"?","requestedSchema":{"type":"object"}}}}`
	accept := WithElicitation(func(context.Context, jsontext.Value) (*mcp.ElicitResult, error) {
		return &mcp.ElicitResult{Action: "accept"}, nil
	})
	for _, c := range []struct {
		name string
		f    *fakeTasks
		opts []HTTPOption
		want string // in the call's error
	}{
		{
			name: "update refused",
			f: &fakeTasks{
				states:    []string{`"status":"input_required","pollIntervalMs":100,` + elicit},
				updateErr: `{"code":-32602,"message":"unknown input key"}`,
			},
			opts: []HTTPOption{accept},
			want: "unknown input key",
		},
		{
			name: "invalid state",
			f:    &fakeTasks{states: []string{`"status":"working","pollIntervalMs":"soon"`}},
			want: "invalid tasks/get result",
		},
		{
			name: "no handler",
			f:    &fakeTasks{states: []string{`"status":"input_required","pollIntervalMs":100,` + elicit}},
			want: "no elicitation handler",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts, rec := rawServer(t, c.f.serve)
			_, err := rawClient(t, ts.URL+"/mcp", c.opts...).CallTool(testCtx(t), "slow", nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one saying %q", err, c.want)
			}
			reqs := rec.requests(mcp.MethodTasksCancel)
			if len(reqs) != 1 || string(reqs[0].Params["taskId"]) != `"`+fakeTaskID+`"` {
				t.Errorf("tasks/cancel requests = %+v, want one for the task", reqs)
			}
		})
	}
}

// fakeListener is fakeTasks with task notifications: it advertises the
// extension, and each subscriptions/listen is handed to the test, which
// writes its events and ends it.
type fakeListener struct {
	fakeTasks
	listens chan *fakeListen
}

// fakeListen is one listen stream of a fakeListener.
type fakeListen struct {
	params map[string]json.RawMessage
	header http.Header
	events chan string // JSON-RPC messages to write
	end    chan struct{}
}

func (l *fakeListen) send(t testing.TB, msg string) {
	t.Helper()
	select {
	case l.events <- msg:
	case <-time.After(waitTimeout):
		t.Fatal("timed out writing to a listen")
	}
}

func (l *fakeListen) ack(t testing.TB, ids ...string) {
	t.Helper()
	b, _ := json.Marshal(ids)
	l.send(t, `{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"notifications":{"taskIds":`+string(b)+`}}}`)
}

func (l *fakeListen) notify(t testing.TB, f *fakeTasks, body string) {
	t.Helper()
	l.send(t, `{"jsonrpc":"2.0","method":"notifications/tasks","params":`+f.task(body)+`}`)
}

func newFakeListener(t testing.TB, states ...string) (*fakeListener, string, *recorder) {
	f := &fakeListener{fakeTasks: fakeTasks{states: states}, listens: make(chan *fakeListen, 4)}
	raw, _ := rawServer(t, f.serve, true)
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Header.Get(mcp.HeaderMethod) == mcp.MethodDiscover {
			body, _ := io.ReadAll(req.Body)
			var r rawRequest
			_ = json.Unmarshal(body, &r)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{},"extensions":{%q:{}}},"resultType":"complete","ttlMs":0,"cacheScope":"public"}}`, r.ID, mcp.ExtensionTasks)
			return
		}
		if req.Header.Get(mcp.HeaderMethod) != mcp.MethodListen {
			proxyTo(w, req, raw.URL)
			return
		}
		body, _ := io.ReadAll(req.Body)
		var r rawRequest
		_ = json.Unmarshal(body, &r)
		l := &fakeListen{params: r.Params, header: req.Header.Clone(), events: make(chan string), end: make(chan struct{})}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		select {
		case f.listens <- l:
		case <-req.Context().Done():
			return
		}
		for {
			select {
			case msg := <-l.events:
				fmt.Fprintf(w, "event: message\ndata: %s\n\n", msg)
				w.(http.Flusher).Flush()
			case <-l.end:
				return
			case <-req.Context().Done():
				return
			}
		}
	})
	rec := &recorder{next: h}
	ts := httptest.NewServer(rec)
	t.Cleanup(func() { closeServer(ts) })
	return f, ts.URL, rec
}

// proxyTo passes a request on to the raw server at url.
func proxyTo(w http.ResponseWriter, req *http.Request, url string) {
	out, _ := http.NewRequestWithContext(req.Context(), req.Method, url+req.URL.Path, req.Body)
	out.Header = req.Header.Clone()
	resp, err := http.DefaultClient.Do(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (f *fakeListener) next(t testing.TB) *fakeListen {
	t.Helper()
	select {
	case l := <-f.listens:
		return l
	case <-time.After(waitTimeout):
		t.Fatal("timed out waiting for a listen")
		return nil
	}
}

func (f *fakeTasks) getCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gets
}

func (f *fakeTasks) setStates(states ...string) {
	f.mu.Lock()
	f.states, f.gets = states, 0
	f.mu.Unlock()
}

// TestTaskListenDropped: with a poll interval too long to matter, every
// tasks/get is the follower's own doing: one just after a listen is
// granted, one when a granted listen drops; after the drop the client
// listens again, and the call ends with the notification of the new
// listen.
func TestTaskListenDropped(t *testing.T) {
	const slow = `"status":"working","pollIntervalMs":30000`
	f, url, _ := newFakeListener(t, slow)
	c := rawClient(t, url+"/mcp")
	var mu sync.Mutex
	var states []string
	status := func(task mcp.Task) {
		mu.Lock()
		states = append(states, task.StatusMessage)
		mu.Unlock()
	}
	sawState := func(msg string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return slices.Contains(states, msg)
		}
	}
	type outcome struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.CallTool(context.Background(), "slow", nil, WithTaskStatus(status))
		done <- outcome{res, err}
	}()

	l1 := f.next(t)
	if string(l1.params["notifications"]) != `{"taskIds":["`+fakeTaskID+`"]}` {
		t.Errorf("listen asks for %s", l1.params["notifications"])
	}
	if !strings.Contains(string(l1.params["_meta"]), mcp.ExtensionTasks) {
		t.Errorf("listen does not declare the tasks extension: %s", l1.params["_meta"])
	}
	if n := f.getCount(); n != 0 {
		t.Errorf("%d tasks/get before the listen was granted", n)
	}
	l1.ack(t, fakeTaskID)
	waitUntil(t, "the poll after the grant", func() bool { return f.getCount() == 1 })
	l1.notify(t, &f.fakeTasks, `"status":"working","statusMessage":"step 1","pollIntervalMs":30000`)
	waitUntil(t, "step 1 reported", sawState("step 1"))

	// The stream breaks while the task moves on.
	f.setStates(`"status":"working","statusMessage":"step 2","pollIntervalMs":30000`)
	close(l1.end)
	waitUntil(t, "step 2 polled after the drop", sawState("step 2"))
	l2 := f.next(t)
	l2.ack(t, fakeTaskID)
	waitUntil(t, "the poll after the second grant", func() bool { return f.getCount() == 2 })
	l2.notify(t, &f.fakeTasks, `"status":"completed","result":{"content":[{"type":"text","text":"done"}]}`)
	select {
	case o := <-done:
		if o.err != nil || *o.res.Content[0].Text != "done" {
			t.Fatalf("CallTool = %+v, %v", o.res, o.err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("CallTool did not return")
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"", "step 1", "step 2", ""}; fmt.Sprint(states) != fmt.Sprint(want) {
		t.Errorf("states = %q, want %q", states, want)
	}
}

// TestTaskListenNotGranted: a listen whose acknowledgement leaves the task
// out is closed at once, and the task is polled to its end.
func TestTaskListenNotGranted(t *testing.T) {
	f, url, rec := newFakeListener(t, `"status":"working","pollIntervalMs":100`)
	c := rawClient(t, url+"/mcp")
	done := make(chan error, 1)
	go func() {
		res, err := c.CallTool(context.Background(), "slow", nil)
		if err == nil && *res.Content[0].Text != "polled" {
			err = fmt.Errorf("result %+v", res)
		}
		done <- err
	}()
	l := f.next(t)
	l.ack(t)
	waitUntil(t, "the listen closed", func() bool { return rec.answered(mcp.MethodListen) == 1 })
	waitUntil(t, "polls", func() bool { return f.getCount() >= 2 })
	f.setStates(`"status":"completed","result":{"content":[{"type":"text","text":"polled"}]}`)
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(waitTimeout):
		t.Fatal("CallTool did not return")
	}
	if n := rec.count(mcp.MethodListen); n != 1 {
		t.Errorf("%d listens, want 1", n)
	}
}

// TestRequestTaskName: Request names the task of a tasks/* request in
// Mcp-Name, as the typed path does.
func TestRequestTaskName(t *testing.T) {
	f := &fakeTasks{states: []string{`"status":"working"`}}
	ts, rec := rawServer(t, f.serve)
	c := rawClient(t, ts.URL+"/mcp")
	for _, m := range []string{mcp.MethodTasksGet, mcp.MethodTasksCancel} {
		if _, err := c.Request(context.Background(), m, map[string]any{"taskId": fakeTaskID}); err != nil {
			t.Fatalf("%s: %v", m, err)
		}
		reqs := rec.requests(m)
		if len(reqs) != 1 || reqs[0].Header.Get(mcp.HeaderName) != fakeTaskID {
			t.Errorf("%s: requests %+v, want Mcp-Name %q", m, reqs, fakeTaskID)
		}
	}
}

// TestTaskRefusedErrors: what asking again will not change ends the
// following; what may pass, an internal error among it, is retried.
func TestTaskRefusedErrors(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&RPCError{Code: -32602, Message: "Task not found"}, true},
		{fmt.Errorf("wrapped: %w", &RPCError{Code: -32602}), true},
		{&RPCError{Code: -32601, Message: "Method not found"}, true},
		{&RPCError{Code: -32021, Message: "Missing required client capability"}, true},
		{fmt.Errorf("wrapped: %w", &RPCError{Code: -32603}), false},
		{&RPCError{Code: -32600}, false},
		{&RPCError{Code: -32000, Message: "server error"}, false},
		{fmt.Errorf("%w: unexpected end of input", errTaskInvalid), true},
		{ErrClosed, true},
		{&HTTPError{Status: 403}, true},
		{&HTTPError{Status: 404}, true},
		{&HTTPError{Status: 429}, false},
		{&HTTPError{Status: 408}, false},
		{&HTTPError{Status: 502}, false},
		{ErrDropped, false},
		{context.DeadlineExceeded, false},
		{errors.New("dial tcp: connection refused"), false},
	} {
		if got := refused(c.err); got != c.want {
			t.Errorf("refused(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// TestTaskGone: a task the server no longer knows ends the call with the
// server's error.
func TestTaskGone(t *testing.T) {
	f := &fakeTasks{states: []string{`"status":"working"`}, getErr: `{"code":-32602,"message":"Failed to retrieve task: Task not found"}`}
	ts, _ := rawServer(t, f.serve)
	_, err := rawClient(t, ts.URL+"/mcp").CallTool(testCtx(t), "slow", nil)
	var rpc *RPCError
	if !errors.As(err, &rpc) || rpc.Code != -32602 || !strings.Contains(err.Error(), fakeTaskID) {
		t.Errorf("err = %v, want the -32602 naming the task", err)
	}
}

// TestTaskInternalErrorRetried: a tasks/get answered with an internal
// error (the server could not read its task store for a moment) is asked
// again, and the call gets the task's result once the store is back.
func TestTaskInternalErrorRetried(t *testing.T) {
	f := &fakeTasks{
		states:  []string{`"status":"completed","result":{"content":[{"type":"text","text":"after the failover"}]}`},
		getErr:  `{"code":-32603,"message":"task store unavailable"}`,
		getErrs: 2,
	}
	ts, _ := rawServer(t, f.serve)
	res, err := rawClient(t, ts.URL+"/mcp").CallTool(testCtx(t), "slow", nil)
	must(t, err)
	if *res.Content[0].Text != "after the failover" {
		t.Errorf("result = %+v", res)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failedGets != 2 || f.gets != 1 {
		t.Errorf("%d tasks/get failed and %d answered, want 2 and 1", f.failedGets, f.gets)
	}
}

// testCtx bounds a call a test makes on its own goroutine, so that a
// follower that never ends fails the test instead of hanging it.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	t.Cleanup(cancel)
	return ctx
}

// TestTaskAnswerResent: answers whose tasks/update did not get through
// (the server unreachable for a moment) are sent again, without asking
// the handler again.
func TestTaskAnswerResent(t *testing.T) {
	elicit := `"inputRequests":{"k":{"method":"elicitation/create","params":{"mode":"form","message":"?","requestedSchema":{"type":"object"}}}}`
	f := &fakeTasks{states: []string{`"status":"input_required","pollIntervalMs":100,` + elicit}}
	ts, _ := rawServer(t, f.serve)
	var failed atomic.Bool
	url := newFixtureHandler(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(mcp.HeaderMethod) == mcp.MethodTasksUpdate && !failed.Swap(true) {
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return
		}
		if r.Header.Get(mcp.HeaderMethod) == mcp.MethodTasksUpdate {
			f.setStates(`"status":"completed","result":{"content":[{"type":"text","text":"ok"}]}`)
		}
		proxyTo(w, r, ts.URL)
	}))
	var asked atomic.Int32
	c := rawClient(t, url+"/mcp", WithElicitation(func(context.Context, jsontext.Value) (*mcp.ElicitResult, error) {
		asked.Add(1)
		return &mcp.ElicitResult{Action: "accept"}, nil
	}))
	res, err := c.CallTool(testCtx(t), "slow", nil)
	must(t, err)
	if *res.Content[0].Text != "ok" {
		t.Errorf("result = %+v", res)
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("handler asked %d times, want 1", n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.updates) != 1 || !failed.Load() {
		t.Errorf("tasks/update reaching the server = %d (after a failure: %v), want 1", len(f.updates), failed.Load())
	}
}
