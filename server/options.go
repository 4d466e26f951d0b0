package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/semconv/v1.41.0/mcpconv"
	"go.opentelemetry.io/otel/trace"

	"tidings/bus"
	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
)

type config struct {
	// tracer and opDuration, when set, record each request (see
	// WithTracerProvider, WithMeterProvider).
	tracer       trace.Tracer
	meter        metric.Meter
	opDuration   *mcpconv.ServerOperationDuration
	instructions string
	discoverMeta func() mcp.Meta
	extensions   map[string]jsontext.Value
	pageSize     int
	secret       []byte
	policies     [numLists]CachePolicy
	logger       *slog.Logger
	keepAlive    time.Duration
	stateTTL     time.Duration
	noServerInfo bool
	now          func() time.Time
	capabilities capsOverride
	visible      func(principal string, l List, key string) bool
	origin       Origin
	middleware   []Middleware
	observer     StreamObserver
	bus          bus.Bus
	state        bus.State
	taskStore    bus.TaskStore
	taskTTL      time.Duration
	taskPoll     time.Duration
	taskLease    time.Duration
	// maxTasks and maxPrincipalTasks bound the tasks running on this
	// replica, in all and for one principal.
	maxTasks, maxPrincipalTasks int
	// listens bounds what listens hold (WithListenLimits).
	listens ListenLimits
	// taskOpts is set by any task option: the server then offers tasks.
	taskOpts bool
}

type capsOverride struct {
	tools, prompts, resources, completions, tasks bool
}

// Option configures a Server.
type Option func(*config)

// WithInstructions sets the instructions returned by server/discover.
func WithInstructions(s string) Option { return func(c *config) { c.instructions = s } }

// WithDiscoverMeta has every server/discover result carry what meta
// returns in its _meta, beside serverInfo: facts about this server that
// a client of a given kind looks for (a gateway tells there who it is,
// so that it can tell when it is its own upstream). meta is called for
// each answer and must not block.
func WithDiscoverMeta(meta func() mcp.Meta) Option { return func(c *config) { c.discoverMeta = meta } }

// WithPageSize sets how many items a list page holds (default 100).
func WithPageSize(n int) Option { return func(c *config) { positive(&c.pageSize, n) } }

// positive sets *dst to v if v is positive and otherwise leaves the
// default there: the rule of every size, count and duration option (see
// the package doc).
func positive[T ~int | ~int64](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
}

// minSecretLen is the shortest secret New accepts without a warning.
const minSecretLen = 32

// WithSecret sets the key that seals what the server hands clients to
// bring back: list cursors (signed) and MRTR requestState (encrypted and
// signed), each bound to its list or call and to the principal. It also
// keys what a task's record keeps of its owner, so that neither a reader
// of the task store can tell who that is nor a writer make a task
// another's.
//
// Replicas. A client behind a balancer brings a token back to whichever
// replica the balancer picks, so every replica must be given the same key
// (at least 32 random bytes, from a secret store; rotate it by restarting
// every replica with the new one, which invalidates outstanding tokens).
// Without WithSecret each replica draws a random key when it starts, and
// a token issued by another replica — or by this one before a restart —
// is refused as invalid (-32602): a client walking a list starts over,
// and a multi-round call fails; a task created through another replica
// is not found. That is right for a single replica and
// wrong for several; the bus does not carry keys. New logs a warning for
// a key shorter than 32 bytes, which would make the tokens easier to
// forge.
func WithSecret(key []byte) Option {
	return func(c *config) { c.secret = append([]byte(nil), key...) }
}

// WithCachePolicy overrides the cache hint of one cacheable result.
func WithCachePolicy(l List, p CachePolicy) Option {
	return func(c *config) {
		if l >= 0 && l < numLists {
			c.policies[l] = p
		}
	}
}

// WithLogger sets where the server logs (default: slog.Default). Request
// payloads and secrets are never logged.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithKeepAlive sets the interval of listen stream keep-alives (default
// 15s; 0 disables). A listen gets one after a whole tick of the interval
// passed with nothing written, so an idle stream hears something within
// twice the interval.
func WithKeepAlive(d time.Duration) Option { return func(c *config) { c.keepAlive = d } }

// WithRequestStateTTL bounds how long an MRTR requestState stays valid
// (default 10 minutes).
func WithRequestStateTTL(d time.Duration) Option { return func(c *config) { positive(&c.stateTTL, d) } }

// WithoutServerInfo stops the server from putting serverInfo in result _meta.
func WithoutServerInfo() Option { return func(c *config) { c.noServerInfo = true } }

