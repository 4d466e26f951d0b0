package h2

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"tidings/internal/engine"
	"tidings/internal/sse"
	"tidings/mcp"
)

// writeLoop is the connection's writer: each time it is woken it
// gathers every frame waiting, of every stream, and writes them in one
// go. It returns when the reader has ended, or after a failed write
// (which closes the socket, so that the reader ends).
func (c *conn) writeLoop() {
	defer close(c.wrote)
	var ticker *time.Ticker
	var tick <-chan time.Time
	var every time.Duration
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	for {
		sweep := false
		select {
		case <-c.kick:
		case <-tick:
			sweep = true
		case <-c.done:
			c.lastWords()
			return
		}
		if err := c.flush(sweep); err != nil {
			c.mu.Lock()
			c.writeErr = err
			c.mu.Unlock()
			_ = c.nc.Close()
			<-c.done
			return
		}
		c.mu.Lock()
		e, gone := c.tickEvery, c.peerGone
		if gone {
			c.writeErr = errPeerGone
		}
		c.mu.Unlock()
		if gone {
			// The reader ends on the closed socket, and the streams
			// with it: parked listens are cut off, as on a write that
			// failed.
			_ = c.nc.Close()
			<-c.done
			return
		}
		if e != every {
			every = e
			if ticker == nil {
				ticker = time.NewTicker(e)
				tick = ticker.C
			} else {
				ticker.Reset(e)
			}
		}
	}
}

// lastWords writes what control frames are queued (a GOAWAY saying why
// the connection ends) once the reader has ended, within a second.
func (c *conn) lastWords() {
	c.mu.Lock()
	for _, f := range c.ctrl {
		c.writeCtrl(f)
	}
	c.ctrl = nil
	c.mu.Unlock()
	if c.wbuf.Len() > 0 {
		_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.nc.Write(c.wbuf.Bytes())
		c.wbuf = bytes.Buffer{}
	}
}

// flush writes everything waiting, in writes of about WriteBuffer bytes.
func (c *conn) flush(sweep bool) error {
	for {
		more := c.fill(sweep)
		sweep = false
		if c.wbuf.Len() > 0 {
			err := c.writeBatch(c.wbuf.Bytes())
			c.wbuf.Reset()
			if c.wbuf.Cap() > 4*c.srv.cfg.WriteBuffer {
				c.wbuf = bytes.Buffer{} // a burst's buffer is not kept
			}
			for i := range c.finals {
				c.finals[i].Release()
			}
			clear(c.finals)
			c.finals = c.finals[:0]
			if err != nil {
				return err
			}
		}
		if !more {
			c.mu.Lock()
			done := c.closing && len(c.ctrl) == 0 && len(c.ready) == 0
			idle := c.idleNow
			c.idleNow = false
			c.mu.Unlock()
			if idle {
				c.reportState()
			}
			if done {
				c.closeGracefully()
			}
			return nil
		}
	}
}

// writeBatch writes b to the socket within the write timeout, which
// runs again each time the client took some of it: the timeout cuts a
// client that reads nothing, not one that reads slowly (a client on a
// busy machine catching up with a burst). A TLS connection cannot go on
// after a write timed out, and fails then.
func (c *conn) writeBatch(b []byte) error {
	wt := c.srv.cfg.WriteTimeout
	for {
		if wt > 0 {
			_ = c.nc.SetWriteDeadline(time.Now().Add(wt))
		}
		n, err := c.nc.Write(b)
		if err == nil || n == 0 || wt <= 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
		b = b[n:]
	}
}

// goAwayLinger is how long a connection that said GOAWAY goes on
// reading, its writing side shut, before it closes: closing a socket
// with unread bytes resets it, and the reset can reach the client ahead
// of the GOAWAY and the last frames, which it would then not read.
const goAwayLinger = time.Second

// closeGracefully ends a connection whose GOAWAY and last frames are
// written: the writing side is shut (over TLS, a close_notify), and the
// reader reads on until the client closes, or for goAwayLinger; the
// connection ends with the reader. A connection that cannot shut its
// writing side alone is closed at once.
func (c *conn) closeGracefully() {
	if !c.shutWrite() {
		_ = c.nc.Close()
	}
}

