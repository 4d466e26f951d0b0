package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/bus"
	"tidings/hub"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// This file runs the work of tasks: one taskRun per task, on the replica
// that created it, from RunAsTask until the task is settled.

// Why a task's work context ended (its cause).
var (
	errTaskCancelled = errors.New("server: the client cancelled the task")
	errTaskExpired   = errors.New("server: the task's TTL passed")
	errTaskGone      = errors.New("server: the task is gone from the store")
	errTaskShutdown  = errors.New("server: the server shut down")
)

// taskRun runs one task's work. Its goroutine (run) owns a second one
// (watch) that follows the task's record while the work runs, so that a
// cancel made through any replica stops the work.
type taskRun struct {
	s         *Server
	id        string
	principal string
	work      ToolHandler
	// tool is the tool as it was registered when the task was created.
	tool *tool
	// first is the request of the first round.
	first *ToolRequest
	// ctx is the work's: detached from the request that created the
	// task, it ends with cancel (a cancel, the server's shutdown), or
	// when the TTL passes.
	ctx     context.Context
	cancel  context.CancelCauseFunc
	stopTTL context.CancelFunc
	// io bounds the runner's own store I/O: it outlives ctx (to settle a
	// task whose work was stopped) but not the TTL, nor a Shutdown whose
	// context ran out.
	io     context.Context
	stopIO context.CancelFunc
	// sub hears of every change of the task, made here or on another
	// replica (through the bus).
	sub *hub.Subscription
	// changed carries the record as watch last read it, newest only, to
	// a round waiting for answers (ask).
	changed chan *taskRecord
}

// newTaskRun prepares the run of task id, registered with the server's
// task set so that Shutdown waits for it. It fails once Shutdown has
// begun.
func (s *Server) newTaskRun(ctx context.Context, id string, r *ToolRequest, work ToolHandler) (*taskRun, error) {
	sub, err := s.hub.Subscribe(hub.Filter{Tasks: []string{id}, Principal: r.Principal})
	if err != nil {
		return nil, err
	}
	tr := &taskRun{s: s, id: id, principal: r.Principal, work: work, tool: r.tool, sub: sub, changed: make(chan *taskRecord, 1)}
	var ttlCtx context.Context
	ttlCtx, tr.stopTTL = context.WithTimeoutCause(context.WithoutCancel(ctx), s.cfg.taskTTL, errTaskExpired)
	tr.ctx, tr.cancel = context.WithCancelCause(ttlCtx)
	tr.io, tr.stopIO = context.WithTimeout(s.tasks.hard, s.cfg.taskTTL)
	tr.first = tr.request(r.Request, r.Arguments, cloneAnswers(r.InputResponses), bytes.Clone(r.state))
	if err := s.tasks.add(tr); err != nil {
		tr.release()
		return nil, err
	}
	return tr, nil
}

// request is the ToolRequest of one round of the work: what the
// creating request said, with no stream of its own.
func (tr *taskRun) request(from Request, args jsontext.Value, answers map[string]jsontext.Value, state []byte) *ToolRequest {
	r := &ToolRequest{
		Request: Request{
			ID: from.ID, Method: from.Method, Name: from.Name, Scopes: from.Scopes,
			ProtocolVersion: from.ProtocolVersion, Capabilities: from.Capabilities, ClientInfo: from.ClientInfo,
			Principal: from.Principal, InputResponses: answers, state: state, logLevel: -1, enc: from.enc, task: tr,
		},
		Arguments: bytes.Clone(args),
		srv:       tr.s,
		tool:      tr.tool,
	}
	return r
}

// release frees what newTaskRun took.
func (tr *taskRun) release() {
	tr.cancel(nil)
	tr.stopTTL()
	tr.stopIO()
	tr.sub.Close()
}

// abandon undoes newTaskRun for a task that was never stored.
func (tr *taskRun) abandon() {
	tr.release()
	tr.s.tasks.done(tr)
}

