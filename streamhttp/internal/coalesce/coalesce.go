// Package coalesce gathers the writes made to a connection into fewer,
// larger writes to the socket.
//
// An HTTP/2 connection carries many streams, and net/http's HTTP/2
// server flushes after each frame it has queued: when a change reaches
// thousands of listens on one connection, their frames leave in many
// small writes of at most a few KiB, one system call each. A Conn takes
// those writes into a bounded buffer and returns; one flusher per
// connection writes everything pending in one call, and while that call
// is in the kernel the frames that follow accumulate for the next one.
// A lone frame waits for nothing but the handoff to the flusher.
//
// The buffer is bounded: a Write that does not fit waits for the
// flusher, so a client that stops reading blocks its own connection, as
// it would without a Conn, and nothing else. An error of the flusher's
// write is returned by every later Write. The flusher runs only while
// there is something to write, so an idle connection holds no goroutine,
// and one buffer.
package coalesce

import (
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// DefaultLimit is the buffer bound of a Conn made with limit 0: enough
// for a few hundred small frames per system call, little enough that a
// hundred connections hold a few MiB at most.
const DefaultLimit = 64 << 10

// closeFlushTimeout bounds how long Close waits for what is pending
// (an HTTP/2 GOAWAY, say) to leave before it closes the connection: a
// peer that stopped reading does not hold Close for longer.
const closeFlushTimeout = time.Second

// Conn is a net.Conn whose writes, once Coalesce is called, are
// gathered and written by one flusher. Until then writes go straight
// through, so a connection that turns out not to need it (HTTP/1.1)
// pays nothing but a branch.
type Conn struct {
	net.Conn
	limit  int
	sniff  bool
	on     atomic.Bool
	sniffd atomic.Bool // the first read has been looked at

	// writes counts the writes made to the wrapped connection, for tests
	// and measurements; shared, when not nil, adds up those of a
	// Listener's connections.
	writes atomic.Int64
	shared *Stats

	mu       sync.Mutex
	pending  []byte
	gathered int64         // writes taken into pending, added to shared as it is taken
	spare    []byte        // the flusher's last buffer, reused while it runs
	flushing bool          // a flusher goroutine runs
	idle     chan struct{} // closed when the running flusher exits
	space    chan struct{} // closed (and replaced) when a waiting Write should look again
	err      error         // the first error of a flusher's write: every later Write fails with it
	closed   bool
	deadline time.Time
	span     time.Duration // how far ahead the last deadline was set; 0 for none or past
}

// New returns nc with coalescing writes from the start. A limit of 0
// means DefaultLimit.
func New(nc net.Conn, limit int) *Conn {
	c := newConn(nc, limit, false)
	c.on.Store(true)
	return c
}

// Sniffing returns nc with its writes going straight through until its
// first read shows the HTTP/2 connection preface (a client speaking
// HTTP/2 without TLS, by prior knowledge), or until Coalesce is called.
func Sniffing(nc net.Conn, limit int) *Conn { return newConn(nc, limit, true) }

func newConn(nc net.Conn, limit int, sniff bool) *Conn {
	if limit <= 0 {
		limit = DefaultLimit
	}
	return &Conn{Conn: nc, limit: limit, sniff: sniff, space: make(chan struct{})}
}

// preface is the start of what an HTTP/2 client sends first.
const preface = "PRI * HTTP/2.0\r\n"

// Coalesce starts gathering writes. Call it before the first write the
// connection's protocol makes (as when a TLS handshake reveals that the
// client chose HTTP/2), not while a write is under way.
func (c *Conn) Coalesce() { c.on.Store(true) }

// Coalescing reports whether writes are being gathered.
func (c *Conn) Coalescing() bool { return c.on.Load() }

// Writes returns how many writes were made to the wrapped connection.
func (c *Conn) Writes() int64 { return c.writes.Load() }

// NetConn returns the wrapped connection, as tls.Conn's does, so that
// what looks for the connection beneath finds it.
func (c *Conn) NetConn() net.Conn { return c.Conn }

// errGathering refuses the socket of a Conn that gathers writes: what
// wrote to the socket directly would overtake what the buffer holds.
var errGathering = errors.New("coalesce: the connection gathers its writes; its socket is not to be written directly")

// SyscallConn reaches the socket beneath while c passes writes straight
// through, so that a transport that takes a connection over from
// net/http (streamhttp's parked HTTP/1.1 listens) can write to it. A
// Conn that gathers writes has no socket to offer.
func (c *Conn) SyscallConn() (syscall.RawConn, error) {
	if c.on.Load() {
		return nil, errGathering
	}
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("coalesce: the connection beneath has no socket")
	}
	return sc.SyscallConn()
}

