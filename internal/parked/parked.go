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

	"tidings/internal/sse"
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

// appendMessage appends msg as one SSE event in one chunk; ev is
// scratch space, returned for reuse.
func appendMessage(dst, ev, msg []byte) (out, scratch []byte) {
	ev = sse.AppendEvent(ev[:0], msg)
	return AppendChunk(dst, ev), ev
}

// keepAliveChunk returns an SSE comment in one chunk.
func keepAliveChunk() []byte { return AppendChunk(nil, sse.AppendComment(nil, "keep-alive")) }

// tickPeriod is how often the ticker sweeps: a quarter of the shorter of
// the keep-alive interval and the write timeout, so that each is kept to
// within a quarter of itself; 0 when neither is set.
func tickPeriod(ka, wt time.Duration) time.Duration {
	d := ka
	if d <= 0 || (wt > 0 && wt < d) {
		d = wt
	}
	if d <= 0 {
		return 0
	}
	return max(d/4, time.Millisecond)
}
