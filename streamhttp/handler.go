package streamhttp

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tidings/internal/engine"
	"tidings/internal/legacy"
	"tidings/internal/sse"
	"tidings/internal/xheader"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp/internal/parked"
	"tidings/streamhttp/internal/writecut"
)

type config struct {
	allowedHosts   map[string]bool
	allowedOrigins map[string]bool
	anyHost        bool
	anyOrigin      bool
	maxBody        int64
	maxDepth       int
	writeTimeout   time.Duration
	principal      func(*http.Request) string
	modernOnly     bool
	maxSessions    int
	maxPrincipal   int // sessions of one principal
	sessionIdle    time.Duration
	logger         *slog.Logger
	park           bool
}

// Option configures a Handler.
type Option func(*config)

// WithAllowedHosts accepts requests whose Host header names one of hosts
// (without port), in addition to loopback names. Use it when serving on a
// non-loopback address.
func WithAllowedHosts(hosts ...string) Option {
	return func(c *config) {
		for _, h := range hosts {
			c.allowedHosts[strings.ToLower(h)] = true
		}
	}
}

// WithAllowedOrigins accepts browser requests from these origins (for
// example "https://app.example.com"), in addition to loopback origins.
func WithAllowedOrigins(origins ...string) Option {
	return func(c *config) {
		for _, o := range origins {
			c.allowedOrigins[strings.ToLower(strings.TrimRight(o, "/"))] = true
		}
	}
}

// WithAnyHost turns the Host check off, for deployments behind a proxy
// that already enforces it. Leave it on otherwise.
func WithAnyHost() Option { return func(c *config) { c.anyHost = true } }

// WithAnyOrigin turns the Origin check off. Only for servers that
// authenticate every request and are never reachable from a browser.
func WithAnyOrigin() Option { return func(c *config) { c.anyOrigin = true } }

// WithMaxBodyBytes bounds a request body (default 4 MiB).
func WithMaxBodyBytes(n int64) Option { return func(c *config) { positive(&c.maxBody, n) } }

// WithMaxDepth bounds JSON nesting in a request (default 128).
func WithMaxDepth(n int) Option { return func(c *config) { positive(&c.maxDepth, n) } }

// positive sets *dst to v if v is positive and otherwise leaves the
// default there: the rule of every size, count and duration option (see
// the package doc).
func positive[T ~int | ~int64](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
}

// WithWriteTimeout bounds how long one write of an answer may block
// (default 10s), a stream's or a plain JSON body's. A listen whose reader
// stops reading is cut after it, and so is a large answer whose reader
// never reads, so a stuck client costs nothing for long. A body is
// written in pieces, each under the timeout, so a client reading slowly
// but steadily still gets it all.
func WithWriteTimeout(d time.Duration) Option {
	return func(c *config) { positive(&c.writeTimeout, d) }
}

// WithPrincipal sets how a request's authorization context is named, for
// private cache scopes, cursor binding and change audiences. It runs once
// per request, after the Host, Origin and body checks; return "" for
// anonymous.
func WithPrincipal(fn func(*http.Request) string) Option {
	return func(c *config) { c.principal = fn }
}

// WithoutLegacy serves revision 2026-07-28 only: initialize and session
// traffic of 2025-11-25 clients are refused like any unknown method.
func WithoutLegacy() Option { return func(c *config) { c.modernOnly = true } }

// WithLogger sets where the handler logs (default: slog.Default). A
// request refused for its Host or Origin is logged at info, once per
// refused value, so that a misconfigured proxy or a DNS-rebinding attempt
// is visible without one line per request.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// The defaults of WithSessionLimits and WithSessionsPerPrincipal.
const (
	DefaultMaxSessions          = 10000
	DefaultSessionsPerPrincipal = 1000
)

// WithSessionLimits bounds the sessions of 2025-11-25 clients: at most
// max at once, and idle ones expire after idle. Defaults:
// DefaultMaxSessions and 30 minutes. Once max sessions are open,
// initialize is refused with HTTP 503 and a -32603 error naming the
// limit, until sessions end or expire: no caller's sessions are evicted
// to make room for another's (see WithSessionsPerPrincipal).
func WithSessionLimits(max int, idle time.Duration) Option {
	return func(c *config) {
		positive(&c.maxSessions, max)
		positive(&c.sessionIdle, idle)
	}
}

