// Package client is an MCP 2026-07-28 client whose view of a server stays
// fresh: usually instant, always eventually correct.
//
// Lists and resource reads go through a cache that honours the server's
// ttlMs and cacheScope, is invalidated at once by change notifications,
// and never stores as fresh an answer that was in flight when a change
// was announced. A Watcher keeps one subscriptions/listen stream open,
// heals it after drops with backoff and jitter, reconciles what may have
// been missed, and reports only real changes. Every call carries the
// _meta and headers the protocol requires; tool calls that need input
// from the user (multi round-trip requests) are answered through handler
// hooks and retried automatically.
//
// An answer the server marks private is kept for the credentials that
// got it — the Authorization header the request actually carried,
// whether set with WithAuthorization, WithHeader, an Authorizer or a view
// made with As — and served to nobody else; when the HTTP client's own
// RoundTripper changes or hides the credentials sent, private answers
// are not cached at all. An Authorizer supplies and renews credentials,
// answering the server's 401 and 403 challenges.
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"go.opentelemetry.io/otel/semconv/v1.41.0/mcpconv"
	"go.opentelemetry.io/otel/trace"

	"tidings/internal/buildinfo"
	"tidings/internal/tracectx"
	"tidings/internal/xheader"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// ElicitHandler answers an elicitation/create input request.
type ElicitHandler func(ctx context.Context, params jsontext.Value) (*mcp.ElicitResult, error)

// SamplingHandler answers a sampling/createMessage input request with a
// CreateMessageResult object.
type SamplingHandler func(ctx context.Context, params jsontext.Value) (jsontext.Value, error)

// RootsHandler answers a roots/list input request.
type RootsHandler func(ctx context.Context) (*mcp.ListRootsResult, error)

type config struct {
	// tracer and opDuration, when set, record each request (see
	// WithTracerProvider, WithMeterProvider).
	tracer     trace.Tracer
	opDuration *mcpconv.ClientOperationDuration
	info       mcp.Implementation
	elicit     ElicitHandler
	sample     SamplingHandler
	roots      RootsHandler
	maxRounds  int
	timeout    time.Duration
	listenIdle time.Duration
	cacheSize  int
	serveStale bool
	authorizer Authorizer
	header     http.Header
	hc         *http.Client
	logger     *slog.Logger
	now        func() time.Time
	maxMsg     int
	stderr     io.Writer
	onRestart  func(ended string)
	env        []string
	onLog      func(level mcp.LogLevel, logger string, data jsontext.Value)
	logLevel   mcp.LogLevel
	noTasks    bool
	pinned     string
}

// HTTPOption configures a client made by NewHTTP. Options that concern
// only HTTP — headers, credentials, the http.Client, the listen's idle
// timeout — are HTTPOptions and no other kind, so passing one to
// NewCommand or New is a compile error rather than a setting that is
// silently ignored. Every Option is an HTTPOption too.
type HTTPOption interface{ applyHTTP(*config) }

// CommandOption configures a client made by NewCommand. Options that
// concern only the spawned server process — its environment, its stderr
// — are CommandOptions and no other kind, so passing one to NewHTTP or
// New is a compile error rather than a setting that is silently ignored.
// Every Option is a CommandOption too.
type CommandOption interface{ applyCommand(*config) }

// Option configures a client made by any constructor: NewHTTP,
// NewCommand or New. It says how the client behaves whatever carries its
// messages (its handlers, cache, timeouts, protocol revision). An option
// that only one transport honours is an HTTPOption or a CommandOption
// instead, and New, whose Transport is the caller's own, accepts neither.
// Options shared by both constructors are kept as a []Option and
// appended one by one to the []HTTPOption or []CommandOption passed on.
type Option interface {
	HTTPOption
	CommandOption
	apply(*config)
}

// option is an Option: its function applies whatever the transport.
type option func(*config)

func (o option) apply(c *config)        { o(c) }
func (o option) applyHTTP(c *config)    { o(c) }
func (o option) applyCommand(c *config) { o(c) }

