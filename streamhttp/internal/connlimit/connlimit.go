// Package connlimit bounds what the clients of an HTTP server can make
// it hold below the level of requests: connections open from one client
// address and in all, the time a request body may take to arrive, and
// the time one write of an answer may block.
//
// A Guard does it in three places of one http.Server: its Listener
// counts connections and refuses those beyond a cap, ConnState learns
// which connections are idle between requests so that they are the
// first closed to make room, and Handler puts deadlines on each
// request's body and answer. The deadlines are per request and per
// write rather than the server's ReadTimeout and WriteTimeout, which
// bound a whole exchange and so would cut a stream that lasts for hours.
package connlimit

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"tidings/streamhttp/internal/writecut"
)

// Limit names a cap on open connections.
type Limit uint8

// The caps a connection can meet.
const (
	// PerAddress caps the connections of one client address.
	PerAddress Limit = iota
	// Total caps the connections of all clients together.
	Total
	numLimits
)

// String returns the name metrics label the limit with.
func (l Limit) String() string {
	switch l {
	case PerAddress:
		return "per_address"
	case Total:
		return "total"
	}
	return "unknown"
}

// Config sets a Guard's limits. A zero field sets no limit.
type Config struct {
	// PerAddress is the most connections open at once from one client
	// address; an IPv6 client's /64 counts as one address, since a
	// single host commonly holds a whole /64.
	PerAddress int
	// Total is the most connections open at once. Keep it below the
	// process's open-file limit, so that accepting a connection to
	// refuse it still finds a descriptor.
	Total int
	// BodyTimeout bounds how long a request body may take to arrive,
	// counted from the end of its headers.
	BodyTimeout time.Duration
	// WriteTimeout bounds how long one write of an answer may block: an
	// answer whose reader stops reading for longer is cut off.
	WriteTimeout time.Duration
	// Logger hears of refusals, at most one line per limit every
	// refusalLogEvery (default: slog.Default).
	Logger *slog.Logger
	// TLS, when the listener's connections speak TLS above it (a
	// tls.NewListener over Listen), is their configuration: a refused
	// connection is then told why over TLS, after a handshake, and not
	// in plain text its client would take for a broken handshake.
	TLS *tls.Config
	// HTTP2 says that a client may speak HTTP/2 from a connection's
	// first byte (h2c by prior knowledge, or after TLS's ALPN chose
	// "h2"): a refused connection whose client does is told why in an
	// HTTP/2 answer, which it reads, and not in an HTTP/1.1 one.
	HTTP2 bool
	// MaxRefusing bounds the refusals told why at once apart from the
	// accept loop, while their clients speak first (TLS, or HTTP/2
	// beside HTTP/1.1): each holds a connection past the cap for up to
	// 2s, so past this many a refused connection is answered at once in
	// plain HTTP/1.1, or closed untold over TLS, and either way counted
	// (default DefaultMaxRefusing).
	MaxRefusing int
}

// Stats is what a Guard has seen, for monitoring.
type Stats struct {
	// Open counts the connections open now, Idle those of them waiting
	// between requests.
	Open, Idle int
	// Refused counts connections refused at each limit, Evicted the idle
	// connections closed to make room under it.
	Refused, Evicted [numLimits]int64
	// BodyTimeouts counts requests whose body did not arrive within
	// BodyTimeout; WriteTimeouts counts answers cut off because a write
	// blocked for WriteTimeout.
	BodyTimeouts, WriteTimeouts int64
	// Refusing counts the refused connections being told why now, apart
	// from the accept loop (with Config.TLS or Config.HTTP2), at most
	// Config.MaxRefusing.
	Refusing int
	// Untold counts the refused connections closed without being told
	// why: over TLS, when Config.MaxRefusing were being told already, or
	// the listener had closed. Each is counted in Refused too.
	Untold int64
}

// refusalLogEvery spaces the log lines of refusals: a flood of them is
// told by the metrics, and the log need only say that it happens.
const refusalLogEvery = 10 * time.Second