// Read reads from the connection; the first read of a sniffing Conn
// turns coalescing on when it begins with the HTTP/2 preface.
func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.sniff && !c.sniffd.Load() && n > 0 {
		c.sniffd.Store(true)
		if m := min(n, len(preface)); string(p[:m]) == preface[:m] && m >= 3 {
			c.on.Store(true)
		}
	}
	return n, err
}

// Write writes p straight through, or, when coalescing, copies it into
// the buffer and returns, waiting first while the buffer is too full to
// take it — until the write deadline, unless the peer is reading what
// the flusher writes (see writeOut). The error of an earlier write made
// by the flusher is returned here.
func (c *Conn) Write(p []byte) (int, error) {
	if !c.on.Load() {
		c.writes.Add(1)
		return c.Conn.Write(p)
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		c.mu.Lock()
		switch {
		case c.closed:
			c.mu.Unlock()
			return 0, net.ErrClosed
		case c.err != nil:
			err := c.err
			c.mu.Unlock()
			return 0, err
		case !c.deadline.IsZero() && !time.Now().Before(c.deadline):
			c.mu.Unlock()
			return 0, os.ErrDeadlineExceeded
		case len(c.pending) == 0 || len(c.pending)+len(p) <= c.limit:
			// An empty buffer takes even a write above the limit, whole,
			// so that no write is split.
			c.pending = append(c.pending, p...)
			c.gathered++
			if !c.flushing {
				c.flushing = true
				c.idle = make(chan struct{})
				go c.flush(c.idle)
			}
			c.mu.Unlock()
			return len(p), nil
		}
		wait, dl := c.space, c.deadline
		c.mu.Unlock()
		var expired <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			if timer == nil {
				timer = time.NewTimer(d)
			} else {
				timer.Reset(d)
			}
			expired = timer.C
		}
		select {
		case <-wait:
		case <-expired:
			// The flusher's own write has the same deadline: if the
			// peer read some of it, the flusher goes on (see writeOut)
			// and room comes; if not, its error comes. Either wakes
			// this Write, which waits for it rather than failing a
			// connection whose peer is slow but reading.
			c.mu.Lock()
			flushing := c.flushing
			c.mu.Unlock()
			if !flushing {
				return 0, os.ErrDeadlineExceeded
			}
			<-wait
		}
	}
}

// wakeLocked lets every waiting Write look again.
func (c *Conn) wakeLocked() {
	close(c.space)
	c.space = make(chan struct{})
}

// flush writes what is pending until nothing is, then exits; idle is
// closed as it does.
func (c *Conn) flush(idle chan struct{}) {
	defer close(idle)
	for {
		c.mu.Lock()
		if len(c.pending) == 0 || c.err != nil {
			// An idle connection keeps one buffer, not two: the spare
			// is only worth its memory while writes keep coming. The
			// larger one stays, for the next burst to write into; a
			// failed connection, which takes no more writes, keeps none.
			if c.err == nil && cap(c.spare) > cap(c.pending) {
				c.pending = c.spare[:0]
			}
			c.flushing, c.spare = false, nil
			c.mu.Unlock()
			return
		}
		out, gathered := c.pending, c.gathered
		c.pending, c.spare, c.gathered = c.spare[:0], nil, 0
		c.wakeLocked()
		c.mu.Unlock()

		c.writes.Add(1)
		if c.shared != nil {
			// Counted here rather than in Write, so that the connections
			// do not all bump one shared counter per frame, and a write
			// refused (closed, failed, past its deadline) is not counted.
			c.shared.Gathered.Add(gathered)
			c.shared.Written.Add(1)
		}
		err := c.writeOut(out)

		c.mu.Lock()
		c.spare = out[:0]
		if err != nil && c.err == nil {
			c.err = err
			c.pending, c.gathered = nil, 0
			c.wakeLocked()
		}
		c.mu.Unlock()
	}
}

