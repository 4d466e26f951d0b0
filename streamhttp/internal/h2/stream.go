package h2

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"tidings/internal/engine"
	"tidings/mcp"
	"tidings/streamhttp/internal/parked"
)

const (
	// flushAt is how many unflushed bytes of a response are handed to
	// the writer without waiting for a Flush, and maxOut how many a
	// handler may have waiting before its Write blocks.
	flushAt = 16 << 10
	maxOut  = 64 << 10
)

// Why a parked stream is handed to the writer, bits of stream.events.
const (
	evHub   = 1 << iota // its subscription has something pending
	evReset             // it was reset: the listen ends
)

// stream is one request and its response.
type stream struct {
	c      *conn
	id     uint32
	cond   sync.Cond // on c.mu: body bytes came, the writer took bytes, or the stream ended
	cancel context.CancelFunc

	// Guarded by c.mu.
	sendWindow  int64
	recvWindow  int32
	recvUnpaid  int32
	declared    int64 // the request's Content-Length, or -1
	received    int64
	body        []byte // received, not yet read by the handler
	bodyClosed  bool   // the handler closed the body, or returned
	state       streamState
	resetBy     resetSide // who reset the stream, if anyone did; resetErr is why
	readExpired bool
	out         []byte // the response's bytes not yet framed
	head        *head  // the response's headers, not yet framed
	endQueued   bool   // the response ends after out
	queued      bool   // in c.ready
	connBlocked bool   // in c.connBlocked
	resetErr    error
	parkEnd     engine.PumpEnd // how a parked listen ends when reset
	handlerDone bool
	released    bool
	readTimer   *time.Timer
	writeTimer  *time.Timer
	readAt      time.Time // the read deadline; zero: none
	writeAt     time.Time // the write deadline; zero: none
	stuck       time.Time // since when out waits for the client's window; zero: not waiting
	park        *parkState
	// cont is where the stream stands with a client that asked to hear
	// 100 Continue before it sends its body (Expect: 100-continue).
	cont continueState

	inHub  atomic.Bool   // in c.hubq
	events atomic.Uint32 // ev* bits for the writer
}

// streamState is where a stream stands in its life as RFC 9113 (5.1)
// draws it. A stream has a struct from the HEADERS that opens it, so it
// is never idle here (an id above conn.maxID is); the server pushes
// nothing, so it is never reserved. Each side's END_STREAM closes that
// side, and a reset from either closes both: the moves are
// endRemoteLocked, endLocalLocked and resetLocked, and nothing else
// sets state.
type streamState uint8

const (
	stateOpen             streamState = iota
	stateHalfClosedRemote             // the client ended its request; the answer goes on
	stateHalfClosedLocal              // the answer ended; the request's body may still come
	stateClosed                       // both ended, or the stream was reset
)

var stateNames = [...]string{"open", "half-closed (remote)", "half-closed (local)", "closed"}

func (st streamState) String() string { return stateNames[st] }

// resetSide says who reset a closed stream, which decides what a frame
// that comes after means: after the client's own RST_STREAM it is a
// STREAM_CLOSED error, after the server's it may have been in flight
// and is passed over (RFC 9113, 5.1).
type resetSide uint8

const (
	notReset resetSide = iota
	resetByServer
	resetByClient
)

// remoteEnded reports whether the client can send the stream no more
// of its request: it ended it, or the stream closed.
func (s *stream) remoteEnded() bool {
	return s.state == stateHalfClosedRemote || s.state == stateClosed
}

// localEnded reports whether the server sends the stream nothing more:
// its END_STREAM went out, or the stream closed.
func (s *stream) localEnded() bool {
	return s.state == stateHalfClosedLocal || s.state == stateClosed
}

// wasReset reports whether the stream closed by a RST_STREAM, of
// either side, rather than by both sides' END_STREAM.
func (s *stream) wasReset() bool { return s.resetBy != notReset }

// endRemoteLocked closes the client's side: its END_STREAM came, or
// the server told it to stop sending.
func (s *stream) endRemoteLocked() {
	switch s.state {
	case stateOpen:
		s.state = stateHalfClosedRemote
	case stateHalfClosedLocal:
		s.state = stateClosed
	}
}

