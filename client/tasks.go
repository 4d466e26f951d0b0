package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/jsonrpc"
	"tidings/mcp"
)

// The client side of the tasks extension (mcp.ExtensionTasks): a server
// may answer a tools/call with a task handle instead of a result, and
// CallTool follows the task until it ends, so that its callers get the
// result the call would have had, or its error, as if the server had
// answered at once. It listens for the task's notifications where the
// server offers them and polls tasks/get where it does not, or while a
// listen is down; it answers the task's input requests with the handlers
// multi round-trip requests use; and a call that stops following its
// task before the task ended (its context ended, the server stayed
// unreachable or refused a request) cancels it.

// ErrTaskCancelled reports a tool call the server ran as a task and then
// cancelled on its own. A call whose context ended returns the context's
// error instead, even though it cancels its task too: the caller knows
// why it ended. CallTool returns it wrapped, with the task's status
// message.
var ErrTaskCancelled = errors.New("client: the server cancelled the task")

// WithoutTasks stops the client declaring the tasks extension on its
// tool calls. Servers must then answer each call themselves, or refuse
// it with -32021 (missing required client capability) when the tool only
// runs as a task. Useful to talk to a server whose tasks the client
// should not wait for, or to see how a server behaves without them;
// CallTool follows tasks transparently, so callers do not need it to
// keep getting plain results.
func WithoutTasks() Option { return option(func(c *config) { c.noTasks = true }) }

// WithTaskStatus hands fn every state the client learns of a task the
// call runs as: the one it was created in, then each later one whose
// status or status message differs from the last, up to the terminal
// one. It lets a caller show a long call's progress, or keep the task id
// (to tell a user, or to log). fn runs on the calling goroutine, between
// the client's requests for the task, so it should return quickly.
func WithTaskStatus(fn func(mcp.Task)) CallOption {
	return callOption(func(o *callOpts) { o.taskStatus = fn })
}

// declaresTasks reports whether requests of method declare the tasks
// extension: those that may create a task and those that follow one.
func (c *Client) declaresTasks(method string) bool {
	if c.cfg.noTasks {
		return false
	}
	switch method {
	case mcp.MethodToolsCall, mcp.MethodTasksGet, mcp.MethodTasksUpdate, mcp.MethodTasksCancel, mcp.MethodListen:
		return true
	}
	return false
}

// requestCaps returns the capabilities a request of method declares:
// Capabilities without the tasks extension where it means nothing.
func (c *Client) requestCaps(method string) mcp.ClientCaps { return c.caps(c.declaresTasks(method)) }

// The bounds of following a task.
const (
	// defaultTaskPoll is the polling interval of a task whose server
	// suggests none. minTaskPoll and maxTaskPoll bound the ones it
	// suggests: the floor so that a server cannot have the client poll in
	// a tight loop; the cap only against absurd values (a call that would
	// look hung for hours), as clients should poll as rarely as the
	// server asks.
	defaultTaskPoll = time.Second
	minTaskPoll     = 100 * time.Millisecond
	maxTaskPoll     = 10 * time.Minute
	// taskBackstopPoll is how often a task is polled at least while a
	// listen tells of it, in case a notification is lost between the
	// server's replicas; taskRetryMax is how far the delay between failing
	// polls grows, so that an outage shorter than taskUnreachable is seen
	// to end. Neither polls more often than the server asks.
	taskBackstopPoll = 30 * time.Second
	taskRetryMax     = 30 * time.Second
	// taskListenMin and taskListenMax bound the backoff between attempts
	// to listen for a task's notifications.
	taskListenMin = 250 * time.Millisecond
	taskListenMax = 30 * time.Second
	// taskUnreachable is how long the polls of a task, or the updates
	// answering its input requests, may keep failing (the server down,
	// the network cut, its store failing over) before the call gives up.
	taskUnreachable = 2 * time.Minute
	// taskCancelTimeout bounds the tasks/cancel sent when a call stops
	// following its task: the call's context may be over, and the cancel
	// must not wait for a server that does not answer.
	taskCancelTimeout = 5 * time.Second
)

// taskPollInterval is the interval the server suggests in ms (0 for
// none), within the client's bounds.
func taskPollInterval(ms int64) time.Duration {
	switch {
	case ms <= 0:
		return defaultTaskPoll
	case ms >= int64(maxTaskPoll/time.Millisecond):
		return maxTaskPoll
	}
	return max(time.Duration(ms)*time.Millisecond, minTaskPoll)
}

