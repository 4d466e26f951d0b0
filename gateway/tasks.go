package gateway

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/client"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// This file passes the tasks extension through: a tools/call an upstream
// answers with a task goes down as that task, under an id that names the
// upstream (which the gateway's server then seals and binds to the
// caller, see server.TaskOrigin), and tasks/get, tasks/update and
// tasks/cancel go back to that upstream with its own id. A listen here
// that follows a task has the gateway poll the upstream's tasks/get, at
// the interval the upstream suggests, while it lasts: the gateway's one
// upstream listen follows lists and resources and would have to be
// opened again for every task followed, while a poll costs one request
// per interval and works with any upstream that runs tasks.

// The gateway's origin runs tasks where its upstreams do.
var _ server.TaskOrigin = origin{}

// taskSeparator parts an upstream's id from its own task id in the
// gateway's task ids; no upstream id holds it (checkID).
const taskSeparator = "/"

// Bounds of the interval at which the gateway polls a followed task: the
// floor keeps an upstream that suggests none, or a tiny one, from having
// the gateway poll in a loop; the ceiling keeps a listener from waiting
// for ever on an absurd suggestion.
const (
	defaultTaskPoll = time.Second
	minTaskPoll     = 50 * time.Millisecond
	maxTaskPoll     = 30 * time.Second
)

// offersTasks reports whether u said it runs tasks when the gateway
// started following it, or, for an upstream asked only in a caller's
// name, when a caller first came (exchanger.learn).
func (u *upstream) offersTasks() bool { return u.offer().tasks }

// withTasks is the option that declares the caller's capabilities to u
// (upstreamCaps) with the tasks extension: the gateway declares it on the
// caller's behalf, for the gateway follows the task for the caller.
func withTasks(u *upstream, req *server.Request) client.CallOption {
	caps := upstreamCaps(u, req)
	if caps.Extensions == nil {
		caps.Extensions = map[string]jsontext.Value{}
	}
	caps.Extensions[mcp.ExtensionTasks] = jsontext.Value("{}")
	return client.WithCapabilities(caps)
}

// asksTask reports whether a call of req to u may be answered with a
// task: the caller declared the extension on a 2026-07-28 request (the
// extension has no earlier form), and u runs tasks.
func asksTask(u *upstream, req *server.Request) bool {
	return req.ProtocolVersion == mcp.Version && mcp.DeclaresTasks(req.Capabilities.Extensions) && u.offersTasks()
}

// taskStarted is what CallTool returns for u's task handle res: the task,
// under the gateway's id for it, or the upstream's mistake when the
// gateway did not ask for one.
func taskStarted(u *upstream, req *server.Request, res jsontext.Value) error {
	if !asksTask(u, req) {
		return jsonrpc.NewError(jsonrpc.CodeInternalError, "upstream "+u.cfg.ID+" answered with a task, which the gateway did not ask for", nil)
	}
	var t mcp.Task
	if err := jsonrpc.UnmarshalParams(res, &t); err != nil {
		return upstreamError(u, err)
	}
	if t.TaskID == "" {
		return jsonrpc.NewError(jsonrpc.CodeInternalError, "upstream "+u.cfg.ID+" answered with a task without a taskId", nil)
	}
	t.TaskID = u.cfg.ID + taskSeparator + t.TaskID
	return &server.TaskStarted{Task: t}
}

// taskOf finds the upstream of the gateway's task id, and the upstream's
// own id of it; false for an upstream the gateway no longer has.
func (g *Gateway) taskOf(id string) (*upstream, string, bool) {
	upID, tid, ok := strings.Cut(id, taskSeparator)
	if !ok {
		return nil, "", false
	}
	ups, _ := g.upstreams()
	for _, u := range ups {
		if u.cfg.ID == upID {
			return u, tid, true
		}
	}
	return nil, "", false
}

// OffersTasks reports whether any upstream runs tasks: the gateway
// advertises the extension while one does.
func (o origin) OffersTasks() bool {
	ups, _ := o.g.upstreams()
	for _, u := range ups {
		if u.offersTasks() {
			return true
		}
	}
	return false
}

// GetTask forwards a tasks/get to the task's upstream.
func (o origin) GetTask(ctx context.Context, req *server.TaskRequest) (*mcp.Task, error) {
	res, err := o.taskRequest(ctx, mcp.MethodTasksGet, req, nil)
	if err != nil {
		return nil, err
	}
	var t mcp.Task
	if err := jsonrpc.UnmarshalParams(res, &t); err != nil {
		return nil, jsonrpc.Wrap(jsonrpc.CodeInternalError, "upstream task state unreadable: ", err)
	}
	return &t, nil
}

// UpdateTask forwards a tasks/update, the caller's answers as they are.
func (o origin) UpdateTask(ctx context.Context, req *server.TaskRequest) error {
	_, err := o.taskRequest(ctx, mcp.MethodTasksUpdate, req, map[string]any{"inputResponses": req.InputResponses})
	return err
}

// CancelTask forwards a tasks/cancel.
func (o origin) CancelTask(ctx context.Context, req *server.TaskRequest) error {
	_, err := o.taskRequest(ctx, mcp.MethodTasksCancel, req, nil)
	return err
}

