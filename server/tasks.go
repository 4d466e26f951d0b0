package server

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"strconv"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/bus"
	"tidings/hub"
	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// This file is the server side of the tasks extension
// (io.modelcontextprotocol/tasks): a tool handler hands its work to a
// task with RunAsTask, the call is answered at once with the task's
// handle, and the client follows the task with tasks/get (or over
// subscriptions/listen), answers its requests for input with
// tasks/update and may stop it with tasks/cancel. The tasks live in a
// bus.TaskStore, so that any replica can serve those methods; the work
// itself runs on the replica that created the task.

// Defaults of the task options.
const (
	defaultTaskTTL  = time.Hour
	defaultTaskPoll = time.Second
)

// Defaults of WithMaxTasks: how many tasks may run at once on one
// replica, in all and for one principal. Each running task is a
// goroutine or two, and a store read every poll interval.
const (
	defaultMaxTasks          = 10000
	defaultMaxPrincipalTasks = 100
)

// maxListenTasks bounds how many tasks one listen may follow: each is a
// store read when the listen starts and whenever it changes.
const maxListenTasks = 100

// WithTaskStore keeps the server's tasks in st instead of in this process
// (bus.NewLocalTasks, the default). Replicas behind a balancer need a store
// they all reach (brokers.OpenTasks on the bus's URL), since a client
// polls, answers and cancels a task through whichever replica it lands on,
// and one secret (WithSecret), which keys the tasks' owners; give them a
// bus too (WithBus), or the replica running a task hears of an answer or a
// cancel made elsewhere only when it next reads the store, up to one poll
// interval later. While the store fails (a broker outage), the replica
// running a task keeps trying to record what the work did, its outcome or
// its requests for input, until the store takes it, the TTL passes or
// Shutdown gives up waiting. An outage longer than the task's lease
// (WithTaskLease) may end with another replica failing the task first, as
// it would had the runner stopped. The server owns st from then on:
// Shutdown closes it. Like every task option, it makes the server offer
// tasks.
func WithTaskStore(st bus.TaskStore) Option {
	return func(c *config) { c.taskStore, c.taskOpts = st, true }
}

// WithTaskTTL sets how long a task is kept after it was created (default
// one hour): its ttlMs. Past it the
// task's work is stopped and the task is forgotten, so a client that
// never comes back costs nothing for ever. Like every task option, it
// makes the server offer tasks.
func WithTaskTTL(d time.Duration) Option {
	return func(c *config) {
		positive(&c.taskTTL, d)
		c.taskOpts = true
	}
}

// WithTaskPollInterval sets the pollIntervalMs the server suggests to
// clients polling a task (default one second). The replica running a task also re-reads it from the
// store that often, so that an answer or a cancel whose event was lost
// on the bus is late by at most one interval. Like every task option, it
// makes the server offer tasks.
func WithTaskPollInterval(d time.Duration) Option {
	return func(c *config) {
		positive(&c.taskPoll, d)
		c.taskOpts = true
	}
}

// WithMaxTasks bounds the tasks running at once on this server (this
// replica: each counts the tasks whose work it runs, not the store's),
// n in all and perPrincipal for any one principal — the unauthenticated
// callers ("") sharing one allowance — so that no caller, nor all of
// them, can make the server run work without end. The defaults are
// 10 000 and 100. Beyond either,
// RunAsTask answers -32603 "Internal error: too many tasks running": the
// call was valid, and the server refuses it for its own sake, as it does
// a task it cannot store; the client may try again once tasks end. Like
// every task option, it makes the server offer tasks.
func WithMaxTasks(n, perPrincipal int) Option {
	return func(c *config) {
		positive(&c.maxTasks, n)
		positive(&c.maxPrincipalTasks, perPrincipal)
		c.taskOpts = true
	}
}