// jitter spreads d by ±20%, so that many clients polling one server do
// not poll in step.
func jitter(d time.Duration) time.Duration {
	return d - d/5 + time.Duration(rand.Int64N(int64(d)*2/5+1))
}

// progressFloor wraps a progress callback and remembers the highest value
// it was given, so that the progress reported for a task's status changes
// goes on from the server's own and keeps increasing.
type progressFloor struct {
	fn func(progress float64, total *float64, message string)
	mu sync.Mutex
	at float64
}

func (p *progressFloor) report(progress float64, total *float64, message string) {
	p.mu.Lock()
	p.at = max(p.at, progress)
	p.mu.Unlock()
	p.fn(progress, total, message)
}

// step reports one more status change, one above the highest value so far.
func (p *progressFloor) step(message string) {
	p.mu.Lock()
	p.at++
	at := p.at
	p.mu.Unlock()
	p.fn(at, nil, message)
}

// taskFollower follows one task to its end. Only the goroutine of the
// call that created the task uses it; a listen's reader hands it what
// arrives through a taskListen.
type taskFollower struct {
	c        *Client
	name     string // the tool's, for errors
	id       string
	progress *progressFloor
	status   func(mcp.Task)

	interval time.Duration
	last     mcp.Task
	lastAt   time.Time // last.LastUpdatedAt, when it parses
	reported bool
	// answers holds the answers to input requests, by key, once a handler
	// gave them; sent marks those the server acknowledged. A key is put
	// to a handler once over the task's life, however often the server
	// shows it again, and an answer that failed to go out is sent again
	// without asking anew.
	answers map[string]jsontext.Value
	sent    map[string]bool
	// unsent says answers failed to go out (the server unreachable): the
	// task is to be polled soon, so that they go out again even when no
	// notification comes. updateFailing is when the tasks/update failures
	// began, zero while none fails: they end the call once they have
	// lasted taskUnreachable, as failed polls do, so that a server whose
	// updates keep failing does not keep the call waiting until the
	// task's TTL.
	unsent        bool
	updateFailing time.Time
}

// taskOutcome is how the following of a task ended for the call:
// terminal when the task itself ended, with its result or error; not
// terminal when the client stopped following a task that may still run,
// with the reason.
type taskOutcome struct {
	res      *mcp.CallToolResult
	err      error
	terminal bool
}

// followTask follows the task that a tools/call of tool name was answered
// with (raw is the CreateTaskResult) and returns what the call would have
// returned.
func (c *Client) followTask(ctx context.Context, name string, raw jsontext.Value, o callOpts, progress *progressFloor) (*mcp.CallToolResult, error) {
	var created mcp.Task
	if err := json.Unmarshal(raw, &created); err != nil {
		return nil, fmt.Errorf("client: tool %q: task: %w", name, err)
	}
	if created.TaskID == "" || created.Status == "" {
		return nil, fmt.Errorf("client: tool %q: a task without taskId or status", name)
	}
	f := &taskFollower{
		c: c, name: name, id: created.TaskID, progress: progress, status: o.taskStatus,
		answers: map[string]jsontext.Value{}, sent: map[string]bool{},
	}
	// Close ends the following as it ends requests.
	ctx, stop := bindLife(ctx, c.life.ctx)
	defer stop()
	end := f.run(ctx, created)
	if end.terminal {
		return end.res, end.err
	}
	// The client stops following a task that may run on: nobody would
	// see its result, and it would hold the server's resources until its
	// TTL. Once Close has ended the client, no request can go out.
	if errors.Is(context.Cause(ctx), ErrClosed) || errors.Is(end.err, ErrClosed) {
		return nil, fmt.Errorf("%w (tool %q, task %s)", ErrClosed, name, f.id)
	}
	f.cancel(ctx)
	if ctx.Err() != nil {
		// The call's context ended, perhaps while a request failed, which
		// may be why it failed: the caller knows that reason best.
		return nil, fmt.Errorf("client: tool %q: task %s: %w", name, f.id, ctx.Err())
	}
	return nil, end.err
}