// endLocalLocked closes the server's side: its END_STREAM was framed.
// A stream answered to its end is work done, so it credits the
// connection's budget of frames that carry none: what the client
// leaves behind (a WINDOW_UPDATE in flight, a late reset) is no flood.
func (s *stream) endLocalLocked() {
	switch s.state {
	case stateOpen:
		s.state = stateHalfClosedLocal
	case stateHalfClosedRemote:
		s.state = stateClosed
	default:
		return
	}
	s.c.junk.credit()
}

// continueState is where a stream stands with an interim 100 Continue:
// a client that asks for one holds its body back until it comes (or it
// tires of waiting), so it goes out when the handler first waits for
// the body, and never once the answer's head is fixed.
type continueState uint8

const (
	contNone   continueState = iota // not asked, or no longer needed
	contAsked                       // asked; the handler has not waited for the body yet
	contQueued                      // the writer is to send it
)

// head is a response's status and headers, as its handler left them.
type head struct {
	status int
	header http.Header
}

func newStream(c *conn, id uint32) *stream {
	s := &stream{c: c, id: id, recvWindow: streamWindow, declared: -1}
	s.cond.L = &c.mu
	return s
}

// run serves the stream's request with h, on the stream's goroutine.
func (s *stream) run(h http.Handler, req *http.Request) {
	w := &responseWriter{s: s, req: req, length: -2}
	defer func() {
		if p := recover(); p != nil {
			if p != http.ErrAbortHandler {
				buf := make([]byte, 64<<10)
				buf = buf[:runtime.Stack(buf, false)]
				s.c.logf("h2: panic serving %s %s: %v\n%s", s.c.remote, req.URL, p, buf)
			}
			s.finish(w, true)
			return
		}
		s.finish(w, false)
	}()
	h.ServeHTTP(w, req)
}

// finish ends the response once the handler has returned, unless the
// handler parked a listen on it.
func (s *stream) finish(w *responseWriter, panicked bool) {
	c := s.c
	c.mu.Lock()
	s.handlerDone = true
	s.closeBodyLocked()
	if s.readTimer != nil {
		s.readTimer.Stop()
	}
	// The write deadline goes on bounding what the handler left to
	// send, as it would a last flush of its own; a parked listen is
	// bound by its write timeout instead.
	if s.writeTimer != nil && (s.park != nil || len(s.out) == 0 && s.head == nil) {
		s.writeTimer.Stop()
	}
	switch {
	case s.park != nil, s.wasReset():
	case panicked:
		s.resetLocked(http2.ErrCodeInternal, true, errReset)
	default:
		if !w.committed {
			if !w.wroteHeader {
				w.WriteHeader(http.StatusOK)
			}
			w.commitLocked(true)
		}
		s.endQueued = true
		c.readyLocked(s)
	}
	c.releaseLocked(s)
	c.mu.Unlock()
	s.cancel()
}

// endBodyLocked ends the request's body: the client sent it all.
func (s *stream) endBodyLocked() {
	s.endRemoteLocked()
	s.cond.Broadcast()
}

// closeBodyLocked drops what the handler did not read of the body,
// giving its room back to the connection.
func (s *stream) closeBodyLocked() {
	if s.bodyClosed {
		return
	}
	s.bodyClosed = true
	s.c.consumedLocked(int32(len(s.body)))
	s.body = nil
	s.cond.Broadcast()
}

// consumedLocked counts n bytes of the stream's window as read, and
// gives them back once half the window is.
func (s *stream) consumedLocked(n int32) {
	if s.remoteEnded() {
		return
	}
	s.recvUnpaid += n
	if s.recvUnpaid >= streamWindow/2 {
		s.c.pushCtrlLocked(ctrlFrame{kind: ctrlWindow, id: s.id, n: uint32(s.recvUnpaid)})
		s.recvWindow += s.recvUnpaid
		s.recvUnpaid = 0
	}
}