// httpOption is an HTTPOption and nothing else.
type httpOption func(*config)

func (o httpOption) applyHTTP(c *config) { o(c) }

// commandOption is a CommandOption and nothing else.
type commandOption func(*config)

func (o commandOption) applyCommand(c *config) { o(c) }

// WithClientInfo sets the clientInfo sent with every request.
func WithClientInfo(info mcp.Implementation) Option { return option(func(c *config) { c.info = info }) }

// WithElicitation declares the elicitation capability and answers
// elicitation input requests with h.
func WithElicitation(h ElicitHandler) Option { return option(func(c *config) { c.elicit = h }) }

// WithSampling declares the sampling capability and answers sampling
// input requests with h.
func WithSampling(h SamplingHandler) Option { return option(func(c *config) { c.sample = h }) }

// WithRoots declares the roots capability and answers roots input
// requests with h.
func WithRoots(h RootsHandler) Option { return option(func(c *config) { c.roots = h }) }

// WithMaxRounds bounds the input-required rounds of one call (default 8).
func WithMaxRounds(n int) Option { return option(func(c *config) { c.maxRounds = n }) }

// WithTimeout sets the per-request timeout (default 60s). Listens are
// exempt; they are bounded by keep-alives instead. Over HTTP it bounds
// each exchange with the server, and the time an Authorizer takes to
// set credentials or answer a refusal (a sign-in in the browser) is not
// counted: the Authorizer bounds its own waits, and the caller's context
// bounds everything.
func WithTimeout(d time.Duration) Option { return option(func(c *config) { c.timeout = d }) }

// WithCacheSize bounds the number of cached answers (default 1024).
func WithCacheSize(n int) Option { return option(func(c *config) { c.cacheSize = n }) }

// WithListenIdleTimeout sets how long a listen stream may stay silent —
// no notification and no keep-alive — before the client takes it for dead
// and reconnects (default 60s, four missed keep-alives of a tidings
// server; 0 disables). Without it a connection that died without a reset
// would leave the client waiting, and stale, forever. It is an HTTPOption:
// a stdio server that dies closes its pipes, which the client sees at
// once, and a Transport given to New watches its own connection.
func WithListenIdleTimeout(d time.Duration) HTTPOption {
	return httpOption(func(c *config) { c.listenIdle = d })
}

// WithServeStale makes reads return the last known answer when a refresh
// fails, instead of the error.
func WithServeStale() Option { return option(func(c *config) { c.serveStale = true }) }

// WithAuthorization sends value as the Authorization header of every
// HTTP request: a fixed credential, such as "Bearer " and a long-lived
// token. For tokens that expire or must be obtained first, use
// WithAuthorizer.
func WithAuthorization(value string) HTTPOption {
	return httpOption(func(c *config) { c.header.Set("Authorization", value) })
}

// WithHeader adds a header to every HTTP request. An Authorization header
// given this way counts as the client's credentials, as with
// WithAuthorization.
func WithHeader(name, value string) HTTPOption {
	return httpOption(func(c *config) { c.header.Add(name, value) })
}

// WithHTTPClient sets the HTTP client used for requests. Its Transport
// may add credentials of its own (oauth2.Transport does); the client
// then cannot tell in advance whose answers it will get, and caches
// none of those the server marks private.
func WithHTTPClient(hc *http.Client) HTTPOption { return httpOption(func(c *config) { c.hc = hc }) }

// WithLogger sets where the client logs warnings (dropped invalid tools,
// reconnects). Default: slog.Default.
func WithLogger(l *slog.Logger) Option { return option(func(c *config) { c.logger = l }) }

// withClock replaces time.Now, for the package's tests of TTL expiry.
// It is not exported: a caller's own tests get a fake clock from
// testing/synctest, which moves time.Now for the client as well.
func withClock(now func() time.Time) Option { return option(func(c *config) { c.now = now }) }

