package engine

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/hub"
	"tidings/mcp"
)

// Source is pending change state to drain: a hub subscription, or a
// session's current one.
type Source interface {
	// Wake receives whenever something may be pending, and once when the
	// hub shuts down.
	Wake() <-chan struct{}
	// Take drains what is pending, appending updated URIs to buf.
	Take(buf []string) (hub.Kind, []string)
	// Ending reports that the hub is shutting down.
	Ending() bool
	// TakeMerged returns and resets how many changes were folded into
	// what was already pending.
	TakeMerged() int
}

// StreamObserver hears what happens on change streams (2026-07-28 listens
// and 2025-11-25 session streams), for metrics; server.StreamObserver is
// this interface, under the name a program sees. Its methods run on the
// streams' own goroutines and must not block.
type StreamObserver interface {
	// Notified reports the notifications one stream just wrote (sent) and
	// how many further changes they stood for (merged): three changes to
	// the tool list before the stream could write make one notification
	// and two merged changes.
	Notified(sent, merged int)
	// CutOff reports a stream ended because its reader stopped reading
	// for longer than the transport's write timeout.
	CutOff()
}

// Notices encodes the notifications one stream sends: each era tags (or
// does not tag) them its own way.
type Notices interface {
	// ListChanged returns the message announcing a change of l. It is
	// asked of every stream at every change, so it should return a
	// message encoded once, not encode it anew. once says the message
	// was made for the change at hand (it carries the change's trace
	// context, see hub.Stamp): a transport that keeps a list's message
	// framed for the stream's life frames this one for one drain only.
	ListChanged(l mcp.List) (msg []byte, once bool)
	// Updated appends the resources/updated message for uri to buf and
	// returns it, with ok false to send nothing for it. The pump reuses
	// buf for the next message, so that a change costs a stream no
	// allocation once its buffer has grown.
	Updated(buf []byte, uri string) (msg []byte, ok bool)
}

// AppendUpdated appends the resources/updated notification for uri to
// buf, with meta (a JSON object, or "" for none) as its params' _meta:
// what each era's Notices.Updated writes, with its own tag or none.
func AppendUpdated(buf []byte, uri, meta string) []byte {
	buf = append(buf, `{"jsonrpc":"2.0","method":"`+mcp.NotifyResourceUpdated+`","params":{"uri":`...)
	buf, _ = jsontext.AppendQuote(buf, uri)
	if meta != "" {
		buf = append(buf, `,"_meta":`...)
		buf = append(buf, meta...)
	}
	return append(buf, "}}"...)
}

// TaskSource is a Source that also follows tasks (of the tasks
// extension): a 2026-07-28 listen whose filter names some.
type TaskSource interface {
	// TakeTasks drains the tasks that changed, appending their ids to buf.
	TakeTasks(buf []string) []string
}

// TaskNotices are Notices that can tell of a task. Task returns the
// notification carrying the task's state as it is now, or nil to send
// nothing (the task is gone). It may read a shared store, so it takes
// the stream's context. An error (the store failed) ends the pump with
// Failed: the change was drained from the source already, and the
// subscriber is better told that the stream is incomplete than left
// without it.
type TaskNotices interface {
	Task(ctx context.Context, id string) ([]byte, error)
}

// PumpOptions tunes Pump.
type PumpOptions struct {
	// KeepAlive is the keep-alive interval; 0 sends none. A keep-alive
	// goes out after a whole tick with nothing written: a ticker rather
	// than a timer reset on every write keeps the busy path free of timer
	// work.
	KeepAlive time.Duration
	// OnKeepAlive, when set, runs after each keep-alive is written.
	OnKeepAlive func()
	// Stop, when closed, ends the pump as ctx does.
	Stop <-chan struct{}
	// Observer, when set, hears of each flush and of a cut-off.
	Observer StreamObserver
}

// PumpEnd says why Pump returned.
type PumpEnd uint8

// Why a pump ends.
const (
	// Stopped: ctx ended or Stop was closed.
	Stopped PumpEnd = iota
	// Lost: a write failed; the stream is broken.
	Lost
	// Drained: the hub shut down and everything pending went out first,
	// so a graceful end truly means nothing was missed.
	Drained
	// Failed: a task's state could not be read (TaskNotices), so a
	// change would go untold; the stream is intact.
	Failed
)

// Pump writes what src has pending to out until ctx ends, a write fails
// or the hub shuts down. It is the one writer of a stream: a change
// sets bits in src, and Pump turns whatever accumulated into one
// notification per kind and URI, so a slow stream coalesces instead of
// queueing.
func Pump(ctx context.Context, src Source, out Stream, n Notices, o PumpOptions) PumpEnd {
	end, err := pump(ctx, src, out, n, o)
	if end == Lost && o.Observer != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		o.Observer.CutOff()
	}
	return end
}

