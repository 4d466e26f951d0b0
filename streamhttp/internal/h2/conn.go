package h2

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"tidings/internal/engine"
	"tidings/streamhttp/internal/parked"
)

const (
	// streamWindow is the receive window each stream starts with, and
	// connWindow the connection's: a connection buffers at most
	// connWindow bytes of request bodies its handlers have not read.
	streamWindow = 256 << 10
	connWindow   = 1 << 20
	// initialWindow is a window before SETTINGS changes it (RFC 9113).
	initialWindow = 65535
	// maxWindow is the largest a flow-control window may grow.
	maxWindow = 1<<31 - 1
	// maxCtrl bounds the control frames waiting to be written: a client
	// that sends pings, settings or streams to refuse faster than it
	// reads the answers is cut off rather than queued for.
	maxCtrl = 10000
	// defaultMaxFrame is the frame size a peer takes before its SETTINGS,
	// and the largest frame the server reads: it advertises no larger
	// SETTINGS_MAX_FRAME_SIZE, so a client may send none larger (RFC
	// 9113, 4.2), and one that does is cut off before its payload is
	// read — where the frame reader would otherwise buffer up to 16 MiB.
	defaultMaxFrame = 16384
)

// errCodeInadequateSecurity is INADEQUATE_SECURITY.
const errCodeInadequateSecurity = http2.ErrCode(0xc)

// connErr is an error of the connection as a whole: it is told to the
// client in a GOAWAY, and the connection ends.
type connErr struct {
	code   http2.ErrCode
	reason string
}

func (e connErr) Error() string { return fmt.Sprintf("h2: %v: %s", e.code, e.reason) }

// ctrl kinds: the frames queued for the writer apart from streams' own.
const (
	ctrlSettings = iota
	ctrlSettingsAck
	ctrlPing
	ctrlWindow
	ctrlReset
	ctrlGoAway
	ctrlPingPeer // the server's own PING, asking whether the peer is there
)

// ctrlFrame is one control frame waiting for the writer.
type ctrlFrame struct {
	kind  uint8
	id    uint32
	n     uint32
	code  http2.ErrCode
	ping  [8]byte
	debug string
}

// conn is one HTTP/2 connection: its reader runs on the goroutine
// net/http handed it over on, its writer on one of its own.
type conn struct {
	srv    *Server
	nc     net.Conn
	tls    *tls.ConnectionState
	h      http.Handler
	base   context.Context
	remote string

	br      *bufio.Reader // the reader's, and its Framer
	fr      *http2.Framer
	writing bool // the writer was started; the reader's

	// The writer's own.
	wbuf    bytes.Buffer // the frames of the next write to the socket
	wfr     *http2.Framer
	henc    *hpack.Encoder
	hbuf    bytes.Buffer
	drain   parked.Frames
	iov     [][]byte
	finals  []engine.Reply          // last replies to release once written
	cut     []engine.StreamObserver // listens the sweep cut, to be told
	hubRest []*stream               // parked streams taken from hubq; those from hubNext on are not drained yet
	hubNext int

	kick  chan struct{} // wakes the writer; holds one wake-up
	done  chan struct{} // closed when the reader ends: the writer stops
	wrote chan struct{} // closed when the writer has returned

	hubmu sync.Mutex
	hubq  []*stream // parked streams with something for the writer

	// stateMu orders the reports to the http.Server's ConnState hook.
	stateMu  sync.Mutex
	reported http.ConnState

	mu           sync.Mutex
	streams      map[uint32]*stream
	maxID        uint32 // the highest stream a client opened
	open         int    // streams counted against MaxStreams
	sendWindow   int64  // the connection's send window
	peerWindow   int32  // the initial send window of a new stream
	peerMaxFrame uint32
	peerTable    uint32 // the peer's SETTINGS_HEADER_TABLE_SIZE, for the writer
	recvWindow   int32  // what the client may still send, all streams
	recvUnpaid   int32  // consumed, not yet given back
	ctrl         []ctrlFrame
	ready        []*stream     // streams with frames to write
	connBlocked  []*stream     // streams waiting for the connection's window
	tickEvery    time.Duration // how often the writer sweeps (see sweepLocked); 0: never
	idleNow      bool          // the last stream ended: the writer reports it
	started      bool          // the preface was read and the writer started
	goingAway    bool
	closing      bool // close the connection once what is queued is written
	closed       bool
	flooded      bool // more than maxCtrl control frames were due
	writeErr     error
	idle         *time.Timer
	// junk bounds the frames that cost the server work and carry none
	// (see spendLocked). owedConn and owedStreams are the bytes of DATA
	// sent that the client has yet to give back by WINDOW_UPDATEs, of
	// the connection and of its streams: summed over the streams,
	// because a stream's updates often come after it ended.
	junk        budget
	owedConn    int64
	owedStreams int64
	// failed says the connection ends with a GOAWAY naming an error;
	// writeShut that its writing side is shut (see shutWrite).
	failed    bool
	writeShut bool
	// lastRead is when the reader last had a frame (Unix nanoseconds);
	// pinged is when the server's PING went out, zero when none is
	// waiting for its ACK; peerGone says that one waited too long.
	lastRead atomic.Int64
	pinged   time.Time
	peerGone bool
	// readBytes counts the bytes read from the socket, readAtPing what
	// it was when the PING went out, and inRead says the reader waits in
	// a read of the socket: a peer is gone only if the reader waited for
	// its bytes and none came, never because the reader itself fell
	// behind (a burst on a busy machine).
	readBytes  atomic.Int64
	readAtPing int64
	inRead     atomic.Bool
}

