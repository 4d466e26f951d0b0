package server_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"tidings/bus"
	"tidings/internal/testrig/testkit"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// taskReplicas returns two servers sharing one task store and, with
// withBus, one bus group, as replicas behind a balancer would: the same
// tools are registered on both (by register).
func taskReplicas(t *testing.T, withBus bool, register func(*server.Server), opts ...server.Option) (a, b *harness) {
	t.Helper()
	store, group := bus.NewLocalTasks(), bus.NewLocal()
	quiet := bus.WithLogger(slog.New(slog.DiscardHandler))
	replica := func() *harness {
		o := []server.Option{server.WithTaskStore(store), server.WithSecret(replicaSecret)}
		if withBus {
			o = append(o, server.WithBus(bus.New(group.Conn(), quiet)))
		}
		h := taskServer(t, append(o, opts...)...)
		register(h.srv)
		return h
	}
	return replica(), replica()
}

// replicaSecret is the secret replicas share: it keys cursors, request
// state and the owners of tasks.
var replicaSecret = []byte("the secret every replica of a test is given")

// replicaTools are the tools of the replica tests: "ask" asks one
// question and answers with what it was told; "job" runs until it is
// stopped, telling b.
func replicaTools(t *testing.T, b *blocker) func(*server.Server) {
	return func(srv *server.Server) {
		addTaskTool(t, srv, "ask", func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			if v := got(req, "q"); v != "" {
				return textResult("told " + v), nil
			}
			return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"q": elicit("q?")}}
		})
		addTaskTool(t, srv, "job", b.work)
	}
}

// TestTaskReplicas: a task created through one replica is got, followed,
// answered and cancelled through the other; the replica running the
// work hears of the answer and of the cancel over the bus (its own
// re-reads are an hour apart here).
func TestTaskReplicas(t *testing.T) {
	blk := newBlocker()
	a, b := taskReplicas(t, true, replicaTools(t, blk), server.WithTaskPollInterval(time.Hour))

	id := a.create(t, "ask", nil)
	b.waitTask(t, id, "input_required, through B", isStatus(mcp.TaskInputRequired))
	l := b.startListen("L", tasked(P{"notifications": P{"taskIds": []string{id}}}))
	if g := l.ack(t); fmt.Sprint(g["taskIds"]) != "["+id+"]" {
		t.Fatalf("B granted %v", g)
	}
	l.rec.waitUntil(t, "the task's state, through B", func(ns []notif) bool { return countMethod(ns, mcp.NotifyTasks) >= 1 })
	r, _ := b.call(1, mcp.MethodTasksUpdate, tasked(P{"taskId": id, "inputResponses": P{"q.1": accept("B")}}))
	r.ok(t)
	ns := l.rec.waitUntil(t, "B's listener to hear the task complete on A", func(ns []notif) bool {
		return len(ns) > 0 && ns[len(ns)-1].Params["status"] == string(mcp.TaskCompleted)
	})
	if text := resultText(t, ns[len(ns)-1].Params); text != "told B" {
		t.Errorf("result %q", text)
	}
	if task := a.task(t, id); task["status"] != string(mcp.TaskCompleted) {
		t.Errorf("through A: %v", task)
	}

	id = a.create(t, "job", nil)
	blk.waitStart(t)
	r, _ = b.call(2, mcp.MethodTasksCancel, tasked(P{"taskId": id}))
	r.ok(t)
	if err := blk.waitEnd(t); err == nil {
		t.Fatal("the work on A was released, not stopped by B's cancel")
	}
	if task := a.task(t, id); task["status"] != string(mcp.TaskCancelled) {
		t.Errorf("through A: %v", task)
	}
}

