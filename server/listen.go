package server

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/hub"
	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// grant returns the part of f the server will honour. Resources the
// caller may not see are not granted: granting them would confirm that
// they exist, and their updates would leak to the caller. Tasks are
// granted by listen alone (grantTasks), since that reads the store.
func (s *Server) grant(principal string, f mcp.SubscriptionFilter) (mcp.SubscriptionFilter, hub.Filter) {
	var g mcp.SubscriptionFilter
	hf := hub.Filter{Principal: principal}
	for _, l := range mcp.Lists() {
		if f.Wants(l) && s.advertises(l) {
			g.Want(l)
			hf.Kinds |= hub.Of(l)
		}
	}
	if s.advertises(mcp.ResourcesList) {
		if len(f.ResourceSubscriptions) > 0 {
			g.ResourceSubscriptions = slices.Compact(slices.Sorted(slices.Values(f.ResourceSubscriptions)))
			g.ResourceSubscriptions = slices.DeleteFunc(g.ResourceSubscriptions, func(uri string) bool {
				return !s.sees(principal, ListResources, uri)
			})
			if len(g.ResourceSubscriptions) == 0 {
				g.ResourceSubscriptions = nil
			}
			hf.URIs = g.ResourceSubscriptions
		}
	}
	return g, hf
}

// listenNotices tags every notification of one listen with its
// subscription id, the listen request's id. It reads the tasks the
// listen follows (engine.TaskNotices) from srv's store, as principal.
type listenNotices struct {
	idMeta    string
	changed   mcp.PerList[[]byte]
	srv       *Server
	principal string
	// req and sent are set for a listen whose tasks an origin runs (see
	// originTasks).
	req  *Request
	sent map[string][]byte
	// stamped holds, once a stamped change reached the listen, the last
	// message made for each list's stamp (see ListChanged).
	stamped *stampedNotices
}

// stampedNotices are the list changes of one listen made for stamped
// changes: each list's message is made once per change, and kept for the
// next drain, which may come before another change.
type stampedNotices struct {
	st  mcp.PerList[*hub.Stamp]
	msg mcp.PerList[[]byte]
}

func newListenNotices(srv *Server, principal string, id jsonrpc.ID) *listenNotices {
	n := &listenNotices{idMeta: `{"` + mcp.MetaSubscriptionID + `":` + id.Raw() + `}`, srv: srv, principal: principal}
	params := []byte(`{"_meta":` + n.idMeta + `}`)
	// One buffer holds the three messages: a listen costs few allocations.
	buf := make([]byte, 0, 3*(len(params)+80))
	for _, l := range mcp.Lists() {
		start := len(buf)
		buf = jsonrpc.AppendNotification(buf, l.Changed(), params)
		n.changed[l] = buf[start:len(buf):len(buf)]
	}
	return n
}

// ListChanged returns l's list change: the listen's own message, or,
// when the latest change of l was stamped (the server traces or measures
// its changes), one with the change's time and trace context in _meta
// beside the subscription id (once), counting the delay since the change.
func (n *listenNotices) ListChanged(l mcp.List) ([]byte, bool) {
	if n.srv.changes == nil {
		return n.changed[l], false
	}
	st := n.srv.hub.Stamp(l)
	if st == nil {
		return n.changed[l], false
	}
	n.srv.changes.delayed(st)
	if len(st.Members) == 0 {
		return n.changed[l], false
	}
	if n.stamped == nil {
		n.stamped = &stampedNotices{}
	}
	if n.stamped.st[l] != st {
		// The list's own message, its _meta and params and itself closed
		// by the last three bytes, with the change's members before them.
		plain := n.changed[l]
		msg := append(n.stamped.msg[l][:0], plain[:len(plain)-3]...)
		msg = append(msg, st.Members...)
		n.stamped.st[l], n.stamped.msg[l] = st, append(msg, plain[len(plain)-3:]...)
	}
	return n.stamped.msg[l], true
}

func (n *listenNotices) Updated(buf []byte, uri string) ([]byte, bool) {
	msg := engine.AppendUpdated(buf, uri, n.idMeta)
	if n.srv.changes == nil {
		return msg, true
	}
	// A stamped update: its members go into _meta, before the three
	// bytes that close it, params and the message.
	if st := n.srv.hub.URIStamp(uri); st != nil {
		n.srv.changes.delayed(st)
		if len(st.Members) > 0 {
			msg = append(msg[:len(msg)-3], st.Members...)
			msg = append(msg, "}}}"...)
		}
	}
	return msg, true
}