// run is the task's goroutine: the work, round after round, then the
// settling of the task.
func (tr *taskRun) run() {
	defer tr.s.tasks.done(tr)
	defer tr.release()
	watchCtx, stopWatch := context.WithCancel(tr.io)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		tr.watch(watchCtx)
	}()
	defer func() {
		stopWatch()
		<-watched
	}()
	req := tr.first
	for round := 1; ; round++ {
		res, err := tr.call(req)
		var ir *InputRequired
		if !errors.As(err, &ir) || tr.ctx.Err() != nil {
			tr.settle(tr.outcome(res, err))
			return
		}
		answers, err := tr.ask(round, ir)
		if err != nil {
			tr.settle(tr.failure(err))
			return
		}
		req = tr.request(tr.first.Request, tr.first.Arguments, answers, ir.State)
	}
}

// call runs one round of the work. A panic fails the task with -32603,
// logged with its stack, as it fails a call.
func (tr *taskRun) call(req *ToolRequest) (res *mcp.CallToolResult, err error) {
	defer func() {
		if p := recover(); p != nil {
			tr.s.log.Error("mcp: task work panicked", "tool", req.Name,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			res, err = nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "Internal error", nil)
		}
	}()
	return tr.work(context.WithValue(tr.ctx, ctxKey{}, &req.Request), req)
}

// storeCallTimeout bounds each of a runner's own calls of the task store
// (one read, or one change with its compare-and-swap retries). A store
// waits as long as its context lets it, and the runner's lasts the
// task's TTL: a call whose answer was lost (a NATS request sent as the
// client reconnects, say) would otherwise hold the runner for an hour,
// deaf to cancels and unable to record what the work did. A call cut
// short is tried again as one that failed.
const storeCallTimeout = 5 * time.Second

// load reads the task, as its runner, within ctx and storeCallTimeout.
// Its lease is the runner's own to renew, not to find lapsed.
func (tr *taskRun) load(ctx context.Context) (*taskRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	rec, _, err := tr.s.readTask(ctx, tr.id, tr.principal, tr.s.cfg.now())
	return rec, err
}

// update changes the task (see updateTask), as its runner, within the
// runner's store I/O and storeCallTimeout.
func (tr *taskRun) update(change func(*taskRecord) bool) (*taskRecord, error) {
	ctx, cancel := context.WithTimeout(tr.io, storeCallTimeout)
	defer cancel()
	return tr.s.updateTask(ctx, tr.id, tr.principal, change)
}

// maxCorruptReads is how many reads in a row may find the task's record
// corrupt before the runner takes the task for gone and stops its work:
// a record is rewritten whole, so one read may meet a torn or foreign
// write that the next does not, but a record that stays corrupt will
// not mend, and no one can follow, answer or cancel the task.
const maxCorruptReads = 3

// watch follows the task's record until ctx ends: on every change it
// hears of, and every poll interval in case an event was lost, it reads
// the record; a finished or vanished task stops the work (a corrupt
// record too, after maxCorruptReads reads), and the record read goes to
// a round waiting for answers. A run of failed reads is logged once.
// Every renewal interval (WithTaskLease) the read is a renewal of the
// task's lease instead; one that failed is tried again at the next wake,
// and soon after besides (from recordRetryMin, doubling up to a renewal
// interval), so that a blip of the store does not cost a renewal's worth
// of the lease.
func (tr *taskRun) watch(ctx context.Context) {
	tick := time.NewTicker(tr.s.cfg.taskPoll)
	defer tick.Stop()
	renewal := time.NewTicker(tr.s.leaseRenewal())
	defer renewal.Stop()
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	failed, corrupt := 0, 0
	renew, wait := false, recordRetryMin
	for {
		select {
		case <-ctx.Done():
			return
		case <-tr.sub.Wake():
			tr.sub.TakeTasks(nil)
		case <-tick.C:
		case <-renewal.C:
			renew = true
		case <-retry.C:
		}
		var rec *taskRecord
		var err error
		if renew {
			rec, err = tr.renew(ctx)
			if renew = err != nil; renew {
				retry.Reset(wait)
				wait = min(2*wait, tr.s.leaseRenewal())
			} else {
				retry.Stop()
				wait = recordRetryMin
			}
		} else {
			rec, err = tr.load(ctx)
		}
		switch {
		case errors.Is(err, errTaskNotFound):
			tr.cancel(errTaskGone)
			continue
		case err != nil:
			if ctx.Err() != nil {
				continue
			}
			if failed++; failed == 1 {
				tr.s.log.Warn("mcp: a running task could not be read", "tool", tr.first.Name, "err", err)
			}
			if !errors.Is(err, errCorruptTask) {
				corrupt = 0
			} else if corrupt++; corrupt == maxCorruptReads {
				tr.s.log.Error("mcp: a running task's record stays corrupt; its work is stopped", "tool", tr.first.Name, "reads", corrupt)
				tr.cancel(errTaskGone)
			}
			continue // read again at the next tick
		case rec.Status.Terminal():
			tr.cancel(errTaskCancelled)
		}
		failed, corrupt = 0, 0
		tr.hand(rec)
	}
}