// RequireTasks makes a tool callable only by requests that declare the
// tasks extension in their own client capabilities: any other call is
// refused with -32021 (naming the extension) before the handler runs.
// It suits work that cannot be done within one request; the handler
// still goes asynchronous itself, with RunAsTask, possibly after
// synchronous rounds of input. Registering such a tool makes the server
// offer tasks. Prompts and resources ignore the option.
func RequireTasks() ItemOption {
	return func(o *itemOpts) { o.tasksOnly = true }
}

// offersTasks reports whether the server advertises the tasks extension
// and serves its methods. The rule is fixed at registration, never by
// what a handler happens to do: WithCapabilities(Tasks), any task option
// (WithTaskStore, WithTaskTTL, WithTaskPollInterval, WithTaskLease,
// WithMaxTasks), or a tool registered with RequireTasks. A server that
// does not offer tasks runs the work of RunAsTask synchronously.
func (s *Server) offersTasks() bool {
	return s.taskSrc.offers() || s.cfg.capabilities.tasks || s.cfg.taskOpts || s.taskTools.Load()
}

// taskable reports whether req may be answered with a task: a 2026-07-28
// request that declared the extension itself, on a server that offers it.
func (s *Server) taskable(req *Request) bool {
	return s.offersTasks() && req.ProtocolVersion == mcp.Version && req.askInput == nil && mcp.DeclaresTasks(req.Capabilities.Extensions)
}

// tasksRequired is the -32021 error of a request that needed the tasks
// extension and did not declare it.
func tasksRequired() *jsonrpc.Error {
	return missingCapabilityError(mcp.ClientCaps{Extensions: map[string]jsontext.Value{mcp.ExtensionTasks: jsontext.Value("{}")}})
}

// RunAsTask runs work as a task when the request allows it, and
// otherwise runs it here and now; a handler ends with
//
//	return req.RunAsTask(ctx, work)
//
// where it wants to go asynchronous — at once, or after synchronous
// rounds of input (InputRequired), so that a task starts only once it
// has what it needs. One handler thus serves every client. ctx is the
// handler's own (or one derived from it): work run here and now gets it
// as it is, deadline and values included, and a task's work gets its
// values but not its end.
//
// A task is created when this request declared the tasks extension in
// its own client capabilities (never because an earlier request did), it
// is a 2026-07-28 request, and the server offers tasks (WithCapabilities
// with Tasks, a task option, or a tool registered with RequireTasks).
// The task is stored before the call is answered, so a tasks/get right
// after the answer finds it; work then runs on a goroutine the server
// owns, and RunAsTask returns an error that the server turns into the
// call's answer, a CreateTaskResult. Return it as it is. A task that
// cannot be stored, one asked for once Shutdown has begun, or one beyond
// the limits of running tasks (WithMaxTasks) is a -32603 *jsonrpc.Error
// instead. Otherwise (and inside a task's own work) work runs on this
// request and its outcome is returned, to be the call's. RunAsTask runs
// work once per request: a second call on the same request is a
// -32603 *jsonrpc.Error, logged, since a second task would be one that
// no client hears of.
//
// Inside a task, work gets a ToolRequest with the same Name, Arguments,
// Principal and Capabilities (and at first the same InputResponses and
// State), and TaskID names the task. Its context has the values of ctx
// but not its end: it ends when the client cancels the task, when the
// task's TTL passes, or when the server shuts down. What work returns
// settles the task: a result completes it (one with isError too); a
// plain error completes it with an isError result, as a call's would; a
// *jsonrpc.Error, or a panic (-32603), fails it with that error; an
// *InputRequired puts it in input_required, and once the client has
// answered every request (with tasks/update) work runs again with the
// answers in InputResponses, keyed as it asked, and its State. Progress
// sets the task's statusMessage; Log sends nothing.
func (r *ToolRequest) RunAsTask(ctx context.Context, work ToolHandler) (*mcp.CallToolResult, error) {
	s := r.srv
	if r.ranTask.Swap(true) {
		if s != nil {
			s.log.Error("mcp: RunAsTask called twice on one request", "tool", r.Name)
		}
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "Internal error", nil)
	}
	if s == nil || r.task != nil || !s.taskable(&r.Request) {
		return work(ctx, r)
	}
	return nil, s.startTask(ctx, r, work)
}

