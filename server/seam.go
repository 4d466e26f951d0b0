package server

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strconv"
	"time"

	"tidings/hub"
	"tidings/internal/engine"
	"tidings/internal/xheader"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// handle hides the seam inside Server: the embedded field is unexported,
// so users see nothing of it, while the transports reach it through
// engine.Of.
type handle = engine.Handle

// seam is the Server as its transports see it. Its methods are exported
// to satisfy engine.Server but, being on an unexported type, are not part
// of the package's API.
type seam Server

func (c *seam) srv() *Server { return (*Server)(c) }

// Hub returns the change hub.
func (c *seam) Hub() *hub.Hub { return c.hub }

// Now returns the server's clock.
func (c *seam) Now() time.Time { return c.cfg.now() }

// KeepAlive returns the keep-alive interval of idle streams.
func (c *seam) KeepAlive() time.Duration { return c.cfg.keepAlive }

// StreamObserver returns the observer of change streams, nil if none.
func (c *seam) StreamObserver() engine.StreamObserver {
	if c.cfg.observer == nil {
		return nil
	}
	return c.cfg.observer
}

// Introduction is what a session's client is told at its start. The
// tasks extension is left out: a session of the earlier era never gets
// a task.
func (c *seam) Introduction() engine.Introduction {
	s := c.srv()
	caps := s.capabilities()
	delete(caps.Extensions, mcp.ExtensionTasks)
	if len(caps.Extensions) == 0 {
		caps.Extensions = nil
	}
	return engine.Introduction{Info: s.info, Capabilities: caps, Instructions: s.cfg.instructions}
}

// Follows returns an empty lease on what principal's listens and
// sessions may follow.
func (c *seam) Follows(ctx context.Context, principal string) engine.Lease {
	return c.follows.lease(ctx, principal)
}

func (c *seam) Follow(principal, uri string) func() {
	return c.src.follow(principal, []string{uri})
}

// Grant returns what the server honours of a subscription filter.
func (c *seam) Grant(principal string, f mcp.SubscriptionFilter) (mcp.SubscriptionFilter, hub.Filter) {
	return c.srv().grant(principal, f)
}

// Serve checks a 2026-07-28 request and serves it. The checks run in the
// order of the error precedence peers rely on: a missing version in the
// envelope (-32020), incomplete _meta (-32602), an envelope version that
// differs from _meta (-32020), an unsupported version (-32022), the
// envelope's routing copies (-32020), then the method's own params
// (-32602).
func (c *seam) Serve(ctx context.Context, call *engine.Call, principal string, env engine.Envelope, out engine.Stream) engine.Reply {
	s := c.srv()
	m := call.Msg
	if m.IsNotification() {
		return engine.Reply{Outcome: engine.Silent}
	}
	req, r := s.admit(call, principal, env, out)
	if req == nil {
		if ro, ok := s.cfg.observer.(RefusalObserver); ok && r.Err != nil {
			ro.Refused(m.Method, r.Err.Code)
		}
		return r
	}
	listen := call.M.Handler == engine.HandleListen
	if listen {
		// Shutdown waits until the transport has written the listen's
		// last message, which it reports by releasing the reply.
		s.writers.add()
	}
	if s.cfg.tracer != nil {
		ctx = s.withTraceHeaders(ctx, call, env)
	}
	r = s.run(ctx, call, req, (*Server).route)
	if listen {
		// A parked listen's last reply carries the tracker instead.
		if r.Outcome != engine.Parked {
			r.Written = &s.writers
		}
	}
	return r
}

// admit runs the checks of Serve and builds the request, or returns the
// refusal.
func (s *Server) admit(call *engine.Call, principal string, env engine.Envelope, out engine.Stream) (*Request, engine.Reply) {
	m := call.Msg
	var declared string
	if env != nil {
		v, err := env.Version()
		if err != nil {
			return nil, mismatch(m.ID, err)
		}
		declared = v
	}
	if r := checkMeta(call); r != nil {
		return nil, *r
	}
	version := *call.P.Meta.ProtocolVersion
	if env != nil && declared != version {
		return nil, mismatch(m.ID, errors.New(mcp.HeaderProtocolVersion+" does not match _meta protocolVersion"))
	}
	if version != mcp.Version {
		return nil, engine.Fail(m.ID, mcp.CodeUnsupportedProtocolVersion,
			"Unsupported protocol version: "+strconv.Quote(version),
			map[string]any{"supported": []string{mcp.Version}, "requested": version})
	}
	if env != nil {
		if err := env.Route(call, s.headerParams(call, principal)); err != nil {
			return nil, mismatch(m.ID, err)
		}
	}
	if call.ParamErr != nil {
		return nil, engine.Fail(m.ID, jsonrpc.CodeInvalidParams, "Invalid params: "+call.ParamErr.Error(), nil)
	}
	meta := call.P.Meta
	req := s.newRequest(call, principal, out)
	req.ProtocolVersion = version
	req.Capabilities = *meta.ClientCapabilities
	req.ClientInfo = meta.ClientInfo
	req.enc = (*modern)(s)
	if meta.LogLevel != nil {
		sev, ok := meta.LogLevel.Severity()
		if !ok {
			return nil, engine.Fail(m.ID, jsonrpc.CodeInvalidParams, "Invalid params: unknown log level "+strconv.Quote(string(*meta.LogLevel)), nil)
		}
		req.logLevel = sev
	}
	return req, engine.Reply{}
}

