package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/hub"
	"tidings/internal/xheader"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// Call is a decoded request, ready for transport checks and dispatch.
type Call struct {
	// Msg is the message as decoded.
	Msg      *jsonrpc.Message
	p        params
	metaErr  error
	paramErr error
}

// params is the union of every method's params; one strict decode serves
// all methods, and each method reads the fields it owns.
type params struct {
	Meta           *mcp.RequestMeta          `json:"_meta"`
	Cursor         *string                   `json:"cursor"`
	Name           *string                   `json:"name"`
	URI            *string                   `json:"uri"`
	Arguments      jsontext.Value            `json:"arguments,omitzero"`
	InputResponses map[string]jsontext.Value `json:"inputResponses"`
	RequestState   *string                   `json:"requestState"`
	Notifications  *mcp.SubscriptionFilter   `json:"notifications"`
	Ref            *mcp.CompleteRef          `json:"ref"`
	Argument       *mcp.CompleteArgument     `json:"argument"`
	Context        *mcp.CompleteContext      `json:"context"`
	RequestID      jsontext.Value            `json:"requestId,omitzero"`
}

// Reply is the outcome of serving a call.
type Reply struct {
	// Body is the encoded response, or nil when none is due (a
	// notification, or a listen ended by the client or by a broken stream).
	Body []byte
	// Status is the HTTP status Streamable HTTP should use when the
	// response has not started streaming yet.
	Status int
	// Abort asks the transport to cut the connection without a clean end,
	// so the client knows the stream broke (a stuck listen reader).
	Abort bool
	// ListenEnded marks the graceful end of a listen (the complete result).
	ListenEnded bool

	// buf and pool, when set, let Release recycle Body's buffer.
	buf  *[]byte
	pool *sync.Pool
}

// Parse decodes a request's params. It returns a ready error reply when
// the params are not an object of the right shape.
//
// Only the members the method uses are decoded, so a stray member of
// another method's shape cannot make a request fail. Problems in _meta or
// in the method's own members are kept and reported once the transport
// has checked its headers (which take precedence), as -32602.
func (s *Server) Parse(m *jsonrpc.Message) (*Call, *Reply) {
	c := &Call{Msg: m}
	var fields map[string]jsontext.Value
	if err := jsonrpc.UnmarshalParams(m.Params, &fields); err != nil {
		r := s.errorReply(m.ID, jsonrpc.CodeInvalidParams, "Invalid params: "+err.Error(), nil)
		return nil, &r
	}
	if raw, ok := fields["_meta"]; ok && string(raw) != "null" {
		var meta mcp.RequestMeta
		if err := jsonrpc.UnmarshalParams(raw, &meta); err != nil || raw[0] != '{' {
			c.metaErr = errors.New("_meta must be an object of the defined shape")
		} else {
			c.p.Meta = &meta
		}
	}
	for _, name := range paramFields(m.Method) {
		raw, ok := fields[name]
		if !ok || c.paramErr != nil {
			continue
		}
		if err := c.p.decode(name, raw); err != nil {
			c.paramErr = fmt.Errorf("%s: %w", name, err)
		}
	}
	return c, nil
}

// paramFields lists the members of params a method reads.
func paramFields(method string) []string {
	switch method {
	case mcp.MethodToolsList, mcp.MethodPromptsList, mcp.MethodResourcesList, mcp.MethodResourcesTemplates:
		return []string{"cursor"}
	case mcp.MethodToolsCall, mcp.MethodPromptsGet:
		return []string{"name", "arguments", "inputResponses", "requestState"}
	case mcp.MethodResourcesRead:
		return []string{"uri", "inputResponses", "requestState"}
	case mcp.MethodResourcesSubscribe, mcp.MethodResourcesUnsubscribe:
		return []string{"uri"}
	case mcp.MethodListen:
		return []string{"notifications"}
	case mcp.MethodComplete:
		return []string{"ref", "argument", "context"}
	case mcp.NotifyCancelled:
		return []string{"requestId"}
	}
	return nil
}

// decode reads one member of params, strictly.
func (p *params) decode(name string, raw jsontext.Value) error {
	var v any
	switch name {
	case "cursor":
		v = &p.Cursor
	case "name":
		v = &p.Name
	case "uri":
		v = &p.URI
	case "arguments":
		p.Arguments = raw
		return nil
	case "inputResponses":
		v = &p.InputResponses
	case "requestState":
		v = &p.RequestState
	case "notifications":
		v = &p.Notifications
	case "ref":
		v = &p.Ref
	case "argument":
		v = &p.Argument
	case "context":
		v = &p.Context
	case "requestId":
		p.RequestID = raw
		return nil
	default:
		return nil
	}
	return jsonrpc.UnmarshalParams(raw, v)
}