// hand gives rec to ask, replacing a record ask has not taken yet: only
// the newest counts. watch alone sends, so the second send never blocks.
func (tr *taskRun) hand(rec *taskRecord) {
	select {
	case tr.changed <- rec:
		return
	default:
	}
	select {
	case <-tr.changed:
	default:
	}
	tr.changed <- rec
}

// ask puts the task in input_required with the requests of ir and waits
// until the client has answered them all, returning the answers under
// the work's own keys. The keys on the wire carry the round, so that
// none is used twice over the task's life; the task's requests are
// checked against the creating request's capabilities, as a call's are.
func (tr *taskRun) ask(round int, ir *InputRequired) (map[string]jsontext.Value, error) {
	missing, need, err := missingCapabilities(tr.first.Capabilities, ir.Requests)
	switch {
	case err != nil:
		tr.s.log.Error("mcp: task asked for input it may not", "tool", tr.first.Name, "err", err)
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "Internal error", nil)
	case need:
		return nil, missingCapabilityError(missing)
	case len(ir.Requests) == 0:
		tr.s.log.Error("mcp: task asked for input without requests", "tool", tr.first.Name)
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "Internal error", nil)
	}
	wire := make(map[string]mcp.InputRequest, len(ir.Requests))
	back := make(map[string]string, len(ir.Requests))
	suffix := "." + strconv.Itoa(round)
	for k, r := range ir.Requests {
		wire[k+suffix], back[k+suffix] = r, k
	}
	rec, err := tr.record("input_required", func(rec *taskRecord) bool {
		if rec.Status.Terminal() {
			return false
		}
		rec.Status, rec.Inputs, rec.Answers, rec.Message = mcp.TaskInputRequired, wire, nil, ""
		return true
	})
	if errors.Is(err, errTaskTooLarge) {
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "Internal error: the task's requests for input are too large", nil)
	}
	if err != nil {
		return nil, err
	}
	if rec.Status.Terminal() {
		return nil, errTaskCancelled
	}
	// A record watch read may predate the write above (a store replica
	// a moment behind, a read already under way): only one that holds an
	// answer to every request of this round, whose wire keys no other
	// round has, says that the client answered them.
	for {
		var rec *taskRecord
		select {
		case <-tr.ctx.Done():
			return nil, context.Cause(tr.ctx)
		case rec = <-tr.changed:
		}
		if rec.Status.Terminal() {
			return nil, errTaskCancelled
		}
		if rec.Status != mcp.TaskWorking || !answered(rec.Answers, back) {
			continue
		}
		answers := make(map[string]jsontext.Value, len(back))
		for wk, k := range back {
			answers[k] = rec.Answers[wk]
		}
		return answers, nil
	}
}

// answered reports whether answers hold every wire key of keys.
func answered(answers map[string]jsontext.Value, keys map[string]string) bool {
	for wk := range keys {
		if _, ok := answers[wk]; !ok {
			return false
		}
	}
	return true
}

// The failures a runner records of its own accord. They say nothing of
// what failed behind them (a store, an encoding): that is for the log.
var (
	errInternal          = jsonrpc.NewError(jsonrpc.CodeInternalError, "Internal error", nil)
	errShutdownUnsettled = jsonrpc.NewError(jsonrpc.CodeInternalError, "Internal error: the server shut down before the task finished", nil)
	errResultTooLarge    = jsonrpc.NewError(jsonrpc.CodeInternalError, "Internal error: the task's result is too large", nil)
)

// stopped is how a task whose work context ended settles, by why it
// ended: a shutdown fails it, while a cancel has settled it already and
// an expired or vanished task is gone (nil: nothing to record). ok is
// false while the context is live.
func (tr *taskRun) stopped() (set func(*taskRecord), ok bool) {
	if tr.ctx.Err() == nil {
		return nil, false
	}
	if errors.Is(context.Cause(tr.ctx), errTaskShutdown) {
		return failWith(errShutdownUnsettled), true
	}
	return nil, true
}