// TestTaskReplicasWithoutBus: without a bus, the replica running a task
// still takes up an answer or a cancel made through another, at its next
// re-read of the store.
func TestTaskReplicasWithoutBus(t *testing.T) {
	blk := newBlocker()
	a, b := taskReplicas(t, false, replicaTools(t, blk), server.WithTaskPollInterval(5*time.Millisecond))
	id := a.create(t, "ask", nil)
	b.waitTask(t, id, "input_required", isStatus(mcp.TaskInputRequired))
	r, _ := b.call(1, mcp.MethodTasksUpdate, tasked(P{"taskId": id, "inputResponses": P{"q.1": accept("late")}}))
	r.ok(t)
	done := b.waitTask(t, id, "the task to complete", isStatus(mcp.TaskCompleted))
	if text := resultText(t, done); text != "told late" {
		t.Errorf("result %q", text)
	}
	id = a.create(t, "job", nil)
	blk.waitStart(t)
	r, _ = b.call(2, mcp.MethodTasksCancel, tasked(P{"taskId": id}))
	r.ok(t)
	if err := blk.waitEnd(t); err == nil {
		t.Fatal("the work was released, not stopped by the cancel")
	}
}

// TestTaskTTL: a task stays for its TTL and no longer. Once it passes,
// tasks/get finds nothing and the work's context has ended.
func TestTaskTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Re-reads an hour apart: the work's own context ends it.
		h := newHarness(t, server.WithTaskTTL(time.Minute), server.WithTaskPollInterval(time.Hour))
		blk := newBlocker()
		addTaskTool(t, h.srv, "job", blk.work)
		id := h.create(t, "job", nil)
		blk.waitStart(t)
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if task := h.task(t, id); task["status"] != string(mcp.TaskWorking) {
			t.Fatalf("before the TTL: %v", task)
		}
		select {
		case err := <-blk.ended:
			t.Fatalf("the work ended before the TTL: %v", err)
		default:
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		r, _ := h.call(1, mcp.MethodTasksGet, tasked(P{"taskId": id}))
		r.fails(t, jsonrpc.CodeInvalidParams)
		select {
		case err := <-blk.ended:
			if err == nil {
				t.Error("the work was released, not stopped by the TTL")
			}
		default:
			t.Error("the work still runs past the TTL")
		}
		shutdown(t, h.srv)
	})
}

// TestTaskTTLServerClock: the TTL is counted on the server's clock
// (WithClock), whatever the store's says; the runner notices at its next
// re-read and stops the work.
func TestTaskTTLServerClock(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 7, 28, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	// The clock jumps by an hour, with no renewal of the lease between:
	// one longer than that keeps the task from lapsing first.
	h := taskServer(t, server.WithClock(clock), server.WithTaskTTL(time.Hour), server.WithTaskPollInterval(5*time.Millisecond),
		server.WithTaskLease(2*time.Hour))
	blk := newBlocker()
	addTaskTool(t, h.srv, "job", blk.work)
	id := h.create(t, "job", nil)
	blk.waitStart(t)
	mu.Lock()
	now = now.Add(time.Hour - time.Millisecond)
	mu.Unlock()
	if task := h.task(t, id); task["status"] != string(mcp.TaskWorking) {
		t.Fatalf("a millisecond before the TTL: %v", task)
	}
	mu.Lock()
	now = now.Add(time.Millisecond)
	mu.Unlock()
	r, _ := h.call(1, mcp.MethodTasksGet, tasked(P{"taskId": id}))
	r.fails(t, jsonrpc.CodeInvalidParams)
	for _, m := range []string{mcp.MethodTasksUpdate, mcp.MethodTasksCancel} {
		r, _ := h.call(2, m, tasked(P{"taskId": id, "inputResponses": P{}}))
		r.fails(t, jsonrpc.CodeInvalidParams)
	}
	if err := blk.waitEnd(t); err == nil {
		t.Fatal("the expired task's work was released, not stopped")
	}
}