// socketReader is the connection's socket as its reader reads it,
// counted and watched (see conn.inRead).
type socketReader struct{ c *conn }

func (r socketReader) Read(p []byte) (int, error) {
	r.c.inRead.Store(true)
	n, err := r.c.nc.Read(p)
	r.c.inRead.Store(false)
	r.c.readBytes.Add(int64(n))
	return n, err
}

func newConn(s *Server, nc net.Conn, st *tls.ConnectionState, h http.Handler, base context.Context) *conn {
	c := &conn{
		srv: s, nc: nc, tls: st, h: h, base: base, remote: nc.RemoteAddr().String(),
		kick: make(chan struct{}, 1), done: make(chan struct{}), wrote: make(chan struct{}),
		streams: make(map[uint32]*stream), sendWindow: initialWindow, peerWindow: initialWindow,
		peerMaxFrame: defaultMaxFrame, peerTable: 4096, recvWindow: connWindow,
	}
	// Frames are read through a buffer, so that a frame's header and
	// payload, and the frames that came with it, cost one read.
	c.br = bufio.NewReaderSize(socketReader{c}, 4<<10)
	c.fr = http2.NewFramer(nil, &continuationWatch{c: c, r: c.br})
	c.fr.SetReuseFrames()
	c.fr.SetMaxReadFrameSize(defaultMaxFrame)
	c.junk = newBudget(s.cfg.FrameBudget, time.Now())
	c.lastRead.Store(time.Now().UnixNano())
	c.fr.MaxHeaderListSize = uint32(min(s.cfg.MaxHeaderBytes, maxWindow))
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.ReadMetaHeaders.SetMaxStringLength(s.cfg.MaxHeaderBytes)
	c.wfr = http2.NewFramer(&c.wbuf, nil)
	// The server's preface comes first, before anything else is queued.
	c.ctrl = append(c.ctrl, ctrlFrame{kind: ctrlSettings}, ctrlFrame{kind: ctrlWindow, n: connWindow - initialWindow})
	if wt := s.cfg.WriteTimeout; wt > 0 {
		c.tickEvery = max(wt/4, time.Millisecond) // the sweep of streams stuck on flow control
	}
	if ka := s.cfg.PingAfter; ka > 0 && (c.tickEvery == 0 || ka/4 < c.tickEvery) {
		c.tickEvery = max(ka/4, time.Millisecond) // the sweep that pings a silent peer
	}
	c.henc = hpack.NewEncoder(&c.hbuf)
	return c
}