// resetLocked ends the stream abruptly, telling the client (send) with
// code; err is what the handler's reads and writes return from then on.
func (s *stream) resetLocked(code http2.ErrCode, send bool, err error) {
	if s.wasReset() {
		return
	}
	c := s.c
	s.state, s.resetBy, s.resetErr = stateClosed, resetByServer, err
	if send {
		c.pushCtrlLocked(ctrlFrame{kind: ctrlReset, id: s.id, code: code})
	}
	s.out, s.head = nil, nil
	s.closeBodyLocked()
	s.cond.Broadcast() // a Write waiting for room, or a Read for bytes, returns
	if s.cancel != nil {
		s.cancel()
	}
	if p := s.park; p != nil && p.hasRep {
		p.hasRep = false
		p.rep.Release() // its bytes are dropped
	}
	if s.park != nil && !s.park.ended {
		s.parkEnd = engine.Stopped
		if send {
			s.parkEnd = engine.Lost
		}
		s.events.Or(evReset)
		c.pushHub(s)
	}
	c.releaseLocked(s)
}

// hubReady is a parked listen's Notify hook: it never blocks.
func (s *stream) hubReady() {
	s.events.Or(evHub)
	s.c.pushHub(s)
}

// pushHub hands s to the writer.
func (c *conn) pushHub(s *stream) {
	if s.inHub.CompareAndSwap(false, true) {
		c.hubmu.Lock()
		c.hubq = append(c.hubq, s)
		c.hubmu.Unlock()
		c.signal()
	}
}

// logf logs to the http.Server's error log.
func (c *conn) logf(format string, args ...any) {
	if l := c.srv.hs.ErrorLog; l != nil {
		l.Printf(format, args...)
		return
	}
	log.Printf(format, args...)
}

// errBadRequest is a request whose headers HTTP/2 does not allow.
var errBadRequest = errors.New("h2: malformed request headers")

// newRequest makes the http.Request of a HEADERS frame that opens s.
func (c *conn) newRequest(f *http2.MetaHeadersFrame, s *stream) (*http.Request, error) {
	var method, scheme, authority, path string
	for _, hf := range f.Fields {
		if edgeSpace(hf.Value) {
			// RFC 9113, 8.2.1 forbids it: HTTP/1.1 trims it, so a proxy
			// that passes the request on over HTTP/1.1 would read
			// another value than the handler here, which is how
			// requests are smuggled.
			return nil, fmt.Errorf("%w: the value of %s starts or ends with whitespace", errBadRequest, hf.Name)
		}
	}
	for _, hf := range f.PseudoFields() {
		switch hf.Name {
		case ":method":
			method = hf.Value
		case ":scheme":
			scheme = hf.Value
		case ":authority":
			authority = hf.Value
		case ":path":
			path = hf.Value
		default:
			return nil, fmt.Errorf("%w: pseudo-header %s", errBadRequest, hf.Name)
		}
	}
	if method == "" || method == http.MethodConnect || scheme == "" || path == "" {
		return nil, fmt.Errorf("%w: :method, :scheme or :path missing, or CONNECT", errBadRequest)
	}
	fields := f.RegularFields()
	hdr := make(http.Header, len(fields))
	for _, hf := range fields {
		switch {
		case connectionSpecific(hf.Name):
			return nil, fmt.Errorf("%w: connection-specific header %s", errBadRequest, hf.Name)
		case hf.Name == "te" && hf.Value != "trailers":
			return nil, fmt.Errorf("%w: te other than trailers", errBadRequest)
		}
		key := http.CanonicalHeaderKey(hf.Name)
		hdr[key] = append(hdr[key], hf.Value)
	}
	if cookies := hdr["Cookie"]; len(cookies) > 1 {
		hdr["Cookie"] = []string{strings.Join(cookies, "; ")}
	}
	if authority == "" {
		authority = hdr.Get("Host")
	}
	delete(hdr, "Host")
	var u *url.URL
	if path == "*" && method == http.MethodOptions {
		u = &url.URL{Path: "*"}
	} else {
		var err error
		if u, err = url.ParseRequestURI(path); err != nil || path[0] != '/' {
			return nil, fmt.Errorf("%w: :path %q", errBadRequest, path)
		}
	}
	if cl := hdr["Content-Length"]; len(cl) > 0 {
		n, err := strconv.ParseUint(cl[0], 10, 63)
		for _, v := range cl[1:] {
			if v != cl[0] {
				err = errBadRequest
			}
		}
		if err != nil {
			return nil, fmt.Errorf("%w: Content-Length %q", errBadRequest, cl[0])
		}
		s.declared = int64(n)
	}
	if e := hdr["Expect"]; len(e) == 1 && strings.EqualFold(e[0], "100-continue") {
		// Taken on here, not passed to a handler that might pass it on.
		delete(hdr, "Expect")
		if !f.StreamEnded() {
			s.cont = contAsked
		}
	}
	var body io.ReadCloser = http.NoBody
	length := s.declared
	if f.StreamEnded() {
		if s.declared > 0 {
			return nil, fmt.Errorf("%w: Content-Length with no body", errBadRequest)
		}
		s.endRemoteLocked()
		length = 0
	} else {
		body = &requestBody{s: s}
	}
	ctx, cancel := context.WithCancel(c.base)
	s.cancel = cancel
	r := &http.Request{
		Method: method, URL: u, Proto: "HTTP/2.0", ProtoMajor: 2, Header: hdr,
		Body: body, ContentLength: length, Host: authority, RemoteAddr: c.remote,
		RequestURI: path, TLS: c.tls,
	}
	return r.WithContext(ctx), nil
}