// outcome is how what the work returned settles the task, as a call's
// outcome would answer the call: a result, or a plain error made an
// isError result, completes it (held to the tool's output schema); a
// *jsonrpc.Error fails it. nil is nothing to record. Work stopped by
// Shutdown that returned a result all the same, finishing as it was
// stopped, completes the task with it: the result is what the client
// waited for, and failing the task would throw it away.
func (tr *taskRun) outcome(res *mcp.CallToolResult, err error) func(*taskRecord) {
	shutdownDone := err == nil && errors.Is(context.Cause(tr.ctx), errTaskShutdown)
	if set, ok := tr.stopped(); ok && !shutdownDone {
		return set
	}
	var je *jsonrpc.Error
	switch {
	case errors.As(err, &je):
		return failWith(je)
	case err != nil:
		res = toolErrorResult(err)
	}
	b, err := taskResult(tr.tool, tr.first.Name, res)
	if err != nil {
		tr.s.log.Error("mcp: internal error", "tool", tr.first.Name, "err", err)
		return failWith(errInternal)
	}
	return func(rec *taskRecord) { rec.Status, rec.Result = mcp.TaskCompleted, b }
}

// failure is how an error of the runner's own, never the work's, settles
// the task: the *jsonrpc.Error it stands for (a request for input the
// client cannot answer, say) fails it, and anything else — the store,
// an encoding — fails it with a plain -32603, logged, since neither is
// a tool's result nor the client's business. A cancelled, expired or
// vanished task has nothing left to record (nil).
func (tr *taskRun) failure(err error) func(*taskRecord) {
	if set, ok := tr.stopped(); ok {
		return set
	}
	var je *jsonrpc.Error
	switch {
	case errors.Is(err, errTaskCancelled), errors.Is(err, errTaskNotFound),
		errors.Is(err, errTaskGone), errors.Is(err, errTaskExpired):
		return nil
	case errors.As(err, &je):
		return failWith(je)
	}
	tr.s.log.Error("mcp: a task's runner failed", "tool", tr.first.Name, "err", err)
	return failWith(errInternal)
}

// settle records how the task ended (set; nil records nothing), unless
// the task is finished already. A result too large for the record fails
// the task instead: the store would refuse it for ever.
func (tr *taskRun) settle(set func(*taskRecord)) {
	if set == nil {
		return
	}
	settled := func(set func(*taskRecord)) func(*taskRecord) bool {
		return func(rec *taskRecord) bool {
			if rec.Status.Terminal() {
				return false
			}
			rec.Inputs, rec.Answers, rec.Message = nil, nil, ""
			set(rec)
			return true
		}
	}
	_, err := tr.record("the outcome", settled(set))
	if errors.Is(err, errTaskTooLarge) {
		tr.s.log.Error("mcp: a task's result is too large for its record", "tool", tr.first.Name, "limit", bus.MaxTaskRecord)
		_, err = tr.record("the outcome", settled(failWith(errResultTooLarge)))
	}
	if err != nil && !errors.Is(err, errTaskNotFound) {
		tr.s.log.Error("mcp: a finished task could not be recorded", "tool", tr.first.Name, "err", err)
	}
}

// Bounds of the waits between a runner's tries to record a change the
// store failed to take: quick at first, for a blip, then a few seconds
// apart, for an outage.
const (
	recordRetryMin = 20 * time.Millisecond
	recordRetryMax = 2 * time.Second
)

// record makes change to the task as updateTask does, and tries again
// while the store fails, until the change lands, the task is gone, or the
// runner's store I/O ends (the TTL passed, or Shutdown gave up waiting).
// The runner alone knows what the work did: a change it gave up on at
// the first failure would leave the task working, its result lost, until
// the TTL. Once the store is back the change lands, and the task's
// listeners hear of it. what names the change in the log.
func (tr *taskRun) record(what string, change func(*taskRecord) bool) (*taskRecord, error) {
	wait := recordRetryMin
	corrupt := 0
	for tries := 1; ; tries++ {
		rec, err := tr.update(change)
		if errors.Is(err, errCorruptTask) {
			corrupt++
		} else {
			corrupt = 0
		}
		switch {
		case err == nil:
			if tries > 1 {
				tr.s.log.Info("mcp: a task's change was recorded after all", "tool", tr.first.Name, "change", what, "tries", tries)
			}
			return rec, nil
		case errors.Is(err, errTaskNotFound), errors.Is(err, errTaskTooLarge), tr.io.Err() != nil,
			corrupt == maxCorruptReads: // a record that stays corrupt will not take the change
			return nil, err
		case tries == 1:
			tr.s.log.Warn("mcp: a task's change could not be recorded; trying again", "tool", tr.first.Name, "change", what, "err", err)
		}
		if pause(tr.io, wait) != nil {
			return nil, err
		}
		wait = min(2*wait, recordRetryMax)
	}
}