// cancel asks the server to cancel the task, which the call stopped
// following before it ended. The request gets a few seconds of its own,
// detached from the call's context, which may be over; its answer changes
// nothing for the call.
func (f *taskFollower) cancel(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), taskCancelTimeout)
	defer cancel()
	if _, err := f.request(ctx, mcp.MethodTasksCancel, nil); err != nil {
		f.c.cfg.logger.Debug("mcp: cancelling a task failed", "tool", f.name, "task", f.id, "err", err)
	}
}

// request sends one tasks/* request for the task; Mcp-Name carries its
// id, so that intermediaries can route it to the replica that has it.
func (f *taskFollower) request(ctx context.Context, method string, params map[string]any) (jsontext.Value, error) {
	p := map[string]any{"taskId": f.id}
	for k, v := range params {
		p[k] = v
	}
	id := f.id
	return f.c.do(ctx, method, p, callOpts{name: &id})
}

// run follows the task from its first state (the CreateTaskResult) until
// it ends, or until the following cannot go on: ctx ended (the outcome's
// error is then ctx's), the server refused a request or stayed
// unreachable too long, or an input request could not be answered.
//
// Where the server offers task notifications, one listen at a time is
// open, and polls happen mostly around it: until the server grants the
// listen, once just after the grant (a change made before the listen
// opened was announced to nobody) unless a notification came first, and
// after the listen drops, until a new one is granted; while it is
// granted, only every taskBackstopPoll (or the task's interval, if
// longer). Without a listen, tasks/get is polled at the interval the
// server suggests.
func (f *taskFollower) run(ctx context.Context, first mcp.Task) *taskOutcome {
	l := &followLoop{f: f, ctx: ctx, poll: newAlarm(), relisten: newAlarm(), bo: backoff{min: taskListenMin, max: taskListenMax}}
	defer l.stop()
	if end := l.start(first); end != nil {
		return end
	}
	for {
		var wake, done <-chan struct{}
		if l.ls != nil {
			wake, done = l.ls.wake, l.ls.done
		}
		var end *taskOutcome
		select {
		case <-ctx.Done():
		case <-l.poll.c():
			l.poll.fired()
			end = l.pollNow()
		case <-l.relisten.c():
			l.relisten.fired()
			l.ls = f.listen(ctx)
		case <-wake:
			end = l.heard()
		case <-done:
			end = l.dropped()
		}
		if end != nil {
			return end
		}
		if ctx.Err() != nil {
			return &taskOutcome{err: ctx.Err()}
		}
	}
}

// followLoop is the state of one taskFollower.run: its two alarms, the
// listen open now, and since when requests have been failing.
type followLoop struct {
	f        *taskFollower
	ctx      context.Context
	poll     *alarm
	relisten *alarm
	ls       *taskListen
	bo       backoff
	// listening is set while a listen is open and the server granted it.
	listening    bool
	failingSince time.Time
}

// stop lets go of the alarms and of the listen open, if any.
func (l *followLoop) stop() {
	l.poll.stop()
	l.relisten.stop()
	if l.ls != nil {
		l.ls.stop()
	}
}

// start takes in the task's first state and arms the first poll and,
// where the server offers task notifications, the first listen.
func (l *followLoop) start(first mcp.Task) *taskOutcome {
	switch first.Status {
	case mcp.TaskCompleted, mcp.TaskFailed, mcp.TaskInputRequired:
		// The first state is the CreateTaskResult, which never carries the
		// task's result, error or input requests: the task is polled at
		// once for them. That poll is retried as any other, should it fail.
		l.f.note(first)
		l.poll.ensure(0)
	default:
		if end := l.f.see(l.ctx, first); end != nil {
			return end
		}
		l.poll.ensure(jitter(l.f.interval))
	}
	// A task that ended has nothing more to tell.
	if !first.Status.Terminal() && l.f.c.tasksAdvertised(l.ctx) {
		l.relisten.ensure(0)
	}
	return nil
}

// pollNow polls once, and arms the next poll unless a listen makes it
// unneeded. It returns the task's outcome once there is one.
func (l *followLoop) pollNow() *taskOutcome {
	l.poll.clear()
	t, err := l.f.get(l.ctx)
	if err != nil {
		if l.ctx.Err() != nil {
			return nil
		}
		if end := l.f.failed(err, &l.failingSince); end != nil {
			return end
		}
		l.poll.ensure(l.f.retryAfter(l.failingSince))
		return nil
	}
	l.failingSince = time.Time{}
	return l.f.seeAndArm(l.ctx, t, l.poll, l.listening)
}