// edgeSpace reports whether a field value starts or ends with a space
// or a tab, which HTTP/2 does not allow.
func edgeSpace(v string) bool {
	return v != "" && (v[0] == ' ' || v[0] == '\t' || v[len(v)-1] == ' ' || v[len(v)-1] == '\t')
}

// connectionSpecific reports whether a header field (its name in lower
// case) belongs to an HTTP/1.1 connection: HTTP/2 carries none
// (RFC 9113, 8.2.2), so a request with one is malformed and an answer's
// is dropped.
func connectionSpecific(name string) bool {
	switch name {
	case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade":
		return true
	}
	return false
}

// headerTooLarge answers a request whose header block was over limit.
func headerTooLarge(limit int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, fmt.Sprintf("the request's headers are over %d bytes", limit), http.StatusRequestHeaderFieldsTooLarge)
	})
}

// requestBody is a request's body, read by its handler.
type requestBody struct{ s *stream }

// errBodyClosed is a read of a body after Close.
var errBodyClosed = errors.New("h2: read of a closed request body")

func (b *requestBody) Read(p []byte) (int, error) {
	s := b.s
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	for len(s.body) == 0 {
		switch {
		case s.bodyClosed && !s.wasReset():
			return 0, errBodyClosed
		case s.wasReset():
			return 0, s.resetErr
		case s.remoteEnded():
			return 0, io.EOF
		case s.readExpired:
			return 0, os.ErrDeadlineExceeded
		}
		if s.cont == contAsked {
			s.cont = contQueued
			s.c.readyLocked(s)
		}
		s.cond.Wait()
	}
	n := copy(p, s.body)
	if s.body = s.body[n:]; len(s.body) == 0 {
		s.body = nil
	}
	s.c.consumedLocked(int32(n))
	s.consumedLocked(int32(n))
	return n, nil
}

func (b *requestBody) Close() error {
	b.s.c.mu.Lock()
	b.s.closeBodyLocked()
	b.s.c.mu.Unlock()
	return nil
}

// responseWriter is a stream's http.ResponseWriter. Its methods are
// the handler's, on one goroutine at a time, as net/http's are.
type responseWriter struct {
	s           *stream
	req         *http.Request
	header      http.Header
	status      int
	wroteHeader bool
	committed   bool  // the head was handed to the writer
	length      int64 // the Content-Length the handler set, -1 for none, -2 not yet read
	written     int64
}

func (w *responseWriter) Header() http.Header {
	if w.header == nil {
		w.header = make(http.Header)
	}
	return w.header
}

func (w *responseWriter) WriteHeader(code int) {
	if w.wroteHeader {
		return
	}
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code))
	}
	if code < 200 {
		return // informational answers are not sent
	}
	w.wroteHeader, w.status = true, code
}