// paramError is the reply for a request whose own members are malformed.
func (s *Server) paramError(c *Call) *Reply {
	if c.paramErr == nil {
		return nil
	}
	r := s.errorReply(c.Msg.ID, jsonrpc.CodeInvalidParams, "Invalid params: "+c.paramErr.Error(), nil)
	return &r
}

// Method returns the call's method.
func (c *Call) Method() string { return c.Msg.Method }

// ProtocolVersion returns the _meta protocol version, if present.
func (c *Call) ProtocolVersion() (string, bool) {
	if c.p.Meta == nil || c.p.Meta.ProtocolVersion == nil {
		return "", false
	}
	return *c.p.Meta.ProtocolVersion, true
}

// NameParam returns what Mcp-Name must carry for this call: the tool or
// prompt name, or the resource URI. ok is false for other methods.
func (c *Call) NameParam() (value string, ok bool) {
	switch c.Msg.Method {
	case mcp.MethodToolsCall, mcp.MethodPromptsGet:
		if c.p.Name != nil {
			return *c.p.Name, true
		}
		return "", true
	case mcp.MethodResourcesRead:
		if c.p.URI != nil {
			return *c.p.URI, true
		}
		return "", true
	}
	return "", false
}

// Arguments returns the raw tools/call arguments.
func (c *Call) Arguments() jsontext.Value { return c.p.Arguments }

// HeaderParam is one Mcp-Param-* header a tool call must carry.
type HeaderParam struct {
	// Header is the canonical header name, "Mcp-Param-<Name>".
	Header string
	// Type is the property's JSON Schema type.
	Type string
	// Value is the raw JSON of the argument; nil when absent or null.
	Value jsontext.Value
}

// HeaderParams returns, for a tools/call, the x-mcp-header parameters of
// the named tool with the argument values they mirror. A tool the
// principal may not see is treated as unknown, so that a header mismatch
// (-32020) does not reveal that it exists.
func (s *Server) HeaderParams(c *Call, principal string) []HeaderParam {
	if c.Msg.Method != mcp.MethodToolsCall || c.p.Name == nil {
		return nil
	}
	e, ok := s.tools.load().get(*c.p.Name)
	if !ok || len(e.val.headers) == 0 || !s.sees(&Request{Principal: principal}, ListTools, *c.p.Name) {
		return nil
	}
	out := make([]HeaderParam, 0, len(e.val.headers))
	for _, h := range e.val.headers {
		v, _ := xheader.Lookup(c.p.Arguments, h.Path)
		out = append(out, HeaderParam{Header: h.Header(), Type: h.Type, Value: v})
	}
	return out
}

// CheckMeta returns the error reply for a request whose _meta lacks a
// field every 2026-07-28 request must carry (protocolVersion or
// clientCapabilities), or nil. Transports run it before comparing headers
// with the body, since there is nothing to compare against without it.
func (s *Server) CheckMeta(c *Call) *Reply {
	meta := c.p.Meta
	var missing string
	switch {
	case c.metaErr != nil:
		r := s.errorReply(c.Msg.ID, jsonrpc.CodeInvalidParams, "Invalid params: "+c.metaErr.Error(), nil)
		r.Status = http.StatusBadRequest
		return &r
	case meta == nil:
		missing = "_meta"
	case meta.ProtocolVersion == nil:
		missing = "_meta." + mcp.MetaProtocolVersion
	case meta.ClientCapabilities == nil:
		missing = "_meta." + mcp.MetaClientCapabilities
	default:
		return nil
	}
	r := s.errorReply(c.Msg.ID, jsonrpc.CodeInvalidParams, "Invalid params: missing "+missing, nil)
	r.Status = http.StatusBadRequest
	return &r
}

// SupportedVersions lists the protocol versions served statelessly.
func (s *Server) SupportedVersions() []string { return []string{mcp.Version} }

// VersionError builds the -32022 reply for an unsupported version.
func (s *Server) VersionError(id jsonrpc.ID, requested string) Reply {
	return s.errorReply(id, mcp.CodeUnsupportedProtocolVersion,
		"Unsupported protocol version: "+strconv.Quote(requested),
		map[string]any{"supported": s.SupportedVersions(), "requested": requested})
}

// ErrorReply builds an error reply with the HTTP status MCP assigns to code.
func (s *Server) ErrorReply(id jsonrpc.ID, code int, msg string, data any) Reply {
	return s.errorReply(id, code, msg, data)
}

func (s *Server) errorReply(id jsonrpc.ID, code int, msg string, data any) Reply {
	return Reply{Body: jsonrpc.AppendErrorResponse(nil, id, jsonrpc.NewError(code, msg, data)), Status: StatusFor(code)}
}