// serve reads the connection's frames until it ends.
func (c *conn) serve(sawPreface bool) {
	defer c.close()
	timeout := c.srv.hs.ReadHeaderTimeout
	if timeout <= 0 {
		timeout = prefaceTimeout
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(timeout))
	if !sawPreface {
		var p [len(http2.ClientPreface)]byte
		if _, err := io.ReadFull(c.br, p[:]); err != nil || string(p[:]) != http2.ClientPreface {
			return
		}
	}
	c.mu.Lock()
	if c.goingAway {
		c.mu.Unlock()
		return // the server shut down before the preface came
	}
	if d := c.srv.cfg.IdleTimeout; d > 0 {
		c.idle = time.AfterFunc(d, c.onIdle)
	}
	c.started = true
	c.mu.Unlock()
	c.writing = true
	go c.writeLoop()
	c.signal()
	// As net/http's HTTP/2 server does: the connection is active once
	// its preface is read, and idle while no stream is open, so that a
	// ConnState hook (a connection cap's) may close it to make room.
	c.setState(http.StateActive)
	c.reportState()
	first := true
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				if c.resetID(se.StreamID, se.Code) {
					continue
				}
				return
			}
			var ce http2.ConnectionError
			var calm connErr
			if errors.As(err, &calm) {
				c.fail(calm)
			} else if errors.As(err, &ce) {
				c.fail(connErr{code: http2.ErrCode(ce), reason: "malformed frame"})
			} else if errors.Is(err, http2.ErrFrameTooLarge) {
				c.fail(connErr{code: http2.ErrCodeFrameSize, reason: "frame larger than SETTINGS_MAX_FRAME_SIZE"})
			}
			return
		}
		if first {
			if sf, ok := f.(*http2.SettingsFrame); !ok || sf.IsAck() {
				c.fail(connErr{code: http2.ErrCodeProtocol, reason: "the client's preface must end with SETTINGS"})
				return
			}
			first = false
			_ = c.nc.SetReadDeadline(time.Time{})
		}
		c.lastRead.Store(time.Now().UnixNano())
		err = c.handle(f)
		if err == nil {
			c.mu.Lock()
			err = c.calmLocked()
			c.mu.Unlock()
		}
		if err != nil {
			var ce connErr
			if errors.As(err, &ce) {
				c.fail(ce)
			}
			return
		}
	}
}

// handle acts on one frame; an error ends the connection.
func (c *conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.SettingsFrame:
		return c.onSettings(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.PingFrame:
		if f.IsAck() {
			if f.Data == peerPing {
				c.mu.Lock()
				c.pinged = time.Time{}
				c.mu.Unlock()
			}
			return nil
		}
		// A PING is owed its answer, and is bounded by the queue of
		// answers a client must read (maxCtrl), not by the budget:
		// clients ping to know the connection lives.
		return c.queue(ctrlFrame{kind: ctrlPing, ping: f.Data})
	case *http2.RSTStreamFrame:
		return c.onReset(f)
	case *http2.PriorityFrame:
		return c.onPriority(f)
	case *http2.GoAwayFrame:
		return nil // the client opens no more streams; those open go on
	case *http2.PushPromiseFrame:
		return connErr{code: http2.ErrCodeProtocol, reason: "a client may not push"}
	case *http2.ContinuationFrame:
		return connErr{code: http2.ErrCodeProtocol, reason: "CONTINUATION without HEADERS"}
	default:
		// Frames of unknown types are ignored (RFC 9113, 4.1), but not
		// without end.
		return c.spend("a frame of an unknown type")
	}
}

// continuationWatch passes a connection's bytes to its frame reader and
// spends each empty CONTINUATION frame among them from the budget of
// frames that carry no work. The reader gathers a header block's
// CONTINUATIONs itself, none of them reaching readLoop, so that a block
// that never ends, one empty frame after another, would otherwise cost
// a core at the client's send rate while nothing else looked.
type continuationWatch struct {
	c    *conn
	r    io.Reader
	head [9]byte // the next frame's header, as far as it came
	got  int     // of head
	left int     // bytes of the current frame's payload still to come
	err  error   // the budget ran out: every read fails from then on
}

func (w *continuationWatch) Read(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.r.Read(p)
	for b := p[:n]; len(b) > 0; {
		if w.left > 0 {
			k := min(w.left, len(b))
			w.left -= k
			b = b[k:]
			continue
		}
		k := copy(w.head[w.got:], b)
		w.got += k
		b = b[k:]
		if w.got < len(w.head) {
			break
		}
		w.got = 0
		w.left = int(w.head[0])<<16 | int(w.head[1])<<8 | int(w.head[2])
		if http2.FrameType(w.head[3]) == http2.FrameContinuation && w.left == 0 {
			// The frame reader has asked for no more than this
			// header yet: it fails at its next read.
			w.err = w.c.spend("an empty CONTINUATION frame")
		}
	}
	return n, err
}