// heard takes what the listen heard: its acknowledgement, which says
// whether the server tells of the task, and the task's newest state.
func (l *followLoop) heard() *taskOutcome {
	acked, granted, t := l.ls.take()
	var end *taskOutcome
	switch {
	case acked && !granted:
		// The server will not tell of this task: poll it.
		l.ls.stop()
		l.ls, l.listening = nil, false
		l.poll.ensure(jitter(l.f.interval))
	case acked && granted:
		l.listening = true
		l.poll.clear()
		if t == nil {
			end = l.pollNow()
		}
	}
	if t != nil && end == nil && l.ctx.Err() == nil {
		end = l.f.seeAndArm(l.ctx, *t, l.poll, l.listening)
	}
	return end
}

// dropped takes in the end of the listen: what it heard last, then a new
// listen after a backoff, or polls alone where the server refused it.
func (l *followLoop) dropped() *taskOutcome {
	if _, _, t := l.ls.take(); t != nil {
		if end := l.f.seeAndArm(l.ctx, *t, l.poll, l.listening); end != nil || l.ctx.Err() != nil {
			return end
		}
	}
	err, lived := l.ls.err, time.Since(l.ls.started)
	was := l.listening
	l.ls, l.listening = nil, false
	switch {
	case errors.Is(err, ErrClosed):
		return &taskOutcome{err: err}
	case refused(err) && !was:
		// The server refused the listen: poll from now on.
		l.poll.ensure(jitter(l.f.interval))
		return nil
	}
	if lived >= taskListenMax {
		l.bo.reset()
	}
	l.relisten.ensure(l.bo.next())
	if was {
		// Whatever changed since the stream broke was told to nobody:
		// look now, and keep looking until a listen is granted again.
		return l.pollNow()
	}
	l.poll.ensure(jitter(l.f.interval))
	return nil
}

// seeAndArm takes in a state of the task (see see) and arms the next
// poll: at the task's interval when no listen tells of the task, or when
// answers to its input requests could not be sent and must go out again;
// at the backstop interval otherwise.
func (f *taskFollower) seeAndArm(ctx context.Context, t mcp.Task, poll *alarm, listening bool) *taskOutcome {
	end := f.see(ctx, t)
	if end != nil || ctx.Err() != nil {
		return end
	}
	switch {
	case f.unsent || !listening:
		f.unsent = false
		poll.ensure(jitter(f.interval))
	default:
		// A backstop, in case a notification is lost between the
		// server's replicas: rare polls cost little.
		poll.ensure(jitter(max(f.interval, taskBackstopPoll)))
	}
	return nil
}

// alarm is a timer that knows whether it is set.
type alarm struct {
	t   *time.Timer
	set bool
}

func newAlarm() *alarm {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &alarm{t: t}
}

// ensure sets the alarm to go off in d unless it is set already.
func (a *alarm) ensure(d time.Duration) {
	if !a.set {
		a.t.Reset(d)
		a.set = true
	}
}

// clear unsets the alarm.
func (a *alarm) clear() {
	a.t.Stop()
	a.set = false
}

// c is the channel the alarm goes off on.
func (a *alarm) c() <-chan time.Time { return a.t.C }

// fired records that the alarm went off.
func (a *alarm) fired() { a.set = false }

func (a *alarm) stop() { a.t.Stop() }

// errTaskInvalid marks a tasks/get result that is not a task: the
// server's reply to the same question will not be better next time.
var errTaskInvalid = errors.New("invalid tasks/get result")

// refused reports an error that asking again will not change: an error
// response that says the server does not know the task (-32602), the
// method (-32601) or that it wants a capability the client did not
// declare (-32021); a result that is not a task; or an HTTP refusal other
// than "too many requests" or a timeout. Anything else may pass: an
// internal error (-32603) is how a server reports a store it could not
// read for a moment (a failover), and the server may be unreachable,
// restarting or overloaded.
func refused(err error) bool {
	if errors.Is(err, ErrClosed) || errors.Is(err, errTaskInvalid) {
		return true
	}
	var rpc *jsonrpc.Error
	if errors.As(err, &rpc) {
		switch rpc.Code {
		case jsonrpc.CodeInvalidParams, jsonrpc.CodeMethodNotFound, mcp.CodeMissingRequiredCapability:
			return true
		}
		return false
	}
	var he *HTTPError
	if errors.As(err, &he) {
		switch he.Status {
		case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
			return false
		}
		return he.Status >= 400 && he.Status < 500
	}
	return false
}