// StatusFor maps an MCP error code to the HTTP status Streamable HTTP uses.
func StatusFor(code int) int {
	switch code {
	case mcp.CodeHeaderMismatch, mcp.CodeMissingRequiredCapability, mcp.CodeUnsupportedProtocolVersion:
		return http.StatusBadRequest
	case jsonrpc.CodeMethodNotFound:
		return http.StatusNotFound
	case jsonrpc.CodeParseError, jsonrpc.CodeInvalidRequest:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

func (s *Server) isSupported(v string) bool { return v == mcp.Version }

// Serve runs one request to its end. principal is the caller's
// authorization context ("" for none). ctx ends when the client cancels
// (stdio notifications/cancelled, or the HTTP stream closing).
func (s *Server) Serve(ctx context.Context, c *Call, principal string, out Stream) Reply {
	m := c.Msg
	if m.IsNotification() {
		return Reply{Status: http.StatusAccepted}
	}
	if r := s.CheckMeta(c); r != nil {
		return *r
	}
	meta := c.p.Meta
	if !s.isSupported(*meta.ProtocolVersion) {
		return s.VersionError(m.ID, *meta.ProtocolVersion)
	}
	if r := s.paramError(c); r != nil {
		return *r
	}
	req := &Request{
		ID:              m.ID,
		Method:          m.Method,
		ProtocolVersion: *meta.ProtocolVersion,
		Capabilities:    *meta.ClientCapabilities,
		ClientInfo:      meta.ClientInfo,
		Principal:       principal,
		InputResponses:  c.p.InputResponses,
		logLevel:        -1,
		progress:        meta.ProgressToken,
		out:             &requestOut{stream: out},
	}
	if meta.LogLevel != nil {
		sev, ok := meta.LogLevel.Severity()
		if !ok {
			return s.errorReply(m.ID, jsonrpc.CodeInvalidParams, "Invalid params: unknown log level "+strconv.Quote(string(*meta.LogLevel)), nil)
		}
		req.logLevel = sev
	}
	defer req.out.finish()
	ctx = context.WithValue(ctx, ctxKey{}, req)

	switch m.Method {
	case mcp.MethodDiscover:
		return s.discover(req)
	case mcp.MethodListen:
		return s.listen(ctx, c, req, out)
	}
	if r, ok := s.primitive(ctx, c, req); ok {
		return r
	}
	return s.errorReply(m.ID, jsonrpc.CodeMethodNotFound, "Method not found: "+strconv.Quote(m.Method), nil)
}

// primitive serves the methods both protocol eras share: the lists, tool
// calls, prompts, reads and completion, each only while the server
// advertises its capability. ok is false for any other method.
func (s *Server) primitive(ctx context.Context, c *Call, req *Request) (r Reply, ok bool) {
	switch c.Msg.Method {
	case mcp.MethodToolsList:
		if s.advertisesTools() {
			return listPage(s, s.tools, ListTools, "tools", c, req), true
		}
	case mcp.MethodPromptsList:
		if s.advertisesPrompts() {
			return listPage(s, s.prompts, ListPrompts, "prompts", c, req), true
		}
	case mcp.MethodResourcesList:
		if s.advertisesResources() {
			return listPage(s, s.resources, ListResources, "resources", c, req), true
		}
	case mcp.MethodResourcesTemplates:
		if s.advertisesResources() {
			return listPage(s, s.templates, ListTemplates, "resourceTemplates", c, req), true
		}
	case mcp.MethodToolsCall:
		if s.advertisesTools() {
			return s.callTool(ctx, c, req), true
		}
	case mcp.MethodPromptsGet:
		if s.advertisesPrompts() {
			return s.getPrompt(ctx, c, req), true
		}
	case mcp.MethodResourcesRead:
		if s.advertisesResources() {
			return s.readResource(ctx, c, req), true
		}
	case mcp.MethodComplete:
		if s.completer() != nil {
			return s.completeCall(ctx, c, req), true
		}
	}
	return Reply{}, false
}

func (s *Server) advertisesTools() bool {
	return s.cfg.capabilities.tools || s.tools.used.Load()
}

func (s *Server) advertisesPrompts() bool {
	return s.cfg.capabilities.prompts || s.prompts.used.Load()
}

func (s *Server) advertisesResources() bool {
	return s.cfg.capabilities.resources || s.resources.used.Load() || s.templates.used.Load()
}

// Capabilities returns what the server advertises right now.
func (s *Server) Capabilities() mcp.ServerCaps {
	var c mcp.ServerCaps
	c.Logging = &struct{}{}
	if s.advertisesTools() {
		c.Tools = &mcp.ListCaps{ListChanged: true}
	}
	if s.advertisesPrompts() {
		c.Prompts = &mcp.ListCaps{ListChanged: true}
	}
	if s.advertisesResources() {
		c.Resources = &mcp.ResourceCaps{Subscribe: true, ListChanged: true}
	}
	if s.cfg.capabilities.completions || s.completer() != nil {
		c.Completions = &struct{}{}
	}
	return c
}

// ---- results ----

// resultTail appends the fields every complete result shares and closes
// the object: resultType, optional cache hints, and _meta with serverInfo.
func (s *Server) resultTail(dst []byte, p *CachePolicy, legacy bool) []byte {
	if legacy {
		// 2025-11-25 results have neither resultType nor cache hints; a
		// trailing comma from the caller is closed off instead.
		if dst[len(dst)-1] == ',' {
			dst = dst[:len(dst)-1]
		}
		return append(dst, '}')
	}
	dst = append(dst, `"resultType":"complete"`...)
	if p != nil {
		dst = append(dst, `,"ttlMs":`...)
		dst = strconv.AppendInt(dst, p.ttlMs(), 10)
		dst = append(dst, `,"cacheScope":"`...)
		dst = append(dst, p.scope()...)
		dst = append(dst, '"')
	}
	if !s.cfg.noServerInfo {
		dst = append(dst, `,"_meta":{"`+mcp.MetaServerInfo+`":`...)
		dst = append(dst, s.infoJSON...)
		dst = append(dst, '}')
	}
	return append(dst, '}')
}

// encodeResult marshals a handler's result object and adds resultType,
// cache hints and serverInfo to it.
func (s *Server) encodeResult(req *Request, v any, meta mcp.Meta, p *CachePolicy, resultType string) ([]byte, error) {
	b, err := jsonrpc.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[0] != '{' {
		return nil, errors.New("result is not an object")
	}
	if req.legacy {
		return s.legacyResult(b, meta)
	}
	out := make([]byte, 0, len(b)+len(s.infoJSON)+96)
	out = append(out, '{')
	if inner := b[1 : len(b)-1]; len(inner) > 0 {
		out = append(out, inner...)
		out = append(out, ',')
	}
	out = append(out, `"resultType":`...)
	out, _ = jsontext.AppendQuote(out, resultType)
	if p != nil {
		out = append(out, `,"ttlMs":`...)
		out = strconv.AppendInt(out, p.ttlMs(), 10)
		out = append(out, `,"cacheScope":"`...)
		out = append(out, p.scope()...)
		out = append(out, '"')
	}
	if len(meta) > 0 || !s.cfg.noServerInfo {
		m := maps.Clone(meta)
		if m == nil {
			m = mcp.Meta{}
		}
		if !s.cfg.noServerInfo {
			m[mcp.MetaServerInfo] = s.infoJSON
		}
		mb, err := jsonrpc.Marshal(m)
		if err != nil {
			return nil, err
		}
		out = append(out, `,"_meta":`...)
		out = append(out, mb...)
	}
	return append(out, '}'), nil
}

// ---- server/discover ----

func (s *Server) discover(req *Request) Reply {
	res := struct {
		SupportedVersions []string       `json:"supportedVersions"`
		Capabilities      mcp.ServerCaps `json:"capabilities"`
		Instructions      string         `json:"instructions,omitempty"`
	}{s.SupportedVersions(), s.Capabilities(), s.cfg.instructions}
	p := s.cfg.policies[ListDiscover]
	b, err := s.encodeResult(req, res, nil, &p, mcp.ResultComplete)
	if err != nil {
		return s.internal(req.ID, err)
	}
	return s.okReply(req.ID, b)
}

func (s *Server) internal(id jsonrpc.ID, err error) Reply {
	s.log.Error("mcp: internal error", "err", err)
	return s.errorReply(id, jsonrpc.CodeInternalError, "Internal error", nil)
}

// ---- lists ----

func listPage[T any](s *Server, r *registry[T], l List, field string, c *Call, req *Request) Reply {
	snap := r.load()
	p := s.cfg.policies[l]
	var after string
	hasAfter := false
	binding := strconv.Itoa(int(l)) + "\x00" + req.Principal
	if c.p.Cursor != nil {
		key, err := s.seal.open(purposeCursor, *c.p.Cursor, binding, s.cfg.now())
		if err != nil {
			return s.errorReply(req.ID, jsonrpc.CodeInvalidParams, "Invalid cursor", nil)
		}
		after, hasAfter = string(key), true
	}
	// The cached first page is the anonymous one: its nextCursor is bound
	// to the empty principal, so other principals must not be served it;
	// nor may anyone when lists depend on who asks.
	cacheable := !hasAfter && req.Principal == "" && s.cfg.visible == nil
	if cacheable {
		if cached := snap.firstPage[boolIndex(req.legacy)].Load(); cached != nil {
			return s.okReply(req.ID, *cached)
		}
	}
	var keep func(string) bool
	if s.cfg.visible != nil {
		keep = func(key string) bool { return s.cfg.visible(req.Principal, l, key) }
		p.Scope = mcp.ScopePrivate
	}
	items, more := snap.page(after, hasAfter, s.cfg.pageSize, keep)
	size := 64 + len(s.infoJSON)
	for _, e := range items {
		size += len(e.json) + 1
	}
	b := make([]byte, 0, size+128)
	b = append(b, `{"`...)
	b = append(b, field...)
	b = append(b, `":[`...)
	for i, e := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e.json...)
	}
	b = append(b, "],"...)
	if more {
		b = append(b, `"nextCursor":`...)
		b, _ = jsontext.AppendQuote(b, s.seal.seal(purposeCursor, []byte(items[len(items)-1].key), binding, time.Time{}))
		b = append(b, ',')
	}
	b = s.resultTail(b, &p, req.legacy)
	if cacheable {
		snap.firstPage[boolIndex(req.legacy)].Store(&b)
	}
	return s.okReply(req.ID, b)
}