// discard is the stream of a request that sends nothing before its
// answer.
type discard struct{}

func (discard) Send([]byte) error { return nil }
func (discard) KeepAlive() error  { return nil }

// Run serves, through the middleware chain, a request an earlier era's
// adapter answers itself.
func (c *seam) Run(ctx context.Context, call *engine.Call, era engine.Era, serve func(context.Context) engine.Reply) engine.Reply {
	s := c.srv()
	req := s.newRequest(call, era.Principal, discard{})
	req.ProtocolVersion = era.Version
	req.Capabilities = era.Capabilities
	req.logLevel = era.LogLevel
	req.enc = era.Encoder
	return s.run(ctx, call, req, func(_ *Server, ctx context.Context, _ *engine.Call, _ *Request) engine.Reply {
		return serve(ctx)
	})
}

// Dispatch serves a request of an earlier era through the same handlers.
func (c *seam) Dispatch(ctx context.Context, call *engine.Call, era engine.Era, out engine.Stream) (engine.Reply, bool) {
	s := c.srv()
	if m := call.M; !m.Handler.Core() || !m.Eras.Has(engine.Legacy) {
		return engine.Reply{}, false
	}
	if call.ParamErr != nil {
		return engine.Fail(call.Msg.ID, jsonrpc.CodeInvalidParams, "Invalid params: "+call.ParamErr.Error(), nil), true
	}
	req := s.newRequest(call, era.Principal, out)
	req.ProtocolVersion = era.Version
	req.Capabilities = era.Capabilities
	req.logLevel = era.LogLevel
	req.enc = era.Encoder
	req.askInput = era.AskInput
	return s.run(ctx, call, req, (*Server).routePrimitive), true
}

// newRequest builds the Request every handler of call sees.
func (s *Server) newRequest(call *engine.Call, principal string, out engine.Stream) *Request {
	req := &Request{
		ID:             call.Msg.ID,
		Method:         call.Msg.Method,
		Principal:      principal,
		InputResponses: call.P.InputResponses,
		logLevel:       -1,
		out:            &requestOut{stream: out},
	}
	req.Name, _ = call.NameParam()
	req.Scopes = s.scopesOf(principal, call)
	if call.P.Meta != nil {
		req.progress = call.P.Meta.ProgressToken
	}
	return req
}

// router serves a method; a method expression, so that passing one
// allocates nothing.
type router func(s *Server, ctx context.Context, call *engine.Call, req *Request) engine.Reply

// run serves req through the middleware chain and the router. A panic
// in a handler (or a middleware) becomes -32603 for that request alone,
// logged with its stack: one bad handler must not take a stdio server
// down or cut an HTTP connection without an answer.
func (s *Server) run(ctx context.Context, call *engine.Call, req *Request, route router) (rep engine.Reply) {
	if s.cfg.tracer != nil || s.cfg.opDuration != nil {
		var done func(*engine.Reply)
		ctx, done = s.observe(ctx, call, req)
		defer func() { done(&rep) }() // last: after a panic's reply is made
	}
	defer req.out.finish()
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("mcp: handler panicked", "method", req.Method, "name", req.Name,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			rep = engine.Fail(req.ID, jsonrpc.CodeInternalError, "Internal error", nil)
		}
	}()
	ctx = context.WithValue(ctx, ctxKey{}, req)
	if s.handler == nil {
		return route(s, ctx, call, req)
	}
	return s.runChain(ctx, call, req, route)
}

// runChain is run with middleware. The chain is built once; what its
// innermost handler is to serve travels on req.
func (s *Server) runChain(ctx context.Context, call *engine.Call, req *Request, route router) engine.Reply {
	defer func() {
		if p := recover(); p != nil {
			req.reply.Release() // a middleware panicked after the handler answered
			panic(p)
		}
	}()
	req.call, req.route = call, route
	err := s.handler(ctx, req)
	// A parked listen goes on whatever the middleware says after it: the
	// connection is no longer the request's to answer on.
	if req.served && (err == nil || req.reply.Outcome == engine.Parked || (req.reply.Err != nil && errors.Is(err, req.reply.Err))) {
		return req.reply
	}
	req.reply.Release()
	return s.middlewareError(ctx, req, err)
}

// routed is the innermost handler of the middleware chain: it serves the
// call on req with its router, once.
func (s *Server) routed(ctx context.Context, req *Request) error {
	if req.served {
		return errNextTwice
	}
	req.served = true
	if r, _ := ctx.Value(ctxKey{}).(*Request); r != req {
		ctx = context.WithValue(ctx, ctxKey{}, req) // a middleware's own context
	}
	// The request lets go of the call, which a listen holds no longer
	// than it needs (see listen).
	call := req.call
	req.call = nil
	req.reply = req.route(s, ctx, call, req)
	if req.reply.Err != nil {
		return req.reply.Err
	}
	return nil
}