// TestTaskCancelWinsOverLateResult: work that finishes after its task
// was cancelled elsewhere, before its runner heard of it, does not undo
// the cancel.
func TestTaskCancelWinsOverLateResult(t *testing.T) {
	finish := make(chan struct{})
	started := make(chan struct{}, 1)
	register := func(srv *server.Server) {
		addTaskTool(t, srv, "deaf", func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			started <- struct{}{}
			<-finish // deaf to its context
			return textResult("finished anyway"), nil
		})
	}
	// No bus, and re-reads an hour apart: A hears of nothing.
	a, b := taskReplicas(t, false, register, server.WithTaskPollInterval(time.Hour))
	id := a.create(t, "deaf", nil)
	recv(t, started, "the work to start")
	r, _ := b.call(1, mcp.MethodTasksCancel, tasked(P{"taskId": id}))
	r.ok(t)
	close(finish)
	// The work's result is written (or not) before the runner's
	// goroutines end, which Shutdown waits for.
	shutdown(t, a.srv)
	if task := b.task(t, id); task["status"] != string(mcp.TaskCancelled) {
		t.Errorf("the late result undid the cancel: %v", task)
	}
}

// outageStore is a task store that refuses every call while it is down,
// as a broker outage would, telling refused of each refusal.
type outageStore struct {
	bus.TaskStore
	mu      sync.Mutex
	down    bool
	refused chan string
}

func (s *outageStore) setDown(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

var errOutage = errors.New("the store is down")

// refuse reports whether the store is down, and tells so.
func (s *outageStore) refuse(op string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		select {
		case s.refused <- op:
		default:
		}
	}
	return s.down
}

func (s *outageStore) Get(ctx context.Context, id string) ([]byte, uint64, error) {
	if s.refuse("get") {
		return nil, 0, errOutage
	}
	return s.TaskStore.Get(ctx, id)
}

func (s *outageStore) Update(ctx context.Context, id string, rec []byte, rev uint64) (uint64, error) {
	if s.refuse("update") {
		return 0, errOutage
	}
	return s.TaskStore.Update(ctx, id, rec, rev)
}

// TestTaskStoreOutage: work that ends, or asks for input, while the task
// store is down is recorded once the store is back: the task completes
// with the work's result, or waits for input, rather than staying
// working until its TTL (or completing with the store's error).
func TestTaskStoreOutage(t *testing.T) {
	store := &outageStore{TaskStore: bus.NewLocalTasks(), refused: make(chan string, 1)}
	// Re-reads an hour apart: nothing but the runner's own retries
	// records the outcome.
	h := taskServer(t, server.WithTaskStore(store), server.WithTaskPollInterval(time.Hour), server.WithLogger(slog.New(slog.DiscardHandler)))
	blk := newBlocker()
	addTaskTool(t, h.srv, "job", blk.work)
	gate := make(chan struct{})
	addTaskTool(t, h.srv, "ask", func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		<-gate
		if v := got(req, "q"); v != "" {
			return textResult("told " + v), nil
		}
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"q": elicit("q?")}}
	})
	outage := func(during func()) {
		t.Helper()
		store.setDown(true)
		during()
		recv(t, store.refused, "the runner to meet the outage")
		store.setDown(false)
	}

	id := h.create(t, "job", nil)
	blk.waitStart(t)
	outage(func() { close(blk.release) })
	if text := resultText(t, h.waitTask(t, id, "the result to be recorded", isStatus(mcp.TaskCompleted))); text != "released" {
		t.Errorf("result %q", text)
	}

	id = h.create(t, "ask", nil)
	outage(func() { gate <- struct{}{} })
	h.waitTask(t, id, "the request for input to be recorded", isStatus(mcp.TaskInputRequired))
	r, _ := h.call(1, mcp.MethodTasksUpdate, tasked(P{"taskId": id, "inputResponses": P{"q.1": accept("after")}}))
	r.ok(t)
	gate <- struct{}{}
	if text := resultText(t, h.waitTask(t, id, "the task to complete", isStatus(mcp.TaskCompleted))); text != "told after" {
		t.Errorf("result %q", text)
	}
}

// stallStore is a task store whose next calls, as many as stall says,
// never answer: they wait for their context, as a request whose reply
// was lost does.
type stallStore struct {
	bus.TaskStore
	mu    sync.Mutex
	stall int
}