// bodyAllowed reports whether the response may carry a body.
func (w *responseWriter) bodyAllowed() bool {
	return w.status != http.StatusNoContent && w.status != http.StatusNotModified && w.req.Method != http.MethodHead
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.bodyAllowed() {
		if w.req.Method == http.MethodHead {
			return len(p), nil
		}
		return 0, http.ErrBodyNotAllowed
	}
	if w.length == -2 {
		w.length = -1
		if n, err := strconv.ParseInt(w.Header().Get("Content-Length"), 10, 64); err == nil && n >= 0 {
			w.length = n
		}
	}
	if w.length >= 0 && w.written+int64(len(p)) > w.length {
		return 0, http.ErrContentLength // more than the handler said it would send
	}
	w.written += int64(len(p))
	s, c := w.s, w.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for len(p) > 0 {
		if s.wasReset() {
			return n, s.resetErr
		}
		if room := maxOut - len(s.out); room > 0 {
			k := min(room, len(p))
			s.out = append(s.out, p[:k]...)
			p, n = p[k:], n+k
			continue
		}
		w.handOverLocked()
		s.cond.Wait()
	}
	if len(s.out) >= flushAt {
		w.handOverLocked()
	}
	return n, nil
}

// handOverLocked has the writer send what is written so far.
func (w *responseWriter) handOverLocked() {
	if !w.committed {
		w.commitLocked(false)
	}
	w.s.c.readyLocked(w.s)
}

// commitLocked fixes the response's head: the headers as they are now,
// with a Date, a Content-Type sniffed from the first bytes when the
// handler set none, and, when the handler has returned (final), the
// Content-Length of the whole body.
func (w *responseWriter) commitLocked(final bool) {
	s := w.s
	h := w.Header().Clone()
	if _, ok := h["Date"]; !ok {
		h["Date"] = []string{time.Now().UTC().Format(http.TimeFormat)}
	}
	if w.bodyAllowed() {
		if _, ok := h["Content-Type"]; !ok && len(s.out) > 0 {
			h["Content-Type"] = []string{http.DetectContentType(s.out)}
		}
		if _, ok := h["Content-Length"]; !ok && final {
			h["Content-Length"] = []string{strconv.Itoa(len(s.out))}
		}
	}
	s.head = &head{status: w.status, header: h}
	w.committed = true
	if s.cont == contAsked {
		s.cont = contNone // the answer comes first; no Continue is due
	}
}

// FlushError hands what is written to the writer, which sends it as
// soon as the stream's flow control lets it; the error is the
// stream's, once it was reset or its connection ended.
func (w *responseWriter) FlushError() error {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	c := w.s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if w.s.wasReset() {
		return w.s.resetErr
	}
	w.handOverLocked()
	return nil
}

func (w *responseWriter) Flush() { _ = w.FlushError() }

// WriteTimeout reports the bound the server puts on the stream's writes
// (Config.WriteTimeout), which makes the writer a writecut.Timed: the
// server cuts a stream whose bytes wait on the client's window that
// long, so that middleware need not time each write by the clock —
// which would also count the time the handler waits for the server's
// own queue, or for a core.
func (w *responseWriter) WriteTimeout() time.Duration { return w.s.c.srv.cfg.WriteTimeout }

// EnableFullDuplex is a no-op: an HTTP/2 handler may read its request
// while it writes its response.
func (w *responseWriter) EnableFullDuplex() error { return nil }

// SetReadDeadline bounds the handler's reads of the request body: one
// waiting at t returns os.ErrDeadlineExceeded.
func (w *responseWriter) SetReadDeadline(t time.Time) error {
	s := w.s
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.readExpired, s.readAt = false, t
	s.readTimer = s.armLocked(s.readTimer, t, s.readDeadlineFired)
	return nil
}

// readRecheck is how soon a read deadline that passed while the
// connection's reader was behind is looked at again.
const readRecheck = 100 * time.Millisecond

