// Package parked carries Streamable HTTP listens on after their request
// handler has returned. Once a listen's headers and acknowledgement are
// written, the transport hijacks the HTTP/1.1 connection and hands it
// here: one poller watches every parked socket for its client leaving
// (and, while a socket has unsent bytes, for room to write), a few
// writers shared by all drain each listen's hub subscription when it
// notifies, and one ticker sends keep-alives and cuts readers stuck past
// the write timeout. A parked listen costs its pending state, a socket
// and a few hundred bytes of its own; it holds no goroutine, no bufio
// buffers and no timer.
//
// Parking needs epoll (Linux); elsewhere New returns nil and the
// transport keeps each listen on its own goroutine.
package parked

import (
	"errors"
	"strconv"
	"time"

	"tidings/internal/engine"
	"tidings/internal/sse"
	"tidings/mcp"
)

// Config tunes a Parker.
type Config struct {
	// WriteTimeout is how long a listen's unsent bytes may wait for its
	// reader before the connection is cut (the transport's write
	// timeout); 0 never cuts.
	WriteTimeout time.Duration
	// Writers is how many goroutines write to parked sockets (default
	// GOMAXPROCS): writes never block, so more would only contend.
	Writers int
}

// errNoSocket is returned by Park for a connection whose socket cannot
// be reached (a net.Conn that is not a syscall.Conn).
var errNoSocket = errors.New("parked: the connection has no socket to park (not a syscall.Conn)")

// LastChunk ends a chunked HTTP/1.1 body: the last chunk, no trailers.
// A listen taken over from net/http ends its body with it, parked or not.
const LastChunk = "0\r\n\r\n"

// AppendChunk appends p as one chunk of a chunked HTTP/1.1 body: what a
// listen taken over from net/http writes, parked or not.
func AppendChunk(dst, p []byte) []byte {
	dst = strconv.AppendInt(dst, int64(len(p)), 16)
	dst = append(dst, '\r', '\n')
	dst = append(dst, p...)
	return append(dst, '\r', '\n')
}

// Frames is one writer's scratch space for framing parked listens'
// notifications, over HTTP/1.1 here or over HTTP/2: what engine.Drain
// hands it, framed for the socket. Its buffers are reused from one
// listen's drain to the next.
type Frames struct {
	drain   engine.Drain
	buf, ev []byte
}

// Take drains l's subscription (engine.Drain) into iov, each SSE event
// framed by frame (which appends an event to dst and returns it): a
// list's own message from lists, where it is framed once and kept for
// the listen's life; every other notification in a buffer of f's, after
// them. When the hub is ending, whether read before the drain so that a
// change landing meanwhile is drained by the pass the shutdown's own
// wake-up brings, Take ends the listen (engine.Drained) and returns its
// last reply with end true; its body, unless nil or Broken, is framed
// after the rest. The returned iov and its buffers are valid until f is
// used again.
func (f *Frames) Take(l *engine.ParkedListen, lists *mcp.PerList[[]byte], iov [][]byte, frame func(dst, event []byte) []byte) (out [][]byte, rep engine.Reply, end bool) {
	ending := l.Sub.Ending()
	buf := f.buf[:0]
	sent, _ := f.drain.Take(l.Sub, l.Notices, func(n engine.Notice) error {
		switch {
		case !n.Kept:
			f.ev = sse.AppendEvent(f.ev[:0], n.Msg)
			buf = frame(buf, f.ev)
			return nil
		case lists[n.List] == nil:
			f.ev = sse.AppendEvent(f.ev[:0], n.Msg)
			lists[n.List] = frame(nil, f.ev)
		}
		iov = append(iov, lists[n.List])
		return nil
	})
	if l.Observer != nil {
		l.Observer.Notified(sent, l.Sub.TakeMerged())
	}
	if ending {
		rep, end = l.End(engine.Drained), true
		if rep.Body != nil && rep.Outcome != engine.Broken {
			f.ev = sse.AppendEvent(f.ev[:0], rep.Body)
			buf = frame(buf, f.ev)
		}
	}
	if len(buf) > 0 {
		iov = append(iov, buf)
	}
	f.buf = buf[:0]
	return iov, rep, end
}

// keepAliveChunk returns an SSE comment in one chunk.
func keepAliveChunk() []byte { return AppendChunk(nil, sse.AppendComment(nil, "keep-alive")) }

// TickPeriod is how often a parker sweeps its listens for keep-alives
// and write timeouts: a quarter of the shorter of the keep-alive
// interval ka and the write timeout wt, so that each is kept to within a
// quarter of itself; 0 when neither is set.
func TickPeriod(ka, wt time.Duration) time.Duration {
	d := ka
	if d <= 0 || (wt > 0 && wt < d) {
		d = wt
	}
	if d <= 0 {
		return 0
	}
	return max(d/4, time.Millisecond)
}