// shutWrite shuts the connection's writing side, once (over TLS, with a
// close_notify), and bounds what the reader still reads by goAwayLinger;
// it reports whether the writing side is shut. The writer calls it on a
// graceful end, the reader on a failed one once the writer has returned.
func (c *conn) shutWrite() bool {
	if !c.writeShut {
		cw, ok := c.nc.(interface{ CloseWrite() error })
		if !ok || cw.CloseWrite() != nil {
			return false
		}
		c.writeShut = true
		_ = c.nc.SetReadDeadline(time.Now().Add(goAwayLinger))
	}
	return true
}

// fill frames what is waiting into the batch, up to about WriteBuffer
// bytes, and reports whether more waits.
func (c *conn) fill(sweep bool) bool {
	if c.hubNext == len(c.hubRest) {
		// The two queues trade places, each keeping its array: a change
		// to every listen of the connection grows neither again.
		c.hubmu.Lock()
		c.hubq, c.hubRest = c.hubRest[:0], c.hubq
		c.hubmu.Unlock()
		c.hubNext = 0
	}
	// Parked streams are drained until the batch is full; the rest wait
	// for the next write, so that the client reads the first streams'
	// changes while the writer drains the others.
	for ; c.hubNext < len(c.hubRest) && c.wbuf.Len() < c.srv.cfg.WriteBuffer; c.hubNext++ {
		s := c.hubRest[c.hubNext]
		c.hubRest[c.hubNext] = nil
		s.inHub.Store(false)
		c.runParked(s, s.events.Swap(0))
	}

	c.mu.Lock()
	c.henc.SetMaxDynamicTableSizeLimit(c.peerTable)
	for _, f := range c.ctrl {
		c.writeCtrl(f)
	}
	clear(c.ctrl)
	c.ctrl = c.ctrl[:0]
	if sweep {
		c.cut = c.sweepLocked(time.Now(), c.cut[:0])
	}
	i := 0
	for ; i < len(c.ready) && c.wbuf.Len() < c.srv.cfg.WriteBuffer; i++ {
		s := c.ready[i]
		s.queued = false
		c.frameLocked(s)
	}
	n := copy(c.ready, c.ready[i:])
	clear(c.ready[n:])
	c.ready = c.ready[:n]
	more := len(c.ready) > 0 || len(c.ctrl) > 0 || c.hubNext < len(c.hubRest)
	c.mu.Unlock()
	for _, o := range c.cut {
		o.CutOff()
	}
	clear(c.cut)
	c.cut = c.cut[:0]
	return more
}

// writeCtrl frames one control frame.
func (c *conn) writeCtrl(f ctrlFrame) {
	switch f.kind {
	case ctrlSettings:
		_ = c.wfr.WriteSettings(
			http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: uint32(c.srv.cfg.MaxStreams)},
			http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow},
			http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: uint32(min(c.srv.cfg.MaxHeaderBytes, maxWindow))},
		)
	case ctrlSettingsAck:
		_ = c.wfr.WriteSettingsAck()
	case ctrlPing:
		_ = c.wfr.WritePing(true, f.ping)
	case ctrlPingPeer:
		_ = c.wfr.WritePing(false, peerPing)
	case ctrlWindow:
		_ = c.wfr.WriteWindowUpdate(f.id, f.n)
	case ctrlReset:
		_ = c.wfr.WriteRSTStream(f.id, f.code)
	case ctrlGoAway:
		_ = c.wfr.WriteGoAway(f.id, f.code, []byte(f.debug))
	}
}