// failWith sets a task failed with e, its message as the status message.
func failWith(e *jsonrpc.Error) func(*taskRecord) {
	b, _ := jsonrpc.Marshal(e)
	return func(rec *taskRecord) { rec.Status, rec.Error, rec.Message = mcp.TaskFailed, b, e.Message }
}

// taskResult encodes the result a task of tool t completed with, held
// to the tool's output schema as a call's result is.
func taskResult(t *tool, name string, res *mcp.CallToolResult) (jsontext.Value, error) {
	res, err := checkToolResult(t, name, res)
	if err != nil {
		return nil, err
	}
	b, err := jsonrpc.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("tool %q's task result: %w", name, err)
	}
	return b, nil
}

// progress sets the task's statusMessage, for followers to read.
func (tr *taskRun) progress(message string) error {
	if message == "" {
		return nil
	}
	_, err := tr.update(func(rec *taskRecord) bool {
		if rec.Status.Terminal() || rec.Message == message {
			return false
		}
		rec.Message = message
		return true
	})
	if errors.Is(err, errTaskNotFound) {
		return nil
	}
	return err
}

// taskSet is the server's running tasks: Shutdown stops them all and
// waits for their goroutines; WithMaxTasks bounds them.
type taskSet struct {
	// hard ends the runners' store I/O when Shutdown gives up waiting.
	hard     context.Context
	stopHard context.CancelFunc
	// max and maxPer bound runs, in all and for one principal.
	max, maxPer int

	mu          sync.Mutex
	runs        map[*taskRun]struct{}
	byPrincipal map[string]int
	closing     bool
	idle        chan struct{} // closed once closing and runs is empty
}

func newTaskSet(max, maxPer int) *taskSet {
	ts := &taskSet{max: max, maxPer: maxPer, runs: make(map[*taskRun]struct{}),
		byPrincipal: make(map[string]int), idle: make(chan struct{})}
	ts.hard, ts.stopHard = context.WithCancel(context.Background())
	return ts
}

// add registers a run: errShuttingDown once the set is closing, and
// errTooManyTasks beyond its bounds.
func (ts *taskSet) add(tr *taskRun) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	switch {
	case ts.closing:
		return errShuttingDown
	case len(ts.runs) >= ts.max, ts.byPrincipal[tr.principal] >= ts.maxPer:
		return errTooManyTasks
	}
	ts.runs[tr] = struct{}{}
	ts.byPrincipal[tr.principal]++
	return nil
}

// done unregisters a run whose goroutines have ended.
func (ts *taskSet) done(tr *taskRun) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, ok := ts.runs[tr]; !ok {
		return
	}
	delete(ts.runs, tr)
	if ts.byPrincipal[tr.principal]--; ts.byPrincipal[tr.principal] == 0 {
		delete(ts.byPrincipal, tr.principal)
	}
	if ts.closing && len(ts.runs) == 0 {
		close(ts.idle)
	}
}

// close refuses new tasks, stops the work of every running one (each
// then settles as failed, unless finished already or its work returns a
// result) and waits for their
// goroutines until ctx ends, when their store I/O is cut short too.
func (ts *taskSet) close(ctx context.Context) error {
	ts.mu.Lock()
	if !ts.closing {
		ts.closing = true
		if len(ts.runs) == 0 {
			close(ts.idle)
		}
		for tr := range ts.runs {
			tr.cancel(errTaskShutdown)
		}
	}
	ts.mu.Unlock()
	select {
	case <-ts.idle:
		ts.stopHard()
		return nil
	case <-ctx.Done():
		ts.stopHard()
		return fmt.Errorf("server: shutdown: tasks still running: %w", ctx.Err())
	}
}