// sees reports whether the caller may see the item keyed key of list l.
func (s *Server) sees(req *Request, l List, key string) bool {
	return s.cfg.visible == nil || s.cfg.visible(req.Principal, l, key)
}

// ---- MRTR helpers ----

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// maxInputRounds bounds how often one legacy request asks its client for
// input before giving up.
const maxInputRounds = 8

// withInput runs a handler. On the 2026-07-28 wire an InputRequired goes
// back to the client as an interim result; on a legacy session, where the
// server may send requests, the transport asks the client directly and the
// handler runs again with the answers — so one handler serves both eras.
func withInput[T any](ctx context.Context, req *Request, call func() (T, error)) (T, error) {
	for round := 0; ; round++ {
		v, err := call()
		var ir *InputRequired
		if req.askInput == nil || !errors.As(err, &ir) || round >= maxInputRounds {
			return v, err
		}
		answers, aerr := req.askInput(ctx, ir)
		if aerr != nil {
			var zero T
			return zero, aerr
		}
		req.InputResponses, req.state = answers, ir.State
	}
}

func stateBinding(method, name, principal string) string {
	return method + "\x00" + name + "\x00" + principal
}

// openState verifies the requestState of a retried call.
func (s *Server) openState(c *Call, req *Request, name string) *Reply {
	if c.p.RequestState == nil {
		return nil
	}
	st, err := s.seal.open(purposeState, *c.p.RequestState, stateBinding(req.Method, name, req.Principal), s.cfg.now())
	if err != nil {
		r := s.errorReply(req.ID, jsonrpc.CodeInvalidParams, "Invalid requestState", nil)
		return &r
	}
	req.state = st
	return nil
}

