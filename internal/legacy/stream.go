package legacy

import (
	"context"
	"errors"

	"tidings/hub"
	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// ErrStreamOpen is returned when a session already has its stream.
var ErrStreamOpen = errors.New("legacy: the session already has a notification stream")

// notices are the session stream's notifications: untagged, and only for
// resources the session still subscribes to — after unsubscribe answers,
// nothing more arrives for that URI. The list-changed messages are
// encoded once, when the stream opens.
type notices struct {
	ss      *Session
	changed mcp.PerList[[]byte]
}

func newNotices(ss *Session) *notices {
	n := &notices{ss: ss}
	for _, l := range mcp.Lists() {
		n.changed[l] = jsonrpc.AppendNotification(nil, l.Changed(), nil)
	}
	return n
}

func (n *notices) ListChanged(l mcp.List) ([]byte, bool) { return n.changed[l], false }

func (n *notices) Updated(buf []byte, uri string) ([]byte, bool) {
	n.ss.mu.Lock()
	still := n.ss.uris[uri]
	n.ss.mu.Unlock()
	if !still {
		return buf, false
	}
	return engine.AppendUpdated(buf, uri, ""), true
}

// Stream sends the session's notifications to out until ctx ends, the
// session ends, or the server shuts down: list changes of every kind the
// server advertises, and resources/updated for the URIs the session
// subscribed to. Notifications of 2026-07-28 listeners never go here, nor
// these there: each is its own hub subscription.
//
// start runs once the stream is claimed, before anything is sent (a
// transport writes its response headers there); a session has at most one
// stream, and a second one fails with ErrStreamOpen before start. The
// error is nil when the stream ended for any reason but a failed write.
//
// Middleware sees the stream as a subscriptions/listen without an id;
// one it refuses fails with a *RefusedError before start.
func (ss *Session) Stream(ctx context.Context, out engine.Stream, start func() error) error {
	call := &engine.Call{Msg: &jsonrpc.Message{Method: mcp.MethodListen}}
	var err error
	rep := ss.srv.Run(ctx, call, ss.era(out), func(ctx context.Context) engine.Reply {
		err = ss.stream(ctx, out, start)
		return engine.Reply{Outcome: engine.Silent}
	})
	if rep.Err != nil {
		return &RefusedError{Err: rep.Err}
	}
	return err
}

// RefusedError is a request the server's middleware refused.
type RefusedError struct{ Err *jsonrpc.Error }

func (e *RefusedError) Error() string { return "legacy: refused: " + e.Err.Error() }

func (ss *Session) stream(ctx context.Context, out engine.Stream, start func() error) error {
	ss.mu.Lock()
	if ss.streaming {
		ss.mu.Unlock()
		return ErrStreamOpen
	}
	// Subscribe before start: once the client sees the stream open, every
	// change from then on must reach it.
	sub, err := ss.srv.Hub().Subscribe(ss.filterLocked())
	if err == nil {
		ss.streaming = true
		ss.sub = sub
	}
	ss.mu.Unlock()
	if err != nil {
		return start() // shutting down: the stream opens and ends at once
	}
	defer func() {
		ss.mu.Lock()
		ss.sub.Close()
		ss.sub = nil
		ss.streaming = false
		ss.mu.Unlock()
	}()
	if err := start(); err != nil {
		return err
	}
	end := engine.Pump(ctx, sub, out, newNotices(ss), engine.PumpOptions{
		KeepAlive: ss.srv.KeepAlive(),
		// An open stream is a session in use, however long it stays
		// quiet: it must not expire as idle under its client.
		OnKeepAlive: ss.keepWarm,
		Stop:        ss.ended,
		Observer:    ss.srv.StreamObserver(),
	})
	if end == engine.Lost {
		return errors.New("legacy: session stream broken")
	}
	return nil
}

// filterLocked is the hub filter of the session's stream: the resources
// the session subscribed to that principal may see, through the same
// grant a 2026-07-28 listen gets, and every list kind — also those the
// server did not offer when the session began, since a session lasts
// while a server starts to offer more.
func (ss *Session) filterLocked() hub.Filter {
	f := mcp.SubscriptionFilter{}
	for u := range ss.uris {
		f.ResourceSubscriptions = append(f.ResourceSubscriptions, u)
	}
	_, hf := ss.srv.Grant(ss.principal, f)
	hf.Kinds = hub.Of(mcp.Lists()...)
	return hf
}

// keepWarm marks the session in use, at each keep-alive of its open
// stream: in its table, where there is one, so that it moves away from
// the cold end.
func (ss *Session) keepWarm() {
	if ss.table != nil {
		ss.table.touch(ss)
		return
	}
	ss.lastSeen.Store(ss.srv.Now().UnixNano())
}
