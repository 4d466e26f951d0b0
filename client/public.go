package client

import (
	"context"
	"io"

	"tidings/jsonrpc"
)

// Transport carries one client's messages to one server and the server's
// messages back. NewHTTP and NewCommand bring their own; New takes any
// other, such as a connection over a socket or to a server in the same
// process (see NewStreamTransport).
//
// The client builds and reads every message itself: a Transport only
// delivers them and tells which of the server's messages belong to which
// request. That is all the 2026-07-28 protocol needs, since there every
// server message belongs to a request. A 2025-11-25 server's messages
// that belong to no request (its own requests, session notifications)
// have no way through a Transport of this shape, so with such a server
// a Watcher polls instead of listening.
type Transport interface {
	// RoundTrip sends req and returns the server's response to it. The
	// server's messages that belong to req and arrive before that (its
	// progress, log messages, the notifications of a
	// subscriptions/listen) go to onMessage, in order, and never after
	// RoundTrip has returned; onMessage does not block for long. A
	// notifications/cancelled naming a listen ends that listen: return it
	// as the final message. When ctx ends first, RoundTrip returns
	// ctx.Err(); a transport that shares one connection among requests
	// then tells the server with a notifications/cancelled. RoundTrip is
	// called concurrently.
	RoundTrip(ctx context.Context, req *Request, onMessage func(*jsonrpc.Message)) (*jsonrpc.Message, error)
	// Notify sends a message that gets no response: a notification, or
	// the answer to a server's own request.
	Notify(ctx context.Context, msg []byte) error
	// Close releases the connection. RoundTrips in flight end.
	Close() error
}

// Request is one request on its way to a Transport.
type Request struct {
	ID     jsonrpc.ID
	Method string
	// Body is the whole encoded JSON-RPC request, a single line of JSON.
	Body []byte
	// ProgressToken is the raw JSON of the progress token in the
	// request's _meta, or empty: notifications/progress carrying it
	// belong to this request.
	ProgressToken string
}

// New returns a client that talks to a server through t. It does no I/O
// until the first call; Close closes t.
func New(t Transport, opts ...Option) *Client {
	cfg := newConfig(opts, Option.apply)
	c := newClient(nil, cfg, newLifetime())
	if st, ok := t.(*streamTransport); ok {
		// Our own framing knows the rest of the protocol: the messages that
		// belong to no request go to the client.
		st.conn.setOther(c.otherMessage)
		c.t = st.conn
	} else {
		c.t = foreignTransport{t}
	}
	return c
}

// NewStreamTransport returns a Transport that speaks the stdio transport's
// framing, one JSON-RPC message per line, writing to w and reading r: the
// stdin and stdout of a server started some other way, a socket, or a
// pair of pipes to a server in the same process. Lines longer than
// 16 MiB are skipped. Close closes w, then r when it is an io.Closer, and
// waits until nothing reads r any more. Used with New, it carries the
// 2025-11-25 protocol in full as well.
func NewStreamTransport(r io.Reader, w io.WriteCloser) Transport {
	rc, _ := r.(io.Closer)
	return &streamTransport{conn: newStdioConn(r, w, rc, defaultMaxMsg, nil, nil)}
}

// defaultMaxMsg bounds one message the client reads.
const defaultMaxMsg = 16 << 20

// streamTransport is the Transport NewStreamTransport returns; New uses
// its connection directly.
type streamTransport struct{ conn *stdioConn }

// RoundTrip implements Transport.
func (s *streamTransport) RoundTrip(ctx context.Context, req *Request, onMessage func(*jsonrpc.Message)) (*jsonrpc.Message, error) {
	return s.conn.roundTrip(ctx, req.outbound(), onMessage)
}

// Notify implements Transport.
func (s *streamTransport) Notify(ctx context.Context, msg []byte) error {
	return s.conn.send(ctx, &outbound{body: msg})
}

// Close implements Transport.
func (s *streamTransport) Close() error { return s.conn.close() }

func (r *Request) outbound() *outbound {
	return &outbound{id: r.ID, method: r.Method, body: r.Body, token: r.ProgressToken}
}

// foreignTransport adapts a Transport from outside the package to the
// client's internal one.
type foreignTransport struct{ t Transport }

func (f foreignTransport) roundTrip(ctx context.Context, r *outbound, onMsg func(*jsonrpc.Message)) (*jsonrpc.Message, error) {
	return f.t.RoundTrip(ctx, &Request{ID: r.id, Method: r.method, Body: r.body, ProgressToken: r.token}, onMsg)
}

func (f foreignTransport) send(ctx context.Context, r *outbound) error {
	return f.t.Notify(ctx, r.body)
}

func (f foreignTransport) close() error { return f.t.Close() }