// WithStderr sets where a spawned server's stderr goes. By default it is
// discarded: a server's diagnostics are not the client's output, and a
// pipe nobody read would stall a chatty server once its buffer filled.
// Pass os.Stderr to see them, or a log writer. w is written from one
// goroutine of the process (exec's copier) and must not block for long,
// or the server blocks on its writes to stderr.
func WithStderr(w io.Writer) CommandOption {
	return commandOption(func(c *config) { c.stderr = w })
}

// WithRestarted has fn told each time a spawned server that died is
// started again, with how it ended ("exit status 3", "signal: killed",
// or "" when it closed its output without exiting in time): a restart
// is otherwise seen only as a dropped request, and a server that keeps
// crashing only once the client gives up on it (ErrServerGone). fn runs
// on the request that starts the server again and must not block.
func WithRestarted(fn func(ended string)) CommandOption {
	return commandOption(func(c *config) { c.onRestart = fn })
}

// WithEnv adds environment variables ("K=V") for a spawned server.
func WithEnv(env ...string) CommandOption {
	return commandOption(func(c *config) { c.env = append(c.env, env...) })
}

// WithServerLogs asks servers for log messages at level and above on
// every request, and hands them to fn.
func WithServerLogs(level mcp.LogLevel, fn func(level mcp.LogLevel, logger string, data jsontext.Value)) Option {
	return option(func(c *config) { c.logLevel, c.onLog = level, fn })
}

// WithProtocolVersion pins the protocol revision, one of Versions: the
// client then skips the era probe (server/discover, and initialize after
// it) and speaks v from the first request, with the initialize handshake
// for the older revisions. A server that answers with another revision
// fails the request with a *VersionError. Pin when the server is known,
// to save the probe's round trip, or for a server that reacts badly to a
// server/discover it does not know.
func WithProtocolVersion(v string) Option { return option(func(c *config) { c.pinned = v }) }

// Client talks to one MCP server. It is safe for concurrent use.
type Client struct {
	t     transport
	cfg   config
	ids   *atomic.Int64 // shared by views, which may share one stdio connection
	cache *cache

	mu      sync.Mutex
	version string
	// shared is the client this one is a view of (see As), or nil.
	shared *Client
	// era is decided once, by probing; views share it.
	era *eraState
	// life ends at Close, for the client and all its views.
	life *lifetime
	// fixed is what every request's _meta repeats, encoded once.
	fixed fixedMeta
}