func pump(ctx context.Context, src Source, out Stream, n Notices, o PumpOptions) (PumpEnd, error) {
	var tick <-chan time.Time
	if o.KeepAlive > 0 {
		t := time.NewTicker(o.KeepAlive)
		defer t.Stop()
		tick = t.C
	}
	wrote := false
	var d Drain
	var tasks []string
	send := func(nt Notice) error { return out.Send(nt.Msg) }
	ts, _ := src.(TaskSource)
	tn, _ := n.(TaskNotices)
	for {
		select {
		case <-ctx.Done():
			return Stopped, nil
		case <-o.Stop:
			return Stopped, nil
		case <-tick:
			if wrote {
				wrote = false
				continue
			}
			if err := out.KeepAlive(); err != nil {
				return Lost, err
			}
			if o.OnKeepAlive != nil {
				o.OnKeepAlive()
			}
		case <-src.Wake():
			// Whether the hub is ending is read before the drain: a
			// change that lands while this drain is written is then
			// drained too, by the pass the shutdown's own wake-up brings.
			ending := src.Ending()
			sent, err := d.Take(src, n, send)
			if ts != nil && err == nil {
				tasks = ts.TakeTasks(tasks[:0])
				var more int
				more, err = flushTasks(ctx, out, tn, tasks)
				sent += more
			}
			if o.Observer != nil {
				o.Observer.Notified(sent, src.TakeMerged())
			}
			if err != nil {
				// Only a failure asks errors.As: its target escapes, and
				// a pump that asked on every wake-up would allocate once
				// per change for each of thousands of listens.
				if re, ok := errors.AsType[*taskReadError](err); ok {
					return Failed, re.err
				}
				return Lost, err
			}
			wrote = true
			if ending {
				return Drained, nil
			}
		}
	}
}

// taskReadError is a task whose state flushTasks could not read, told
// apart from a failed write.
type taskReadError struct{ err error }

func (e *taskReadError) Error() string { return e.err.Error() }

// flushTasks sends the state of each task in ids. Its error is a failed
// write, or a *taskReadError.
func flushTasks(ctx context.Context, out Stream, n TaskNotices, ids []string) (sent int, err error) {
	if n == nil {
		return 0, nil
	}
	for _, id := range ids {
		msg, err := n.Task(ctx, id)
		if err != nil {
			return sent, &taskReadError{err}
		}
		if msg != nil {
			if err := out.Send(msg); err != nil {
				return sent, err
			}
			sent++
		}
	}
	return sent, nil
}

// maxScratch bounds the buffer a drain keeps for the next
// resources/updated message: a URI may be as long as a request allows,
// and a buffer kept at that size would cost a listen that much for
// hours.
const maxScratch = 4 << 10

// Drain turns what a source has pending into the notifications it
// stands for: one per list that changed, in the lists' order, then one
// per updated URI. It is the one place where a change becomes
// notifications, whichever road carries them to a socket — a goroutine
// per stream (Pump), or the shared writers of parked listens over
// HTTP/1.1 and HTTP/2; the transports only frame and write what it
// hands them. Its buffers are reused from one drain to the next, so
// that a change costs a stream no allocation once they have grown.
type Drain struct {
	uris []string
	msg  []byte // one resources/updated message at a time
}

// Notice is one notification of a drain. Msg is valid until the
// callback it is handed to returns. Kept says that Msg is the list
// List's own message, the same for the stream's life, which a transport
// may frame once and keep; otherwise Msg was made for this drain (a
// URI's update, or a list's change that carries its trace context).
type Notice struct {
	Msg  []byte
	List mcp.List
	Kept bool
}

// Take drains src and hands each notification, encoded by n, to each,
// in order, until each fails; sent counts those each took.
func (d *Drain) Take(src Source, n Notices, each func(Notice) error) (sent int, err error) {
	kinds, uris := src.Take(d.uris[:0])
	defer func() {
		clear(uris) // the URIs are not kept alive by the buffer
		d.uris = uris[:0]
	}()
	for _, l := range mcp.Lists() {
		if kinds.Has(l) {
			msg, once := n.ListChanged(l)
			if err := each(Notice{Msg: msg, List: l, Kept: !once}); err != nil {
				return sent, err
			}
			sent++
		}
	}
	for _, u := range uris {
		msg, ok := n.Updated(d.msg[:0], u)
		if d.msg = msg; cap(msg) > maxScratch {
			d.msg = nil // a long URI's buffer is not kept
		}
		if ok {
			if err := each(Notice{Msg: msg}); err != nil {
				return sent, err
			}
			sent++
		}
	}
	return sent, nil
}