// inputRequired turns a handler's InputRequired into the interim result,
// refusing to ask for kinds of input the client did not declare.
func (s *Server) inputRequired(req *Request, name string, ir *InputRequired) Reply {
	if req.legacy {
		// A 2025-11-25 client has no interim results: its input was asked
		// for directly, and a handler still asking after maxInputRounds
		// rounds has failed.
		return s.errorReply(req.ID, jsonrpc.CodeInternalError,
			"Internal error: the handler still needs input after "+strconv.Itoa(maxInputRounds)+" rounds", nil)
	}
	missing, need, err := missingCapabilities(req.Capabilities, ir.Requests)
	if err != nil {
		return s.internal(req.ID, err)
	}
	if need {
		return Reply{Body: jsonrpc.AppendErrorResponse(nil, req.ID, missingCapabilityError(missing)), Status: StatusFor(mcp.CodeMissingRequiredCapability)}
	}
	res := struct {
		InputRequests map[string]mcp.InputRequest `json:"inputRequests,omitempty"`
		RequestState  string                      `json:"requestState,omitempty"`
	}{InputRequests: ir.Requests}
	if ir.State != nil {
		res.RequestState = s.seal.seal(purposeState, ir.State, stateBinding(req.Method, name, req.Principal), s.cfg.now().Add(s.cfg.stateTTL))
	}
	if len(res.InputRequests) == 0 && res.RequestState == "" {
		return s.internal(req.ID, errors.New("InputRequired with neither requests nor state"))
	}
	b, err := s.encodeResult(req, res, nil, nil, mcp.ResultInputRequired)
	if err != nil {
		return s.internal(req.ID, err)
	}
	return s.okReply(req.ID, b)
}

// handlerError maps an error returned by a prompt, resource or completion
// handler to a reply. Only prompts/get and resources/read (like
// tools/call) may answer with input_required (MRTR-1); for any other
// method an InputRequired is the handler's fault. A request whose context
// has ended gets no answer: it was cancelled, or its connection is gone.
func (s *Server) handlerError(ctx context.Context, req *Request, name string, err error) Reply {
	var ir *InputRequired
	if errors.As(err, &ir) {
		if req.Method != mcp.MethodPromptsGet && req.Method != mcp.MethodResourcesRead {
			return s.internal(req.ID, fmt.Errorf("%s handler asked for input, which only tools/call, prompts/get and resources/read may", req.Method))
		}
		return s.inputRequired(req, name, ir)
	}
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return Reply{Body: jsonrpc.AppendErrorResponse(nil, req.ID, je), Status: StatusFor(je.Code)}
	}
	if ctx.Err() != nil {
		return Reply{}
	}
	return s.internal(req.ID, err)
}