// WithSessionsPerPrincipal bounds the 2025-11-25 sessions one principal
// (see WithPrincipal) may hold at once (default
// DefaultSessionsPerPrincipal); the unauthenticated callers share one allowance. A
// principal at its quota that opens another session loses its own least
// recently used one, so that a client opening sessions in a loop takes
// the place of nobody's sessions but its own, and at most n of the
// table's.
func WithSessionsPerPrincipal(n int) Option {
	return func(c *config) {
		positive(&c.maxPrincipal, n)
	}
}

// Handler serves one MCP server over Streamable HTTP.
type Handler struct {
	srv      engine.Server
	cfg      config
	sessions *legacy.Table // nil with WithoutLegacy
	refusals refusals
	parker   *parked.Parker // nil without WithParking, or without epoll
	// mcp is the server, which Serve shuts down to end its listens.
	mcp *server.Server
	// lazyParker parks the listens of a Handler without WithParking
	// served by Serve, made on the first.
	parkOnce   sync.Once
	lazyParker atomic.Pointer[parked.Parker]
}

// New returns a Handler for srv.
func New(srv *server.Server, opts ...Option) *Handler {
	cfg := config{
		allowedHosts:   map[string]bool{},
		allowedOrigins: map[string]bool{},
		maxBody:        4 << 20,
		maxDepth:       jsonrpc.DefaultMaxDepth,
		writeTimeout:   10 * time.Second,
		maxSessions:    DefaultMaxSessions,
		maxPrincipal:   DefaultSessionsPerPrincipal,
		sessionIdle:    30 * time.Minute,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	h := &Handler{srv: engine.Of(srv), cfg: cfg, mcp: srv}
	if cfg.park {
		h.parker = parked.New(parked.Config{WriteTimeout: cfg.writeTimeout})
	}
	if !cfg.modernOnly {
		h.sessions = legacy.NewTable(h.srv, cfg.maxSessions, cfg.maxPrincipal, cfg.sessionIdle)
	}
	return h
}

// SessionCount returns the number of live 2025-11-25 sessions, for
// monitoring: each holds a little state until it ends, expires or is
// evicted (see WithSessionLimits).
func (h *Handler) SessionCount() int {
	if h.sessions == nil {
		return 0
	}
	return h.sessions.Len()
}

// SessionStats is what the handler's 2025-11-25 sessions hold and how
// they ended, for monitoring (see metrics.RegisterSessions).
type SessionStats struct {
	// Open is the number of live sessions.
	Open int
	// Evicted counts sessions ended for a newer one of the same
	// principal at its quota (WithSessionsPerPrincipal); Expired,
	// sessions ended for being idle; Refused, initialize requests
	// refused because the table was full (WithSessionLimits).
	Evicted, Expired, Refused int64
}

// SessionStats returns what the sessions hold now and did so far.
func (h *Handler) SessionStats() SessionStats {
	if h.sessions == nil {
		return SessionStats{}
	}
	st := h.sessions.Stats()
	return SessionStats{Open: st.Open, Evicted: st.Evicted, Expired: st.Expired, Refused: st.Refused}
}

func isLoopbackHost(host string) bool {
	host = strings.ToLower(host)
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.Trim(hostport, "[]")
}

func (h *Handler) hostAllowed(r *http.Request) bool {
	if h.cfg.anyHost {
		return true
	}
	host := hostOnly(r.Host)
	return isLoopbackHost(host) || h.cfg.allowedHosts[strings.ToLower(host)]
}

func (h *Handler) originAllowed(origin string) bool {
	if h.cfg.anyOrigin {
		return true
	}
	o := strings.ToLower(strings.TrimRight(origin, "/"))
	if h.cfg.allowedOrigins[o] {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	return isLoopbackHost(u.Hostname())
}

// maxRefusalsRemembered bounds the refused values remembered for logging
// once; past it the memory starts over, so a flood of distinct values
// costs bounded memory and at worst one line per value per round.
const maxRefusalsRemembered = 1024

// refusals remembers which refused Host and Origin values were logged.
type refusals struct {
	mu   sync.Mutex
	seen map[string]struct{}
}

// first reports whether key is refused for the first time.
func (r *refusals) first(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.seen[key]; ok {
		return false
	}
	if r.seen == nil || len(r.seen) >= maxRefusalsRemembered {
		r.seen = make(map[string]struct{})
	}
	r.seen[key] = struct{}{}
	return true
}

// logRefusal logs a request refused for its Host or Origin header, once
// per refused value.
func (h *Handler) logRefusal(header, value string, r *http.Request) {
	if len(value) > 200 {
		value = value[:200]
	}
	if h.refusals.first(header + "\x00" + value) {
		h.cfg.logger.Info("streamhttp: refused a request for its "+header+" header (see WithAllowedHosts, WithAllowedOrigins)",
			"header", header, "value", value, "remote", r.RemoteAddr)
	}
}

// writeError writes a JSON-RPC error body with the given HTTP status.
func (h *Handler) writeError(w http.ResponseWriter, status int, id jsonrpc.ID, code jsonrpc.Code, msg string, data any) {
	body := jsonrpc.AppendErrorResponse(nil, id, jsonrpc.NewError(code, msg, data))
	h.writeJSON(w, status, body)
}

// writeJSON answers with status and body (nil for none), under the write
// timeout.
func (h *Handler) writeJSON(w http.ResponseWriter, status int, body []byte) {
	a := answerWriter{w: w, rc: http.NewResponseController(w), timeout: h.cfg.writeTimeout}
	a.plain(status, body)
}

// ServeHTTP answers one POST of the Streamable HTTP transport (and, for
// 2025-11-25 sessions, their GET stream and DELETE). Checks run cheapest
// and most hostile first: Host and Origin, method, content type, body size,
// JSON syntax and depth, then the MCP headers against the body.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.hostAllowed(r) {
		h.logRefusal("Host", r.Host, r)
		h.writeError(w, http.StatusForbidden, jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "Forbidden: Host not allowed", nil)
		return
	}
	if origin := r.Header.Get("Origin"); origin != "" && !h.originAllowed(origin) {
		h.logRefusal("Origin", origin, r)
		h.writeError(w, http.StatusForbidden, jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "Forbidden: Origin not allowed", nil)
		return
	}
	sid := r.Header.Get(mcp.HeaderSessionID)
	if sid != "" && !h.cfg.modernOnly && r.Method != http.MethodPost {
		h.serveSessionMethod(w, r, sid)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.writeError(w, http.StatusMethodNotAllowed, jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "Method not allowed: use POST", nil)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, _ := strings.Cut(ct, ";"); !strings.EqualFold(strings.TrimSpace(mt), "application/json") {
			h.writeError(w, http.StatusUnsupportedMediaType, jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "Unsupported Content-Type: send application/json", nil)
			return
		}
	}
	body, err := readBody(r.Body, r.ContentLength, h.cfg.maxBody)
	if err != nil {
		switch {
		case errors.Is(err, errTooLarge):
			h.writeError(w, http.StatusRequestEntityTooLarge, jsonrpc.ID{}, jsonrpc.CodeInvalidRequest,
				"Request body too large (limit "+strconv.FormatInt(h.cfg.maxBody, 10)+" bytes)", nil)
		case errors.Is(err, os.ErrDeadlineExceeded):
			// A read deadline the server set on the body (see the package
			// doc): the error says which.
			h.writeError(w, http.StatusRequestTimeout, jsonrpc.ID{}, jsonrpc.CodeParseError, "Request Timeout: "+err.Error(), nil)
		default:
			h.writeError(w, http.StatusBadRequest, jsonrpc.ID{}, jsonrpc.CodeParseError, "Parse error: could not read body", nil)
		}
		return
	}
	msg, err := jsonrpc.Decode(body, h.cfg.maxDepth)
	if err != nil {
		var de *jsonrpc.DecodeError
		if errors.As(err, &de) {
			h.writeJSON(w, http.StatusBadRequest, jsonrpc.AppendErrorResponse(nil, de.ID, de.RPCError()))
			return
		}
		h.writeError(w, http.StatusBadRequest, jsonrpc.ID{}, jsonrpc.CodeParseError, "Parse error", nil)
		return
	}
	if msg.IsResponse() {
		// A response answers a 2025-11-25 session's server; in 2026-07-28
		// there is nothing it could answer.
		if !h.cfg.modernOnly && sid != "" {
			h.serveLegacy(w, r, msg, nil, nil, sid)
			return
		}
		h.writeError(w, http.StatusBadRequest, msg.ID, jsonrpc.CodeInvalidRequest, "Invalid Request: clients do not send responses in this protocol version", nil)
		return
	}
	call, rep := engine.Parse(msg)
	if !h.cfg.modernOnly && call.Era(r.Header.Get(protocolVersionKey)) == engine.Legacy {
		h.serveLegacy(w, r, msg, call, rep, sid)
		return
	}
	if msg.IsNotification() {
		h.writeJSON(w, http.StatusAccepted, nil)
		return
	}
	if rep != nil {
		h.writeJSON(w, statusOf(rep), rep.Body)
		return
	}
	out := h.newResponder(w, r)
	out.env.h = r.Header
	fd := frontDoorOf(r)
	if fd != nil {
		fd.note(h.mcp)
	}
	out.parker, out.park = h.parkerFor(fd)
	out.req, out.writeTimeout = r, h.cfg.writeTimeout
	reply := h.srv.Serve(r.Context(), call, h.principalOf(r), &out.env, out)
	out.finish(reply)
}