// frameLocked frames what s has to send, as far as the flow-control
// windows let it.
func (c *conn) frameLocked(s *stream) {
	if s.localEnded() {
		return
	}
	progress := false
	if s.cont == contQueued {
		c.writeHead(s.id, &head{status: http.StatusContinue}, false)
		s.cont, progress = contNone, true
	}
	if s.head != nil {
		end := s.endQueued && len(s.out) == 0
		c.writeHead(s.id, s.head, end)
		s.head, progress = nil, true
		if end {
			s.endLocalLocked()
		}
	}
	off := c.dataLocked(s, s.out, s.endQueued)
	progress = progress || off > 0
	if off == len(s.out) {
		if s.out = s.out[:0]; s.park != nil || cap(s.out) > 2*maxOut {
			s.out = nil // a parked listen keeps no buffer between changes
		}
		if s.endQueued && !s.localEnded() {
			_ = c.wfr.WriteData(s.id, true, nil)
			s.endLocalLocked()
			progress = true
		}
	} else if off > 0 {
		s.out = s.out[:copy(s.out, s.out[off:])]
	}
	// The time since when bytes wait for the client's window, for the
	// sweep's write timeout; progress starts it over.
	pending := len(s.out) > 0
	switch {
	case !pending:
		s.stuck = time.Time{}
	case progress || s.stuck.IsZero():
		s.stuck = time.Now()
	}
	if p := s.park; p != nil {
		if progress {
			p.lastWrite = time.Now()
		}
		if !pending && p.dirty && !p.ended {
			c.pushHub(s)
		}
	}
	if progress {
		s.cond.Broadcast()
	}
	if s.localEnded() {
		if p := s.park; p != nil && p.hasRep {
			// The listen's last reply is out: it is released once the
			// batch is written.
			c.finals = append(c.finals, p.rep)
			p.rep, p.hasRep = engine.Reply{}, false
		}
		if !s.remoteEnded() {
			// The answer is complete before the request: the client
			// is told to stop sending it (RFC 9113, 8.1).
			_ = c.wfr.WriteRSTStream(s.id, http2.ErrCodeNo)
			s.endRemoteLocked()
			s.closeBodyLocked()
		}
		c.releaseLocked(s)
	}
}

// dataLocked frames b as s's DATA, as much of it as the flow-control
// windows let through, the last frame ending the stream if end and b
// goes whole; it returns how many bytes it framed. A stream stopped by
// the connection's window waits in c.connBlocked for a WINDOW_UPDATE.
func (c *conn) dataLocked(s *stream, b []byte, end bool) int {
	off := 0
	for off < len(b) {
		n := min(len(b)-off, int(c.peerMaxFrame), int(max(min(s.sendWindow, c.sendWindow), 0)))
		if n == 0 {
			if c.sendWindow <= 0 && !s.connBlocked {
				s.connBlocked = true
				c.connBlocked = append(c.connBlocked, s)
			}
			break
		}
		last := end && off+n == len(b)
		_ = c.wfr.WriteData(s.id, last, b[off:off+n])
		off += n
		s.sendWindow -= int64(n)
		c.sendWindow -= int64(n)
		c.owedConn += int64(n)
		c.owedStreams += int64(n)
		if last {
			s.endLocalLocked()
		}
	}
	return off
}

// writeHead frames a response's HEADERS, and CONTINUATION frames when
// the block is over the client's frame size.
func (c *conn) writeHead(id uint32, h *head, end bool) {
	c.hbuf.Reset()
	_ = c.henc.WriteField(hpack.HeaderField{Name: ":status", Value: statusText(h.status)})
	for k, vv := range h.header {
		lk := lowerKey(k)
		if connectionSpecific(lk) || !httpguts.ValidHeaderFieldName(lk) {
			continue
		}
		for _, v := range vv {
			if httpguts.ValidHeaderFieldValue(v) {
				_ = c.henc.WriteField(hpack.HeaderField{Name: lk, Value: v})
			}
		}
	}
	block := c.hbuf.Bytes()
	chunk := min(len(block), int(c.peerMaxFrame))
	_ = c.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block[:chunk], EndStream: end, EndHeaders: chunk == len(block)})
	for block = block[chunk:]; len(block) > 0; block = block[chunk:] {
		chunk = min(len(block), int(c.peerMaxFrame))
		_ = c.wfr.WriteContinuation(id, chunk == len(block), block[:chunk])
	}
}

// statusText is the :status of code.
func statusText(code int) string {
	if code == http.StatusOK {
		return "200"
	}
	return strconv.Itoa(code)
}

// lowerKey is a header's name as HTTP/2 sends it.
func lowerKey(k string) string {
	switch k {
	case "Content-Type":
		return "content-type"
	case "Content-Length":
		return "content-length"
	case "Date":
		return "date"
	case "Cache-Control":
		return "cache-control"
	case "Mcp-Session-Id":
		return "mcp-session-id"
	case "X-Accel-Buffering":
		return "x-accel-buffering"
	}
	return strings.ToLower(k)
}