func (s *stallStore) stalls(ctx context.Context) error {
	s.mu.Lock()
	stall := s.stall > 0
	if stall {
		s.stall--
	}
	s.mu.Unlock()
	if !stall {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func (s *stallStore) Get(ctx context.Context, id string) ([]byte, uint64, error) {
	if err := s.stalls(ctx); err != nil {
		return nil, 0, err
	}
	return s.TaskStore.Get(ctx, id)
}

// TestTaskStoreCallLost: the runner's call to record how the work ended
// never answers. The runner gives up on it within seconds, not at the
// TTL, and records the outcome with its next try.
func TestTaskStoreCallLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &stallStore{TaskStore: bus.NewLocalTasks()}
		h := newHarness(t, server.WithTaskStore(store), server.WithTaskTTL(time.Hour), server.WithTaskPollInterval(time.Hour),
			server.WithLogger(slog.New(slog.DiscardHandler)))
		blk := newBlocker()
		addTaskTool(t, h.srv, "job", blk.work)
		id := h.create(t, "job", nil)
		blk.waitStart(t)
		store.mu.Lock()
		store.stall = 1
		store.mu.Unlock()
		close(blk.release)
		<-blk.ended
		synctest.Wait() // the runner waits for the lost call
		time.Sleep(time.Minute)
		synctest.Wait()
		if task := h.task(t, id); task["status"] != string(mcp.TaskCompleted) {
			t.Errorf("a minute on: %v", task)
		}
		// A runner still waiting is cut short once Shutdown gives up.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = h.srv.Shutdown(ctx)
	})
}

// lagStore is a task store whose reads, once armed, lag behind the next
// write: the two reads after it return the record as it was before, as
// a replica a moment behind would.
type lagStore struct {
	bus.TaskStore
	mu      sync.Mutex
	armed   bool
	stale   int
	prev    []byte
	prevRev uint64
}

func (s *lagStore) arm() {
	s.mu.Lock()
	s.armed = true
	s.mu.Unlock()
}

// lagged reports whether the stale reads have all been made.
func (s *lagStore) lagged() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.armed && s.stale == 0
}

func (s *lagStore) Get(ctx context.Context, id string) ([]byte, uint64, error) {
	s.mu.Lock()
	if s.stale > 0 {
		s.stale--
		defer s.mu.Unlock()
		return bytes.Clone(s.prev), s.prevRev, nil
	}
	s.mu.Unlock()
	return s.TaskStore.Get(ctx, id)
}

func (s *lagStore) Update(ctx context.Context, id string, rec []byte, rev uint64) (uint64, error) {
	prev, prevRev, _ := s.TaskStore.Get(ctx, id)
	n, err := s.TaskStore.Update(ctx, id, rec, rev)
	s.mu.Lock()
	if err == nil && s.armed {
		s.armed, s.stale, s.prev, s.prevRev = false, 2, prev, prevRev
	}
	s.mu.Unlock()
	return n, err
}

// TestTaskAskLaggingRead: the reads right after a task asks for input
// still show it working with nothing asked. The work waits for the
// client's answer all the same, rather than running again without it.
func TestTaskAskLaggingRead(t *testing.T) {
	store := &lagStore{TaskStore: bus.NewLocalTasks()}
	h := taskServer(t, server.WithTaskStore(store), server.WithTaskPollInterval(20*time.Millisecond))
	gate := make(chan struct{})
	rounds := make(chan string, 4)
	addTaskTool(t, h.srv, "ask", func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		<-gate
		v := got(req, "q")
		rounds <- v
		if v != "" {
			return textResult("told " + v), nil
		}
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"q": elicit("q?")}}
	})
	id := h.create(t, "ask", nil)
	store.arm()
	gate <- struct{}{}
	recv(t, rounds, "the first round")
	// The runner makes the stale reads; a tasks/get must not take them.
	testkit.WaitFor(t, waitLimit, "the stale reads", store.lagged)
	h.waitTask(t, id, "the request for input", isStatus(mcp.TaskInputRequired))
	r, _ := h.call(1, mcp.MethodTasksUpdate, tasked(P{"taskId": id, "inputResponses": P{"q.1": accept("yes")}}))
	r.ok(t)
	gate <- struct{}{}
	if v := recv(t, rounds, "the second round"); v != "yes" {
		t.Fatalf("the second round had answer %q, want the client's", v)
	}
	if text := resultText(t, h.waitTask(t, id, "the task to complete", isStatus(mcp.TaskCompleted))); text != "told yes" {
		t.Errorf("result %q", text)
	}
}

