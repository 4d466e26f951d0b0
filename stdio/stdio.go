// Package stdio serves an MCP server over newline-delimited JSON-RPC on a
// pair of byte streams, normally a process's stdin and stdout.
//
// Requests run concurrently and answer in any order. Any number of
// subscriptions/listen requests may be open at once on the one connection,
// each keyed by its own request id; notifications/cancelled ends exactly
// the request it names. Nothing but protocol messages is ever written to
// the output.
//
// An option that takes a size, a count or a duration keeps its default
// for a value of zero or less: a bound is never turned off by a zero
// left unset.
package stdio

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"tidings/internal/engine"
	"tidings/internal/legacy"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

type config struct {
	maxLine       int
	maxDepth      int
	maxInFlight   int
	maxListens    int
	cancelOnClose bool
	drain         time.Duration
	principal     string
}

// Option configures Serve.
type Option func(*config)

// WithMaxLineBytes bounds one incoming message (default 4 MiB). A longer
// line is discarded whole and answered with a parse error; the connection
// stays usable.
func WithMaxLineBytes(n int) Option { return func(c *config) { positive(&c.maxLine, n) } }

// WithMaxInFlight bounds concurrently running ordinary requests (default
// 64). Requests over the bound wait for a slot without holding up the
// reader, so cancellations still arrive; up to four times the bound may
// wait, and any beyond that are answered at once with an error saying the
// server is busy.
func WithMaxInFlight(n int) Option { return func(c *config) { positive(&c.maxInFlight, n) } }

// WithMaxListens bounds open listens on one connection (default 1000).
func WithMaxListens(n int) Option { return func(c *config) { positive(&c.maxListens, n) } }

// WithDrainTimeout sets how long requests still running at end of input
// may take to finish before they are cancelled (default 5s). Their answers
// are still written, so "echo request | server" works.
func WithDrainTimeout(d time.Duration) Option { return func(c *config) { positive(&c.drain, d) } }

