// Package writecut bounds each write of an HTTP/2 answer without
// bounding the time between writes.
//
// Over HTTP/1.1 a write deadline left in place after a write is
// harmless: it is the connection's, and only a write in progress can
// miss it, so a stream may move it once in a while and idle in between.
// net/http's HTTP/2 server instead resets a stream whose write deadline
// passes whether or not a write is under way, so a listen that waits
// longer than the write timeout between two changes would be cut. A
// Cutter times the write in progress alone: Begin starts a timer, End
// stops it, and only a timer that fires in between cuts the stream, by
// moving its deadline into the past. Begin and End cost a timer reset,
// not a message to the connection's serving goroutine as a deadline
// does.
package writecut

import (
	"net/http"
	"sync"
	"time"
)

// Timed is a ResponseWriter whose writes a Cutter times already, as
// middleware beneath a handler may (connlimit's): a handler that would
// time them with a timeout no shorter leaves it to that writer, so that
// each write is timed once, and a cut is counted where it is counted.
type Timed interface {
	// WriteTimeout is the timeout the writer cuts a write after.
	WriteTimeout() time.Duration
}

// TimedWithin reports whether w is a Timed writer cutting writes within
// timeout.
func TimedWithin(w http.ResponseWriter, timeout time.Duration) bool {
	t, ok := w.(Timed)
	return ok && t.WriteTimeout() > 0 && t.WriteTimeout() <= timeout
}

// Cutter bounds the writes of one HTTP/2 answer. It is used by the
// handler's goroutine only, except for the timer's cut.
type Cutter struct {
	rc      *http.ResponseController
	timeout time.Duration
	onCut   func()

	t *time.Timer

	mu   sync.Mutex // held by the cut and by Close
	done bool
	cut  bool
}

// New returns a Cutter of the answer rc writes, cutting a write that
// blocks for longer than timeout; onCut (if not nil) hears of each cut.
func New(rc *http.ResponseController, timeout time.Duration, onCut func()) *Cutter {
	return &Cutter{rc: rc, timeout: timeout, onCut: onCut}
}

// Applies reports whether r's answers need a Cutter: those of HTTP/2.
func Applies(r *http.Request) bool { return r.ProtoMajor >= 2 }

// Begin starts timing a write.
func (c *Cutter) Begin() {
	if c.t == nil {
		c.t = time.AfterFunc(c.timeout, c.fire)
		return
	}
	c.t.Reset(c.timeout)
}

// End stops timing the write.
func (c *Cutter) End() {
	if c.t != nil {
		c.t.Stop()
	}
}

// Cut reports whether a write was cut.
func (c *Cutter) Cut() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cut
}

// Close stops the Cutter for good, waiting for a cut under way: call it
// before the handler returns, after which the ResponseController may no
// longer be used.
func (c *Cutter) Close() {
	c.End()
	c.mu.Lock()
	c.done = true
	c.mu.Unlock()
}

func (c *Cutter) fire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.cut {
		return
	}
	c.cut = true
	// A deadline in the past resets the stream at once, which ends the
	// blocked write.
	_ = c.rc.SetWriteDeadline(time.Unix(1, 0))
	if c.onCut != nil {
		c.onCut()
	}
}