// TaskID returns the id of the task whose work the request is running,
// or "" outside a task.
func (r *Request) TaskID() string {
	if r.task == nil {
		return ""
	}
	return r.task.id
}

// taskCreated is what RunAsTask returns once a task runs the work:
// callTool answers the call with the task's handle.
type taskCreated struct{ task mcp.Task }

func (*taskCreated) Error() string { return "server: the call goes on as a task" }

// errTaskNotFound is a task that is not there for the caller: unknown,
// expired, or another principal's, which must all look alike. It is
// ErrTaskNotFound, an origin's word for the same, so that errors.Is
// finds either whichever side made it.
var errTaskNotFound = ErrTaskNotFound

// errTaskTooLarge is a change that would make the task's record larger
// than a store takes (bus.MaxTaskRecord). It is not the store failing:
// trying again cannot help, so the change is given up at once.
var errTaskTooLarge = errors.New("server: the task's record would be too large")

// taskNotFound answers a request for a task the caller does not have.
func taskNotFound(id jsonrpc.ID) engine.Reply {
	return invalid(id, "Failed to retrieve task: Task not found")
}

// taskRecordVersion is the layout of taskRecord; a replica refuses a
// record of another layout rather than misread it.
const taskRecordVersion = 1

// taskRecord is a task as the server keeps it in the store: what
// tasks/get reports, its owner, and the answers its work has yet to take
// up. It is JSON, written and read by every replica.
type taskRecord struct {
	V int `json:"v"`
	// Owner is the hex HMAC-SHA-256 of the principal that created the
	// task, keyed by the server's secret (see Server.ownerHash): enough
	// to recognise the owner, while the store never holds who it is.
	Owner   string         `json:"owner"`
	Status  mcp.TaskStatus `json:"status"`
	Message string         `json:"message,omitempty"`
	Created time.Time      `json:"created"`
	Updated time.Time      `json:"updated"`
	TTLMs   int64          `json:"ttlMs"`
	PollMs  int64          `json:"pollMs"`
	// Inputs are the outstanding requests for input, under their wire
	// keys; Answers the answers received and not yet taken up by the work.
	Inputs  map[string]mcp.InputRequest `json:"inputs,omitempty"`
	Answers map[string]jsontext.Value   `json:"answers,omitempty"`
	Result  jsontext.Value              `json:"result,omitzero"`
	Error   jsontext.Value              `json:"error,omitzero"`
	// Lease is when the replica running the task last promised to renew
	// it by (see WithTaskLease): past it, an unfinished task's runner is
	// taken for gone. Zero in a record written before leases were kept,
	// or by a replica that keeps none, which never lapses.
	Lease time.Time `json:"lease,omitzero"`
}

// ownerHash is what a record keeps of a principal: an HMAC-SHA-256 keyed
// with a key drawn from the server's secret (WithSecret, which replicas
// share). A bare hash would let whoever reads the store test guesses of
// principals (user names, e-mail addresses) against it, and whoever
// writes it make a task anyone's by writing the hash of their name;
// without the key neither can.
func (s *Server) ownerHash(principal string) string {
	m := hmac.New(sha256.New, s.ownerKey)
	m.Write([]byte(principal))
	return hex.EncodeToString(m.Sum(nil))
}

// taskOwnerKey is the key of ownerHash, drawn from secret so that it is
// used for nothing else the secret keys.
func taskOwnerKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("tidings task owner v1"))
	return m.Sum(nil)
}

// errCorruptTask is a record that is not one this server writes: unlike
// a store that failed, reading it again gives the same answer.
var errCorruptTask = errors.New("server: corrupt task record")

// decodeTaskRecord reads a record from the store. A store is shared
// infrastructure: whatever it holds, a record that is not one this
// server writes is an error saying what is wrong, never a panic or a
// half-read task.
func decodeTaskRecord(b []byte) (*taskRecord, error) {
	var rec taskRecord
	if err := jsonrpc.UnmarshalParams(b, &rec); err != nil || len(b) == 0 || b[0] != '{' {
		if err == nil {
			err = errors.New("not a JSON object")
		}
		return nil, fmt.Errorf("%w: %w", errCorruptTask, err)
	}
	if err := rec.check(); err != nil {
		return nil, fmt.Errorf("%w: %w", errCorruptTask, err)
	}
	return &rec, nil
}

