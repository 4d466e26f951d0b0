package server

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// Request is what every handler learns about the request it serves.
type Request struct {
	// ID is the JSON-RPC id of the request.
	ID jsonrpc.ID
	// Method is the JSON-RPC method.
	Method string
	// Name is what the request names: the tool or prompt, the
	// resource's URI, or the task of a tasks/get, tasks/update or
	// tasks/cancel ("" for methods that name nothing).
	Name string
	// Scopes are the OAuth scopes declared (see RequireScopes) for what
	// the request touches — the item it names, the prompt or template a
	// completion refers to, the resources a subscription follows — for
	// an authorization middleware to check.
	Scopes []string
	// ProtocolVersion is the version the request declared.
	ProtocolVersion string
	// Capabilities are the client capabilities declared on this request.
	// Only these may be relied on (never ones from earlier requests).
	Capabilities mcp.ClientCaps
	// ClientInfo is the self-reported client, if sent. Never trust it.
	ClientInfo *mcp.Implementation
	// Principal identifies the caller's authorization context, as set by
	// the transport ("" when unauthenticated).
	Principal string
	// InputResponses holds the client's answers to an earlier
	// InputRequired, keyed as asked.
	InputResponses map[string]jsontext.Value

	state    []byte
	logLevel int // -1 when logging was not requested
	// enc finishes results the way the request's era wants them.
	enc engine.Encoder
	// askInput, on an earlier era's session, asks the client for input
	// with server-to-client requests and returns the answers.
	askInput func(ctx context.Context, reqs map[string]mcp.InputRequest) (map[string]jsontext.Value, error)
	progress jsontext.Value
	out      *requestOut

	// What the innermost handler of a middleware chain serves (see
	// Server.routed): the call, its router, and its answer once it ran.
	call   *engine.Call
	route  router
	reply  engine.Reply
	served bool

	// task is set inside a task's work (see ToolRequest.RunAsTask).
	task *taskRun
	// ends is set on a listen its transport parked (see AfterEnd).
	ends *listenEnds
}

// AfterEnd reports whether the request goes on after its handler has
// returned — a listen its transport parked, so that no goroutine waits
// on it (streamhttp over HTTP/1.1) — and if so has fn run once it ends
// (at once if it has ended already), with context.Canceled if its
// client went away and nil otherwise. Middleware that accounts for a
// request's whole life, such as an open-listens gauge or a duration,
// closes its account in fn when AfterEnd returns true, and as soon as
// the next handler returns otherwise. Call it after the next handler
// returns; fn must not block.
func (r *Request) AfterEnd(fn func(error)) bool {
	if r.ends == nil {
		return false
	}
	r.ends.add(fn)
	return true
}

// listenEnds are what middleware has run when a parked listen ends.
type listenEnds struct {
	log   *slog.Logger
	mu    sync.Mutex
	ended bool
	err   error
	fns   []func(error)
}

func (e *listenEnds) add(fn func(error)) {
	e.mu.Lock()
	if !e.ended {
		e.fns = append(e.fns, fn)
		e.mu.Unlock()
		return
	}
	err := e.err
	e.mu.Unlock()
	e.run(fn, err)
}

// end runs what was added, once.
func (e *listenEnds) end(err error) {
	e.mu.Lock()
	e.ended, e.err = true, err
	fns := e.fns
	e.fns = nil
	e.mu.Unlock()
	for _, fn := range fns {
		e.run(fn, err)
	}
}