// readFailStore is a task store whose reads fail, once armed, from the
// next write on until it is disarmed: the write lands, and telling of it
// does not.
type readFailStore struct {
	bus.TaskStore
	mu             sync.Mutex
	armed, failing bool
}

func (s *readFailStore) set(armed, failing bool) {
	s.mu.Lock()
	s.armed, s.failing = armed, failing
	s.mu.Unlock()
}

func (s *readFailStore) Get(ctx context.Context, id string) ([]byte, uint64, error) {
	s.mu.Lock()
	failing := s.failing
	s.mu.Unlock()
	if failing {
		return nil, 0, errOutage
	}
	return s.TaskStore.Get(ctx, id)
}

func (s *readFailStore) Update(ctx context.Context, id string, rec []byte, rev uint64) (uint64, error) {
	n, err := s.TaskStore.Update(ctx, id, rec, rev)
	s.mu.Lock()
	if err == nil && s.armed {
		s.armed, s.failing = false, true
	}
	s.mu.Unlock()
	return n, err
}

// TestTaskListenReadFails: a listen whose read of a changed task fails
// ends with -32603, so that the client listens again and hears the
// task's state, rather than going on without the change.
func TestTaskListenReadFails(t *testing.T) {
	store := &readFailStore{TaskStore: bus.NewLocalTasks()}
	h := taskServer(t, server.WithTaskStore(store), server.WithLogger(slog.New(slog.DiscardHandler)))
	t.Cleanup(func() { store.set(false, false) }) // before Shutdown, which runs first
	step := make(chan struct{})
	addTaskTool(t, h.srv, "job", func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		select {
		case <-step:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		_ = req.Progress(1, nil, "half way")
		<-ctx.Done()
		return nil, ctx.Err()
	})
	id := h.create(t, "job", nil)
	l := h.startListen("L", tasked(P{"notifications": P{"taskIds": []string{id}}}))
	l.ack(t)
	l.rec.waitCount(t, 2) // the task's state
	store.set(true, false)
	close(step)
	rep := recv(t, l.done, "the listen to end")
	l.done <- rep // for the harness's cleanup
	if !strings.Contains(string(rep.Body), `"code":-32603`) {
		t.Errorf("the listen ended with %s (outcome %v), want -32603", rep.Body, rep.Outcome)
	}
}

// countStore is a task store that counts its reads.
type countStore struct {
	bus.TaskStore
	mu   sync.Mutex
	gets int
}

func (s *countStore) Get(ctx context.Context, id string) ([]byte, uint64, error) {
	s.mu.Lock()
	s.gets++
	s.mu.Unlock()
	return s.TaskStore.Get(ctx, id)
}

func (s *countStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets
}