// repaid reports whether a WINDOW_UPDATE of inc gives back bytes of
// DATA the server sent (owed), and takes them off. One that gives back
// less than minRepay while more is owed is not: otherwise a client
// could send a WINDOW_UPDATE of 1 for every byte it was sent, where a
// real one (net/http's gives back 4 to 8 KiB at a time, nghttp2's half
// a window) sends a few a DATA frame.
func repaid(owed *int64, inc int64) bool {
	if *owed == 0 || inc < min(*owed, minRepay) {
		return false
	}
	*owed = max(*owed-inc, 0)
	return true
}

// minRepay is the least a WINDOW_UPDATE gives back to count as called
// for, unless it clears what is owed.
const minRepay = 1 << 10

// spend takes one frame of what from the connection's budget.
func (c *conn) spend(what string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.spendLocked(what)
}

// spendLocked takes one frame that costs the server work and carries
// none — a reset, an empty DATA frame, a WINDOW_UPDATE nothing sent
// called for, PRIORITY, SETTINGS, an unknown type, an empty
// CONTINUATION — from the
// connection's budget (Config.FrameBudget, refilled at a tenth of it a
// second); past it the connection ends with ENHANCE_YOUR_CALM. Such
// floods otherwise cost a core at the attacker's send rate, answered or
// not (Rapid Reset, CVE-2023-44487, is the best known).
func (c *conn) spendLocked(what string) error {
	if c.junk.spend(time.Now()) {
		return nil
	}
	return connErr{code: http2.ErrCodeEnhanceYourCalm, reason: fmt.Sprintf("more than %d frames that carry no work (%s the last)", c.junk.burst, what)}
}

// onPriority checks a PRIORITY frame, whose advice is not taken: a
// stream may not depend on itself (RFC 9113, 5.3.1).
func (c *conn) onPriority(f *http2.PriorityFrame) error {
	if f.StreamDep == f.StreamID {
		c.mu.Lock()
		defer c.mu.Unlock()
		if s := c.streams[f.StreamID]; s != nil {
			s.resetLocked(http2.ErrCodeProtocol, true, errReset)
			return c.calmLocked()
		}
		return c.queueLocked(ctrlFrame{kind: ctrlReset, id: f.StreamID, code: http2.ErrCodeProtocol})
	}
	return c.spend("PRIORITY")
}

// queue queues a control frame and wakes the writer.
func (c *conn) queue(f ctrlFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queueLocked(f)
}

// queueLocked queues a control frame the client's frame called for;
// the error ends the connection once too many wait (see maxCtrl).
func (c *conn) queueLocked(f ctrlFrame) error {
	c.pushCtrlLocked(f)
	return c.calmLocked()
}

// pushCtrlLocked queues a control frame and wakes the writer; past
// maxCtrl waiting it marks the connection as flooded, which the reader
// acts on (calmLocked) once it has handled the frame at fault.
func (c *conn) pushCtrlLocked(f ctrlFrame) {
	if len(c.ctrl) >= maxCtrl {
		c.flooded = true
		return
	}
	c.ctrl = append(c.ctrl, f)
	c.signal()
}

// calmLocked is the error that ends a flooded connection, or nil.
func (c *conn) calmLocked() error {
	if !c.flooded {
		return nil
	}
	return connErr{code: http2.ErrCodeEnhanceYourCalm, reason: fmt.Sprintf("more than %d control frames waiting: the client sends faster than it reads", maxCtrl)}
}

// signal wakes the writer.
func (c *conn) signal() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// goAwayLocked queues a GOAWAY naming the last stream taken: from then
// on no new stream is taken.
func (c *conn) goAwayLocked(code http2.ErrCode, debug string) {
	c.goingAway = true
	c.ctrl = append(c.ctrl, ctrlFrame{kind: ctrlGoAway, id: c.maxID, code: code, debug: debug})
	c.signal()
}

// fail ends the connection with a GOAWAY carrying e.
func (c *conn) fail(e connErr) {
	c.mu.Lock()
	c.goAwayLocked(e.code, e.reason)
	c.closing, c.failed = true, true
	c.mu.Unlock()
}

// goAway refuses new streams and closes the connection once the open
// ones have ended: the server is shutting down.
func (c *conn) goAway() {
	c.mu.Lock()
	if !c.started && !c.closed {
		// No preface yet, so nothing taken: the reader, waiting for
		// it, ends with the socket.
		c.goingAway = true
		c.mu.Unlock()
		_ = c.nc.Close()
		return
	}
	if !c.goingAway && !c.closed {
		c.goAwayLocked(http2.ErrCodeNo, "")
		c.closing = c.open == 0
	}
	c.mu.Unlock()
}