// refusalWriteTimeout bounds the write of a refusal. The connection is
// fresh, so its few bytes fit the socket's buffer and the write does not
// block; the deadline only keeps the accept loop safe if it ever did.
const refusalWriteTimeout = 100 * time.Millisecond

// Guard bounds the connections and requests of one http.Server.
type Guard struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	open  int
	idle  idleList // every idle connection, the longest idle first
	nIdle int
	addrs map[netip.Addr]*addrConns

	// The refusals being answered apart from the accept loop (with TLS
	// or HTTP/2, whose clients speak first), each one's connection, so
	// that Close ends them.
	refusing      map[net.Conn]struct{}
	refusingWG    sync.WaitGroup
	refusalsEnded bool // by the listener's Close

	refused, evicted            [numLimits]atomic.Int64
	bodyTimeouts, writeTimeouts atomic.Int64
	untold                      atomic.Int64
	lastLog                     [numLimits]atomic.Int64 // UnixNano of the last refusal logged
}

// addrConns are the connections of one client address.
type addrConns struct {
	open int
	idle idleList
}

// New returns a Guard with the limits of cfg.
func New(cfg Config) *Guard {
	if cfg.MaxRefusing <= 0 {
		cfg.MaxRefusing = DefaultMaxRefusing
	}
	g := &Guard{cfg: cfg, log: cfg.Logger, addrs: map[netip.Addr]*addrConns{}}
	if g.log == nil {
		g.log = slog.Default()
	}
	return g
}

// Stats returns what g has seen so far.
func (g *Guard) Stats() Stats {
	g.mu.Lock()
	s := Stats{Open: g.open, Idle: g.nIdle, Refusing: len(g.refusing)}
	g.mu.Unlock()
	for l := range numLimits {
		s.Refused[l] = g.refused[l].Load()
		s.Evicted[l] = g.evicted[l].Load()
	}
	s.BodyTimeouts = g.bodyTimeouts.Load()
	s.WriteTimeouts = g.writeTimeouts.Load()
	s.Untold = g.untold.Load()
	return s
}

// Listen returns ln with g's caps on the connections it accepts. Give
// the same g's ConnState to the http.Server that serves it, or no
// connection is ever known to be idle and a full cap refuses at once.
func (g *Guard) Listen(ln net.Listener) net.Listener { return &listener{Listener: ln, g: g} }

type listener struct {
	net.Listener
	g *Guard
}

// Close closes the listener and ends the refusals still being answered.
func (l *listener) Close() error {
	err := l.Listener.Close()
	l.g.endRefusals()
	return err
}

// Accept returns the next connection within the caps, refusing the
// others on the way.
func (l *listener) Accept() (net.Conn, error) {
	for {
		nc, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if c := l.g.admit(nc); c != nil {
			return c, nil
		}
	}
}

// clientAddr is the address nc's caps count it under.
func clientAddr(nc net.Conn) netip.Addr {
	ap, err := netip.ParseAddrPort(nc.RemoteAddr().String())
	if err != nil {
		return netip.Addr{} // not IP: all such connections share one count
	}
	a := ap.Addr().Unmap()
	if a.Is6() {
		a = netip.PrefixFrom(a.WithZone(""), 64).Masked().Addr()
	}
	return a
}

// admit counts nc in if the caps leave room, closing the longest idle
// connection under a full cap to make some; it returns nil, having
// refused nc, when no connection under the cap is idle.
func (g *Guard) admit(nc net.Conn) *conn {
	addr := clientAddr(nc)
	for {
		g.mu.Lock()
		a := g.addrs[addr]
		var victim *conn
		var hit Limit
		switch {
		case g.cfg.PerAddress > 0 && a != nil && a.open >= g.cfg.PerAddress:
			victim, hit = a.idle.head, PerAddress
		case g.cfg.Total > 0 && g.open >= g.cfg.Total:
			victim, hit = g.idle.head, Total
		default:
			if a == nil {
				a = &addrConns{idle: idleList{which: 1}}
				g.addrs[addr] = a
			}
			a.open++
			g.open++
			g.mu.Unlock()
			return &conn{Conn: nc, g: g, addr: addr, ac: a}
		}
		if victim == nil {
			g.mu.Unlock()
			g.refuse(nc, hit, addr)
			return nil
		}
		// Out of the idle lists now, so that no other admission picks it;
		// its Close counts it out.
		g.unidleLocked(victim)
		g.mu.Unlock()
		g.evicted[hit].Add(1)
		_ = victim.Close()
	}
}