// check reports what makes rec inconsistent.
func (rec *taskRecord) check() error {
	switch {
	case rec.V != taskRecordVersion:
		return fmt.Errorf("layout %d, want %d", rec.V, taskRecordVersion)
	case len(rec.Owner) != 2*sha256.Size || !isLowerHex(rec.Owner):
		return errors.New("the owner is not an HMAC-SHA-256 in hex")
	case rec.Created.IsZero() || rec.Updated.IsZero():
		return errors.New("a timestamp is missing")
	case rec.TTLMs <= 0 || rec.PollMs <= 0:
		return errors.New("the TTL and the poll interval must be positive")
	case len(rec.Result) > 0 && (rec.Status != mcp.TaskCompleted || rec.Result[0] != '{'):
		return errors.New("a result outside the completed status, or not an object")
	case rec.Status == mcp.TaskCompleted && len(rec.Result) == 0:
		return errors.New("completed without a result")
	case len(rec.Error) > 0 && (rec.Status != mcp.TaskFailed || rec.Error[0] != '{'):
		return errors.New("an error outside the failed status, or not an object")
	case rec.Status == mcp.TaskFailed && len(rec.Error) == 0:
		return errors.New("failed without an error")
	case (len(rec.Inputs) > 0) != (rec.Status == mcp.TaskInputRequired):
		return errors.New("requests for input outside the input_required status, or input_required without any")
	case len(rec.Answers) > 0 && rec.Status != mcp.TaskInputRequired && rec.Status != mcp.TaskWorking:
		return errors.New("answers kept for a finished task")
	}
	switch rec.Status {
	case mcp.TaskWorking, mcp.TaskInputRequired, mcp.TaskCompleted, mcp.TaskFailed, mcp.TaskCancelled:
	default:
		return fmt.Errorf("unknown status %q", rec.Status)
	}
	for k, in := range rec.Inputs {
		if in.Method == "" {
			return fmt.Errorf("request for input %q has no method", k)
		}
	}
	return nil
}