// ---- tools/call ----

func (s *Server) callTool(ctx context.Context, c *Call, req *Request) Reply {
	if c.p.Name == nil {
		return s.errorReply(req.ID, jsonrpc.CodeInvalidParams, "Invalid params: missing tool name", nil)
	}
	name := *c.p.Name
	e, ok := s.tools.load().get(name)
	if !ok || !s.sees(req, ListTools, name) {
		return s.errorReply(req.ID, jsonrpc.CodeInvalidParams, "Unknown tool: "+strconv.Quote(name), nil)
	}
	if r := s.openState(c, req, name); r != nil {
		return *r
	}
	args := c.p.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = jsontext.Value("{}")
	}
	if args[0] != '{' {
		return s.errorReply(req.ID, jsonrpc.CodeInvalidParams, "Invalid params: arguments must be an object", nil)
	}
	t := e.val
	if err := validateJSON(t.input, args); err != nil {
		res := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{mcp.TextContent("Invalid arguments for tool " + strconv.Quote(name) + ": " + err.Error())}}
		return s.toolResult(req, name, t, res)
	}
	treq := &ToolRequest{Request: *req, Name: name, Arguments: args}
	treq.Request.out = req.out
	res, err := withInput(ctx, &treq.Request, func() (*mcp.CallToolResult, error) {
		return t.handler(context.WithValue(ctx, ctxKey{}, &treq.Request), treq)
	})
	if err != nil {
		var ir *InputRequired
		var je *jsonrpc.Error
		switch {
		case errors.As(err, &ir):
			return s.inputRequired(req, name, ir)
		case errors.As(err, &je):
			return Reply{Body: jsonrpc.AppendErrorResponse(nil, req.ID, je), Status: StatusFor(je.Code)}
		case ctx.Err() != nil:
			return Reply{}
		}
		res = &mcp.CallToolResult{IsError: true, Content: []mcp.Content{mcp.TextContent(err.Error())}}
	}
	if res == nil {
		res = &mcp.CallToolResult{}
	}
	return s.toolResult(req, name, t, res)
}

func (s *Server) toolResult(req *Request, name string, t *tool, res *mcp.CallToolResult) Reply {
	if res.Content == nil {
		res.Content = []mcp.Content{}
	}
	if t.output != nil && !res.IsError {
		if len(res.StructuredContent) == 0 {
			return s.internal(req.ID, fmt.Errorf("tool %q declares an output schema but returned no structuredContent", name))
		}
		if err := validateJSON(t.output, res.StructuredContent); err != nil {
			return s.internal(req.ID, fmt.Errorf("tool %q returned structuredContent that does not match its output schema: %w", name, err))
		}
	}
	// The handler's _meta is merged with serverInfo into one member; left
	// on the struct it would be written a second time.
	body, meta := *res, res.Meta
	body.Meta = nil
	b, err := s.encodeResult(req, &body, meta, nil, mcp.ResultComplete)
	if err != nil {
		return s.internal(req.ID, err)
	}
	return s.okReply(req.ID, b)
}

// ---- prompts/get ----

func (s *Server) getPrompt(ctx context.Context, c *Call, req *Request) Reply {
	if c.p.Name == nil {
		return s.errorReply(req.ID, jsonrpc.CodeInvalidParams, "Invalid params: missing prompt name", nil)
	}
	name := *c.p.Name
	e, ok := s.prompts.load().get(name)
	if !ok || !s.sees(req, ListPrompts, name) {
		return s.errorReply(req.ID, jsonrpc.CodeInvalidParams, "Unknown prompt: "+strconv.Quote(name), nil)
	}
	var args map[string]string
	if len(c.p.Arguments) > 0 && string(c.p.Arguments) != "null" {
		if err := jsonrpc.UnmarshalParams(c.p.Arguments, &args); err != nil {
			return s.errorReply(req.ID, jsonrpc.CodeInvalidParams, "Invalid params: prompt arguments must be an object of strings", nil)
		}
	}
	for _, a := range e.val.def.Arguments {
		if _, ok := args[a.Name]; a.Required && !ok {
			return s.errorReply(req.ID, jsonrpc.CodeInvalidParams, "Missing required argument: "+strconv.Quote(a.Name), nil)
		}
	}
	if r := s.openState(c, req, name); r != nil {
		return *r
	}
	preq := &PromptRequest{Request: *req, Name: name, Arguments: args}
	res, err := withInput(ctx, &preq.Request, func() (*mcp.GetPromptResult, error) {
		return e.val.handler(context.WithValue(ctx, ctxKey{}, &preq.Request), preq)
	})
	if err != nil {
		return s.handlerError(ctx, req, name, err)
	}
	if res == nil {
		res = &mcp.GetPromptResult{}
	}
	if res.Messages == nil {
		res.Messages = []mcp.PromptMessage{}
	}
	body, meta := *res, res.Meta
	body.Meta = nil
	b, err := s.encodeResult(req, &body, meta, nil, mcp.ResultComplete)
	if err != nil {
		return s.internal(req.ID, err)
	}
	return s.okReply(req.ID, b)
}