// refuse answers nc with a 503 that names the limit, and closes it.
func (g *Guard) refuse(nc net.Conn, l Limit, addr netip.Addr) {
	g.refused[l].Add(1)
	var msg string
	var max int
	switch l {
	case PerAddress:
		max = g.cfg.PerAddress
		msg = fmt.Sprintf("too many connections from %v: this server allows %d at once from one client address\n", addr, max)
	default:
		max = g.cfg.Total
		msg = fmt.Sprintf("too many connections: this server allows %d at once in all\n", max)
	}
	if now := time.Now().UnixNano(); now-g.lastLog[l].Load() >= int64(refusalLogEvery) {
		g.lastLog[l].Store(now)
		g.log.Warn("refusing connections: a connection limit is reached", "limit", l.String(), "max", max, "addr", addr.String())
	}
	// At once, in plain HTTP/1.1: what a client not speaking TLS most
	// likely reads.
	answerNow := func() {
		if g.cfg.TLS == nil {
			_ = nc.SetWriteDeadline(time.Now().Add(refusalWriteTimeout))
			_, _ = nc.Write(refusal503(msg))
		} else {
			g.untold.Add(1)
		}
		_ = nc.Close()
	}
	if g.cfg.TLS == nil && !g.cfg.HTTP2 {
		answerNow()
		return
	}
	// The client speaks first (a TLS handshake, or an HTTP/2 preface to
	// tell from an HTTP/1.1 request): that is waited for apart from the
	// accept loop, by at most MaxRefusing goroutines; past them a refused
	// connection is answered at once, or closed untold over TLS.
	g.mu.Lock()
	if g.refusing == nil {
		g.refusing = map[net.Conn]struct{}{}
	}
	if g.refusalsEnded || len(g.refusing) >= g.cfg.MaxRefusing {
		g.mu.Unlock()
		answerNow()
		return
	}
	g.refusing[nc] = struct{}{}
	g.refusingWG.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.refusingWG.Done()
		g.answerRefusal(nc, msg)
		g.mu.Lock()
		delete(g.refusing, nc)
		g.mu.Unlock()
		_ = nc.Close()
	}()
}

// ConnState is the http.Server's ConnState hook: it keeps track of which
// connections are idle between requests (for HTTP/2, between streams).
// A connection the listener's was wrapped in, by TLS or otherwise, is
// looked through by its NetConn method.
func (g *Guard) ConnState(nc net.Conn, s http.ConnState) {
	c := g.find(nc)
	if c == nil {
		return
	}
	g.mu.Lock()
	if s == http.StateIdle && !c.closed {
		g.idleLocked(c)
	} else {
		g.unidleLocked(c)
	}
	g.mu.Unlock()
}

// find returns the admitted connection beneath nc, or nil.
func (g *Guard) find(nc net.Conn) *conn {
	for nc != nil {
		if c, ok := nc.(*conn); ok && c.g == g {
			return c
		}
		u, ok := nc.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		nc = u.NetConn()
	}
	return nil
}

func (g *Guard) idleLocked(c *conn) {
	if c.idle {
		return
	}
	c.idle = true
	g.nIdle++
	g.idle.pushBack(c)
	c.ac.idle.pushBack(c)
}

func (g *Guard) unidleLocked(c *conn) {
	if !c.idle {
		return
	}
	c.idle = false
	g.nIdle--
	g.idle.remove(c)
	c.ac.idle.remove(c)
}

