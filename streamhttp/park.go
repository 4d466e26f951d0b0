package streamhttp

import (
	"net"
	"net/http"
	"time"

	"tidings/internal/engine"
	"tidings/internal/sse"
	"tidings/streamhttp/internal/h2"
	"tidings/streamhttp/internal/parked"
)

// WithParking parks listens: a listen over plain HTTP/1.1 on Linux is
// handed, once its acknowledgement is written, to one poller and a few
// writers shared by every parked listen, so that an open listen costs a
// few kilobytes and no goroutine instead of a goroutine pair and
// net/http's buffers (see the package doc, Parked listens). It is off
// by default because a parked connection has left net/http: the
// http.Server's Close and Shutdown no longer cut it, nor does cancelling
// the request's context in a handler around this one; the server's
// Shutdown, the client leaving and the write timeout end it. A program
// that ends its listens that way, as tidings serve does, turns it on.
func WithParking() Option { return func(c *config) { c.park = true } }

// ParkedListens returns how many listens are parked now (see
// WithParking), for monitoring: each is also an open listen.
func (h *Handler) ParkedListens() int {
	p := h.parker
	if p == nil {
		p = h.lazyParker.Load() // parked by Serve
	}
	if p == nil {
		return 0
	}
	return p.Len()
}

// Park hands a listen to the handler's parker (engine.Parker): only a
// 2026-07-28 listen whose acknowledgement went out whole, over plain
// HTTP/1.1 or over an HTTP/2 stream of tidings' own server (h2.Parkable).
// net/http's HTTP/2 server runs each stream on its goroutine to the
// end, and a TLS connection's socket carries records net/http's
// crypto/tls writes, so both keep the goroutine.
func (o *responder) Park(l *engine.ParkedListen) bool {
	r := o.req
	if !o.park || r == nil {
		return false
	}
	if r.ProtoMajor == 2 {
		return o.parkStream(l)
	}
	if o.parker == nil || r.ProtoMajor != 1 || r.ProtoMinor < 1 || r.TLS != nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.sse || o.broken != nil || o.raw != nil {
		return false
	}
	// The headers and the acknowledgement are flushed: the response is
	// a chunked SSE stream whose next byte is a chunk's. Bytes the
	// client sent after the listen (it is the connection's last request)
	// stay unread and the connection closes when the listen ends.
	nc, _, err := o.rc.Hijack()
	if err != nil {
		return false
	}
	if err := o.parker.Park(nc, l); err != nil {
		// The connection is no longer net/http's: the listen goes on
		// this goroutine, written to the connection directly.
		o.raw = nc
		o.deadline = time.Time{}
		return false
	}
	o.parked = true
	return true
}

// parkStream parks a listen on its HTTP/2 stream, when the stream is
// served by tidings' own HTTP/2 server: the connection's writer carries
// it on, bound by the handler's write timeout.
func (o *responder) parkStream(l *engine.ParkedListen) bool {
	p := parkableBeneath(o.w)
	if p == nil {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.sse || o.broken != nil {
		return false
	}
	if !p.ParkListen(l, o.writeTimeout) {
		return false
	}
	o.parked = true
	return true
}

// parkableBeneath finds the h2.Parkable under w's wrappers, if any.
func parkableBeneath(w http.ResponseWriter) h2.Parkable {
	for range 16 {
		if p, ok := w.(h2.Parkable); ok {
			return p
		}
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return nil
		}
		w = u.Unwrap()
	}
	return nil
}

// writeRaw writes b as one chunk of the response to a connection taken
// over from net/http, under the write timeout.
func (a *answerWriter) writeRaw(b []byte) error {
	if a.timeout > 0 {
		_ = a.raw.SetWriteDeadline(time.Now().Add(a.timeout))
	}
	if _, err := a.raw.Write(parked.AppendChunk(make([]byte, 0, len(b)+12), b)); err != nil {
		a.broken = err
		return err
	}
	return nil
}

// finishRaw writes the last reply to a connection taken over from
// net/http, ends the chunked body and closes the connection; a broken
// stream is closed without an end, so the client sees it cut.
func (o *responder) finishRaw(rep engine.Reply) {
	defer o.raw.Close()
	if rep.Outcome == engine.Broken || o.broken != nil {
		if tc, ok := o.raw.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		return
	}
	if rep.Body != nil {
		o.buf = sse.AppendEvent(o.buf[:0], rep.Body)
		if o.writeRaw(o.buf) != nil {
			return
		}
	}
	_, _ = o.raw.Write([]byte(parked.LastChunk))
}