// errNextTwice is what a middleware's second call of next returns: a
// request is served once.
var errNextTwice = errors.New("server: middleware called next more than once")

// middlewareError answers for a request a middleware ended with err.
func (s *Server) middlewareError(ctx context.Context, req *Request, err error) engine.Reply {
	var je *jsonrpc.Error
	switch {
	case err == nil:
		return s.internal(req.ID, errors.New("middleware returned without calling the handler or an error"))
	case errors.As(err, &je):
		return engine.ErrorReply(req.ID, je)
	case ctx.Err() != nil:
		return engine.Reply{Outcome: engine.Silent}
	}
	return s.internal(req.ID, err)
}

// scopesOf returns the scopes declared for what call touches: the item
// it names (RequiredScopes), the prompt or template a completion refers
// to, the resource a 2025-11-25 subscribe names, and every resource a
// listen subscribes to.
func (s *Server) scopesOf(principal string, call *engine.Call) []string {
	if !s.scoped.Load() {
		return nil
	}
	p := &call.P
	switch call.Msg.Method {
	case mcp.MethodComplete:
		if p.Ref == nil {
			return nil
		}
		if p.Ref.Type == "ref/prompt" {
			return s.RequiredScopes(principal, mcp.MethodPromptsGet, p.Ref.Name)
		}
		if e, ok := s.templates.load().get(p.Ref.URI); ok && s.sees(principal, ListTemplates, p.Ref.URI) {
			return e.val.opts.scopes
		}
		return s.RequiredScopes(principal, mcp.MethodResourcesRead, p.Ref.URI)
	case mcp.MethodResourcesSubscribe:
		if p.URI != nil {
			return s.RequiredScopes(principal, mcp.MethodResourcesRead, *p.URI)
		}
	case mcp.MethodListen:
		if p.Notifications == nil {
			return nil
		}
		var all []string
		for _, uri := range p.Notifications.ResourceSubscriptions {
			all = append(all, s.RequiredScopes(principal, mcp.MethodResourcesRead, uri)...)
		}
		slices.Sort(all)
		return slices.Compact(all)
	}
	name, _ := call.NameParam()
	return s.RequiredScopes(principal, call.Msg.Method, name)
}

// routePrimitive serves a method both eras share (the caller checked
// that it is one), while the server offers its capability.
func (s *Server) routePrimitive(ctx context.Context, call *engine.Call, req *Request) engine.Reply {
	if !s.offers(call.M.Needs) {
		// As in route: a server without the capability has no such
		// method. (An empty reply here went out as an HTTP 200 without a
		// body, which a client cannot read.)
		return engine.Fail(req.ID, jsonrpc.CodeMethodNotFound, "Method not found: "+strconv.Quote(call.Msg.Method), nil)
	}
	return handlers[call.M.Handler](s, ctx, call, req)
}

// route serves a 2026-07-28 method, as the method table has it: one of
// the core's, of this era, whose capability the server offers.
func (s *Server) route(ctx context.Context, call *engine.Call, req *Request) engine.Reply {
	if m := call.M; m.Handler.Core() && m.Eras.Has(engine.Modern) && s.offers(m.Needs) {
		return handlers[m.Handler](s, ctx, call, req)
	}
	return engine.Fail(req.ID, jsonrpc.CodeMethodNotFound, "Method not found: "+strconv.Quote(call.Msg.Method), nil)
}

func mismatch(id jsonrpc.ID, err error) engine.Reply {
	return engine.Fail(id, mcp.CodeHeaderMismatch, "Header mismatch: "+err.Error(), nil)
}

// checkMeta returns the refusal for a request whose _meta lacks a field
// every 2026-07-28 request must carry (protocolVersion or
// clientCapabilities), or nil.
func checkMeta(c *engine.Call) *engine.Reply {
	meta := c.P.Meta
	var missing string
	switch {
	case c.MetaErr != nil:
		r := engine.Fail(c.Msg.ID, jsonrpc.CodeInvalidParams, "Invalid params: "+c.MetaErr.Error(), nil)
		r.Outcome = engine.Refused
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
	r := engine.Fail(c.Msg.ID, jsonrpc.CodeInvalidParams, "Invalid params: missing "+missing, nil)
	r.Outcome = engine.Refused
	return &r
}

// headerParams returns, for a tools/call, the x-mcp-header parameters of
// the named tool with the argument values they mirror. A tool the
// principal may not see is treated as unknown, so that a header mismatch
// (-32020) does not reveal that it exists.
func (s *Server) headerParams(c *engine.Call, principal string) []engine.HeaderParam {
	if c.Msg.Method != mcp.MethodToolsCall || c.P.Name == nil {
		return nil
	}
	headers := s.src.toolHeaders(principal, *c.P.Name)
	if len(headers) == 0 {
		return nil
	}
	out := make([]engine.HeaderParam, 0, len(headers))
	for _, h := range headers {
		v, _ := xheader.Lookup(c.P.Arguments, h.Path)
		out = append(out, engine.HeaderParam{Header: h.Header(), Type: h.Type, Value: v})
	}
	return out
}