// conn is an admitted connection; closing it counts it out.
type conn struct {
	net.Conn
	g    *Guard
	addr netip.Addr
	ac   *addrConns

	// Guarded by g.mu.
	closed bool
	idle   bool
	links  [2]links // in g.idle and in ac.idle
}

type links struct{ prev, next *conn }

// Close closes the connection, once, and counts it out.
func (c *conn) Close() error {
	g := c.g
	g.mu.Lock()
	if c.closed {
		g.mu.Unlock()
		return net.ErrClosed
	}
	c.closed = true
	g.unidleLocked(c)
	g.open--
	if c.ac.open--; c.ac.open == 0 {
		delete(g.addrs, c.addr)
	}
	g.mu.Unlock()
	return c.Conn.Close()
}

// SyscallConn reaches the socket beneath, so that a transport that takes
// a hijacked connection over (streamhttp parks listens) can poll and
// write it itself; the connection stays counted until it is closed.
func (c *conn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, fmt.Errorf("connlimit: a %T has no socket to reach", c.Conn)
	}
	return sc.SyscallConn()
}

// CloseWrite shuts the writing side of the connection beneath, so that a
// server ending a connection can still read what its client sent; the
// connection stays counted until it is closed.
func (c *conn) CloseWrite() error {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok {
		return errors.ErrUnsupported
	}
	return cw.CloseWrite()
}

// idleList is a list of connections threaded through their links[which],
// so that a connection going idle and busy again allocates nothing.
type idleList struct {
	which      int
	head, tail *conn
}

func (l *idleList) pushBack(c *conn) {
	ln := &c.links[l.which]
	ln.prev, ln.next = l.tail, nil
	if l.tail != nil {
		l.tail.links[l.which].next = c
	} else {
		l.head = c
	}
	l.tail = c
}

func (l *idleList) remove(c *conn) {
	ln := &c.links[l.which]
	if ln.prev != nil {
		ln.prev.links[l.which].next = ln.next
	} else {
		l.head = ln.next
	}
	if ln.next != nil {
		ln.next.links[l.which].prev = ln.prev
	} else {
		l.tail = ln.prev
	}
	ln.prev, ln.next = nil, nil
}

// BodyTimeoutError is the error of reading a request body that did not
// arrive within the Guard's BodyTimeout. net/http closes the connection
// after the answer, since what is left of the body cannot be skipped.
type BodyTimeoutError struct {
	// Timeout is the BodyTimeout.
	Timeout time.Duration
	err     error
}

func (e *BodyTimeoutError) Error() string {
	return fmt.Sprintf("the request body did not arrive within %v", e.Timeout)
}

// Unwrap returns the read's own error, an os.ErrDeadlineExceeded.
func (e *BodyTimeoutError) Unwrap() error { return e.err }

// Handler returns h with the Guard's deadlines on each request: the body
// must arrive within BodyTimeout, and no write of the answer may block
// for longer than WriteTimeout. A request without a body gets no read
// deadline at all, and a body's deadline is lifted once it is read: the
// connection is then read only to notice the client leave, and a
// deadline there would end a long answer. Write deadlines are per write,
// so an answer may stream for as long as its reader keeps reading.
func (g *Guard) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if g.cfg.BodyTimeout > 0 && r.Body != nil && r.Body != http.NoBody {
			if rc.SetReadDeadline(time.Now().Add(g.cfg.BodyTimeout)) == nil {
				r.Body = &body{ReadCloser: r.Body, g: g, rc: rc}
			}
		}
		if g.cfg.WriteTimeout <= 0 {
			h.ServeHTTP(w, r)
			return
		}
		if writecut.TimedWithin(w, g.cfg.WriteTimeout) {
			// The server beneath bounds the writes itself, by what waits
			// on the client (tidings' HTTP/2 server): timing them by the
			// clock here would cut streams for the server's own backlog.
			h.ServeHTTP(w, r)
			return
		}
		if writecut.Applies(r) {
			// HTTP/2 would cut a stream whose deadline passed between
			// writes, so each write is timed instead.
			cw := &cutWriter{ResponseWriter: w, rc: rc, cut: writecut.New(rc, g.cfg.WriteTimeout, func() { g.writeTimeouts.Add(1) }),
				timeout: g.cfg.WriteTimeout}
			h.ServeHTTP(cw, r)
			cw.cut.Close()
			return
		}
		dw := &writer{ResponseWriter: w, rc: rc, timeout: g.cfg.WriteTimeout, g: g}
		// Armed before the handler runs, so that what net/http writes on
		// the handler's behalf (a 100 Continue) is bounded too.
		dw.arm(true)
		h.ServeHTTP(dw, r)
		// The rest of the answer goes out after h returns, when net/http
		// flushes its buffer: under a fresh deadline (h may have lifted
		// the last), which net/http lifts once the answer is out.
		dw.arm(true)
	})
}

