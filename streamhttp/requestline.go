package streamhttp

import (
	"bytes"
	"errors"
	"io"
	"net"
	"syscall"
)

// A plaintext port serves HTTP/1.1 and HTTP/2 by prior knowledge alike.
// A connection whose first line is neither — not the HTTP/2 preface, not
// a request line that ends in an HTTP version — speaks no protocol the
// server has, and is closed unanswered (RFC 9113, 3.4, asks this of a
// bad preface), where net/http would answer it as a malformed HTTP/1.1
// request. requestLineListener does that below everything else, so that
// the caps and the parked listens see the connection as usual.
type requestLineListener struct{ net.Listener }

func (l requestLineListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &requestLineConn{Conn: c}, nil
}

// maxRequestLine is how much of a first line is looked at: past it,
// net/http's own bound on a request's head answers.
const maxRequestLine = 8 << 10

// requestLineConn checks its connection's first line as it is read.
type requestLineConn struct {
	net.Conn
	done bool
	seen int
	tail []byte // the last bytes of the first line so far
}

func (c *requestLineConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.done || n == 0 {
		return n, err
	}
	i := bytes.IndexByte(p[:n], '\n')
	end := n
	if i >= 0 {
		end = i
	}
	c.tail = append(c.tail, p[:end]...)
	if len(c.tail) > 16 {
		c.tail = append(c.tail[:0], c.tail[len(c.tail)-16:]...)
	}
	c.seen += end
	switch {
	case i >= 0:
		c.done = true
		if !isRequestLineEnd(bytes.TrimSuffix(c.tail, []byte("\r"))) {
			_ = c.Conn.Close()
			return 0, io.EOF
		}
	case c.seen > maxRequestLine:
		c.done = true
	}
	return n, err
}

// isRequestLineEnd reports whether a first line ending in tail is the
// HTTP/2 preface's or an HTTP/1 request line's: its last word a version.
func isRequestLineEnd(tail []byte) bool {
	sp := bytes.LastIndexByte(tail, ' ')
	return sp >= 0 && bytes.HasPrefix(tail[sp+1:], []byte("HTTP/"))
}

// SyscallConn reaches the socket, for a listen parked on a poller.
func (c *requestLineConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, syscall.EINVAL
	}
	return sc.SyscallConn()
}

// CloseWrite shuts the writing side of the connection beneath, so that a
// server ending a connection can still read what its client sent.
func (c *requestLineConn) CloseWrite() error {
	cw, ok := c.Conn.(interface{ CloseWrite() error })
	if !ok {
		return errors.ErrUnsupported
	}
	return cw.CloseWrite()
}