// taskRequest sends method about req's task to its upstream, with the
// caller's capabilities. The upstream's invalid-params refusal of a
// task id the gateway got from it means the task is gone: it is told
// as server.ErrTaskNotFound, as a forged id is. A tasks/get or
// tasks/cancel under way when a reload replaces the upstream, closing
// its client, is sent again to the upstream that replaced it, once:
// both may be asked twice, where a tasks/update's answers may not be
// given twice, so the caller of one is told what happened and what to
// do instead.
func (o origin) taskRequest(ctx context.Context, method string, req *server.TaskRequest, params map[string]any) (jsontext.Value, error) {
	if params == nil {
		params = map[string]any{}
	}
	u, tid, ok := o.g.taskOf(req.TaskID)
	if !ok {
		return nil, server.ErrTaskNotFound
	}
	send := func() (jsontext.Value, error) {
		params["taskId"] = tid
		return u.c.Request(ctx, method, params, append(forCaller(u, &req.Request), withTasks(u, &req.Request))...)
	}
	res, err := send()
	if errors.Is(err, client.ErrClosed) && ctx.Err() == nil && o.g.ctx.Err() == nil {
		// The upstream's client was closed under the request: a reload
		// replaced the upstream, or removed it.
		if u, tid, ok = o.g.taskOf(req.TaskID); !ok {
			return nil, server.ErrTaskNotFound
		}
		if method == mcp.MethodTasksUpdate {
			// Not sent again: the upstream may have taken the answers.
			return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "upstream "+u.cfg.ID+
				" was replaced by a configuration reload while this tasks/update was on its way, which may or may not have reached it:"+
				" read the task (tasks/get) and answer again if it still asks for input", nil)
		}
		res, err = send()
	}
	var je *jsonrpc.Error
	if errors.As(err, &je) && je.Code == jsonrpc.CodeInvalidParams && method != mcp.MethodTasksUpdate {
		return nil, server.ErrTaskNotFound
	}
	if err != nil {
		return nil, upstreamError(u, err)
	}
	return res, nil
}

// FollowTasks has the gateway poll the tasks ids name while a listen
// here follows them, in the name of the listen's caller, whose tasks
// they are; release stops what no listen follows any more.
func (o origin) FollowTasks(req *server.Request, ids []string) func() {
	return o.g.taskPolls.follow(o.g, req.Principal, ids)
}

// taskPolls are the tasks the gateway polls for its listeners, one poll
// per task however many listens follow it.
type taskPolls struct {
	mu    sync.Mutex
	polls map[string]*taskPoll
	wg    sync.WaitGroup
}

// taskPoll is one task polled, and the listens following it.
type taskPoll struct {
	listens int
	stop    context.CancelFunc
}

// follow starts polling, in principal's name, the tasks of ids not
// polled yet.
func (p *taskPolls) follow(g *Gateway, principal string, ids []string) func() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.polls == nil {
		p.polls = make(map[string]*taskPoll)
	}
	for _, id := range ids {
		tp := p.polls[id]
		if tp == nil && g.ctx.Err() == nil {
			ctx, stop := context.WithCancel(g.ctx)
			tp = &taskPoll{stop: stop}
			p.polls[id] = tp
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				g.pollTask(ctx, principal, id)
			}()
		}
		if tp != nil {
			tp.listens++
		}
	}
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, id := range ids {
			tp := p.polls[id]
			if tp == nil {
				continue
			}
			if tp.listens--; tp.listens == 0 {
				tp.stop()
				delete(p.polls, id)
			}
		}
	}
}

// pollTask polls the task id at its upstream, in the name of principal,
// whose task it is, until ctx ends or the task ends or is gone, and
// tells the gateway's server of each state it finds (the first too: a
// listen read the task before the poll began). An upstream that
// exchanges tokens is asked with principal's latest token, which its
// listen here keeps (exchanger.hold).
func (g *Gateway) pollTask(ctx context.Context, principal, id string) {
	ctx = withCaller(ctx, caller{principal: principal})
	var last mcp.Task
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Found again on every pass: a reload may replace the upstream
		// and close the client of the one found before.
		u, tid, ok := g.taskOf(id)
		if !ok {
			g.srv.TaskChanged(id)
			return
		}
		wait := defaultTaskPoll
		res, err := u.c.Request(ctx, mcp.MethodTasksGet, map[string]any{"taskId": tid}, withTasks(u, &server.Request{}))
		var je *jsonrpc.Error
		var now mcp.Task
		switch {
		case ctx.Err() != nil:
			return
		case errors.As(err, &je) && je.Code == jsonrpc.CodeInvalidParams:
			g.srv.TaskChanged(id) // gone: the listens find it so
			return
		case err != nil:
			u.log.Debug("a followed task could not be read; polling on", "err", err)
		case jsonrpc.UnmarshalParams(res, &now) != nil:
			u.log.Debug("a followed task's state is unreadable; polling on")
		default:
			if now.Status != last.Status || now.StatusMessage != last.StatusMessage || now.LastUpdatedAt != last.LastUpdatedAt {
				last = now
				g.srv.TaskChanged(id)
			}
			if now.Status.Terminal() {
				return
			}
			if now.PollIntervalMs > 0 {
				wait = min(max(time.Duration(now.PollIntervalMs)*time.Millisecond, minTaskPoll), maxTaskPoll)
			}
		}
		t.Reset(wait)
	}
}