// TestTaskBounds: answers too large to keep with a task are refused
// with -32602 up front; a listen follows at most 100 tasks and reads
// each once to start; and WithMaxTasks bounds the tasks running, in all
// and per principal, with -32603.
func TestTaskBounds(t *testing.T) {
	store := &countStore{TaskStore: bus.NewLocalTasks()}
	h := taskServer(t, server.WithTaskStore(store), server.WithTaskPollInterval(time.Hour), server.WithMaxTasks(3, 2))
	blk := newBlocker()
	addTaskTool(t, h.srv, "job", blk.work)
	addTaskTool(t, h.srv, "ask", func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"q": elicit("q?")}}
	})

	id := h.create(t, "ask", nil)
	h.waitTask(t, id, "the request for input", isStatus(mcp.TaskInputRequired))
	huge := strings.Repeat("x", bus.MaxTaskRecord)
	r, _ := h.call(1, mcp.MethodTasksUpdate, tasked(P{"taskId": id, "inputResponses": P{"q.1": accept(huge)}}))
	r.fails(t, jsonrpc.CodeInvalidParams)
	if !strings.Contains(r.Error.Message, "too large") {
		t.Errorf("message %q", r.Error.Message)
	}

	before := store.count()
	l := h.startListen("L", tasked(P{"notifications": P{"taskIds": []string{id}}}))
	l.ack(t)
	l.rec.waitCount(t, 2)
	if n := store.count() - before; n != 1 {
		t.Errorf("a listen of one task read the store %d times to start, want 1", n)
	}
	l.stop(t)
	many := make([]string, 101)
	for i := range many {
		many[i] = fmt.Sprint("t", i)
	}
	r, _ = h.call(2, mcp.MethodListen, tasked(P{"notifications": P{"taskIds": many}}))
	r.reply.Release()
	r.fails(t, jsonrpc.CodeInvalidParams)

	// "ask" runs until its TTL: one of the principal's two.
	h.create(t, "job", nil)
	blk.waitStart(t)
	tooMany := func(h *harness) {
		t.Helper()
		r, _ := h.call(3, mcp.MethodToolsCall, tasked(P{"name": "job"}))
		r.fails(t, jsonrpc.CodeInternalError)
		if r.Error.Message != "Internal error: too many tasks running" {
			t.Errorf("message %q", r.Error.Message)
		}
	}
	tooMany(h)
	other := h.as("other")
	other.create(t, "job", nil)
	blk.waitStart(t)
	tooMany(other) // three in all
	blk.release <- struct{}{}
	blk.waitEnd(t)
	testkit.WaitFor(t, waitLimit, "room for a task", func() bool {
		r, _ := other.call(4, mcp.MethodToolsCall, tasked(P{"name": "job"}))
		return r.Error == nil
	})
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestTaskOwnerKeyed: a record keeps of its owner a hash keyed by the
// server's secret, not a bare SHA-256 of the principal: a replica with
// another secret does not take the task for the principal's, and the
// store does not hold what anyone could compute from the principal's
// name. The logs above Debug never carry a task's id, which with
// anonymous principals is all that guards the task.
func TestTaskOwnerKeyed(t *testing.T) {
	store := &countStore{TaskStore: bus.NewLocalTasks()}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	a := taskServer(t, server.WithTaskStore(store), server.WithSecret(replicaSecret), server.WithLogger(log)).as("alice")
	b := taskServer(t, server.WithTaskStore(store), server.WithSecret([]byte("another secret, of another deployment")), server.WithLogger(log)).as("alice")
	for _, h := range []*harness{a, b} {
		addTaskTool(t, h.srv, "panic", func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			panic("boom")
		})
	}
	id := a.create(t, "panic", nil)
	a.waitTask(t, id, "the task to fail", isStatus(mcp.TaskFailed))
	r, _ := b.call(1, mcp.MethodTasksGet, tasked(P{"taskId": id}))
	r.fails(t, jsonrpc.CodeInvalidParams)

	raw, _, err := store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	bare := sha256.Sum256([]byte("alice"))
	if strings.Contains(string(raw), hex.EncodeToString(bare[:])) {
		t.Errorf("the record keeps the bare SHA-256 of its owner: %s", raw)
	}
	if !strings.Contains(logs.String(), "panicked") {
		t.Errorf("the panic was not logged: %s", logs.String())
	}
	if strings.Contains(logs.String(), id) {
		t.Errorf("a log above Debug names the task: %s", logs.String())
	}
}

// conflictStore is a task store whose next writes, as many as conflicts
// says, find the record changed meanwhile.
type conflictStore struct {
	bus.TaskStore
	mu        sync.Mutex
	conflicts int
	tries     []time.Time
}