// newConfig returns the configuration opts make, each applied by apply:
// the method of the option kind the constructor takes.
func newConfig[O any](opts []O, apply func(O, *config)) config {
	cfg := config{
		info:       mcp.Implementation{Name: "tidings", Version: buildinfo.Version("")},
		maxRounds:  8,
		timeout:    60 * time.Second,
		listenIdle: 60 * time.Second,
		header:     http.Header{},
		now:        time.Now,
		maxMsg:     defaultMaxMsg,
	}
	for _, o := range opts {
		apply(o, &cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	if cfg.hc == nil {
		cfg.hc = &http.Client{Transport: defaultTransport()}
	}
	return cfg
}

// idlePerServer is how many connections to its server a client keeps
// open between requests when the program gave it no http.Client.
const idlePerServer = 64

// defaultTransport is net/http's default Transport, the client's own, with
// room to keep a connection for each request in flight. DefaultTransport
// keeps 2 per server: a client making more calls at once (a gateway's to
// its upstream, for its many callers) would open and close a connection
// for every call past two, and leave the sockets in TIME_WAIT. The
// client's own also means that closing it closes only its connections.
// A program that replaced http.DefaultTransport gets its own.
func defaultTransport() http.RoundTripper {
	dt, ok := http.DefaultTransport.(*http.Transport)
	if !ok {
		return http.DefaultTransport
	}
	t := dt.Clone()
	t.MaxIdleConnsPerHost = idlePerServer
	return t
}

func newClient(t transport, cfg config, life *lifetime) *Client {
	return &Client{
		t: t, cfg: cfg, version: mcp.Version, ids: new(atomic.Int64), era: &eraState{}, life: life,
		cache: newCache(cfg.cacheSize, cfg.now, cfg.serveStale),
	}
}

// As returns a view of the client that speaks for another authorization
// context: it sends authorization as the Authorization header (none when
// it is empty: an anonymous view) instead of the client's credentials,
// and without its Authorizer. It shares the connection and the cache,
// where public answers are reused across contexts and private ones are
// not. Gateways serving many users over one upstream use it. Closing any
// view closes the connection.
//
// A private answer is kept under the Authorization header the request
// that got it actually carried, however it was set (WithAuthorization,
// WithHeader, an Authorizer, As), and served only to a view whose next
// request would carry the same one. Over stdio nothing is sent: the
// connection is the caller, and its views share its answers.
func (c *Client) As(authorization string) *Client {
	cfg := c.cfg
	cfg.header = c.cfg.header.Clone()
	cfg.header.Del("Authorization")
	if authorization != "" {
		cfg.header.Set("Authorization", authorization)
	}
	cfg.authorizer = nil
	v := &Client{cfg: cfg, cache: c.cache, ids: c.ids, era: c.era, life: c.life, version: c.currentVersion(), shared: c}
	if ht, ok := c.t.(*httpTransport); ok {
		cp := *ht
		cp.setHeader(cfg.header)
		cp.auth = nil
		v.t = &cp
	} else {
		v.t = c.t
	}
	return v
}

// lookupContext returns the authorization context the client's next
// request would carry: private answers kept under it are its own.
func (c *Client) lookupContext(ctx context.Context) authContext {
	if ht, ok := c.t.(*httpTransport); ok {
		return ht.wouldSend(ctx)
	}
	return anonymousAuth
}

// answeredAs returns whose answer the response to r is (see authContext).
func (c *Client) answeredAs(r *outbound) authContext {
	if _, overHTTP := c.t.(*httpTransport); overHTTP {
		return r.authOut
	}
	return anonymousAuth // nothing travels with the request: the connection is the caller
}

// NewHTTP returns a client for the Streamable HTTP endpoint at url. It
// does no I/O until the first call.
func NewHTTP(url string, opts ...HTTPOption) *Client {
	cfg := newConfig(opts, HTTPOption.applyHTTP)
	return newClient(newHTTPTransport(url, cfg), cfg, newLifetime())
}

// NewCommand starts a stdio server as a subprocess and returns a client for
// it. Close stops the process (closing its stdin, then SIGTERM, then
// SIGKILL); on Unix the server runs in a process group of its own and the
// signals go to the whole group, so helpers it started cannot keep Close
// waiting.
//
// ctx bounds only the start. The server lives until Close, whatever
// happens to ctx: a client often outlives the context it was made in, and
// a server killed when that ended would fail every later request.
//
// A server that crashes is started again on the next request (in-flight
// requests fail with ErrDropped, and a Watcher reconnects and reconciles),
// unless it keeps dying right after starting: then requests fail with
// ErrServerGone.
func NewCommand(ctx context.Context, name string, args []string, opts ...CommandOption) (*Client, error) {
	cfg := newConfig(opts, CommandOption.applyCommand)
	c := newClient(nil, cfg, newLifetime())
	// The first start is bounded by ctx; restarts, which happen long after
	// ctx may have ended, by the client's own life, which Close ends.
	spawn := func(ctx context.Context) (*stdioTransport, error) {
		return startStdio(ctx, name, args, cfg.env, cfg.stderr, c.otherMessage, cfg.maxMsg)
	}
	t, err := newCommandTransport(ctx, c.life.ctx, spawn, func(ended string) {
		c.forgetEra()
		if cfg.onRestart != nil {
			cfg.onRestart(ended)
		}
	})
	if err != nil {
		return nil, err
	}
	c.t = t
	return c, nil
}

// otherMessage handles stdio messages that belong to no request, as the
// server's dialect has them.
func (c *Client) otherMessage(m *jsonrpc.Message) { c.dialect().serverMessage(c, m) }

func (c *Client) deliverLog(m *jsonrpc.Message) {
	if c.cfg.onLog == nil {
		return
	}
	deliverLogTo(m, c.cfg.onLog)
}

// deliverLogTo hands a notifications/message to fn.
func deliverLogTo(m *jsonrpc.Message, fn func(level mcp.LogLevel, logger string, data jsontext.Value)) {
	var p struct {
		Level  mcp.LogLevel   `json:"level"`
		Logger string         `json:"logger"`
		Data   jsontext.Value `json:"data"`
	}
	if jsonrpc.UnmarshalParams(m.Params, &p) == nil {
		fn(p.Level, p.Logger, p.Data)
	}
}

// Close releases the connection (and stops a spawned server). Requests and
// listens in flight, on this client and its views, end with ErrClosed, and
// answers to a server's own requests still running are cancelled and
// waited for. A 2025-11-25 session is ended first.
func (c *Client) Close() error {
	if c.life.end() {
		c.dialect().end(c)
	}
	err := c.t.close()
	c.life.bg.Wait()
	return err
}

// Capabilities returns the client capabilities declared on each request,
// derived from the handlers installed, and the tasks extension unless
// WithoutTasks turned it off. The extension is declared only where it
// means something: on tools/call, which a server may then answer with a
// task, and on the requests that follow a task (tasks/get, tasks/update,
// tasks/cancel, subscriptions/listen) of the 2026-07-28 era; the
// 2025-11-25 era has no extensions and never sees it.
func (c *Client) Capabilities() mcp.ClientCaps { return c.caps(!c.cfg.noTasks) }

// caps returns the client's capabilities, with the tasks extension when
// tasks is set.
func (c *Client) caps(tasks bool) mcp.ClientCaps {
	var caps mcp.ClientCaps
	empty := jsontext.Value("{}")
	if tasks {
		caps.Extensions = map[string]jsontext.Value{mcp.ExtensionTasks: empty}
	}
	if c.cfg.elicit != nil {
		caps.Elicitation = &mcp.ElicitationCaps{Form: &empty}
	}
	if c.cfg.sample != nil {
		caps.Sampling = &mcp.SamplingCaps{}
	}
	if c.cfg.roots != nil {
		caps.Roots = &empty
	}
	return caps
}

// RPCError is an error response from the server.
type RPCError = jsonrpc.Error

// callOpts tunes one request.
type callOpts struct {
	name     *string
	params   []headerField
	onMsg    func(*jsonrpc.Message)
	noLimit  bool // listens: no request timeout
	progress func(progress float64, total *float64, message string)
	// taskStatus receives the states of the task a tools/call runs as
	// (see WithTaskStatus).
	taskStatus func(mcp.Task)
	// httpStatus, when set, receives the HTTP status of the response (0
	// on stdio, or when none came): the era probe needs it.
	httpStatus *int
	// auth, when set, records whose credentials the request carried, for
	// the cache to file the answer under.
	auth *authRecord
	// caps, when set, are declared in place of the client's own (see
	// WithCapabilities).
	caps *mcp.ClientCaps
	// logLevel and onLog, when onLog is set, ask for this request's log
	// messages at logLevel and take them (see WithLogs).
	logLevel mcp.LogLevel
	onLog    func(level mcp.LogLevel, logger string, data jsontext.Value)
	// trace, when set, is the trace context the request carries in _meta.
	trace *tracectx.Carrier
}

// deliverProgress hands a notifications/progress to fn.
func deliverProgress(m *jsonrpc.Message, fn func(progress float64, total *float64, message string)) {
	var p struct {
		Progress float64  `json:"progress"`
		Total    *float64 `json:"total"`
		Message  string   `json:"message"`
	}
	if jsonrpc.UnmarshalParams(m.Params, &p) == nil {
		fn(p.Progress, p.Total, p.Message)
	}
}

func (c *Client) nextID() jsonrpc.ID { return jsonrpc.IntID(c.ids.Add(1)) }

func (c *Client) currentVersion() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// do sends one request and returns its result object. When the server
// answers -32022 (unsupported protocol version) and lists
// 2026-07-28 among the versions it supports, it retries once: a server may
// refuse the version we sent for a transient reason and then ask for that
// same version; a list without ours ends the request with the error. Close
// ends the request with ErrClosed.
func (c *Client) do(ctx context.Context, method string, params map[string]any, o callOpts) (jsontext.Value, error) {
	if c.life.closed() {
		return nil, ErrClosed
	}
	ctx, stop := bindLife(ctx, c.life.ctx)
	defer stop()
	var done func(error)
	if c.cfg.tracer != nil || c.cfg.opDuration != nil {
		ctx, done = c.observe(ctx, method, &o)
	}
	res, err := c.doEra(ctx, method, params, o)
	if done != nil {
		done(err)
	}
	if err != nil && errors.Is(context.Cause(ctx), ErrClosed) {
		return nil, fmt.Errorf("%w (%s)", ErrClosed, method)
	}
	return res, err
}

// doEra sends the request in the server's era.
func (c *Client) doEra(ctx context.Context, method string, params map[string]any, o callOpts) (jsontext.Value, error) {
	d, err := c.ensureEra(ctx)
	if err != nil {
		return nil, err
	}
	return d.do(ctx, c, method, params, o)
}

// doModern sends one 2026-07-28 request.
func (c *Client) doModern(ctx context.Context, method string, params map[string]any, o callOpts) (jsontext.Value, error) {
	ctx, perExchange, cancel := c.limit(ctx, o.noLimit)
	defer cancel()
	for attempt := 0; ; attempt++ {
		id := c.nextID()
		token := ""
		if o.progress != nil {
			token = strconv.Quote("p" + id.Raw())
		}
		body, err := c.encode(id, method, params, token, &o)
		if err != nil {
			return nil, err
		}
		req := &outbound{id: id, method: method, body: body, version: c.currentVersion(), token: token, timeout: perExchange}
		if _, overHTTP := c.t.(*httpTransport); overHTTP {
			req.header = modernHeader(method, o)
		}
		if o.noLimit {
			req.idle = c.cfg.listenIdle
		}
		onMsg := func(m *jsonrpc.Message) {
			switch m.Method {
			case mcp.NotifyMessage:
				if o.onLog != nil {
					deliverLogTo(m, o.onLog)
				} else {
					c.deliverLog(m)
				}
				return
			case mcp.NotifyProgress:
				if o.progress != nil {
					deliverProgress(m, o.progress)
				}
				return
			}
			if o.onMsg != nil {
				o.onMsg(m)
				return
			}
			c.strayChange(nil, m)
		}
		resp, err := c.t.roundTrip(ctx, req, onMsg)
		if o.httpStatus != nil {
			*o.httpStatus = req.statusOut
		}
		if err != nil {
			return nil, err
		}
		if o.auth != nil {
			o.auth.add(c.answeredAs(req))
		}
		if resp.Method == mcp.NotifyCancelled {
			return nil, errServerEnded
		}
		if resp.Error != nil {
			if resp.Error.Code == mcp.CodeUnsupportedProtocolVersion && attempt == 0 && c.adoptVersion(resp.Error) {
				continue
			}
			return nil, resp.Error
		}
		if err := checkResultType(resp.Result, method == mcp.MethodToolsCall && o.declaredTasks(c, method)); err != nil {
			return nil, fmt.Errorf("client: %s: %w", method, err)
		}
		return resp.Result, nil
	}
}

// limit applies the request timeout to one request (none to a listen,
// noLimit, or with WithTimeout(0)). Over HTTP the transport applies it,
// to each exchange once the Authorizer has set its credentials, so that
// the time an Authorizer waits (for a sign-in in the browser) is not
// counted: it is returned as perExchange, for the request's outbound.
// Other transports carry no credentials, and the deadline goes on ctx.
func (c *Client) limit(ctx context.Context, noLimit bool) (_ context.Context, perExchange time.Duration, cancel context.CancelFunc) {
	if noLimit || c.cfg.timeout <= 0 {
		return ctx, 0, func() {}
	}
	if _, overHTTP := c.t.(*httpTransport); overHTTP {
		return ctx, c.cfg.timeout, func() {}
	}
	ctx, cancel = context.WithTimeout(ctx, c.cfg.timeout)
	return ctx, 0, cancel
}

// modernHeader lists the header fields a 2026-07-28 request carries over
// HTTP, so that intermediaries can route it without reading the body: its
// method, the name it acts on, and the arguments its tool mirrors.
func modernHeader(method string, o callOpts) []headerField {
	h := make([]headerField, 0, 2+len(o.params))
	h = append(h, headerField{mcp.HeaderMethod, method})
	if o.name != nil {
		h = append(h, headerField{mcp.HeaderName, xheader.Encode(*o.name)})
	}
	if t := o.trace; t != nil && t.Parent != "" {
		// For peers that read trace context from HTTP headers (an HTTP
		// middleware's) rather than from _meta.
		h = append(h, headerField{"Traceparent", t.Parent})
		if t.State != "" {
			h = append(h, headerField{"Tracestate", t.State})
		}
	}
	return append(h, o.params...)
}

// errServerEnded reports that the server ended a request itself with
// notifications/cancelled (stdio's way of closing a listen).
var errServerEnded = errors.New("client: server ended the request")

// adoptVersion reports whether a -32022 error's supported list holds the
// one version this client speaks, 2026-07-28, and so whether a retry makes
// sense; it then sends that version from now on.
func (c *Client) adoptVersion(e *jsonrpc.Error) bool {
	var data struct {
		Supported []string `json:"supported"`
	}
	if json.Unmarshal(e.Data, &data) != nil {
		return false
	}
	for _, v := range data.Supported {
		if v == mcp.Version {
			c.mu.Lock()
			c.version = v
			c.mu.Unlock()
			return true
		}
	}
	return false
}

// declaredTasks reports whether a request of method with these options
// declared the tasks extension: the capabilities of WithCapabilities
// where given (a gateway declares its caller's), else the client's.
func (o *callOpts) declaredTasks(c *Client, method string) bool {
	if o.caps != nil {
		return mcp.DeclaresTasks(o.caps.Extensions)
	}
	return c.declaresTasks(method)
}

// checkResultType enforces that a result's resultType is one we know; an
// absent one means complete (servers of earlier versions send none). A
// task handle ("task") is a valid answer only where task says so: to a
// tools/call that declared the tasks extension. Anywhere else the
// extension makes it an invalid response.
func checkResultType(result jsontext.Value, task bool) error {
	var r struct {
		ResultType *string `json:"resultType"`
	}
	if err := json.Unmarshal(result, &r); err != nil {
		return fmt.Errorf("result is not an object: %w", err)
	}
	if r.ResultType == nil {
		return nil
	}
	switch *r.ResultType {
	case mcp.ResultComplete, mcp.ResultInputRequired:
		return nil
	case mcp.ResultTask:
		if task {
			return nil
		}
		return errors.New(`a task (resultType "task") is not a valid answer to this request`)
	}
	return fmt.Errorf("unknown resultType %q", *r.ResultType)
}

// Request sends any request and returns its raw result. It does not cache,
// does not answer input requests and does not follow tasks: a tools/call
// a server chose to run as a task comes back as the task handle
// (resultType "task"). Use the typed methods for all that. Of the
// options, WithProgress hands on the request's progress notifications,
// which a proxy passes to its own caller.
func (c *Client) Request(ctx context.Context, method string, params map[string]any, opts ...CallOption) (jsontext.Value, error) {
	o := callOpts{}
	for _, opt := range opts {
		opt.applyCall(&o)
	}
	switch method {
	case mcp.MethodToolsCall, mcp.MethodPromptsGet:
		if s, ok := params["name"].(string); ok {
			o.name = &s
			if method == mcp.MethodToolsCall {
				// The arguments the tool's schema mirrors into
				// Mcp-Param-* headers go there, as with CallTool. When
				// they cannot be found (no tool list, an argument of
				// another type), the request goes without them, and the
				// server says what is missing.
				var raw jsontext.Value
				switch a := params["arguments"].(type) {
				case nil:
				case jsontext.Value:
					raw = a // already encoded, as a proxy has it
				default:
					b, err := json.Marshal(a, json.Deterministic(true))
					if err != nil {
						return nil, fmt.Errorf("client: tool %q arguments: %w", s, err)
					}
					raw = b
				}
				if hdrs, err := c.paramHeaders(ctx, s, raw); err == nil {
					o.params = hdrs
				}
			}
		}
	case mcp.MethodResourcesRead:
		if s, ok := params["uri"].(string); ok {
			o.name = &s
		}
	case mcp.MethodTasksGet, mcp.MethodTasksUpdate, mcp.MethodTasksCancel:
		if s, ok := params["taskId"].(string); ok {
			o.name = &s
		}
	}
	return c.do(ctx, method, params, o)
}

// cacheHints reads ttlMs and cacheScope from a result. Only an explicit
// "public" makes an answer shareable across authorization contexts: a
// missing or unknown cacheScope is treated as private, the choice that
// cannot leak one caller's answer to another through a shared client.
func cacheHints(result jsontext.Value) (time.Duration, mcp.CacheScope) {
	var h struct {
		TTL   *int64         `json:"ttlMs"`
		Scope mcp.CacheScope `json:"cacheScope"`
	}
	_ = json.Unmarshal(result, &h)
	ttl := time.Duration(0)
	if h.TTL != nil && *h.TTL > 0 {
		ttl = time.Duration(*h.TTL) * time.Millisecond
	}
	scope := h.Scope
	if scope != mcp.ScopePublic {
		scope = mcp.ScopePrivate
	}
	return ttl, scope
}

// DiscoverResult is what server/discover tells.
type DiscoverResult struct {
	SupportedVersions []string       `json:"supportedVersions"`
	Capabilities      mcp.ServerCaps `json:"capabilities"`
	Instructions      string         `json:"instructions,omitempty"`
	ServerInfo        *mcp.Implementation
	// Meta is the result's _meta as the server sent it (serverInfo
	// among it), for what a server tells of itself beyond the fields.
	Meta mcp.Meta `json:"_meta,omitempty"`
}

// Discover asks the server who it is and what it can do (cached per
// ttlMs). The first Discover after connecting is answered by the era
// probe's own server/discover.
func (c *Client) Discover(ctx context.Context) (*DiscoverResult, error) {
	d, err := c.ensureEra(ctx)
	if err != nil {
		return nil, err
	}
	if r := d.discovered(); r != nil {
		return r, nil
	}
	as := c.lookupContext(ctx)
	return cachedAs[*DiscoverResult](ctx, c.cache, mcp.MethodDiscover, topicDiscover, as, func(ctx context.Context) (fetched, error) {
		var res jsontext.Value
		var answeredAs authContext
		if p := c.era.takeProbe(as); p != nil {
			res, answeredAs = p.res, p.as // the era probe just asked
		} else {
			var who authRecord
			var err error
			if res, err = c.do(ctx, mcp.MethodDiscover, nil, callOpts{auth: &who}); err != nil {
				return fetched{}, err
			}
			answeredAs = who.context()
		}
		var d DiscoverResult
		if err := json.Unmarshal(res, &d); err != nil {
			return fetched{}, fmt.Errorf("client: server/discover: %w", err)
		}
		var meta struct {
			Meta struct {
				Info *mcp.Implementation `json:"io.modelcontextprotocol/serverInfo"`
			} `json:"_meta"`
		}
		_ = json.Unmarshal(res, &meta)
		d.ServerInfo = meta.Meta.Info
		ttl, scope := cacheHints(res)
		return fetched{value: &d, ttl: ttl, scope: scope, as: answeredAs}, nil
	})
}