// listen serves subscriptions/listen: the acknowledgement first, then
// the changes its grant covers, until the client leaves (no response),
// the stream breaks (cut), or the server shuts down (the complete result,
// after everything pending was sent). A listen that follows tasks hears
// the state of each first, then of every change.
func (s *Server) listen(ctx context.Context, c *engine.Call, req *Request) engine.Reply {
	l, refused := s.openListen(ctx, c, req)
	if refused != nil {
		return *refused
	}
	// What the listen holds is let go of when it returns, unless a
	// parked listen took it along (see engine.Parker).
	parked := false
	defer func() {
		if !parked {
			l.release()
		}
	}()
	if l.releaseTasks != nil {
		defer l.releaseTasks()
	}
	out := req.out.stream
	// A parked listen outlives req: the end keeps only what it needs.
	id, enc := req.ID, req.enc
	complete := func() engine.Reply {
		b, err := enc.Finish([]byte{'{'}, engine.Tail{ResultType: mcp.ResultComplete,
			Meta: mcp.Meta{mcp.MetaSubscriptionID: jsontext.Value(id.Raw())}})
		if err != nil {
			return s.internal(id, err)
		}
		r := s.okReply(id, b)
		r.ListenEnded = true
		return r
	}
	ack, firsts := l.ack, l.firsts
	// l stays for as long as the listen: it lets go of the messages
	// sent once, of which the acknowledgement repeats every URI followed.
	l.ack, l.firsts = nil, nil
	if err := out.Send(ack); err != nil {
		return engine.Reply{Outcome: engine.Broken}
	}
	if l.closed {
		return complete()
	}
	// Each task's state as it was read comes first.
	for _, msg := range firsts {
		if msg != nil {
			if err := out.Send(msg); err != nil {
				return engine.Reply{Outcome: engine.Broken}
			}
		}
	}
	// A listen that follows tasks reads their state as it goes, with the
	// request's context: it keeps its goroutine.
	if p, ok := out.(engine.Parker); ok && !l.tasks {
		// The end is kept for as long as the listen is parked: it holds
		// release alone of l.
		release := l.release
		ends := &listenEnds{log: s.log}
		pl := &engine.ParkedListen{Sub: l.sub, Notices: l.n, KeepAlive: s.cfg.keepAlive, Observer: (*seam)(s).StreamObserver(),
			End: func(end engine.PumpEnd) engine.Reply {
				release()
				r := s.parkedEnd(end, id, complete)
				// Shutdown waits for this last reply, not for the
				// Parked one the request returned (see seam.Serve).
				r.Written = &s.writers
				var err error
				if end == engine.Stopped {
					err = context.Canceled // the client went away
				}
				ends.end(err)
				return r
			}}
		if p.Park(pl) {
			parked = true
			req.ends = ends
			return engine.Reply{Outcome: engine.Parked}
		}
	}
	end := engine.Pump(ctx, l.sub, out, l.n, engine.PumpOptions{KeepAlive: s.cfg.keepAlive, Observer: (*seam)(s).StreamObserver()})
	return listenEnd(end, id, complete)
}

// openedListen is a listen granted and subscribed to the hub, before
// anything was sent on it.
type openedListen struct {
	sub *hub.Subscription
	n   *listenNotices
	// ack is the acknowledgement, the listen's first message; firsts
	// are the states of the tasks it follows, as read, told next.
	ack    []byte
	firsts [][]byte
	// tasks is set when the listen follows tasks; closed when the hub
	// is, so that the listen completes once acknowledged.
	tasks, closed bool
	// release lets go of everything the listen holds but its tasks,
	// which releaseTasks lets go of (a listen that follows tasks is
	// never parked).
	release, releaseTasks func()
}