func (s *conflictStore) Update(ctx context.Context, id string, rec []byte, rev uint64) (uint64, error) {
	s.mu.Lock()
	s.tries = append(s.tries, time.Now())
	conflict := s.conflicts > 0
	if conflict {
		s.conflicts--
	}
	s.mu.Unlock()
	if conflict {
		return 0, bus.ErrTaskConflict
	}
	return s.TaskStore.Update(ctx, id, rec, rev)
}

// TestTaskSwapBackoff: a change whose compare-and-swap conflicts is
// tried again after a short wait, not at once, and the request's end
// ends the waits.
func TestTaskSwapBackoff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &conflictStore{TaskStore: bus.NewLocalTasks()}
		h := newHarness(t, server.WithTaskStore(store), server.WithTaskPollInterval(time.Hour))
		blk := newBlocker()
		addTaskTool(t, h.srv, "job", blk.work)
		id := h.create(t, "job", nil)
		blk.waitStart(t)
		store.mu.Lock()
		store.conflicts = 5
		store.mu.Unlock()
		r, _ := h.call(1, mcp.MethodTasksCancel, tasked(P{"taskId": id}))
		r.ok(t)
		store.mu.Lock()
		tries := store.tries
		store.mu.Unlock()
		if len(tries) != 6 {
			t.Fatalf("%d tries, want 6", len(tries))
		}
		for i := 1; i < len(tries); i++ {
			if !tries[i].After(tries[i-1]) {
				t.Errorf("try %d came at once after a conflict", i+1)
			}
		}
		blk.waitEnd(t)

		// A request that ends while waiting gives up.
		id = h.create(t, "job", nil)
		blk.waitStart(t)
		store.mu.Lock()
		store.conflicts = 1000
		store.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		rep := h.serveRaw(ctx, encodeRequest(t, 2, mcp.MethodTasksCancel, tasked(P{"taskId": id})), newRecorder(t))
		rep.Release()
		store.mu.Lock()
		n := len(store.tries) - 6
		store.conflicts = 0
		store.mu.Unlock()
		if n >= 100 {
			t.Errorf("%d tries within the request's 10ms", n)
		}
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		_ = h.srv.Shutdown(sctx)
	})
}

// TestTaskCorruptRecord: a running task's record that stays corrupt
// stops the work after a few reads, where the runner read and logged it
// at every poll until the TTL with the work running on.
func TestTaskCorruptRecord(t *testing.T) {
	store := bus.NewLocalTasks()
	h := taskServer(t, server.WithTaskStore(store), server.WithTaskPollInterval(5*time.Millisecond),
		server.WithLogger(slog.New(slog.DiscardHandler)))
	blk := newBlocker()
	addTaskTool(t, h.srv, "job", blk.work)
	id := h.create(t, "job", nil)
	blk.waitStart(t)
	_, rev, err := store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Update(context.Background(), id, []byte(`{"not":"a task"}`), rev); err != nil {
		t.Fatal(err)
	}
	if err := blk.waitEnd(t); err == nil {
		t.Error("the work was released rather than stopped")
	}
}

// TestTaskCorruptRecordAtSettle: work that ends while its task's record
// is corrupt ends its runner within a few tries, where the runner tried
// to record the outcome until the TTL.
func TestTaskCorruptRecordAtSettle(t *testing.T) {
	store := bus.NewLocalTasks()
	h := taskServer(t, server.WithTaskStore(store), server.WithTaskPollInterval(time.Hour),
		server.WithLogger(slog.New(slog.DiscardHandler)))
	blk := newBlocker()
	addTaskTool(t, h.srv, "job", blk.work)
	id := h.create(t, "job", nil)
	blk.waitStart(t)
	_, rev, err := store.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Update(context.Background(), id, []byte(`{"not":"a task"}`), rev); err != nil {
		t.Fatal(err)
	}
	close(blk.release)
	blk.waitEnd(t)
	// Shutdown (at cleanup) waits for the runner: a runner still trying
	// makes it time out.
}
