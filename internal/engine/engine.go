// Package engine is the seam between the MCP server core and the
// transports that carry its messages.
//
// A transport frames bytes and decodes a JSON-RPC message; everything
// after that is the core's: Parse reads the params once, and Serve checks
// the request (in the order peers rely on, asking the transport through an
// Envelope for what it carries beside the body), dispatches it and encodes
// the reply. Because Serve only takes a *Call, and only Parse makes one, a
// transport cannot dispatch before the checks or run them twice.
//
// The package is internal: server authors never see it. The server
// package hands its Server out through Of, and the previous protocol era's
// adapter builds on the same interface.
package engine

import (
	"context"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/hub"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// Stream is where a request's own messages go before its response:
// progress and log notifications, a listen's acknowledgement and change
// notifications, and on a 2025-11-25 session the server's requests for
// input. stdio writes lines; Streamable HTTP switches the response to SSE
// on first use.
type Stream interface {
	// Send writes one encoded JSON-RPC message. An error means the peer is
	// gone or stuck; the request should end without a response. Send
	// keeps no part of msg once it returns: the caller may write the
	// next message into the same buffer, so that a change fanned out to
	// thousands of streams costs no allocation per stream.
	Send(msg []byte) error
	// KeepAlive writes a transport keep-alive (an SSE comment) if the
	// transport has one, so that idle streams are not cut by
	// intermediaries.
	KeepAlive() error
}

// Envelope is what a transport carries beside the body and must agree
// with it: on Streamable HTTP, the MCP-Protocol-Version, Mcp-Method,
// Mcp-Name and Mcp-Param-* headers. stdio has none and passes nil.
type Envelope interface {
	// Version returns the protocol version the transport declares. An
	// error (missing, repeated, unsafe) is a header mismatch, reported
	// before the body's own _meta is looked at.
	Version() (string, error)
	// Route checks the transport's copies of the method, the name and the
	// mirrored tool arguments (params) against the call; an error is a
	// header mismatch. It runs once the versions are known to agree.
	Route(c *Call, params []HeaderParam) error
}

// TraceHeaders is an Envelope that carries W3C trace context headers
// (traceparent, tracestate) beside the body, as HTTP does: a traced
// server takes the request's trace from them when its _meta names none.
type TraceHeaders interface {
	TraceHeaders() (parent, state string)
}

// HeaderParam is one Mcp-Param-* header a tool call must carry.
type HeaderParam struct {
	// Header is the canonical header name, "Mcp-Param-<Name>".
	Header string
	// Type is the property's JSON Schema type.
	Type string
	// Value is the raw JSON of the argument; nil when absent or null.
	Value jsontext.Value
}

// Server is what transports drive. The server package implements it; Of
// returns it for a *server.Server.
type Server interface {
	// Serve runs one 2026-07-28 request to its end. principal names the
	// caller's authorization context ("" for none); env is nil on
	// transports without one. ctx ends when the client cancels or goes
	// away. The transport writes the reply's body (unless Outcome says
	// otherwise) and then calls Release, always, even when it writes
	// nothing: for a listen, the server's Shutdown waits for that.
	Serve(ctx context.Context, c *Call, principal string, env Envelope, out Stream) Reply

	// Dispatch serves one request of an earlier protocol era through the
	// same handlers: the methods the method table gives both eras and a
	// core handler (lists, tools/call, prompts/get, resources/read and
	// completion/complete). ok is false for any other method, which the
	// era's adapter serves itself or refuses.
	Dispatch(ctx context.Context, c *Call, era Era, out Stream) (r Reply, ok bool)
	// Run serves, through the same middleware as every other request,
	// a request the era's adapter answers itself (initialize, ping, its
	// subscriptions, and its notification stream, which middleware sees
	// as a subscriptions/listen): serve runs only if the middleware lets
	// the request through, and its reply is the request's unless the
	// middleware answers otherwise.
	Run(ctx context.Context, c *Call, era Era, serve func(context.Context) Reply) Reply
	// Introduction is what the server says of itself at a session's start.
	Introduction() Introduction
	// Grant returns the part of f the server honours for principal, and
	// the hub filter that follows it: what a listen acknowledges, and
	// what an earlier era's subscriptions are made of.
	Grant(principal string, f mcp.SubscriptionFilter) (mcp.SubscriptionFilter, hub.Filter)
	// Hub is the server's change hub.
	Hub() *hub.Hub
	// Now is the server's clock.
	Now() time.Time
	// KeepAlive is the interval of keep-alives on idle streams (0: none).
	KeepAlive() time.Duration
	// StreamObserver hears of every stream's notifications (nil: none).
	StreamObserver() StreamObserver
	// Follows returns an empty lease on the allowances of what
	// principal's listens and sessions follow, and of the connection ctx
	// carries (see WithConn): an earlier era's session grows it by the
	// resources it subscribes to.
	Follows(ctx context.Context, principal string) Lease
	// Follow tells the server that principal started following the
	// content of uri outside a listen (an earlier era's subscription),
	// and the function it returns that it stopped: a server whose items
	// come from elsewhere follows them there.
	Follow(principal, uri string) (stop func())
}

// Lease is what one listen or session holds of the server's allowances
// of listens and followed resource URIs.
type Lease interface {
	// Grow takes listens more open listens and uris more followed URIs,
	// or takes nothing and returns the error that names the limit they
	// would pass.
	Grow(listens, uris int) *jsonrpc.Error
	// Shrink gives back uris followed URIs.
	Shrink(uris int)
	// Release gives back everything the lease holds; it is safe to call
	// more than once.
	Release()
}

// Conn is one transport connection that carries many requests, and
// listens among them: a stdio connection. A server bounds what the
// listens of one connection hold; Listens and URIs are those holdings,
// kept by the server under its own lock.
type Conn struct {
	Listens, URIs int
}

type connKey struct{}

// WithConn returns ctx carrying c: the requests served with it count
// against c's allowances as well as their principal's.
func WithConn(ctx context.Context, c *Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// ConnOf returns the connection ctx carries, or nil: a Streamable HTTP
// request is its own, and only its principal's allowances bound it.
func ConnOf(ctx context.Context) *Conn {
	c, _ := ctx.Value(connKey{}).(*Conn)
	return c
}

// Era describes a request served through Dispatch: what the client
// declared when its session began, and how the era encodes results and
// asks for input.
type Era struct {
	// Version is the protocol version of the session.
	Version string
	// Capabilities are the client capabilities of the session.
	Capabilities mcp.ClientCaps
	// Principal names the caller's authorization context.
	Principal string
	// LogLevel is the session's log severity threshold, -1 for none.
	LogLevel int
	// Encoder finishes results.
	Encoder Encoder
	// AskInput asks the client for input with requests of the server's
	// own and returns the answers, keyed as asked. The client's
	// capabilities have already been checked.
	AskInput func(ctx context.Context, reqs map[string]mcp.InputRequest) (map[string]jsontext.Value, error)
}

// Introduction is what a server tells a client that opens a session.
type Introduction struct {
	Info         mcp.Implementation
	Capabilities mcp.ServerCaps
	Instructions string
}

// Provider is satisfied by *server.Server (through an embedded Handle);
// the method is unexported so that nothing outside this module can reach
// the seam.
type Provider interface {
	engine() Server
}

// Handle carries a Server inside the public type that owns it. A type
// that embeds it (under an unexported alias, so the field stays hidden)
// satisfies Provider.
type Handle struct{ srv Server }

// NewHandle wraps srv.
func NewHandle(srv Server) Handle { return Handle{srv: srv} }

func (h Handle) engine() Server { return h.srv }

// Of returns the seam of a server.
func Of(p Provider) Server { return p.engine() }

// Outcome says what a transport does with a reply besides writing its body.
type Outcome uint8

// The outcomes. Streamable HTTP maps them to statuses; stdio writes the
// body, if any, and nothing else.
const (
	// Answered: Body is a response, a result or an error found while
	// serving the request.
	Answered Outcome = iota
	// Silent: no response is due (a notification, a cancelled request, a
	// listen whose client went away).
	Silent
	// Refused: Body is an error for a request refused before it was
	// served (malformed envelope or _meta, header mismatch, unsupported
	// version, missing client capability).
	Refused
	// UnknownMethod: Body is a method-not-found error.
	UnknownMethod
	// Broken: the stream broke or its reader is stuck; cut the connection
	// without a clean end, so the client knows something was lost.
	Broken
	// Parked: the stream took the listen over (see Parker) and writes
	// its last reply itself; the transport writes nothing for this one.
	Parked
)

// Reply is the outcome of serving a request.
type Reply struct {
	// Body is the encoded response, or nil when none is due.
	Body []byte
	// Outcome classifies the reply.
	Outcome Outcome
	// ListenEnded marks the graceful end of a listen (the complete result).
	ListenEnded bool
	// Err is the error Body carries, if it carries one: what middleware
	// and metrics see of a failed request.
	Err *jsonrpc.Error

	// Buf and Pool, when set, let Release recycle Body's buffer.
	Buf  *[]byte
	Pool *sync.Pool
	// Written, when set, is told once at Release that the reply is
	// written (a listen's last message, which Shutdown waits for).
	Written Tracker
}

// Tracker hears that a tracked reply was written.
type Tracker interface{ Written() }

// maxPooledBody bounds the buffers kept for reuse, so that one huge result
// does not stay pinned in a pool.
const maxPooledBody = 1 << 20

// Release hands Body's buffer back for reuse and reports that the reply
// is written (or abandoned). Call it exactly once per reply, after Body is
// written out and when no copy of this Reply will be used again.
func (r *Reply) Release() {
	if r.Buf != nil {
		if cap(*r.Buf) <= maxPooledBody {
			r.Pool.Put(r.Buf)
		}
		r.Buf, r.Pool = nil, nil
	}
	r.Body = nil
	if r.Written != nil {
		r.Written.Written()
		r.Written = nil
	}
}

// ErrorReply builds the reply for a JSON-RPC error, classified by its code.
func ErrorReply(id jsonrpc.ID, e *jsonrpc.Error) Reply {
	return Reply{Body: jsonrpc.AppendErrorResponse(nil, id, e), Outcome: OutcomeFor(e.Code), Err: e}
}

// Fail is ErrorReply for a new error.
func Fail(id jsonrpc.ID, code jsonrpc.Code, msg string, data any) Reply {
	return ErrorReply(id, jsonrpc.NewError(code, msg, data))
}

// OutcomeFor classifies an error code: the codes that say the request
// itself was unacceptable are Refused, an unknown method is UnknownMethod,
// and every other error was found while serving (Answered).
func OutcomeFor(code jsonrpc.Code) Outcome {
	switch code {
	case mcp.CodeHeaderMismatch, mcp.CodeMissingRequiredCapability, mcp.CodeUnsupportedProtocolVersion,
		jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest:
		return Refused
	case jsonrpc.CodeMethodNotFound:
		return UnknownMethod
	}
	return Answered
}