// failed judges a failed tasks/get or tasks/update: a refusal is the
// server's last word on the task; anything else is retried until it has
// lasted taskUnreachable.
func (f *taskFollower) failed(err error, since *time.Time) *taskOutcome {
	if refused(err) {
		return &taskOutcome{err: fmt.Errorf("client: tool %q: task %s: %w", f.name, f.id, err)}
	}
	if since.IsZero() {
		*since = time.Now()
	} else if time.Since(*since) >= taskUnreachable {
		return &taskOutcome{err: fmt.Errorf("client: tool %q: task %s unreachable for %v: %w", f.name, f.id, taskUnreachable, err)}
	}
	return nil
}

// retryAfter is the delay before the next poll while polls fail: the
// interval, doubled for each interval the failures have lasted (up to 16
// times), never above taskRetryMax unless the interval itself is.
func (f *taskFollower) retryAfter(since time.Time) time.Duration {
	d := f.interval
	for i := 0; i < 4 && time.Since(since) > d; i++ {
		d *= 2
	}
	return jitter(min(d, max(f.interval, taskRetryMax)))
}

// get polls the task once.
func (f *taskFollower) get(ctx context.Context) (mcp.Task, error) {
	res, err := f.request(ctx, mcp.MethodTasksGet, nil)
	if err != nil {
		return mcp.Task{}, err
	}
	var t mcp.Task
	if err := json.Unmarshal(res, &t); err != nil {
		return mcp.Task{}, fmt.Errorf("%w: %w", errTaskInvalid, err)
	}
	return t, nil
}

// note records a state of the task and reports it when its status or
// status message changed. It returns false, and records nothing, for a
// state of another task or without a status.
func (f *taskFollower) note(t mcp.Task) bool {
	if t.TaskID != f.id || t.Status == "" {
		return false
	}
	// A state older than one seen already (a poll overtaken by a
	// notification) is not reported, lest the status seem to go back.
	// Its input requests are still looked at (keys are answered once
	// anyway), and a terminal state is always taken, so that clocks that
	// disagree between replicas cannot hide a task's end or a question.
	at, perr := time.Parse(time.RFC3339Nano, t.LastUpdatedAt)
	stale := perr == nil && at.Before(f.lastAt) && !t.Status.Terminal()
	if !stale {
		if perr == nil {
			f.lastAt = at
		}
		f.interval = taskPollInterval(t.PollIntervalMs)
		if !f.reported || t.Status != f.last.Status || t.StatusMessage != f.last.StatusMessage {
			f.reported = true
			if f.status != nil {
				f.status(t)
			}
			if f.progress != nil {
				f.progress.step(t.StatusMessage)
			}
		}
		f.last = t
	}
	return true
}

// see takes in a state of the task, from a poll or a notification: it
// notes it, ends the call on a terminal state, and answers input
// requests.
func (f *taskFollower) see(ctx context.Context, t mcp.Task) *taskOutcome {
	if !f.note(t) {
		return nil
	}
	switch t.Status {
	case mcp.TaskCompleted:
		var out mcp.CallToolResult
		if len(t.Result) == 0 {
			return &taskOutcome{terminal: true, err: fmt.Errorf("client: tool %q: task %s completed without a result", f.name, f.id)}
		}
		if err := json.Unmarshal(t.Result, &out); err != nil {
			return &taskOutcome{terminal: true, err: fmt.Errorf("client: tool %q result: %w", f.name, err)}
		}
		return &taskOutcome{terminal: true, res: &out}
	case mcp.TaskFailed:
		var rpc jsonrpc.Error
		if err := json.Unmarshal(t.Error, &rpc); err != nil || len(t.Error) == 0 {
			return &taskOutcome{terminal: true, err: fmt.Errorf("client: tool %q: task %s failed without a valid error: %s", f.name, f.id, t.StatusMessage)}
		}
		// The error the call would have had, as it would have had it.
		return &taskOutcome{terminal: true, err: &rpc}
	case mcp.TaskCancelled:
		if t.StatusMessage != "" {
			return &taskOutcome{terminal: true, err: fmt.Errorf("%w (tool %q, task %s): %s", ErrTaskCancelled, f.name, f.id, t.StatusMessage)}
		}
		return &taskOutcome{terminal: true, err: fmt.Errorf("%w (tool %q, task %s)", ErrTaskCancelled, f.name, f.id)}
	case mcp.TaskInputRequired:
		return f.answer(ctx, t.InputRequests)
	}
	return nil
}