// ---- resources/read ----

func (s *Server) readResource(ctx context.Context, c *Call, req *Request) Reply {
	if c.p.URI == nil {
		return s.errorReply(req.ID, jsonrpc.CodeInvalidParams, "Invalid params: missing uri", nil)
	}
	uri := *c.p.URI
	rreq := &ResourceRequest{Request: *req, URI: uri}
	var h ResourceHandler
	var opts resourceOpts
	if e, ok := s.resources.load().get(uri); ok && s.sees(req, ListResources, uri) {
		h, opts = e.val.handler, e.val.opts
	} else if !ok {
		for _, e := range s.templates.load().items {
			if !s.sees(req, ListTemplates, e.key) {
				continue
			}
			vals := e.val.tmpl.Match(uri)
			if vals == nil {
				continue
			}
			rreq.Vars = map[string]string{}
			for _, name := range e.val.tmpl.Varnames() {
				if v := vals.Get(name); v.Valid() {
					rreq.Vars[name] = v.String()
				}
			}
			h, opts = e.val.handler, e.val.opts
			break
		}
	}
	notFound := func() Reply {
		return s.errorReply(req.ID, jsonrpc.CodeInvalidParams, "Resource not found", map[string]string{"uri": uri})
	}
	if h == nil {
		return notFound()
	}
	if r := s.openState(c, req, uri); r != nil {
		return *r
	}
	rreq.state = req.state // rreq copied req before the state was opened
	res, err := withInput(ctx, &rreq.Request, func() (*mcp.ReadResourceResult, error) {
		return h(context.WithValue(ctx, ctxKey{}, &rreq.Request), rreq)
	})
	if err != nil {
		if errors.Is(err, ErrResourceNotFound) {
			return notFound()
		}
		return s.handlerError(ctx, req, uri, err)
	}
	if res == nil || len(res.Contents) == 0 {
		return notFound()
	}
	p := s.cfg.policies[ReadResource]
	if opts.policy != nil {
		p = *opts.policy
	}
	if rreq.policy != nil {
		p = *rreq.policy
	} else if opts.policy == nil && s.cfg.visible != nil {
		p.Scope = mcp.ScopePrivate // what a read shows depends on who asks
	}
	body, meta := *res, res.Meta
	body.Meta = nil
	b, err := s.encodeResult(req, &body, meta, &p, mcp.ResultComplete)
	if err != nil {
		return s.internal(req.ID, err)
	}
	return s.okReply(req.ID, b)
}

// ---- completion/complete ----

func (s *Server) completeCall(ctx context.Context, c *Call, req *Request) Reply {
	if c.p.Ref == nil || c.p.Argument == nil {
		return s.errorReply(req.ID, jsonrpc.CodeInvalidParams, "Invalid params: ref and argument are required", nil)
	}
	switch c.p.Ref.Type {
	case "ref/prompt":
		if _, ok := s.prompts.load().get(c.p.Ref.Name); !ok || !s.sees(req, ListPrompts, c.p.Ref.Name) {
			return s.errorReply(req.ID, jsonrpc.CodeInvalidParams, "Unknown prompt: "+strconv.Quote(c.p.Ref.Name), nil)
		}
	case "ref/resource":
	default:
		return s.errorReply(req.ID, jsonrpc.CodeInvalidParams, "Invalid params: unknown ref type "+strconv.Quote(c.p.Ref.Type), nil)
	}
	creq := &CompleteRequest{Request: *req, Ref: *c.p.Ref, Argument: *c.p.Argument}
	if c.p.Context != nil {
		creq.Context = *c.p.Context
	}
	comp, err := s.completer()(context.WithValue(ctx, ctxKey{}, &creq.Request), creq)
	if err != nil {
		return s.handlerError(ctx, req, "", err)
	}
	if comp == nil {
		comp = &mcp.Completion{}
	}
	if comp.Values == nil {
		comp.Values = []string{}
	}
	if len(comp.Values) > 100 {
		comp.Values = comp.Values[:100]
		comp.HasMore = true
	}
	b, err := s.encodeResult(req, struct {
		Completion *mcp.Completion `json:"completion"`
	}{comp}, nil, nil, mcp.ResultComplete)
	if err != nil {
		return s.internal(req.ID, err)
	}
	return s.okReply(req.ID, b)
}

// ---- subscriptions/listen ----