// onIdle closes a connection that has had no stream for IdleTimeout.
func (c *conn) onIdle() {
	c.mu.Lock()
	if c.open == 0 && !c.goingAway && !c.closed {
		c.goAwayLocked(http2.ErrCodeNo, "idle")
		c.closing = true
	}
	c.mu.Unlock()
}

// onHeaders opens a stream, or ends a request's body with its trailers.
func (c *conn) onHeaders(f *http2.MetaHeadersFrame) error {
	id := f.StreamID
	if id%2 == 0 {
		return connErr{code: http2.ErrCodeProtocol, reason: "a client's stream has an odd number"}
	}
	if f.HasPriority() && f.Priority.StreamDep == id {
		// A stream that depends on itself (RFC 9113, 5.3.1): a stream
		// error, on a stream that opened and closed at once.
		c.mu.Lock()
		defer c.mu.Unlock()
		if id <= c.maxID {
			return connErr{code: http2.ErrCodeProtocol, reason: "HEADERS on a stream whose request was sent"}
		}
		c.maxID = id
		return c.queueLocked(ctrlFrame{kind: ctrlReset, id: id, code: http2.ErrCodeProtocol})
	}
	c.mu.Lock()
	if s := c.streams[id]; s != nil {
		defer c.mu.Unlock()
		switch {
		case s.resetBy == resetByClient:
			// Closed by the client's own RST_STREAM (RFC 9113, 5.1),
			// though its handler has yet to return.
			return c.queueLocked(ctrlFrame{kind: ctrlReset, id: id, code: http2.ErrCodeStreamClosed})
		case s.resetBy == resetByServer:
			return nil // in flight when the server's reset went out
		case s.remoteEnded() || !f.StreamEnded():
			return connErr{code: http2.ErrCodeProtocol, reason: "HEADERS on a stream whose request was sent"}
		}
		// Trailers, not passed on: they end the body, which must have
		// its Content-Length by then.
		if s.declared >= 0 && s.received != s.declared {
			s.resetLocked(http2.ErrCodeProtocol, true, errBodyLength)
			return nil
		}
		s.endBodyLocked()
		return nil
	}
	if id <= c.maxID {
		c.mu.Unlock()
		return connErr{code: http2.ErrCodeStreamClosed, reason: "HEADERS on a closed stream"}
	}
	c.maxID = id
	if c.goingAway {
		c.mu.Unlock()
		return c.queue(ctrlFrame{kind: ctrlReset, id: id, code: http2.ErrCodeRefusedStream})
	}
	if c.open >= c.srv.cfg.MaxStreams {
		c.mu.Unlock()
		c.srv.refused.Add(1)
		return c.queue(ctrlFrame{kind: ctrlReset, id: id, code: http2.ErrCodeRefusedStream})
	}
	// The stream counts from here on, so that a GOAWAY or the idle
	// timeout, which may come meanwhile, does not close the connection
	// under a stream it has taken.
	c.open++
	if c.idle != nil {
		c.idle.Stop()
	}
	c.mu.Unlock()

	s := newStream(c, id)
	req, err := c.newRequest(f, s)
	if err != nil {
		c.mu.Lock()
		c.streamGoneLocked()
		err := c.queueLocked(ctrlFrame{kind: ctrlReset, id: id, code: http2.ErrCodeProtocol})
		c.mu.Unlock()
		return err
	}
	h := c.h
	if f.Truncated {
		h = headerTooLarge(c.srv.cfg.MaxHeaderBytes)
	}
	c.mu.Lock()
	c.streams[id] = s
	s.sendWindow = int64(c.peerWindow)
	c.mu.Unlock()
	c.srv.streams.Add(1)
	c.reportState()
	go s.run(h, req)
	return nil
}

