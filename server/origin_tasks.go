package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"tidings/hub"
	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// This file passes the tasks extension through an Origin: the tasks run
// wherever the origin sends the calls, and the server hands their ids to
// callers sealed and bound to the caller, so that the origin need not
// know who owns which task.

// TaskOrigin is an Origin whose tool calls may go on as tasks (the tasks
// extension) where the origin runs them. With one, the server offers the
// extension while OffersTasks says so, and serves tasks/get, tasks/update
// and tasks/cancel, and the taskIds of subscriptions/listen, through it.
//
// The origin names its tasks as it likes (TaskStarted.Task.TaskID); the
// caller sees that name sealed with the server's secret and bound to the
// caller's principal, and the origin is only ever asked of a name it
// gave, by the principal it gave it to: a forged id, or another
// caller's, is refused as an unknown task is, before the origin is
// asked. The sealed form of one name for one principal never changes,
// so a caller may compare the ids it is given.
type TaskOrigin interface {
	Origin
	// OffersTasks reports whether the origin can run tasks now: the
	// server advertises the extension, and serves its methods, while it
	// does. It is called per request and must not do I/O.
	OffersTasks() bool
	// GetTask answers tasks/get for the task req.TaskID names.
	GetTask(ctx context.Context, req *TaskRequest) (*mcp.Task, error)
	// UpdateTask answers tasks/update: req.InputResponses go to the task.
	UpdateTask(ctx context.Context, req *TaskRequest) error
	// CancelTask answers tasks/cancel.
	CancelTask(ctx context.Context, req *TaskRequest) error
	// FollowTasks is called when the listen req starts to follow the
	// tasks ids name, and the function it returns when the listen ends:
	// the origin watches them meanwhile and calls Server.TaskChanged on
	// each change. The tasks are req.Principal's: an origin that must
	// ask in its caller's name watches them in that principal's.
	FollowTasks(req *Request, ids []string) (release func())
}

// TaskRequest is a request about one task of a TaskOrigin.
type TaskRequest struct {
	Request
	// TaskID is the task as the origin named it.
	TaskID string
}

// TaskStarted is what a TaskOrigin's CallTool returns, as its error, when
// the call goes on as a task: the server answers the call with Task,
// whose TaskID is the origin's own name for it (see TaskOrigin). It may
// be returned only for a request that declared the tasks extension
// (Request.Capabilities); any other is refused with -32603.
type TaskStarted struct{ Task mcp.Task }

func (e *TaskStarted) Error() string { return "server: the call goes on as task " + e.Task.TaskID }

// ErrTaskNotFound is what a TaskOrigin returns for a task it does not
// have (unknown, expired, forgotten): the caller is told what it is told
// of a forged id.
var ErrTaskNotFound = errors.New("server: task not found")

// purposeTask seals the task ids of an origin.
const purposeTask byte = 't'

// originTasks is the taskSource of a server whose Origin runs tasks: the
// callers know the origin's tasks by ids sealed to them.
type originTasks struct {
	s *Server
	o TaskOrigin
}

func (t *originTasks) offers() bool { return t.o.OffersTasks() }

// sealTask is the id a principal knows the origin's task id by. It has
// no expiry, so that it is the same each time: the origin says when the
// task is gone.
func (s *Server) sealTask(id, principal string) string {
	return s.seal.seal(purposeTask, []byte(id), principal, time.Time{})
}

// openTask returns the origin's id of the task principal knows as
// sealed; false for an id the server did not seal for principal.
func (s *Server) openTask(sealed, principal string) (string, bool) {
	b, err := s.seal.open(purposeTask, sealed, principal, s.cfg.now())
	if err != nil {
		return "", false
	}
	return string(b), true
}

// originTaskStarted answers a call that went on as the origin's task t.
func (s *Server) originTaskStarted(req *Request, t mcp.Task) engine.Reply {
	if !s.taskable(req) {
		return s.internal(req.ID, errors.New("server: the origin answered with a task a request that cannot take one"))
	}
	t.TaskID = s.sealTask(t.TaskID, req.Principal)
	return s.reply(req, t, engine.Tail{ResultType: mcp.ResultTask})
}

