package engine

import (
	"context"
	"time"

	"tidings/hub"
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
}

// Notices encodes the notifications one stream sends: each era tags (or
// does not tag) them its own way.
type Notices interface {
	// ListChanged returns the message for one list kind (a single bit).
	ListChanged(k hub.Kind) []byte
	// Updated returns the resources/updated message for uri, or nil to
	// send nothing for it.
	Updated(uri string) []byte
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
	// Refresh, when it fires, makes the pump run OnRefresh (a session's
	// subscriptions changed, so the Source now drains another one).
	Refresh   <-chan struct{}
	OnRefresh func() error
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
)

// Pump writes what src has pending to out until ctx ends, a write fails
// or the hub shuts down. It is the one writer of a stream: a change
// sets bits in src, and Pump turns whatever accumulated into one
// notification per kind and URI, so a slow stream coalesces instead of
// queueing.
func Pump(ctx context.Context, src Source, out Stream, n Notices, o PumpOptions) PumpEnd {
	var tick <-chan time.Time
	if o.KeepAlive > 0 {
		t := time.NewTicker(o.KeepAlive)
		defer t.Stop()
		tick = t.C
	}
	wrote := false
	var uris []string
	for {
		select {
		case <-ctx.Done():
			return Stopped
		case <-o.Stop:
			return Stopped
		case <-o.Refresh:
			if err := o.OnRefresh(); err != nil {
				return Lost
			}
		case <-tick:
			if wrote {
				wrote = false
				continue
			}
			if err := out.KeepAlive(); err != nil {
				return Lost
			}
			if o.OnKeepAlive != nil {
				o.OnKeepAlive()
			}
		case <-src.Wake():
			var kinds hub.Kind
			kinds, uris = src.Take(uris[:0])
			if err := Flush(out, n, kinds, uris); err != nil {
				return Lost
			}
			wrote = true
			if src.Ending() {
				return Drained
			}
		}
	}
}

// Flush sends the notifications for kinds and uris.
func Flush(out Stream, n Notices, kinds hub.Kind, uris []string) error {
	for _, k := range [...]hub.Kind{hub.ToolsList, hub.PromptsList, hub.ResourcesList} {
		if kinds&k != 0 {
			if err := out.Send(n.ListChanged(k)); err != nil {
				return err
			}
		}
	}
	for _, u := range uris {
		if msg := n.Updated(u); msg != nil {
			if err := out.Send(msg); err != nil {
				return err
			}
		}
	}
	return nil
}