// readDeadlineFired ends the handler's wait for the body once the read
// deadline passed — unless the body may be in bytes the connection's
// reader has yet to read: a reader that is not waiting on the socket is
// busy or behind (a burst on a busy machine), and a client is not to be
// timed out for the server's backlog. It looks again shortly then.
func (s *stream) readDeadlineFired() {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if !s.due(s.readAt) || s.handlerDone {
		return
	}
	if len(s.body) == 0 && !s.remoteEnded() && !c.inRead.Load() && !c.closed {
		s.readTimer.Reset(readRecheck)
		return
	}
	s.readExpired = true
	s.cond.Broadcast()
}

// SetWriteDeadline resets the stream at t unless the deadline moves
// first, whether or not a write is under way then (as net/http's HTTP/2
// server does); a deadline in the past resets it at once.
func (w *responseWriter) SetWriteDeadline(t time.Time) error {
	s := w.s
	s.c.mu.Lock()
	defer s.c.mu.Unlock()
	s.writeAt = t
	s.writeTimer = s.armLocked(s.writeTimer, t, func() {
		s.c.mu.Lock()
		if s.due(s.writeAt) && !s.localEnded() {
			s.resetLocked(http2.ErrCodeCancel, true, os.ErrDeadlineExceeded)
		}
		s.c.mu.Unlock()
	})
	return nil
}

// due reports whether deadline at has passed; a timer that fired for a
// deadline since moved on finds it not due.
func (s *stream) due(at time.Time) bool { return !at.IsZero() && !time.Now().Before(at) }

// armLocked has timer t0 (made if nil) call fire at t; a zero t stops
// it. fire checks the deadline it serves, as a timer may fire for one
// that has moved since.
func (s *stream) armLocked(t0 *time.Timer, t time.Time, fire func()) *time.Timer {
	if t0 != nil {
		t0.Stop()
	}
	if t.IsZero() || s.handlerDone {
		return t0
	}
	d := max(time.Until(t), 0)
	if t0 == nil {
		return time.AfterFunc(d, fire)
	}
	t0.Reset(d)
	return t0
}

// parkState is a listen parked on a stream; the writer's.
type parkState struct {
	l         *engine.ParkedListen
	wt        time.Duration       // the write timeout it was parked with
	lists     mcp.PerList[[]byte] // each list's change, as an SSE event
	dirty     bool                // the hub has something not yet drained
	ended     bool                // End was called (set under c.mu)
	lastWrite time.Time
	// rep is the listen's last reply once it ended, until its bytes are
	// written (or the stream is reset); guarded by c.mu.
	rep    engine.Reply
	hasRep bool
}

// ParkListen takes l over once its acknowledgement is flushed: from
// then on the connection's writer sends l's changes, keep-alives and
// last reply on this stream, and the handler returns without ending the
// stream. writeTimeout bounds how long the listen's bytes may wait for
// the client to open its window (0: no bound). False means nothing was
// taken: the stream is reset or its head was not flushed, and the
// handler pumps the listen itself.
func (w *responseWriter) ParkListen(l *engine.ParkedListen, writeTimeout time.Duration) bool {
	s, c := w.s, w.s.c
	c.mu.Lock()
	if s.wasReset() || c.closed || s.park != nil || !w.committed {
		c.mu.Unlock()
		return false
	}
	s.park = &parkState{l: l, wt: writeTimeout, lastWrite: time.Now()}
	if len(s.out) > 0 || s.head != nil {
		// What was flushed before waits for the client's window: the
		// write timeout runs from here, and the writer looks again.
		s.stuck = time.Now()
		c.readyLocked(s)
	}
	if every := parked.TickPeriod(l.KeepAlive, writeTimeout); every > 0 && (c.tickEvery == 0 || every < c.tickEvery) {
		c.tickEvery = every
	}
	c.mu.Unlock()
	c.srv.parked.Add(1)
	l.Sub.Notify(s.hubReady)
	c.signal()
	return true
}

// Parkable is the ResponseWriter of a stream a listen can be parked on
// (see ParkListen): a transport that finds it beneath its
// ResponseWriter, through Unwrap, may park.
type Parkable interface {
	ParkListen(l *engine.ParkedListen, writeTimeout time.Duration) bool
}