// openListen checks a listen's filter against the limits, grants it,
// takes its share of the limits and subscribes it to the hub, and reads
// the state of the tasks it follows. When the listen cannot be opened,
// refused is the answer, and what was taken has been let go of. The
// listen is returned as a value, kept on its goroutine's stack.
func (s *Server) openListen(ctx context.Context, c *engine.Call, req *Request) (l openedListen, refused *engine.Reply) {
	if c.P.Notifications == nil {
		return l, refuse(invalid(req.ID, "Invalid params: missing notifications filter"))
	}
	f := *c.P.Notifications
	// A listen lasts for hours and its params may be megabytes: once
	// read, the call lets go of them, whoever keeps the call itself.
	c.P.Notifications, c.Msg.Params = nil, nil
	if len(f.ResourceSubscriptions) > s.cfg.listens.URIsPerListen {
		return l, refuse(engine.ErrorReply(req.ID, s.follows.refusal(limitURIsPerListen)))
	}
	if r := s.checkListenTasks(req, f.TaskIDs); r != nil {
		return l, r
	}
	granted, hf := s.grant(req.Principal, f)
	// The lease holds the listen's share of the limits until it ends;
	// it is taken before the hub is subscribed to, so that no caller
	// holds more than its allowance even for a moment.
	held := s.follows.lease(ctx, req.Principal)
	if err := held.Grow(1, len(hf.URIs)); err != nil {
		return l, refuse(engine.ErrorReply(req.ID, err))
	}
	// release is kept by a parked listen for hours: it holds what it
	// lets go of and nothing else.
	var sub *hub.Subscription
	var stopFollow func()
	l.release = func() {
		if sub != nil {
			sub.Close()
		}
		if stopFollow != nil {
			stopFollow()
		}
		held.Release()
	}
	opened := false
	defer func() {
		if !opened {
			if l.releaseTasks != nil {
				l.releaseTasks()
			}
			l.release()
		}
	}()
	var taskIDs []string
	if len(f.TaskIDs) > 0 && s.offersTasks() {
		// The subscription follows every task asked for and is made
		// before they are read, so that a change landing after a read is
		// heard of; events of another's task never reach it (their
		// audience is that principal), nor does Task tell of one.
		taskIDs = slices.Compact(slices.Sorted(slices.Values(f.TaskIDs)))
		hf.Tasks = taskIDs
	}
	if len(hf.URIs) > 0 {
		stopFollow = s.src.follow(req.Principal, hf.URIs)
	}
	sub, err := s.hub.Subscribe(hf)
	l.sub, l.closed = sub, errors.Is(err, hub.ErrClosed)
	l.n = newListenNotices(s, req.Principal, req.ID)
	if taskIDs != nil {
		ids, msgs, rel, err := s.taskSrc.grant(ctx, req, l.n, taskIDs)
		if err != nil {
			if ctx.Err() != nil {
				return l, refuse(engine.Reply{Outcome: engine.Silent})
			}
			return l, refuse(s.internal(req.ID, err))
		}
		l.releaseTasks, l.tasks = rel, true
		granted.TaskIDs, l.firsts = ids, msgs
	}
	gb, err := jsonrpc.Marshal(granted)
	if err != nil {
		return l, refuse(s.internal(req.ID, err))
	}
	// The hub keeps its own copy of each URI, shared by every listen
	// that follows it; the request's copies can go.
	granted.ResourceSubscriptions, hf.URIs, f.ResourceSubscriptions = nil, nil, nil
	l.ack = jsonrpc.AppendNotification(nil, mcp.NotifyAcknowledged,
		[]byte(`{"_meta":`+l.n.idMeta+`,"notifications":`+string(gb)+`}`))
	opened = true
	return l, nil
}

// refuse is r, as openListen refuses with it.
func refuse(r engine.Reply) *engine.Reply { return &r }

// parkedEnd is listenEnd for a parked listen, which ends on a goroutine
// shared by every parked listen, outside run's recover: a panic is
// logged and answered as run answers one, not passed on to end the
// process.
func (s *Server) parkedEnd(end engine.PumpEnd, id jsonrpc.ID, complete func() engine.Reply) (r engine.Reply) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("mcp: the end of a parked listen panicked", "method", mcp.MethodListen,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			r = engine.Fail(id, jsonrpc.CodeInternalError, "Internal error", nil)
		}
	}()
	return listenEnd(end, id, complete)
}

// listenEnd is the last reply of a listen that ended as end says.
func listenEnd(end engine.PumpEnd, id jsonrpc.ID, complete func() engine.Reply) engine.Reply {
	switch end {
	case engine.Lost:
		return engine.Reply{Outcome: engine.Broken}
	case engine.Drained:
		return complete()
	case engine.Failed:
		// A task's state could not be read (see listenNotices.Task): the
		// client listens again, and hears every task's state first.
		return engine.Fail(id, jsonrpc.CodeInternalError, "Internal error: a task's state could not be read; listen again", nil)
	}
	return engine.Reply{Outcome: engine.Silent}
}