// onData passes a request's body on to its handler.
func (c *conn) onData(f *http2.DataFrame) error {
	id := f.StreamID
	n := int32(f.Header().Length)
	data := f.Data()
	c.mu.Lock()
	defer c.mu.Unlock()
	if n > c.recvWindow {
		return connErr{code: http2.ErrCodeFlowControl, reason: "DATA beyond the connection's window"}
	}
	c.recvWindow -= n
	if len(data) == 0 && !f.StreamEnded() {
		if err := c.spendLocked("an empty DATA frame"); err != nil {
			return err
		}
	}
	s := c.streams[id]
	if s == nil || s.remoteEnded() {
		c.consumedLocked(n)
		switch {
		case id > c.maxID:
			return connErr{code: http2.ErrCodeProtocol, reason: "DATA on a stream not opened"}
		case s == nil, s.resetBy == resetByClient:
			// Closed: by its end, or by the client's own RST_STREAM
			// (RFC 9113, 5.1). After a reset of the server's, frames in
			// flight are passed over.
			return c.queueLocked(ctrlFrame{kind: ctrlReset, id: id, code: http2.ErrCodeStreamClosed})
		case !s.wasReset():
			s.resetLocked(http2.ErrCodeStreamClosed, true, errReset)
		}
		return nil
	}
	if n > s.recvWindow {
		c.consumedLocked(n)
		s.resetLocked(http2.ErrCodeFlowControl, true, errReset)
		return nil
	}
	s.recvWindow -= n
	if pad := n - int32(len(data)); pad > 0 {
		c.consumedLocked(pad)
		s.consumedLocked(pad)
	}
	s.received += int64(len(data))
	if s.declared >= 0 && s.received > s.declared {
		c.consumedLocked(int32(len(data)))
		s.resetLocked(http2.ErrCodeProtocol, true, errBodyLength)
		return nil
	}
	if len(data) > 0 {
		if s.bodyClosed {
			c.consumedLocked(int32(len(data)))
		} else {
			s.body = append(s.body, data...)
			s.cond.Broadcast()
		}
	}
	if f.StreamEnded() {
		if s.declared >= 0 && s.received != s.declared {
			s.resetLocked(http2.ErrCodeProtocol, true, errBodyLength)
			return nil
		}
		s.endBodyLocked()
	}
	return nil
}

// errBodyLength is a body that does not have its Content-Length.
var errBodyLength = errors.New("h2: the request body's length is not its Content-Length")

// consumedLocked counts n bytes of the connection's window as read, and
// gives them back once half the window is.
func (c *conn) consumedLocked(n int32) {
	c.recvUnpaid += n
	if c.recvUnpaid >= connWindow/2 {
		c.pushCtrlLocked(ctrlFrame{kind: ctrlWindow, n: uint32(c.recvUnpaid)})
		c.recvWindow += c.recvUnpaid
		c.recvUnpaid = 0
	}
}

// onSettings applies the client's settings and acknowledges them.
func (c *conn) onSettings(f *http2.SettingsFrame) error {
	if f.IsAck() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.spendLocked("SETTINGS"); err != nil {
		return err
	}
	err := f.ForeachSetting(func(st http2.Setting) error {
		if err := st.Valid(); err != nil {
			code := http2.ErrCodeProtocol
			var ce http2.ConnectionError
			if errors.As(err, &ce) {
				code = http2.ErrCode(ce) // FLOW_CONTROL_ERROR for a window over 2^31-1
			}
			return connErr{code: code, reason: err.Error()}
		}
		switch st.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(st.Val) - int64(c.peerWindow)
			c.peerWindow = int32(st.Val)
			for _, s := range c.streams {
				s.sendWindow += delta
				if s.sendWindow > maxWindow {
					return connErr{code: http2.ErrCodeFlowControl, reason: "SETTINGS_INITIAL_WINDOW_SIZE overflows a stream's window"}
				}
				if delta > 0 && len(s.out) > 0 {
					c.readyLocked(s)
				}
			}
		case http2.SettingMaxFrameSize:
			c.peerMaxFrame = st.Val
		case http2.SettingHeaderTableSize:
			c.peerTable = st.Val
		}
		return nil
	})
	if err != nil {
		var ce connErr
		if errors.As(err, &ce) {
			return ce
		}
		return connErr{code: http2.ErrCodeProtocol, reason: err.Error()}
	}
	return c.queueLocked(ctrlFrame{kind: ctrlSettingsAck})
}