// statusOf maps a reply to the HTTP status Streamable HTTP gives it
// while the response has not turned into a stream.
func statusOf(rep *engine.Reply) int {
	switch rep.Outcome {
	case engine.Refused:
		return http.StatusBadRequest
	case engine.UnknownMethod:
		return http.StatusNotFound
	case engine.Silent:
		if rep.Body == nil {
			return http.StatusNoContent
		}
	}
	return http.StatusOK
}

var errTooLarge = errors.New("body too large")

// readBody reads a body of at most max bytes. A body that declares its
// size (size >= 0) is read into a buffer of that size, where one grown
// as it filled was copied and reallocated on the way.
func readBody(r io.Reader, size, max int64) ([]byte, error) {
	n := int64(512)
	if size >= 0 && size <= max {
		n = size + 1 // the one byte more sees the end without growing
	}
	buf := make([]byte, 0, n)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		room := buf[len(buf):cap(buf)]
		if left := max + 1 - int64(len(buf)); int64(len(room)) > left {
			room = room[:left]
		}
		m, err := r.Read(room)
		buf = buf[:len(buf)+m]
		if int64(len(buf)) > max {
			return nil, errTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// protocolVersionKey is mcp.HeaderProtocolVersion as net/http keys it:
// a header read by its canonical key is not canonicalized first, which
// allocates on every request.
const protocolVersionKey = "Mcp-Protocol-Version"

// envelope is a request's MCP headers, checked against its body by the
// core in the order peers rely on (see engine.Envelope).
type envelope struct{ h http.Header }

// Version returns the MCP-Protocol-Version header.
func (e *envelope) Version() (string, error) {
	hv, ok := single(e.h, protocolVersionKey)
	if !ok || hv == "" {
		return "", errors.New("missing or repeated " + mcp.HeaderProtocolVersion + " header")
	}
	if !xheader.Safe(hv) {
		return "", errors.New(mcp.HeaderProtocolVersion + " has invalid characters")
	}
	return hv, nil
}

// TraceHeaders returns the request's W3C trace context headers, for a
// peer that sends them instead of (or beside) _meta's.
func (e *envelope) TraceHeaders() (parent, state string) {
	return e.h.Get("Traceparent"), e.h.Get("Tracestate")
}

// Route checks Mcp-Method, Mcp-Name and the Mcp-Param-* headers.
func (e *envelope) Route(c *engine.Call, params []engine.HeaderParam) error {
	method, ok := single(e.h, mcp.HeaderMethod)
	if !ok || method == "" {
		return errors.New("missing " + mcp.HeaderMethod + " header")
	}
	if method != c.Method() {
		return errors.New(mcp.HeaderMethod + " does not match the body's method")
	}
	if want, needed := c.NameParam(); needed {
		got, ok := single(e.h, mcp.HeaderName)
		if !ok {
			return errors.New("missing " + mcp.HeaderName + " header")
		}
		dec, err := xheader.Decode(got)
		if err != nil {
			return errors.New(mcp.HeaderName + " has invalid characters")
		}
		if dec != want {
			return errors.New(mcp.HeaderName + " does not match the body")
		}
	}
	for _, p := range params {
		if msg := checkParam(e.h, p); msg != "" {
			return errors.New(msg)
		}
	}
	return nil
}

func checkParam(hdr http.Header, p engine.HeaderParam) string {
	vals := hdr.Values(p.Header)
	if len(p.Value) == 0 {
		if len(vals) > 0 {
			return p.Header + " is present but the argument is absent"
		}
		return ""
	}
	if len(vals) != 1 {
		return "missing or repeated " + p.Header + " header"
	}
	got, err := xheader.Decode(vals[0])
	if err != nil {
		return p.Header + ": " + err.Error()
	}
	if !xheader.Matches(p.Type, p.Value, got) {
		return p.Header + " does not match the argument"
	}
	return ""
}

func single(h http.Header, name string) (string, bool) {
	v := h.Values(name)
	if len(v) != 1 {
		return "", false
	}
	return v[0], true
}

// writeChunk is the most one Write of an answer hands net/http, so that
// a long body is written in pieces, each under the write timeout: a
// reader that keeps reading, however slowly, is not cut, and one that
// stops is cut within the timeout.
const writeChunk = 64 << 10

// answerWriter writes one request's answer, stream or plain JSON, with
// every write under the write timeout. net/http sets no deadline of its
// own here, so without one a client that asks for a large answer and
// never reads would hold the handler's goroutine and the encoded body for
// ever.
type answerWriter struct {
	w        http.ResponseWriter
	rc       *http.ResponseController
	timeout  time.Duration
	broken   error // the first failed write's error; every later write fails with it
	deadline time.Time
	raw      net.Conn // the connection, once taken over from net/http (see responder.Park)
	// cut, for a stream over HTTP/2, times each write in place of the
	// deadline, which HTTP/2 would let cut the stream between writes.
	cut *writecut.Cutter
}

// arm moves the write deadline. Moving it costs a poller update; in a
// burst of writes it is moved only once half of it is used up, so a stuck
// write is still cut within timeout.
func (a *answerWriter) arm() {
	if a.timeout <= 0 {
		return
	}
	if a.cut != nil {
		a.cut.Begin()
		return
	}
	if now := time.Now(); a.deadline.Sub(now) < a.timeout/2 {
		a.deadline = now.Add(a.timeout)
		_ = a.rc.SetWriteDeadline(a.deadline)
	}
}

// write writes b and flushes it to the client.
func (a *answerWriter) write(b []byte) error {
	if a.broken != nil {
		return a.broken
	}
	if a.raw != nil {
		return a.writeRaw(b)
	}
	for {
		n := min(len(b), writeChunk)
		a.arm()
		_, err := a.w.Write(b[:n])
		a.disarm()
		if err != nil {
			a.broken = err
			return err
		}
		if b = b[n:]; len(b) == 0 {
			break
		}
	}
	a.arm()
	err := a.rc.Flush()
	a.disarm()
	if err != nil {
		a.broken = err
		return err
	}
	return nil
}

// disarm ends the timing of a write over HTTP/2; over HTTP/1.1 the
// deadline stays until the next write moves it.
func (a *answerWriter) disarm() {
	if a.cut != nil {
		a.cut.End()
	}
}

// plain answers with status and body (nil for none). It sets the length
// even of an empty body, so that flushing it (which sends the headers)
// does not turn the answer into a chunked one.
func (a *answerWriter) plain(status int, body []byte) {
	hdr := a.w.Header()
	vals := make([]string, 2) // one allocation for both headers' values
	if body != nil {
		vals[0] = "application/json"
		hdr["Content-Type"] = vals[0:1:1]
	}
	if status != http.StatusNoContent && status != http.StatusNotModified && status >= 200 {
		vals[1] = strconv.Itoa(len(body))
		hdr["Content-Length"] = vals[1:2:2]
	}
	a.w.WriteHeader(status)
	_ = a.write(body)
	a.clearDeadline()
}

// clearDeadline lifts the write deadline before the connection serves its
// next request. A broken answer keeps it, so that net/http's last flush
// of what it still buffers is cut at once instead of blocking.
func (a *answerWriter) clearDeadline() {
	if a.cut != nil {
		a.cut.Close()
		return
	}
	if !a.deadline.IsZero() && a.broken == nil && a.raw == nil {
		_ = a.rc.SetWriteDeadline(time.Time{})
		a.deadline = time.Time{}
	}
}

// responder is the engine.Stream of one POST. It answers with plain JSON
// unless something is sent before the response, in which case it switches
// to SSE for the rest of the request.
type responder struct {
	mu sync.Mutex
	answerWriter
	sse bool
	buf []byte
	env envelope

	// What parking a listen needs (see Park): the request, set for
	// 2026-07-28 requests only, and the handler's parker.
	req          *http.Request
	parker       *parked.Parker
	park         bool          // WithParking
	writeTimeout time.Duration // the handler's, for a listen parked on an HTTP/2 stream
	parked       bool          // the listen went to the parker, connection and all
}

func (h *Handler) newResponder(w http.ResponseWriter, r *http.Request) *responder {
	o := &responder{answerWriter: answerWriter{w: w, rc: http.NewResponseController(w), timeout: h.cfg.writeTimeout}}
	if h.cfg.writeTimeout > 0 && writecut.Applies(r) {
		if writecut.TimedWithin(w, h.cfg.writeTimeout) {
			o.timeout = 0 // each write is cut beneath, within the timeout
		} else {
			o.cut = writecut.New(o.rc, h.cfg.writeTimeout, nil)
		}
	}
	return o
}

func (o *responder) startSSE() {
	hdr := o.w.Header()
	hdr["Content-Type"] = []string{"text/event-stream"}
	hdr["Cache-Control"] = []string{"no-cache, no-transform"}
	hdr["X-Accel-Buffering"] = []string{"no"}
	o.w.WriteHeader(http.StatusOK)
	o.sse = true
}

// maxKeptBuffer bounds the buffer a stream keeps between writes. A
// listen's acknowledgement echoes its filter, which may be megabytes,
// and a listen lasts for hours: a buffer kept at that size would cost
// each listen as much again as everything it follows.
const maxKeptBuffer = 64 << 10

// Send writes one message as an SSE event.
func (o *responder) Send(msg []byte) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.sse {
		o.startSSE()
	}
	o.buf = sse.AppendEvent(o.buf[:0], msg)
	err := o.write(o.buf)
	if cap(o.buf) > maxKeptBuffer {
		o.buf = nil
	}
	return err
}

// KeepAlive writes an SSE comment.
func (o *responder) KeepAlive() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.sse {
		o.startSSE()
	}
	return o.write(sse.AppendComment(o.buf[:0], "keep-alive"))
}

func (o *responder) finish(rep engine.Reply) {
	o.mu.Lock()
	defer o.mu.Unlock()
	defer rep.Release() // the body is written (or dropped) by the time this runs
	if o.parked {
		return // the parker writes the listen's end
	}
	if o.raw != nil {
		o.finishRaw(rep)
		return
	}
	if rep.Outcome == engine.Broken {
		panic(http.ErrAbortHandler)
	}
	defer o.clearDeadline()
	if rep.Body == nil {
		if !o.sse {
			// The client went away, or a notification: nothing to say.
			o.plain(statusOf(&rep), nil)
		}
		return
	}
	if o.sse {
		o.buf = sse.AppendEvent(o.buf[:0], rep.Body)
		_ = o.write(o.buf)
		return
	}
	o.plain(statusOf(&rep), rep.Body)
}