// run runs fn, logging a panic with its stack instead of passing it on:
// a parked listen ends on a goroutine shared by every parked listen,
// where a middleware's panic would end the process, not one request.
func (e *listenEnds) run(fn func(error), err error) {
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("mcp: a middleware's AfterEnd function panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	fn(err)
}

// State returns the verified state the handler put in an earlier
// InputRequired, or nil when the client sent none.
func (r *Request) State() []byte { return r.state }

// requestOut serialises a request's notifications and enforces that
// progress only increases and that nothing follows the response.
type requestOut struct {
	mu       sync.Mutex
	stream   engine.Stream
	done     bool
	last     float64
	sentProg bool
}

// Progress sends notifications/progress when the client asked for it with
// a progressToken; otherwise it does nothing. progress must increase with
// every call; a value that does not is dropped.
//
// Inside a task's work it sends nothing: a non-empty message becomes the
// task's statusMessage, which the client reads with tasks/get or hears
// over a listen that follows the task.
func (r *Request) Progress(progress float64, total *float64, message string) error {
	if r.task != nil {
		return r.task.progress(message)
	}
	if len(r.progress) == 0 || r.out == nil {
		return nil
	}
	o := r.out
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done || (o.sentProg && progress <= o.last) {
		return nil
	}
	p := struct {
		ProgressToken jsontext.Value `json:"progressToken"`
		Progress      float64        `json:"progress"`
		Total         *float64       `json:"total,omitzero"`
		Message       string         `json:"message,omitempty"`
	}{r.progress, progress, total, message}
	b, err := jsonrpc.Marshal(p)
	if err != nil {
		return err
	}
	o.last, o.sentProg = progress, true
	return o.stream.Send(jsonrpc.AppendNotification(nil, mcp.NotifyProgress, b))
}

// LogLevel returns the least severe level of log messages the caller
// asked for on this request (its _meta, or its 2025-11-25 session's
// logging/setLevel), and false when it asked for none or the request has
// no stream to send them on. A gateway asks its upstream for the same.
func (r *Request) LogLevel() (mcp.LogLevel, bool) {
	if r.logLevel < 0 || r.out == nil {
		return "", false
	}
	for _, l := range []mcp.LogLevel{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"} {
		if sev, _ := l.Severity(); sev == r.logLevel {
			return l, true
		}
	}
	return "", false
}

// Log sends notifications/message on this request's own stream when the
// request set a log level at or below level; otherwise it does nothing.
// Inside a task's work, which has no stream, it does nothing.
func (r *Request) Log(level mcp.LogLevel, logger string, data any) error {
	sev, ok := level.Severity()
	if !ok || r.logLevel < 0 || sev < r.logLevel || r.out == nil {
		return nil
	}
	p := struct {
		Level  mcp.LogLevel `json:"level"`
		Logger string       `json:"logger,omitempty"`
		Data   any          `json:"data"`
	}{level, logger, data}
	b, err := jsonrpc.Marshal(p)
	if err != nil {
		return fmt.Errorf("log data: %w", err)
	}
	o := r.out
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.done {
		return nil
	}
	return o.stream.Send(jsonrpc.AppendNotification(nil, mcp.NotifyMessage, b))
}

func (o *requestOut) finish() {
	o.mu.Lock()
	o.done = true
	o.mu.Unlock()
}

// ToolRequest is a tools/call; Name is the tool's name.
type ToolRequest struct {
	Request
	// Arguments is the raw arguments object, already validated against
	// the tool's input schema.
	Arguments jsontext.Value

	// What RunAsTask needs: the server and the tool called; ranTask is
	// set by the first RunAsTask, which a second one is refused by.
	srv     *Server
	tool    *tool
	ranTask atomic.Bool
}

// PromptRequest is a prompts/get; Name is the prompt asked for, which
// is registered and visible to the caller.
type PromptRequest struct {
	Request
	// Arguments are the caller's values; every required argument of the
	// prompt is present (nil when the prompt was called without any).
	Arguments map[string]string
}

// ResourceRequest is a resources/read.
type ResourceRequest struct {
	Request
	URI string
	// Vars holds the variables matched from a resource template (nil for
	// fixed resources).
	Vars map[string]string

	policy *CachePolicy
}

// SetCache overrides the cache hint for this one read result.
func (r *ResourceRequest) SetCache(p CachePolicy) { r.policy = &p }

// CompleteRequest is a completion/complete.
type CompleteRequest struct {
	Request
	// Ref names the prompt or resource template being completed; a prompt
	// ref is known to exist and be visible to the caller.
	Ref mcp.CompleteRef
	// Argument is the argument being typed and its partial value.
	Argument mcp.CompleteArgument
	// Context holds the values of arguments already filled in, so that
	// suggestions can depend on them (zero when the client sent none).
	Context mcp.CompleteContext
}

// InputRequired is returned (as an error) by a tool, prompt or resource
// handler that needs input from the client before it can finish. The
// client answers the Requests and retries; the handler then finds the
// answers in Request.InputResponses and its State in Request.State.
type InputRequired struct {
	// Requests maps a key of the handler's choosing to an elicitation,
	// sampling or roots request.
	Requests map[string]mcp.InputRequest
	// State is opaque to the client. The server seals it (integrity,
	// expiry, bound to method, name and principal) before sending it.
	State []byte
}

// Error makes InputRequired an error, so a handler can return it; it is
// never shown to the client, which receives an input_required result.
func (e *InputRequired) Error() string { return "input required" }

type ctxKey struct{}

// requestFromContext exposes the current request to helpers.
func requestFromContext(ctx context.Context) *Request {
	r, _ := ctx.Value(ctxKey{}).(*Request)
	return r
}

// RequestFromContext returns the request being served, if any.
func RequestFromContext(ctx context.Context) (*Request, bool) {
	r := requestFromContext(ctx)
	return r, r != nil
}