// onWindowUpdate grows a send window and wakes what waited for it.
func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	inc := int64(f.Increment)
	if f.StreamID == 0 {
		// One that no DATA sent called for is junk (a client's first,
		// which widens the window, costs a token of the budget's
		// thousand).
		if !repaid(&c.owedConn, inc) {
			if err := c.spendLocked("WINDOW_UPDATE"); err != nil {
				return err
			}
		}
		if c.sendWindow += inc; c.sendWindow > maxWindow {
			return connErr{code: http2.ErrCodeFlowControl, reason: "WINDOW_UPDATE overflows the connection's window"}
		}
		for _, s := range c.connBlocked {
			s.connBlocked = false
			c.readyLocked(s)
		}
		clear(c.connBlocked)
		c.connBlocked = c.connBlocked[:0]
		return nil
	}
	if f.StreamID > c.maxID {
		return connErr{code: http2.ErrCodeProtocol, reason: "WINDOW_UPDATE on a stream not opened"}
	}
	s := c.streams[f.StreamID]
	if !repaid(&c.owedStreams, inc) {
		if err := c.spendLocked("WINDOW_UPDATE"); err != nil {
			return err
		}
	}
	if s == nil || s.wasReset() {
		return nil // in flight when the stream ended
	}
	if s.sendWindow += inc; s.sendWindow > maxWindow {
		s.resetLocked(http2.ErrCodeFlowControl, true, errReset)
		return nil
	}
	if len(s.out) > 0 {
		c.readyLocked(s)
	}
	return nil
}

// onReset ends a stream the client reset.
func (c *conn) onReset(f *http2.RSTStreamFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID > c.maxID {
		return connErr{code: http2.ErrCodeProtocol, reason: "RST_STREAM on a stream not opened"}
	}
	if s := c.streams[f.StreamID]; s != nil && !s.wasReset() {
		s.resetLocked(f.ErrCode, false, errReset)
		s.resetBy = resetByClient
	}
	return c.spendLocked("RST_STREAM")
}

// resetID resets stream id for a malformed frame of it, and reports
// whether the connection goes on.
func (c *conn) resetID(id uint32, code http2.ErrCode) bool {
	if id%2 == 0 {
		// Only a client's stream (odd) can be malformed; an even one
		// was never opened.
		c.fail(connErr{code: http2.ErrCodeProtocol, reason: "a frame on a stream no client opens"})
		return false
	}
	c.mu.Lock()
	if s := c.streams[id]; s != nil {
		s.resetLocked(code, true, errReset)
	} else {
		c.maxID = max(c.maxID, id) // a malformed HEADERS still opened (and closed) its stream
		c.pushCtrlLocked(ctrlFrame{kind: ctrlReset, id: id, code: code})
	}
	err := c.calmLocked()
	c.mu.Unlock()
	if err != nil {
		c.fail(err.(connErr))
		return false
	}
	return true
}

// readyLocked has the writer look at s.
func (c *conn) readyLocked(s *stream) {
	if !s.queued {
		s.queued = true
		c.ready = append(c.ready, s)
		c.signal()
	}
}

// releaseLocked lets go of s once its handler has returned, it has
// ended on the wire, and a listen parked on it has ended.
func (c *conn) releaseLocked(s *stream) {
	if s.released || !s.handlerDone || !s.localEnded() || (s.park != nil && !s.park.ended) {
		return
	}
	s.released = true
	if s.writeTimer != nil {
		s.writeTimer.Stop()
	}
	delete(c.streams, s.id)
	c.srv.streams.Add(-1)
	c.streamGoneLocked()
}

// streamGoneLocked counts a stream out; after the last, the connection
// is reported idle, and closes if it is going away.
func (c *conn) streamGoneLocked() {
	if c.open--; c.open > 0 || c.closed {
		return
	}
	c.idleNow = true
	c.signal() // the writer reports the connection idle
	if c.goingAway {
		c.closing = true
	} else if d := c.srv.cfg.IdleTimeout; d > 0 {
		if c.idle == nil {
			c.idle = time.AfterFunc(d, c.onIdle)
		} else {
			c.idle.Reset(d)
		}
	}
}

// reportState tells the http.Server's ConnState hook whether the
// connection is idle (no stream open) or active, when that changed
// since it was last told.
func (c *conn) reportState() {
	if c.srv.hs.ConnState == nil {
		return
	}
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	c.mu.Lock()
	st := http.StateActive
	if c.open == 0 {
		st = http.StateIdle
	}
	closed := c.closed
	c.mu.Unlock()
	if !closed && st != c.reported {
		c.reported = st
		c.srv.hs.ConnState(c.nc, st)
	}
}