// newConfig is the defaults with opts applied.
func newConfig(opts []Option) config {
	cfg := config{maxLine: 4 << 20, maxDepth: jsonrpc.DefaultMaxDepth, maxInFlight: 64, maxListens: 1000, cancelOnClose: true, drain: 5 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	return cfg
}

// positive sets *dst to v if v is positive and otherwise leaves the
// default there: the rule of every size, count and duration option (see
// the package doc).
func positive[T ~int | ~int64](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
}

// WithPrincipal names the authorization context of everything this
// connection asks (default "", anonymous). A stdio server has one client,
// the process that started it, so the principal comes from the process —
// a flag or the environment it was started with — never from a token:
// visibility, cursors, request state and change audiences then treat it
// as they treat an HTTP caller's.
func WithPrincipal(p string) Option { return func(c *config) { c.principal = p } }

// WithoutCancelOnListenEnd stops the server from sending
// notifications/cancelled for a listen before its complete result when it
// ends the listen itself. By default both are sent, so clients that follow
// either reading of the specification see the end.
func WithoutCancelOnListenEnd() Option { return func(c *config) { c.cancelOnClose = false } }

// maxWaitingFactor times the in-flight bound is how many ordinary
// requests may wait for a slot before new ones are refused as busy.
const maxWaitingFactor = 4

// conn is one stdio connection.
type conn struct {
	srv engine.Server
	cfg config

	wmu  sync.Mutex
	w    io.Writer
	werr error
	// failed holds werr once a write failed, readable without wmu, which
	// a blocked write holds.
	failed atomic.Pointer[error]

	// hmu is held while the reader handles a line; stopped, set under it
	// when Serve returns, ends the handling.
	hmu     sync.Mutex
	stopped bool

	mu            sync.Mutex
	inflight      map[string]*call
	listens       int
	waiting       int // ordinary requests waiting for a slot in sem
	session       *legacy.Session
	sessionCancel context.CancelFunc

	sem     chan struct{}
	wg      sync.WaitGroup
	replies chan []byte // see reply

	// wbuf is the buffer write frames a message in, kept between writes
	// under wmu.
	wbuf []byte

	// The goroutine that reads a request runs it (a carrier): it hands
	// the reading on first, to an idle carrier waiting on standby, or to
	// a new one when none is idle. The answer then waits for no other
	// goroutine to be scheduled — which costs tens of microseconds when
	// the input is a pipe read by a blocking system call — and a
	// carrier's stack has grown already, where a goroutine started per
	// request grew its own anew. At most maxInFlight carriers wait idle;
	// they end when quit is closed, after every request is done.
	// carriers counts those not reading (running a request, or idle),
	// which Serve waits for; the one reading may stay blocked in a read
	// that cannot be interrupted.
	standby  chan *lineReader
	next     func() // the request the line just handled left to run, for its reader
	idle     atomic.Int32
	quit     chan struct{}
	carriers sync.WaitGroup
	readErr  chan error // the input's end, or why handling a line failed
}

// call is one request in flight. cancelled is atomic, never a lock:
// the reader sets it for a notifications/cancelled while the request's
// own goroutine may be blocked writing to a stdout nobody reads, and
// the reader must not wait for that write.
type call struct {
	cancel    context.CancelFunc
	listen    bool
	cancelled atomic.Bool
}

// Serve reads requests from in and writes responses and notifications to
// out until in reaches EOF, ctx ends, or out fails. It waits for every
// request it started before returning. For a graceful end that gives every
// listen its complete result, call srv.Shutdown before cancelling ctx.
// A read from in cannot be interrupted: when Serve returns because ctx
// ended, its reader stays blocked until in is closed (for a process's
// stdin, until the process exits).
func Serve(ctx context.Context, srv *server.Server, in io.Reader, out io.Writer, opts ...Option) error {
	cfg := newConfig(opts)
	c := &conn{srv: engine.Of(srv), cfg: cfg, w: out, inflight: map[string]*call{}, sem: make(chan struct{}, cfg.maxInFlight),
		replies: make(chan []byte, maxQueuedReplies), standby: make(chan *lineReader), quit: make(chan struct{}), readErr: make(chan error, 1)}
	written := make(chan struct{})
	go func() {
		defer close(written)
		c.writeReplies()
	}()
	// The server bounds what the listens of one connection hold.
	ctx, cancel := context.WithCancel(engine.WithConn(ctx, &engine.Conn{}))
	defer func() {
		cancel()
		c.wg.Wait()
		close(c.quit)
		c.carriers.Wait()
		close(c.replies)
		<-written
	}()

	// The reader handles each line itself, as soon as it is read, and
	// runs the request it leaves (see carry). Serve stops it handling
	// lines once it returns.
	go c.carry(ctx, &lineReader{br: bufio.NewReaderSize(in, 64<<10), max: c.cfg.maxLine})
	select {
	case <-ctx.Done():
		c.hmu.Lock()
		c.stopped = true
		c.hmu.Unlock()
		return nil
	case err := <-c.readErr:
		if he, ok := err.(handleError); ok {
			return he.err
		}
		// End of input: no more requests will come, and nobody can
		// cancel the ones in flight. Ordinary requests still get their
		// answers; listens end now, since nothing could ever end them
		// otherwise.
		c.endListens()
		c.drain(ctx)
		if errors.Is(err, io.EOF) || errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
}

// errStopped tells the reader that Serve has returned and handles no
// more lines.
var errStopped = errors.New("stdio: connection stopped")

// handleError is an error of handling a line (the output failed), told
// apart from the input's.
type handleError struct{ err error }

func (e handleError) Error() string { return e.err.Error() }

// lineReader splits the input into lines, discarding (and reporting)
// lines over the limit without buffering them. One carrier at a time
// reads with it.
type lineReader struct {
	br      *bufio.Reader
	max     int
	line    []byte
	tooLong bool
	err     error // the input's end, after a last line without a newline
}

// next returns the next line that is not blank (empty for one over the
// limit), or the input's error.
func (r *lineReader) next() ([]byte, error) {
	if r.err != nil {
		return nil, r.err
	}
	for {
		chunk, err := r.br.ReadSlice('\n')
		if !r.tooLong {
			if len(r.line)+len(chunk) > r.max {
				r.tooLong = true
				r.line = r.line[:0]
			} else {
				r.line = append(r.line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && len(r.line) == 0 && !r.tooLong {
			return nil, err
		}
		msg := []byte{}
		if !r.tooLong {
			msg = bytes.Clone(bytes.TrimRight(r.line, "\r\n"))
		}
		keep := r.tooLong || len(bytes.TrimSpace(msg)) > 0
		r.line, r.tooLong = r.line[:0], false
		if keep {
			r.err = err // told at the next call
			return msg, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// carry reads and handles lines with r until one leaves a request to
// run; then it hands the reading on (to an idle carrier, or a new one),
// runs the request itself, and waits idle to be handed the reading
// again. The input's end, or a failure to handle a line, ends the
// reading: the carrier that met it tells Serve.
func (c *conn) carry(ctx context.Context, r *lineReader) {
	for {
		f, err := c.readRequest(ctx, r)
		if err != nil {
			c.readErr <- err
			return
		}
		c.carriers.Add(1)
		select {
		case c.standby <- r:
		default:
			go c.carry(ctx, r)
		}
		f()
		if r = c.rest(); r == nil {
			return
		}
	}
}

// readRequest reads and handles lines until one leaves a request to
// run, and returns it.
func (c *conn) readRequest(ctx context.Context, r *lineReader) (func(), error) {
	for {
		line, err := r.next()
		if err != nil {
			return nil, err
		}
		c.hmu.Lock()
		if c.stopped {
			c.hmu.Unlock()
			return nil, errStopped
		}
		err = c.handleLine(ctx, line)
		f := c.next
		c.next = nil
		c.hmu.Unlock()
		if err != nil {
			return nil, handleError{err}
		}
		if f != nil {
			return f, nil
		}
	}
}

// rest waits, as one of at most maxInFlight idle carriers, to be handed
// the reading; nil when the carrier is to end instead.
func (c *conn) rest() *lineReader {
	defer c.carriers.Done()
	if c.idle.Add(1) > int32(c.cfg.maxInFlight) {
		c.idle.Add(-1)
		return nil
	}
	defer c.idle.Add(-1)
	select {
	case r := <-c.standby:
		return r
	case <-c.quit:
		return nil
	}
}

// maxKeptBuffer bounds the buffer a connection keeps for framing its
// messages between writes.
const maxKeptBuffer = 64 << 10

// maxQueuedReplies bounds the answers the reader hands to the reply
// writer (refusals and parse errors), so that it never blocks on a
// stdout nobody reads — cancellations must still be read — unless a
// client floods it with that many bad lines without reading.
const maxQueuedReplies = 64

// reply queues an answer the reader itself gives. It reports the
// connection's write error, if writing has already failed, so that Serve
// ends when the output is gone.
func (c *conn) reply(msg []byte) error {
	if err := c.failed.Load(); err != nil {
		return *err
	}
	c.replies <- msg
	return nil
}

// writeReplies writes the reader's answers until the queue is closed.
func (c *conn) writeReplies() {
	for msg := range c.replies {
		_ = c.write(msg)
	}
}

// write sends one message followed by a newline. After the first failure
// every later write fails too.
func (c *conn) write(msg []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	c.wbuf = append(append(c.wbuf[:0], msg...), '\n')
	if _, err := c.w.Write(c.wbuf); err != nil {
		c.werr = fmt.Errorf("stdio: write: %w", err)
		c.failed.Store(&c.werr)
	}
	if cap(c.wbuf) > maxKeptBuffer {
		c.wbuf = nil // a large answer's buffer is not kept for the small ones after it
	}
	return c.werr
}

func (c *conn) handleLine(ctx context.Context, line []byte) error {
	if len(line) == 0 {
		return c.reply(jsonrpc.AppendErrorResponse(nil, jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeParseError,
			"Parse error: message longer than "+strconv.Itoa(c.cfg.maxLine)+" bytes", nil)))
	}
	msg, err := jsonrpc.Decode(line, c.cfg.maxDepth)
	if err != nil {
		var de *jsonrpc.DecodeError
		if errors.As(err, &de) {
			return c.reply(jsonrpc.AppendErrorResponse(nil, de.ID, de.RPCError()))
		}
		return c.reply(jsonrpc.AppendErrorResponse(nil, jsonrpc.ID{}, jsonrpc.NewError(jsonrpc.CodeParseError, "Parse error", nil)))
	}
	switch {
	case msg.IsResponse():
		// Only a legacy session's server asks the client anything; in
		// 2026-07-28 there is nothing a response could answer.
		if ss := c.legacySession(); ss != nil {
			ss.Deliver(msg)
		}
		return nil
	case msg.IsNotification():
		if msg.Method == mcp.NotifyCancelled {
			c.cancel(msg)
		}
		return nil
	}
	parsed, rep := engine.Parse(msg)
	if rep != nil {
		return c.reply(rep.Body)
	}
	modern := parsed.Era("") == engine.Modern
	if parsed.M.Handler == engine.HandleInitialize && !modern {
		return c.initialize(ctx, parsed)
	}
	session := c.legacySession()
	if modern {
		session = nil // requests with _meta are served statelessly, always
	}
	key := msg.ID.Raw()
	isListen := parsed.M.Handler == engine.HandleListen
	c.mu.Lock()
	if _, dup := c.inflight[key]; dup {
		c.mu.Unlock()
		return c.reply(jsonrpc.AppendErrorResponse(nil, msg.ID, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"Invalid Request: id "+key+" is already in use by a request in flight", nil)))
	}
	if isListen && c.listens >= c.cfg.maxListens {
		c.mu.Unlock()
		return c.reply(jsonrpc.AppendErrorResponse(nil, msg.ID, jsonrpc.NewError(jsonrpc.CodeInternalError,
			"Too many open listens on this connection (limit "+strconv.Itoa(c.cfg.maxListens)+")", nil)))
	}
	if !isListen && c.waiting >= maxWaitingFactor*c.cfg.maxInFlight {
		c.mu.Unlock()
		return c.reply(jsonrpc.AppendErrorResponse(nil, msg.ID, jsonrpc.NewError(jsonrpc.CodeInternalError,
			"Server busy: too many requests in flight on this connection", nil)))
	}
	cctx, cancel := context.WithCancel(ctx)
	cl := &call{cancel: cancel, listen: isListen}
	c.inflight[key] = cl
	if isListen {
		c.listens++
	} else {
		c.waiting++
	}
	c.mu.Unlock()

	c.wg.Add(1)
	c.run(func() {
		defer c.wg.Done()
		defer cancel()
		// The slot is taken here, never in the reader, so that a
		// notifications/cancelled (or a response) behind a full
		// connection is still read.
		run := true
		if !isListen {
			select {
			case c.sem <- struct{}{}:
				defer func() { <-c.sem }()
			case <-cctx.Done():
				run = false
			}
			c.mu.Lock()
			c.waiting--
			c.mu.Unlock()
		}
		var reply engine.Reply // a request cancelled while waiting has no answer
		switch {
		case !run:
		case session != nil:
			reply = session.Serve(cctx, parsed, &stream{c: c, cl: cl})
		default:
			reply = c.srv.Serve(cctx, parsed, c.cfg.principal, nil, &stream{c: c, cl: cl})
		}
		// Released once written or dropped; for a listen, Shutdown waits
		// for this.
		defer reply.Release()
		c.mu.Lock()
		delete(c.inflight, key)
		if isListen {
			c.listens--
		}
		c.mu.Unlock()
		if cl.cancelled.Load() || reply.Body == nil {
			return
		}
		if reply.ListenEnded && c.cfg.cancelOnClose {
			b, _ := jsonrpc.Marshal(struct {
				RequestID jsonrpc.ID `json:"requestId"`
				Reason    string     `json:"reason"`
			}{msg.ID, "server is shutting down"})
			_ = c.write(jsonrpc.AppendNotification(nil, mcp.NotifyCancelled, b))
		}
		_ = c.write(reply.Body)
	})
	return nil
}

// run leaves f, the request the line being handled makes, for the
// carrier that read the line to run (see carry).
func (c *conn) run(f func()) { c.next = f }

// drain waits for requests in flight, cancelling them once the drain
// timeout has passed.
func (c *conn) drain(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(c.cfg.drain)
	defer t.Stop()
	select {
	case <-done:
		return
	case <-t.C:
	case <-ctx.Done():
	}
	c.mu.Lock()
	for _, cl := range c.inflight {
		cl.cancel()
	}
	c.mu.Unlock()
	<-done
}

// legacySession returns the connection's 2025-11-25 session, if an
// initialize opened one.
func (c *conn) legacySession() *legacy.Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.session
}

// initialize switches the connection to the 2025-11-25 rules: the session
// lives as long as the connection, and its notifications (list changes,
// updates of subscribed resources) are written to the connection itself.
func (c *conn) initialize(ctx context.Context, init *engine.Call) error {
	// Only the reader calls this, one line at a time, so the session
	// cannot change between the check and the assignment; the lock is
	// not held while the server's middleware runs.
	if c.legacySession() != nil {
		return c.reply(jsonrpc.AppendErrorResponse(nil, init.Msg.ID, jsonrpc.NewError(jsonrpc.CodeInvalidRequest,
			"Invalid Request: this connection is already initialized", nil)))
	}
	ss, reply := legacy.Open(ctx, c.srv, init, c.cfg.principal)
	if ss == nil {
		return c.reply(reply.Body)
	}
	c.mu.Lock()
	c.session = ss
	sctx, cancel := context.WithCancel(ctx)
	c.sessionCancel = cancel
	c.mu.Unlock()
	if err := c.write(reply.Body); err != nil {
		cancel()
		return err
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer ss.End()
		_ = ss.Stream(sctx, &stream{c: c, cl: &call{cancel: cancel}}, func() error { return nil })
	}()
	return nil
}

// endListens cancels every open listen, and the legacy session's stream.
func (c *conn) endListens() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sessionCancel != nil {
		c.sessionCancel()
	}
	for _, cl := range c.inflight {
		if cl.listen {
			cl.cancel()
		}
	}
}

// cancel ends the request named by a notifications/cancelled. Unknown or
// finished ids are ignored, as the race between cancel and completion
// allows.
func (c *conn) cancel(msg *jsonrpc.Message) {
	var p struct {
		RequestID jsonrpc.ID `json:"requestId"`
	}
	if jsonrpc.UnmarshalParams(msg.Params, &p) != nil || p.RequestID.IsZero() {
		return
	}
	c.mu.Lock()
	cl := c.inflight[p.RequestID.Raw()]
	c.mu.Unlock()
	if cl == nil {
		return
	}
	cl.cancelled.Store(true)
	cl.cancel()
}

// stream is the engine.Stream of one request on a stdio connection: its
// messages share the connection, and fall silent once it is cancelled.
type stream struct {
	c  *conn
	cl *call
}

func (s *stream) Send(msg []byte) error {
	if s.cl.cancelled.Load() {
		return context.Canceled
	}
	return s.c.write(msg)
}

// KeepAlive does nothing: a pipe needs no keep-alive.
func (s *stream) KeepAlive() error { return nil }