// grant returns the part of f the server will honour. Resources the
// caller may not see are not granted: granting them would confirm that
// they exist, and their updates would leak to the caller.
func (s *Server) grant(req *Request, f mcp.SubscriptionFilter) (mcp.SubscriptionFilter, hub.Filter) {
	var g mcp.SubscriptionFilter
	var hf hub.Filter
	if f.ToolsListChanged && s.advertisesTools() {
		g.ToolsListChanged = true
		hf.Kinds |= hub.ToolsList
	}
	if f.PromptsListChanged && s.advertisesPrompts() {
		g.PromptsListChanged = true
		hf.Kinds |= hub.PromptsList
	}
	if s.advertisesResources() {
		if f.ResourcesListChanged {
			g.ResourcesListChanged = true
			hf.Kinds |= hub.ResourcesList
		}
		if len(f.ResourceSubscriptions) > 0 {
			g.ResourceSubscriptions = slices.Compact(slices.Sorted(slices.Values(f.ResourceSubscriptions)))
			g.ResourceSubscriptions = slices.DeleteFunc(g.ResourceSubscriptions, func(uri string) bool {
				return !s.sees(req, ListResources, uri)
			})
			if len(g.ResourceSubscriptions) == 0 {
				g.ResourceSubscriptions = nil
			}
			hf.URIs = g.ResourceSubscriptions
		}
	}
	return g, hf
}

// maxListenURIs bounds one listen's URI set, which bounds its memory.
const maxListenURIs = 10000

func (s *Server) listen(ctx context.Context, c *Call, req *Request, out Stream) Reply {
	if c.p.Notifications == nil {
		return s.errorReply(req.ID, jsonrpc.CodeInvalidParams, "Invalid params: missing notifications filter", nil)
	}
	if len(c.p.Notifications.ResourceSubscriptions) > maxListenURIs {
		return s.errorReply(req.ID, jsonrpc.CodeInvalidParams,
			"Invalid params: too many resourceSubscriptions (limit "+strconv.Itoa(maxListenURIs)+")", nil)
	}
	granted, hf := s.grant(req, *c.p.Notifications)
	hf.Principal = req.Principal

	idMeta := `{"` + mcp.MetaSubscriptionID + `":` + req.ID.Raw() + `}`
	gb, err := jsonrpc.Marshal(granted)
	if err != nil {
		return s.internal(req.ID, err)
	}
	ack := jsonrpc.AppendNotification(nil, mcp.NotifyAcknowledged,
		[]byte(`{"_meta":`+idMeta+`,"notifications":`+string(gb)+`}`))
	complete := func() Reply {
		res := `{"resultType":"complete","_meta":{"` + mcp.MetaSubscriptionID + `":` + req.ID.Raw()
		if !s.cfg.noServerInfo {
			res += `,"` + mcp.MetaServerInfo + `":` + string(s.infoJSON)
		}
		res += `}}`
		r := s.okReply(req.ID, []byte(res))
		r.ListenEnded = true
		return r
	}

	sub, err := s.hub.Subscribe(hf)
	if errors.Is(err, hub.ErrClosed) {
		if out.Send(ack) != nil {
			return Reply{Abort: true}
		}
		return complete()
	}
	defer sub.Close()
	if err := out.Send(ack); err != nil {
		return Reply{Abort: true}
	}

	var kindMsg [3][]byte
	for i, method := range [3]string{mcp.NotifyToolsListChanged, mcp.NotifyPromptsListChanged, mcp.NotifyResourcesListChanged} {
		kindMsg[i] = jsonrpc.AppendNotification(nil, method, []byte(`{"_meta":`+idMeta+`}`))
	}
	// A keep-alive goes out after a whole tick with nothing written. A
	// ticker rather than a timer reset on every write keeps the busy path
	// free of timer work.
	var tick <-chan time.Time
	if s.cfg.keepAlive > 0 {
		t := time.NewTicker(s.cfg.keepAlive)
		defer t.Stop()
		tick = t.C
	}
	wrote := false
	var uris []string
	var buf []byte
	for {
		select {
		case <-ctx.Done():
			return Reply{}
		case <-tick:
			if wrote {
				wrote = false
				continue
			}
			if err := out.KeepAlive(); err != nil {
				return Reply{Abort: true}
			}
		case <-sub.Wake():
			var kinds hub.Kind
			kinds, uris = sub.Take(uris[:0])
			for i := range kindMsg {
				if kinds&(hub.Kind(1)<<i) != 0 {
					if err := out.Send(kindMsg[i]); err != nil {
						return Reply{Abort: true}
					}
				}
			}
			for _, u := range uris {
				buf = buf[:0]
				buf = append(buf, `{"uri":`...)
				buf, _ = jsontext.AppendQuote(buf, u)
				buf = append(buf, `,"_meta":`...)
				buf = append(buf, idMeta...)
				buf = append(buf, '}')
				if err := out.Send(jsonrpc.AppendNotification(nil, mcp.NotifyResourceUpdated, buf)); err != nil {
					return Reply{Abort: true}
				}
			}
			wrote = true
			if sub.Ending() {
				// What was pending went out first, so the complete result
				// truly means nothing was missed.
				return complete()
			}
		}
	}
}