// answer fulfils the input requests not yet answered and sends their
// answers with tasks/update. A request the client has no handler for (or
// whose handler fails) ends the call as it would a multi round-trip
// request; followTask then cancels the task, which would otherwise wait
// for an answer that will not come.
func (f *taskFollower) answer(ctx context.Context, reqs map[string]mcp.InputRequest) *taskOutcome {
	keys := make([]string, 0, len(reqs))
	for k := range reqs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := map[string]jsontext.Value{}
	for _, k := range keys {
		if f.sent[k] {
			continue
		}
		v, ok := f.answers[k]
		if !ok {
			var err error
			v, err = f.c.answer(ctx, reqs[k])
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return &taskOutcome{err: fmt.Errorf("client: %s: input %q: %w", mcp.MethodToolsCall, k, err)}
			}
			f.answers[k] = v
		}
		out[k] = v
	}
	if len(out) == 0 {
		return nil
	}
	if _, err := f.request(ctx, mcp.MethodTasksUpdate, map[string]any{"inputResponses": out}); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		if end := f.failed(err, &f.updateFailing); end != nil {
			return end
		}
		// The next state that still asks for them sends them again.
		f.unsent = true
		return nil
	}
	f.updateFailing = time.Time{}
	for k := range out {
		f.sent[k] = true
		delete(f.answers, k)
	}
	return nil
}

// tasksAdvertised reports whether the server says it has the tasks
// extension, and so may tell of tasks on a listen. Not knowing counts as
// no: the task is then polled.
func (c *Client) tasksAdvertised(ctx context.Context) bool {
	d, err := c.Discover(ctx)
	if err != nil {
		return false
	}
	return mcp.DeclaresTasks(d.Capabilities.Extensions)
}

// taskListen is one subscriptions/listen for a task's notifications. The
// listen's reader hands over what arrives without ever waiting for the
// follower (on stdio it reads for every request): the acknowledgement,
// and the latest state of the task, which replaces one not yet taken, as
// each notification carries the task's whole state.
type taskListen struct {
	cancel  context.CancelFunc
	started time.Time
	wake    chan struct{} // has a value when there is something to take
	done    chan struct{} // closed once the listen ended; err is then set
	err     error

	mu      sync.Mutex
	acked   bool // an acknowledgement not yet taken
	granted bool
	latest  *mcp.Task
}

// listen opens a listen for the task's notifications, in a goroutine of
// its own, which stop ends.
func (f *taskFollower) listen(ctx context.Context) *taskListen {
	ctx, cancel := context.WithCancel(ctx)
	l := &taskListen{cancel: cancel, started: time.Now(), wake: make(chan struct{}, 1), done: make(chan struct{})}
	onMsg := func(m *jsonrpc.Message) {
		switch m.Method {
		case mcp.NotifyAcknowledged:
			var p struct {
				Notifications mcp.SubscriptionFilter `json:"notifications"`
			}
			_ = jsonrpc.UnmarshalParams(m.Params, &p)
			l.mu.Lock()
			l.acked, l.granted = true, slices.Contains(p.Notifications.TaskIDs, f.id)
			l.mu.Unlock()
		case mcp.NotifyTasks:
			var t mcp.Task
			if jsonrpc.UnmarshalParams(m.Params, &t) != nil || t.TaskID != f.id {
				return
			}
			l.mu.Lock()
			l.latest = &t
			l.mu.Unlock()
		default:
			return
		}
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
	filter := mcp.SubscriptionFilter{TaskIDs: []string{f.id}}
	go func() {
		defer close(l.done)
		_, l.err = f.c.do(ctx, mcp.MethodListen, map[string]any{"notifications": filter}, callOpts{onMsg: onMsg, noLimit: true})
	}()
	return l
}

// take returns what arrived since the last take: whether an
// acknowledgement came and what it granted, and the latest state.
func (l *taskListen) take() (acked, granted bool, t *mcp.Task) {
	l.mu.Lock()
	defer l.mu.Unlock()
	acked, granted, t = l.acked, l.granted, l.latest
	l.acked, l.latest = false, nil
	return acked, granted, t
}

// stop ends the listen and waits for its goroutine.
func (l *taskListen) stop() {
	l.cancel()
	<-l.done
}