func isLowerHex(s string) bool {
	for i := range len(s) {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// encode is rec as the store keeps it.
func (rec *taskRecord) encode() ([]byte, error) {
	b, err := jsonrpc.Marshal(rec)
	if err != nil {
		return nil, fmt.Errorf("server: encode task record: %w", err)
	}
	return b, nil
}

// ownedBy reports whether principal created the task; the comparison
// takes the same time wherever the hashes differ.
func (s *Server) ownedBy(rec *taskRecord, principal string) bool {
	return hmac.Equal([]byte(rec.Owner), []byte(s.ownerHash(principal)))
}

// expired reports whether the task's TTL has passed at now. The store
// forgets the task by then too, by its own clock; this check makes the
// server's clock (WithClock) the one that counts for the server.
func (rec *taskRecord) expired(now time.Time) bool {
	return !now.Before(rec.Created.Add(time.Duration(rec.TTLMs) * time.Millisecond))
}

// wire is the task as a client sees it: a CreateTaskResult's body, or
// with detailed set the DetailedTask of tasks/get and notifications/tasks,
// which adds what belongs to the status.
func (rec *taskRecord) wire(id string, detailed bool) mcp.Task {
	ttl := rec.TTLMs
	t := mcp.Task{
		TaskID:         id,
		Status:         rec.Status,
		StatusMessage:  rec.Message,
		CreatedAt:      rec.Created.UTC().Format(time.RFC3339Nano),
		LastUpdatedAt:  rec.Updated.UTC().Format(time.RFC3339Nano),
		TTLMs:          &ttl,
		PollIntervalMs: rec.PollMs,
	}
	if detailed {
		switch rec.Status {
		case mcp.TaskInputRequired:
			t.InputRequests = rec.Inputs
		case mcp.TaskCompleted:
			t.Result = rec.Result
		case mcp.TaskFailed:
			t.Error = rec.Error
		}
	}
	return t
}

// loadTask reads the task id of principal from the store, for a client
// (tasks/get, a listen): an unfinished task whose lease lapsed is failed
// first (see changeTask), so that no one is told it still runs.
func (s *Server) loadTask(ctx context.Context, id, principal string) (*taskRecord, error) {
	now := s.cfg.now()
	rec, _, err := s.readTask(ctx, id, principal, now)
	if err != nil || !rec.lapsed(now) {
		return rec, err
	}
	return s.changeTask(ctx, id, principal, func(*taskRecord) bool { return false })
}

// readTask reads the task id of principal from the store, with its
// revision: an unknown task, one expired at now and another principal's
// are all errTaskNotFound.
func (s *Server) readTask(ctx context.Context, id, principal string, now time.Time) (*taskRecord, uint64, error) {
	b, rev, err := s.taskStore.Get(ctx, id)
	if errors.Is(err, bus.ErrNoTask) {
		return nil, 0, errTaskNotFound
	}
	if err != nil {
		return nil, 0, fmt.Errorf("server: read task: %w", err)
	}
	rec, err := decodeTaskRecord(b)
	if err != nil {
		return nil, 0, err
	}
	if !s.ownedBy(rec, principal) || rec.expired(now) {
		return nil, 0, errTaskNotFound
	}
	return rec, rev, nil
}

// maxTaskSwaps bounds the compare-and-swap retries of one change: each
// retry means another change landed first, so running out means the
// task is being changed far faster than anyone could mean to.
const maxTaskSwaps = 100

// Bounds of the wait before a compare-and-swap is tried again: writers
// that collided, tried again at once, would collide again, each round a
// trip to the store. A random wait, up to a bound that grows with the
// tries, spreads them apart.
const (
	swapBackoffMin = time.Millisecond
	swapBackoffMax = 50 * time.Millisecond
)

// swapBackoff waits before the try-th retry of a compare-and-swap, a
// random time under min(try·swapBackoffMin, swapBackoffMax), or until ctx
// ends.
func swapBackoff(ctx context.Context, try int) error {
	d := min(time.Duration(try)*swapBackoffMin, swapBackoffMax)
	return pause(ctx, d/2+mrand.N(d/2+1))
}

// pause waits d, or until ctx ends, when it returns ctx's error.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// updateTask changes the task id of principal with change, which edits
// the record it is given and reports whether it changed anything. It
// reads and writes by compare-and-swap until the write lands on the
// record it read, so that changes made meanwhile by other requests or
// replicas are never lost (change may run several times). A change that
// lands is published to the owner's listeners, here and, through the
// bus, on every replica. It returns the record as it now is.
func (s *Server) updateTask(ctx context.Context, id, principal string, change func(*taskRecord) bool) (*taskRecord, error) {
	return s.swapTask(ctx, id, principal, change, true)
}

// swapTask is updateTask; with told false the change is one no client
// sees (a lease renewed), which leaves lastUpdatedAt as it is and is
// published to no one.
func (s *Server) swapTask(ctx context.Context, id, principal string, change func(*taskRecord) bool, told bool) (*taskRecord, error) {
	for try := range maxTaskSwaps {
		if try > 0 {
			if err := swapBackoff(ctx, try); err != nil {
				return nil, err
			}
		}
		now := s.cfg.now()
		rec, rev, err := s.readTask(ctx, id, principal, now)
		if err != nil {
			return nil, err
		}
		if !change(rec) {
			return rec, nil
		}
		if told && now.After(rec.Updated) {
			rec.Updated = now
		}
		nb, err := rec.encode()
		if err != nil {
			return nil, err
		}
		if len(nb) > bus.MaxTaskRecord {
			return nil, errTaskTooLarge
		}
		_, err = s.taskStore.Update(ctx, id, nb, rev)
		switch {
		case errors.Is(err, bus.ErrTaskConflict):
			continue
		case errors.Is(err, bus.ErrNoTask):
			return nil, errTaskNotFound
		case err != nil:
			return nil, fmt.Errorf("server: write task: %w", err)
		}
		if told {
			s.publishTask(id, principal)
		}
		return rec, nil
	}
	return nil, fmt.Errorf("server: task changed %d times while being written", maxTaskSwaps)
}

// publishTask tells the owner's listeners (and the task's runner) that
// the task changed; no one else hears of it.
func (s *Server) publishTask(id, principal string) {
	s.hub.Publish(hub.Event{Task: id, Audience: []string{principal}})
}

// errTooManyTasks refuses a task beyond the limits of WithMaxTasks.
var errTooManyTasks = jsonrpc.NewError(jsonrpc.CodeInternalError, "Internal error: too many tasks running", nil)

// errShuttingDown refuses a task once Shutdown has begun.
var errShuttingDown = jsonrpc.NewError(jsonrpc.CodeInternalError, "Internal error: the server is shutting down", nil)

// startTask creates the task of r, durably, and starts its work. The
// error it returns is the *taskCreated that callTool answers with, or
// the -32603 that stands for a task that could not be created.
func (s *Server) startTask(ctx context.Context, r *ToolRequest, work ToolHandler) error {
	now := s.cfg.now()
	rec := &taskRecord{V: taskRecordVersion, Owner: s.ownerHash(r.Principal), Status: mcp.TaskWorking,
		Created: now, Updated: now, TTLMs: s.cfg.taskTTL.Milliseconds(), PollMs: s.cfg.taskPoll.Milliseconds(),
		Lease: now.Add(s.cfg.taskLease)}
	b, err := rec.encode()
	if err != nil {
		s.log.Error("mcp: task not created", "tool", r.Name, "err", err)
		return jsonrpc.NewError(jsonrpc.CodeInternalError, "Internal error", nil)
	}
	id := rand.Text()
	tr, err := s.newTaskRun(ctx, id, r, work)
	if err != nil {
		if errors.Is(err, errTooManyTasks) {
			s.log.Warn("mcp: task refused: too many tasks running", "tool", r.Name)
			return errTooManyTasks
		}
		return errShuttingDown
	}
	// The store's expiry is by the store's clock; the record's own, by
	// the server's (see taskRecord.expired).
	if err := s.taskStore.Create(ctx, id, b, time.Now().Add(s.cfg.taskTTL)); err != nil {
		tr.abandon()
		s.log.Error("mcp: task not created", "tool", r.Name, "err", err)
		return jsonrpc.NewError(jsonrpc.CodeInternalError, "Internal error: the task could not be stored", nil)
	}
	go tr.run()
	return &taskCreated{task: rec.wire(id, false)}
}

// inputResponsesTooLarge refuses answers that do not fit in the task's
// record, which holds them until the work takes them up.
var inputResponsesTooLarge = "Invalid params: the inputResponses are too large to keep with the task (limit " +
	strconv.Itoa(bus.MaxTaskRecord) + " bytes in all)"

// tasksGet serves tasks/get.
func (s *Server) tasksGet(ctx context.Context, c *engine.Call, req *Request) engine.Reply {
	return s.tasksMethod(ctx, c, req, func(id string) (*taskRecord, string, error) {
		rec, err := s.loadTask(ctx, id, req.Principal)
		return rec, "", err
	})
}

// tasksUpdate serves tasks/update.
func (s *Server) tasksUpdate(ctx context.Context, c *engine.Call, req *Request) engine.Reply {
	return s.tasksMethod(ctx, c, req, func(id string) (*taskRecord, string, error) {
		if c.P.InputResponses == nil {
			return nil, "Invalid params: missing inputResponses", nil
		}
		size := 0
		for k, v := range c.P.InputResponses {
			size += len(k) + len(v)
		}
		if size > bus.MaxTaskRecord {
			return nil, inputResponsesTooLarge, nil
		}
		_, err := s.changeTask(ctx, id, req.Principal, func(rec *taskRecord) bool {
			return rec.answer(c.P.InputResponses)
		})
		return nil, "", err
	})
}

// tasksCancel serves tasks/cancel.
func (s *Server) tasksCancel(ctx context.Context, c *engine.Call, req *Request) engine.Reply {
	return s.tasksMethod(ctx, c, req, func(id string) (*taskRecord, string, error) {
		_, err := s.changeTask(ctx, id, req.Principal, (*taskRecord).cancel)
		return nil, "", err
	})
}

// tasksMethod serves one of tasks/get, tasks/update and tasks/cancel,
// whose work is op. Each needs the extension in the request's own
// capabilities, then a taskId naming a task of the caller's; an unknown
// task, an expired one and another principal's are refused alike. op
// returns the record to answer with (nil: an empty result), or the
// message of an invalid-params refusal, or an error. A server with a
// TaskOrigin serves the origin's tasks instead, after the same checks.
func (s *Server) tasksMethod(ctx context.Context, c *engine.Call, req *Request, op taskOp) engine.Reply {
	if !mcp.DeclaresTasks(req.Capabilities.Extensions) {
		return engine.ErrorReply(req.ID, tasksRequired())
	}
	if c.P.TaskID == nil {
		return invalid(req.ID, "Invalid params: missing taskId")
	}
	return s.taskSrc.method(ctx, c, req, *c.P.TaskID, op)
}

// storeTasks is the taskSource of a server that runs its tasks itself,
// keeping them in its task store: the default.
type storeTasks Server

func (*storeTasks) offers() bool { return false }

func (st *storeTasks) method(ctx context.Context, _ *engine.Call, req *Request, id string, op taskOp) engine.Reply {
	s := (*Server)(st)
	rec, refusal, err := op(id)
	if refusal != "" {
		return invalid(req.ID, refusal)
	}
	switch {
	case errors.Is(err, errTaskNotFound):
		return taskNotFound(req.ID)
	case errors.Is(err, errTaskTooLarge):
		return invalid(req.ID, inputResponsesTooLarge)
	case err != nil && ctx.Err() != nil:
		return engine.Reply{Outcome: engine.Silent}
	case err != nil:
		return s.internal(req.ID, err)
	case rec != nil:
		return s.reply(req, rec.wire(id, true), engine.Tail{})
	}
	return s.reply(req, struct{}{}, engine.Tail{})
}

// answer takes the answers to requests still outstanding and ignores
// every other key (never issued, answered already, or of a finished
// task). Once nothing is outstanding the task is working again, and its
// runner takes the answers up.
func (rec *taskRecord) answer(responses map[string]jsontext.Value) bool {
	if rec.Status != mcp.TaskInputRequired {
		return false
	}
	changed := false
	for k, v := range responses {
		if _, ok := rec.Inputs[k]; !ok {
			continue
		}
		if rec.Answers == nil {
			rec.Answers = make(map[string]jsontext.Value)
		}
		rec.Answers[k] = bytes.Clone(v)
		delete(rec.Inputs, k)
		changed = true
	}
	if changed && len(rec.Inputs) == 0 {
		rec.Status, rec.Inputs, rec.Message = mcp.TaskWorking, nil, ""
	}
	return changed
}

// cancel ends an unfinished task as cancelled, at once: the runner, on
// whichever replica, stops the work when it hears of it, and never
// overwrites a finished task.
func (rec *taskRecord) cancel() bool {
	if rec.Status.Terminal() {
		return false
	}
	rec.Status, rec.Message = mcp.TaskCancelled, "The client cancelled the task."
	rec.Inputs, rec.Answers = nil, nil
	return true
}

// grantTasks returns the tasks of ids (sorted, without repeats) that
// exist and are principal's, with their records as read, or nil for
// none: a listen follows only those, its acknowledgement says so, and it
// sends those records as the tasks' first states. The listen (ctx)
// follows their leases too (see leaseWatch).
func (s *Server) grantTasks(ctx context.Context, principal string, ids []string) ([]string, []*taskRecord, error) {
	var granted []string
	var recs []*taskRecord
	for _, id := range ids {
		rec, err := s.loadTask(ctx, id, principal)
		if errors.Is(err, errTaskNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		s.leases.follow(ctx, id, principal, rec)
		granted, recs = append(granted, id), append(recs, rec)
	}
	return granted, recs, nil
}

// checkListenTasks refuses a listen that asks for tasks without
// declaring the extension (SUB-18), or for too many.
func (s *Server) checkListenTasks(req *Request, ids []string) *engine.Reply {
	if len(ids) == 0 || !s.offersTasks() {
		return nil
	}
	if !mcp.DeclaresTasks(req.Capabilities.Extensions) {
		r := engine.ErrorReply(req.ID, tasksRequired())
		return &r
	}
	if len(ids) > maxListenTasks {
		r := invalid(req.ID, "Invalid params: too many taskIds (limit "+strconv.Itoa(maxListenTasks)+")")
		return &r
	}
	return nil
}

// Task returns the notifications/tasks of the task id as tasks/get
// would report it now, tagged with the listen's subscription id; nil
// when the task is gone (or no longer the caller's). A store that fails
// is an error, which ends the listen with -32603: the change it was to
// tell of has been taken from the subscription, so going on would leave
// the client with a state it believes current, while a client told the
// listen failed listens again and hears every task's state anew.
func (n *listenNotices) Task(ctx context.Context, id string) ([]byte, error) {
	return n.srv.taskSrc.task(ctx, n, id)
}

// grant returns the tasks of ids, read from the store (grantTasks).
func (st *storeTasks) grant(ctx context.Context, req *Request, n *listenNotices, ids []string) ([]string, [][]byte, func(), error) {
	granted, recs, err := (*Server)(st).grantTasks(ctx, req.Principal, ids)
	if err != nil {
		return nil, nil, func() {}, err
	}
	msgs := make([][]byte, len(granted))
	for i, id := range granted {
		msgs[i] = n.taskNotice(id, recs[i])
	}
	return granted, msgs, func() {}, nil
}

// task is the store's task id as the listen n's caller may see it.
func (st *storeTasks) task(ctx context.Context, n *listenNotices, id string) ([]byte, error) {
	rec, err := n.srv.loadTask(ctx, id, n.principal)
	switch {
	case errors.Is(err, errTaskNotFound), err != nil && ctx.Err() != nil:
		return nil, nil
	case err != nil:
		n.srv.log.Warn("mcp: a task's state could not be told; the listen ends", "err", err)
		return nil, err
	}
	n.srv.leases.follow(ctx, id, n.principal, rec)
	return n.taskNotice(id, rec), nil
}

// taskNotice is the notifications/tasks of rec, the task id.
func (n *listenNotices) taskNotice(id string, rec *taskRecord) []byte {
	params := n.taskParams(rec.wire(id, true))
	if params == nil {
		return nil
	}
	return jsonrpc.AppendNotification(nil, mcp.NotifyTasks, params)
}

// taskParams are the params of a notifications/tasks telling task (an
// object) on this listen: the task, tagged with the listen's id; nil
// when it cannot be encoded.
func (n *listenNotices) taskParams(task any) []byte {
	b, err := jsonrpc.Marshal(task)
	if err != nil || len(b) < 2 {
		n.srv.log.Error("mcp: task notification", "err", err)
		return nil
	}
	buf := make([]byte, 0, len(b)+len(n.idMeta)+16)
	buf = append(buf, b[:len(b)-1]...)
	buf = append(buf, `,"_meta":`...)
	buf = append(buf, n.idMeta...)
	return append(buf, '}')
}

// cloneAnswers copies answers, which a task keeps past the request
// that brought them.
func cloneAnswers(m map[string]jsontext.Value) map[string]jsontext.Value {
	if m == nil {
		return nil
	}
	out := maps.Clone(m)
	for k, v := range out {
		out[k] = bytes.Clone(v)
	}
	return out
}