// setState tells the ConnState hook st.
func (c *conn) setState(st http.ConnState) {
	if c.srv.hs.ConnState == nil {
		return
	}
	c.stateMu.Lock()
	defer c.stateMu.Unlock()
	c.reported = st
	c.srv.hs.ConnState(c.nc, st)
}

// close ends the connection once its reader has: every stream is reset,
// the writer stops, and the listens still parked end.
func (c *conn) close() {
	c.mu.Lock()
	c.closed = true
	if c.idle != nil {
		c.idle.Stop()
	}
	for _, s := range c.streams {
		s.resetLocked(http2.ErrCodeCancel, false, errClosed)
	}
	c.mu.Unlock()
	// A writer blocked on a client that reads nothing gives up within a
	// second, and so do its last words.
	_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	close(c.done)
	if c.writing {
		<-c.wrote
	}
	how := engine.Stopped
	if c.writeErr != nil {
		how = engine.Lost
	}
	c.mu.Lock()
	streams := make([]*stream, 0, len(c.streams))
	for _, s := range c.streams {
		streams = append(streams, s)
	}
	c.mu.Unlock()
	for _, s := range streams {
		if p := s.park; p != nil && !p.ended {
			c.endParked(s, how)
		}
	}
	for i := range c.finals {
		c.finals[i].Release()
	}
	c.finals = nil
	c.mu.Lock()
	for _, s := range c.streams {
		c.releaseLocked(s)
	}
	failed := c.failed
	c.mu.Unlock()
	if failed && c.writeErr == nil {
		c.linger()
	}
	_ = c.nc.Close()
}

// linger shuts the writing side of a connection whose GOAWAY named an
// error, once the GOAWAY is written, and reads and drops what the client
// still sends, until it closes, for goAwayLinger or maxLingerBytes at
// most: closing a socket with unread bytes resets it, and the reset can
// reach the client ahead of the GOAWAY, which would then never be read.
// A connection that cannot shut its writing side alone is not lingered
// on.
func (c *conn) linger() {
	if c.shutWrite() {
		_, _ = io.CopyN(io.Discard, c.br, maxLingerBytes)
	}
}

// maxLingerBytes bounds what linger reads.
const maxLingerBytes = 1 << 20

// budget is a token bucket of frames: burst at most, refilled at a tenth
// of burst a second.
type budget struct {
	burst  int
	tokens float64
	last   time.Time
}

func newBudget(burst int, now time.Time) budget {
	return budget{burst: burst, tokens: float64(burst), last: now}
}

// credit gives back a token, up to burst.
func (b *budget) credit() { b.tokens = min(float64(b.burst), b.tokens+1) }

// spend takes a token, and reports whether there was one.
func (b *budget) spend(now time.Time) bool {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(float64(b.burst), b.tokens+d.Seconds()*float64(b.burst)/10)
		b.last = now
	}
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// peerPing is the payload of the server's own PINGs.
var peerPing = [8]byte{'t', 'i', 'd', 'i', 'n', 'g', 's', 0}

// errPeerGone is why a connection whose peer did not answer a PING ended.
var errPeerGone = errors.New("h2: the client did not answer a PING in time")

// checkPeerLocked pings a peer that has sent nothing for
// Config.PingAfter, and marks the connection for closing when the PING's
// ACK has not come within Config.PingTimeout: a client that vanished
// without closing its socket (a laptop shut, a network gone) is found
// in seconds, not by TCP keep-alive minutes later, and the listens
// parked on it are let go. A reader that is behind — bytes came since
// the PING that it has yet to make frames of, or it is not waiting on
// the socket at all — is not taken for a vanished peer: it pings again.
// The writer calls it at each sweep.
func (c *conn) checkPeerLocked(now time.Time) {
	after := c.srv.cfg.PingAfter
	if after <= 0 || c.peerGone {
		return
	}
	if !c.pinged.IsZero() {
		if now.Sub(c.pinged) < c.srv.cfg.PingTimeout {
			return
		}
		if !c.inRead.Load() || c.readBytes.Load() != c.readAtPing {
			// Bytes came that the reader has yet to make frames of, or
			// it is busy: the reader is behind, not the peer gone. Ask
			// again.
			c.pinged = time.Time{}
			return
		}
		c.peerGone = true
		return
	}
	if now.Sub(time.Unix(0, c.lastRead.Load())) >= after {
		c.pinged, c.readAtPing = now, c.readBytes.Load()
		c.pushCtrlLocked(ctrlFrame{kind: ctrlPingPeer})
	}
}