// method serves tasks/get, tasks/update or tasks/cancel of the task the
// caller knows as sealed through the origin, once tasksMethod has made
// the checks it makes of the server's own tasks.
func (t *originTasks) method(ctx context.Context, c *engine.Call, req *Request, sealed string, _ taskOp) engine.Reply {
	s, o := t.s, t.o
	id, ok := s.openTask(sealed, req.Principal)
	if !ok {
		return taskNotFound(req.ID)
	}
	treq := &TaskRequest{Request: *req, TaskID: id}
	tctx := context.WithValue(ctx, ctxKey{}, &treq.Request)
	var task *mcp.Task
	var err error
	switch c.M.Handler {
	case engine.HandleTasksGet:
		task, err = o.GetTask(tctx, treq)
	case engine.HandleTasksUpdate:
		if c.P.InputResponses == nil {
			return invalid(req.ID, "Invalid params: missing inputResponses")
		}
		err = o.UpdateTask(tctx, treq)
	default:
		err = o.CancelTask(tctx, treq)
	}
	var je *jsonrpc.Error
	switch {
	case errors.Is(err, ErrTaskNotFound):
		return taskNotFound(req.ID)
	case errors.As(err, &je):
		return engine.ErrorReply(req.ID, je)
	case err != nil && ctx.Err() != nil:
		return engine.Reply{Outcome: engine.Silent}
	case err != nil:
		return s.internal(req.ID, err)
	case task != nil:
		task.TaskID = sealed
		return s.reply(req, task, engine.Tail{})
	}
	return s.reply(req, struct{}{}, engine.Tail{})
}

// TaskChanged tells the listens following the task its TaskOrigin named
// id that it changed: each reads it again (GetTask) and tells its
// caller its state. Only the principal the task was given to follows it.
func (s *Server) TaskChanged(id string) {
	for _, p := range s.originFollows.principals(id) {
		s.hub.Publish(hub.Event{Task: s.sealTask(id, p), Audience: []string{p}})
	}
}

// originTaskFollows counts, for TaskChanged, the listens that follow each
// task of the origin, by principal.
type originTaskFollows struct {
	mu sync.Mutex
	by map[string]map[string]int // origin's id → principal → listens
}

func (f *originTaskFollows) add(id, principal string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.by == nil {
		f.by = make(map[string]map[string]int)
	}
	if f.by[id] == nil {
		f.by[id] = make(map[string]int)
	}
	f.by[id][principal]++
}

func (f *originTaskFollows) remove(id, principal string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.by[id][principal]--; f.by[id][principal] <= 0 {
		delete(f.by[id], principal)
		if len(f.by[id]) == 0 {
			delete(f.by, id)
		}
	}
}

func (f *originTaskFollows) principals(id string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.by[id]))
	for p := range f.by[id] {
		out = append(out, p)
	}
	return out
}

// grant returns the tasks of ids a listen follows: those whose sealed
// id the server made for this principal, as the origin reports them.
func (t *originTasks) grant(ctx context.Context, req *Request, n *listenNotices, ids []string) ([]string, [][]byte, func(), error) {
	s, o := t.s, t.o
	n.req = req
	var granted, originIDs []string
	var msgs [][]byte
	for _, sealed := range ids {
		id, ok := s.openTask(sealed, req.Principal)
		if !ok || s.sealTask(id, req.Principal) != sealed {
			continue // forged, another's, or not in the form the hub knows
		}
		msg, err := t.notice(ctx, n, sealed, id)
		if err != nil {
			return nil, nil, func() {}, err
		}
		if msg == nil {
			continue
		}
		granted, originIDs, msgs = append(granted, sealed), append(originIDs, id), append(msgs, msg)
	}
	if len(originIDs) == 0 {
		return granted, msgs, func() {}, nil
	}
	// A change between the read above and the origin's first look is
	// told by the origin's first look.
	for _, id := range originIDs {
		s.originFollows.add(id, req.Principal)
	}
	unfollow := o.FollowTasks(req, originIDs)
	return granted, msgs, func() {
		unfollow()
		for _, id := range originIDs {
			s.originFollows.remove(id, req.Principal)
		}
	}, nil
}

// task is the notifications/tasks of the task the listen n's caller
// knows as sealed (see listenNotices.Task).
func (t *originTasks) task(ctx context.Context, n *listenNotices, sealed string) ([]byte, error) {
	id, ok := t.s.openTask(sealed, n.principal)
	if !ok {
		return nil, nil
	}
	return t.notice(ctx, n, sealed, id)
}

// notice is the notifications/tasks of the origin's task id, which the
// listen n's caller knows as sealed; nil when the task is gone, or
// unchanged since the last one this listen sent.
func (t *originTasks) notice(ctx context.Context, n *listenNotices, sealed, id string) ([]byte, error) {
	treq := &TaskRequest{Request: *n.req, TaskID: id}
	task, err := t.o.GetTask(context.WithValue(ctx, ctxKey{}, &treq.Request), treq)
	switch {
	case errors.Is(err, ErrTaskNotFound), err != nil && ctx.Err() != nil:
		return nil, nil
	case err != nil:
		n.srv.log.Warn("mcp: a task's state could not be told; the listen ends", "err", err)
		return nil, err
	}
	task.TaskID = sealed
	buf := n.taskParams(task)
	if buf == nil {
		return nil, nil
	}
	// The origin tells of a change it sees at its first look too, which
	// the listen may have sent already.
	if string(n.sent[sealed]) == string(buf) {
		return nil, nil
	}
	if n.sent == nil {
		n.sent = make(map[string][]byte)
	}
	n.sent[sealed] = buf
	return jsonrpc.AppendNotification(nil, mcp.NotifyTasks, buf), nil
}