// runParked does what a parked stream's events ask for, on the writer.
func (c *conn) runParked(s *stream, ev uint32) {
	p := s.park
	if p == nil || p.ended {
		return
	}
	if ev&evReset != 0 {
		c.mu.Lock()
		how := s.parkEnd
		c.mu.Unlock()
		c.endParked(s, how)
		return
	}
	if ev&evHub != 0 {
		p.dirty = true
	}
	c.mu.Lock()
	busy := len(s.out) > 0 || s.wasReset()
	c.mu.Unlock()
	if !p.dirty || busy {
		return // frameLocked hands it back once its bytes are out
	}
	p.dirty = false
	iov, rep, end := c.drain.Take(p.l, &p.lists, c.iov[:0], appendEvent)
	c.mu.Lock()
	if !s.wasReset() {
		// What the windows let through is framed from the drain's own
		// buffers; only the rest is kept, so that a change costs a
		// listen no allocation.
		for _, b := range iov {
			if len(s.out) == 0 {
				n := c.dataLocked(s, b, false)
				if b = b[n:]; n > 0 {
					p.lastWrite = time.Now()
				}
			}
			s.out = append(s.out, b...)
		}
	}
	if end {
		c.endedLocked(s)
		switch {
		case s.wasReset():
			// The client reset the stream while the listen drained:
			// nothing more is written.
			rep.Release()
		case rep.Outcome == engine.Broken:
			p.rep, p.hasRep = rep, true
			s.resetLocked(http2.ErrCodeCancel, true, errReset)
		default:
			p.rep, p.hasRep = rep, true // released once written, or at a reset
			s.endQueued = true
		}
	}
	c.frameLocked(s)
	c.releaseLocked(s)
	c.mu.Unlock()
	clear(iov)
	c.iov = iov[:0]
}

// waitsOnPeer reports whether s's bytes wait for the client to open a
// window: the stream's own, or the connection's.
func (s *stream) waitsOnPeer() bool { return s.sendWindow <= 0 || s.connBlocked }

// appendEvent frames an SSE event as an HTTP/2 stream carries it: as
// it is.
func appendEvent(dst, event []byte) []byte { return append(dst, event...) }

// endParked ends a parked listen that is cut off, and lets its stream go.
func (c *conn) endParked(s *stream, how engine.PumpEnd) {
	rep := s.park.l.End(how)
	c.mu.Lock()
	c.endedLocked(s)
	c.releaseLocked(s)
	c.mu.Unlock()
	rep.Release()
}

// endedLocked marks s's listen ended.
func (c *conn) endedLocked(s *stream) {
	s.park.ended = true
	s.park.l = nil
	s.park.lists = mcp.PerList[[]byte]{}
	c.srv.parked.Add(-1)
}

// sweepLocked sends parked listens their keep-alives and cuts the
// streams whose bytes waited for the client's window past their write
// timeout — a parked listen's own, or else Config.WriteTimeout — whether
// their handler still runs (blocked in a Write) or has returned. Only
// the time spent waiting on the client counts — a window it does not
// open — never the time bytes wait behind other streams in the
// connection's own queue, or a handler waits for a core, which a burst
// of listens on a busy server makes long: a client that reads is never
// cut for the server's backlog (a client that stops reading its socket
// is, by the connection's write timeout). A write deadline the handler
// set itself still cuts at that time. The observers of the listens cut
// are returned, to be told once c.mu is let go.
func (c *conn) sweepLocked(now time.Time, cut []engine.StreamObserver) []engine.StreamObserver {
	c.checkPeerLocked(now)
	for _, s := range c.streams {
		if s.localEnded() {
			continue
		}
		p := s.park
		if len(s.out) > 0 && !s.waitsOnPeer() {
			s.stuck = time.Time{} // queued behind other streams, not stuck
			continue
		}
		if len(s.out) > 0 {
			limit := c.srv.cfg.WriteTimeout
			if p != nil && p.wt > 0 {
				limit = p.wt
			}
			if s.stuck.IsZero() {
				s.stuck = now
			} else if limit > 0 && now.Sub(s.stuck) >= limit {
				if p != nil && !p.ended && p.l.Observer != nil {
					cut = append(cut, p.l.Observer)
				}
				s.resetLocked(http2.ErrCodeCancel, true, errReset)
				c.srv.writeTimeouts.Add(1)
			}
			continue
		}
		if p != nil && !p.ended {
			if ka := p.l.KeepAlive; ka > 0 && now.Sub(p.lastWrite) >= ka {
				s.out = sse.AppendComment(s.out, "keep-alive")
				c.frameLocked(s)
			}
		}
	}
	return cut
}