// WithVisibility makes what a caller sees depend on who the caller is:
// visible reports whether principal (see streamhttp.WithPrincipal) may see
// the item keyed key — a tool or prompt name, a resource URI, a URI
// template — of list l. Hidden items are left out of lists and answer as
// unknown when called or read. Lists then carry cacheScope "private", so
// no cache ever serves one caller's list to another. Access control
// itself belongs here, never in cache scopes: a public answer may be
// reused under any token.
func WithVisibility(visible func(principal string, l List, key string) bool) Option {
	return func(c *config) { c.visible = visible }
}

// WithClock replaces time.Now, for tests of expiry.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// Capability names a kind of primitive a server can advertise.
type Capability uint8

// The capabilities WithCapabilities can advertise early. Tasks is the
// tasks extension (see ToolRequest.RunAsTask), advertised under
// capabilities.extensions.
const (
	Tools Capability = 1 << iota
	Prompts
	Resources
	Completions
	Tasks
)

// WithCapabilities advertises primitives before anything is registered, for
// servers that start empty and fill up at run time. A primitive is also
// advertised as soon as something of its kind is first registered.
func WithCapabilities(caps ...Capability) Option {
	return func(c *config) {
		for _, k := range caps {
			c.capabilities.tools = c.capabilities.tools || k&Tools != 0
			c.capabilities.prompts = c.capabilities.prompts || k&Prompts != 0
			c.capabilities.resources = c.capabilities.resources || k&Resources != 0
			c.capabilities.completions = c.capabilities.completions || k&Completions != 0
			c.capabilities.tasks = c.capabilities.tasks || k&Tasks != 0
		}
	}
}

// WithExtension advertises the extension name (such as MCP Apps,
// "io.modelcontextprotocol/ui") in capabilities.extensions, with its
// settings (nil for {}). The server only says it supports it: what the
// extension puts in items (a tool's _meta, a ui:// resource) is the
// server's to register, and a client that declares the extension on a
// request (Request.Capabilities.Extensions) is one that understands it.
// The tasks extension has its own switch (Tasks, RunAsTask).
func WithExtension(name string, settings jsontext.Value) Option {
	return func(c *config) {
		if len(settings) == 0 {
			settings = jsontext.Value("{}")
		}
		if c.extensions == nil {
			c.extensions = map[string]jsontext.Value{}
		}
		c.extensions[name] = settings
	}
}

// MethodHandler serves one request, of any method and either protocol
// era. It reports the outcome as an error: nil for a result (a tool result
// with isError set included), a *jsonrpc.Error for a protocol error.
type MethodHandler func(ctx context.Context, req *Request) error

// Middleware wraps the handling of every request: logging, metrics,
// tracing, authorization. It sees the request before any handler runs
// (req.Method, req.Name, req.Principal) and the outcome after; it may
// refuse a request by returning an error without calling next (a
// *jsonrpc.Error reaches the client as it is; any other error becomes
// -32603), and may pass next a context of its own. It calls next at most
// once, before it returns, with the *Request it was given. For a listen,
// next returns when the listen ends — unless its transport parked it
// (streamhttp over HTTP/1.1), when next returns once the listen is
// acknowledged and Request.AfterEnd tells when it ends.
type Middleware func(next MethodHandler) MethodHandler

// WithMiddleware adds middleware; the first given is the outermost.
func WithMiddleware(mw ...Middleware) Option {
	return func(c *config) { c.middleware = append(c.middleware, mw...) }
}

// chain composes middleware around h once, at New: wrapping per request
// would cost an allocation per middleware and request.
func chain(mw []Middleware, h MethodHandler) MethodHandler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

// StreamObserver hears what happens on change streams (2026-07-28 listens
// and 2025-11-25 session streams), for metrics. Its methods run on the
// streams' own goroutines and must not block. Notified(sent, merged)
// reports the notifications one stream just wrote and how many further
// changes they stood for: three changes to the tool list before the
// stream could write make one notification and two merged changes.
// CutOff reports a stream ended because its reader stopped reading for
// longer than the transport's write timeout. It is the interface the
// streams themselves are written against, so that an observer given here
// reaches them as it is.
type StreamObserver = engine.StreamObserver

// RefusalObserver is a StreamObserver that also hears of each request
// refused before any handler or middleware ran: a header mismatch, an
// unsupported protocol version, malformed _meta or params. Metrics count
// those too.
type RefusalObserver interface {
	StreamObserver
	// Refused reports the method the request named (which may be one
	// the server does not know) and the JSON-RPC code it was refused with.
	Refused(method string, code jsonrpc.Code)
}

// WithStreamObserver sets the observer of every change stream (and of
// refusals, if it is also a RefusalObserver).
func WithStreamObserver(o StreamObserver) Option {
	return func(c *config) { c.observer = o }
}