// writeOut writes out whole to the wrapped connection. A write that
// times out after the peer took some of it goes on with the rest, its
// deadline renewed for as long again: the write deadline measures a peer
// that reads nothing, not one that reads slowly — a client on a busy
// machine, catching up with a burst — which is cut only once it stops.
// Once Close was called, or with a deadline set in the past, a timeout
// ends the write.
func (c *Conn) writeOut(out []byte) error {
	for {
		n, err := c.Conn.Write(out)
		if err == nil || n == 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		c.mu.Lock()
		span, closed := c.span, c.closed
		dl := time.Now().Add(span)
		if span > 0 && !closed {
			c.deadline = dl // for the Writes waiting, and those to come
		}
		c.mu.Unlock()
		if span <= 0 || closed {
			return err
		}
		out = out[n:]
		if err := c.Conn.SetWriteDeadline(dl); err != nil {
			return err
		}
	}
}

// SetWriteDeadline bounds both the wrapped connection's writes and the
// wait of a Write for room in the buffer. A deadline already past — what
// tls.Conn sets once its close_notify is written, so that nothing follows
// it — refuses later Writes but not what earlier ones handed over, which
// still leaves, within closeFlushTimeout, as on Close: the caller saw
// those Writes succeed.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.span = 0
	if d := time.Until(t); !t.IsZero() && d > 0 {
		c.span = d
	}
	c.wakeLocked()
	flushing := c.flushing
	c.mu.Unlock()
	if flushing && !t.IsZero() && !time.Now().Before(t) {
		t = time.Now().Add(closeFlushTimeout)
	}
	return c.Conn.SetWriteDeadline(t)
}

// SetDeadline sets both deadlines, the write one as SetWriteDeadline.
func (c *Conn) SetDeadline(t time.Time) error {
	if err := c.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetReadDeadline(t)
}

// Close lets what is pending leave, for at most closeFlushTimeout,
// stops the flusher and closes the connection. Writes after it fail
// with net.ErrClosed.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return net.ErrClosed
	}
	c.closed = true
	c.wakeLocked()
	idle, running := c.idle, c.flushing
	c.mu.Unlock()
	if running {
		_ = c.Conn.SetWriteDeadline(time.Now().Add(closeFlushTimeout))
		<-idle
	}
	return c.Conn.Close()
}

// CloseWrite lets what is pending leave, within the write deadline, and
// shuts the writing side of the connection beneath, so that its reader
// can go on reading what the peer still sends. Writes after it fail.
func (c *Conn) CloseWrite() error {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok {
		return errors.ErrUnsupported
	}
	c.mu.Lock()
	idle, running := c.idle, c.flushing
	c.mu.Unlock()
	if running {
		<-idle
	}
	return cw.CloseWrite()
}

// Stats adds up what the gathering connections of a Listener did, for
// monitoring: Gathered counts the writes they took into their buffers,
// added as the flusher takes each buffer, Written the writes they made
// to their sockets. Their ratio is the frames per system call.
type Stats struct {
	Gathered, Written atomic.Int64
}

// Listener wraps the connections it accepts in sniffing Conns.
type Listener struct {
	net.Listener
	limit int
	stats Stats
}

// Stats returns the counts of the Listener's connections.
func (l *Listener) Stats() *Stats { return &l.stats }

// Listen returns ln with every accepted connection a sniffing Conn of
// the given buffer limit (0 for DefaultLimit).
func Listen(ln net.Listener, limit int) *Listener { return &Listener{Listener: ln, limit: limit} }

// Accept returns the next connection, wrapped.
func (l *Listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := Sniffing(nc, l.limit)
	c.shared = &l.stats
	return c, nil
}