// body is a request body read under the Guard's BodyTimeout.
type body struct {
	io.ReadCloser
	g        *Guard
	rc       *http.ResponseController
	done     bool
	timedOut bool
}

func (b *body) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == nil || b.done {
		return n, err
	}
	switch {
	case err == io.EOF:
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	case errors.Is(err, os.ErrDeadlineExceeded):
		if !b.timedOut {
			b.timedOut = true
			b.g.bodyTimeouts.Add(1)
		}
		err = &BodyTimeoutError{Timeout: b.g.cfg.BodyTimeout, err: err}
	}
	return n, err
}

// writer is a ResponseWriter whose every write is bounded by a deadline.
type writer struct {
	http.ResponseWriter
	rc       *http.ResponseController
	timeout  time.Duration
	g        *Guard
	deadline time.Time
	cut      bool
}

// arm moves the write deadline to timeout from now; unless forced, only
// once half of it is used up, so that a burst of writes moves it once.
func (w *writer) arm(force bool) {
	now := time.Now()
	if !force && w.deadline.Sub(now) >= w.timeout/2 {
		return
	}
	w.deadline = now.Add(w.timeout)
	_ = w.rc.SetWriteDeadline(w.deadline)
}

func (w *writer) check(err error) {
	if err != nil && !w.cut && errors.Is(err, os.ErrDeadlineExceeded) {
		w.cut = true
		w.g.writeTimeouts.Add(1)
	}
}

func (w *writer) Write(p []byte) (int, error) {
	w.arm(false)
	n, err := w.ResponseWriter.Write(p)
	w.check(err)
	return n, err
}

// FlushError flushes under the deadline; http.ResponseController finds
// it first.
func (w *writer) FlushError() error {
	w.arm(false)
	err := w.rc.Flush()
	w.check(err)
	return err
}

// Flush is FlushError for handlers that ask for an http.Flusher.
func (w *writer) Flush() { _ = w.FlushError() }

// Unwrap gives http.ResponseController the ResponseWriter beneath.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// cutWriter is a ResponseWriter of HTTP/2 whose every write is cut
// after the Guard's WriteTimeout, and only while under way.
type cutWriter struct {
	http.ResponseWriter
	rc      *http.ResponseController
	cut     *writecut.Cutter
	timeout time.Duration
}

// WriteTimeout makes the writer a writecut.Timed: a handler beneath it
// leaves the timing of its writes to it, and their cuts are counted.
func (w *cutWriter) WriteTimeout() time.Duration { return w.timeout }

func (w *cutWriter) Write(p []byte) (int, error) {
	w.cut.Begin()
	defer w.cut.End()
	return w.ResponseWriter.Write(p)
}

// FlushError flushes under the timeout; http.ResponseController finds
// it first.
func (w *cutWriter) FlushError() error {
	w.cut.Begin()
	defer w.cut.End()
	return w.rc.Flush()
}

// Flush is FlushError for handlers that ask for an http.Flusher.
func (w *cutWriter) Flush() { _ = w.FlushError() }

// Unwrap gives http.ResponseController the ResponseWriter beneath.
func (w *cutWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
