package gateway

import (
	"cmp"
	"context"
	"sort"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/client"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// origin is the gateway as its server sees it: where the lists and the
// requests that name an item go.
type origin struct{ g *Gateway }

// List serves one page of a merged list. The cursor is the key of the
// last item of the page before: a walk skips nothing that stays listed
// for all of it, whatever changes around it.
func (o origin) List(ctx context.Context, req *server.ListRequest) (*server.ListPage, error) {
	g := o.g
	i := listIndex(req.List)
	if i < 0 {
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "no such list", nil)
	}
	snap := g.snapshot()
	mv := g.mergedList(ctx, snap, i, req.Principal, snap.ruleFor(ctx))
	start := 0
	if req.Cursor != nil {
		after := string(req.Cursor)
		start = sort.SearchStrings(mv.keys, after)
		if start < len(mv.keys) && mv.keys[start] == after {
			start++
		}
	}
	end := min(start+snap.cfg.pageSize(), len(mv.items))
	page := &server.ListPage{Items: mv.items[start:end]}
	if end < len(mv.items) {
		page.Next = []byte(mv.keys[end-1])
	}
	ttl := max(mv.expires.Sub(g.now()), 0)
	page.Cache = server.CachePolicy{TTL: ttl.Truncate(time.Millisecond), Scope: mv.scope}
	if len(mv.missing) > 0 {
		ids, err := jsonrpc.Marshal(mv.missing)
		if err != nil {
			return nil, err
		}
		page.Meta = mcp.Meta{MissingMetaKey: ids}
	}
	return page, nil
}

// CallTool forwards a tools/call to the upstream of the tool, under its
// own name there, and hands its progress back to the caller.
func (o origin) CallTool(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	u, it, ok := o.g.route(ctx, o.g.snapshot(), listIndex(server.ListTools), req.Principal, req.Name)
	if !ok {
		return nil, cmp.Or(o.g.refusal(req.Principal, listIndex(server.ListTools), req.Name), errUnknown("tool", req.Name))
	}
	params := map[string]any{"name": it.orig, "arguments": req.Arguments}
	retryParams(params, &req.Request)
	opts := append(forCaller(u, &req.Request), client.WithProgress(func(p float64, total *float64, msg string) {
		_ = req.Progress(p, total, msg)
	}))
	if asksTask(u, &req.Request) {
		opts = append(opts, withTasks(u, &req.Request))
	}
	res, err := u.c.Request(ctx, mcp.MethodToolsCall, params, opts...)
	if err != nil {
		return nil, upstreamError(u, err)
	}
	rr, err := interim(u, res)
	if err != nil {
		return nil, err
	}
	if rr.ResultType == mcp.ResultTask {
		return nil, taskStarted(u, &req.Request, res)
	}
	var out mcp.CallToolResult
	if err := jsonrpc.UnmarshalParams(res, &out); err != nil {
		return nil, upstreamError(u, err)
	}
	return &out, nil
}

// GetPrompt forwards a prompts/get to the upstream of the prompt.
func (o origin) GetPrompt(ctx context.Context, req *server.PromptRequest) (*mcp.GetPromptResult, error) {
	u, it, ok := o.g.route(ctx, o.g.snapshot(), listIndex(server.ListPrompts), req.Principal, req.Name)
	if !ok {
		return nil, cmp.Or(o.g.refusal(req.Principal, listIndex(server.ListPrompts), req.Name), errUnknown("prompt", req.Name))
	}
	params := map[string]any{"name": it.orig}
	if req.Arguments != nil {
		params["arguments"] = req.Arguments
	}
	retryParams(params, &req.Request)
	res, err := u.c.Request(ctx, mcp.MethodPromptsGet, params, forCaller(u, &req.Request)...)
	if err != nil {
		return nil, upstreamError(u, err)
	}
	if _, err := interim(u, res); err != nil {
		return nil, err
	}
	var out mcp.GetPromptResult
	if err := jsonrpc.UnmarshalParams(res, &out); err != nil {
		return nil, upstreamError(u, err)
	}
	return &out, nil
}

// ReadResource forwards a resources/read to the upstream that serves the
// URI. A public answer is kept for its ttlMs and served to every caller
// who may see the resource; a private one is never kept. Under caller
// rules every answer is told private, kept or not: the rules hide the
// resource from some, so no cache may pass it on to another caller.
func (o origin) ReadResource(ctx context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
	g := o.g
	snap := g.snapshot()
	u, err := g.routeURI(ctx, snap, req.Principal, req.URI)
	if err != nil {
		return nil, err
	}
	if u == nil {
		return nil, cmp.Or(g.refusal(req.Principal, -1, req.URI), server.ErrResourceNotFound)
	}
	now := g.now()
	k := g.reads.get(req.URI)
	if k != nil && k.from == u && now.Before(k.expires) {
		u.st.hits.Add(1)
		scope := mcp.ScopePublic
		if len(snap.cfg.Callers) > 0 {
			scope = mcp.ScopePrivate
		}
		req.SetCache(server.CachePolicy{TTL: k.expires.Sub(now).Truncate(time.Millisecond), Scope: scope})
		return k.res, nil
	}
	u.st.misses.Add(1)
	u.st.requests.Add(1)
	params := map[string]any{"uri": req.URI}
	retryParams(params, &req.Request)
	res, err := u.c.Request(ctx, mcp.MethodResourcesRead, params, forCaller(u, &req.Request)...)
	if err != nil {
		return nil, upstreamError(u, err)
	}
	rr, err := interim(u, res)
	if err != nil {
		return nil, err
	}
	var out mcp.ReadResourceResult
	if err := jsonrpc.UnmarshalParams(res, &out); err != nil {
		return nil, upstreamError(u, err)
	}
	ttl := time.Duration(0)
	if rr.TTL != nil && *rr.TTL > 0 {
		ttl = min(time.Duration(*rr.TTL)*time.Millisecond, snap.cfg.maxTTL())
	}
	scope := mcp.ScopePrivate
	if rr.Scope == mcp.ScopePublic && len(snap.cfg.Callers) == 0 && u.x == nil {
		scope = mcp.ScopePublic
	}
	req.SetCache(server.CachePolicy{TTL: ttl, Scope: scope})
	if rr.Scope == mcp.ScopePublic && ttl > 0 && u.x == nil {
		g.reads.put(req.URI, &keptRead{res: &out, from: u, expires: now.Add(ttl), size: int64(len(res))}, snap.cfg.maxKeptBytes(), now)
	}
	return &out, nil
}

// Complete forwards a completion/complete to the upstream of the prompt
// or template its ref names.
func (o origin) Complete(ctx context.Context, req *server.CompleteRequest) (*mcp.Completion, error) {
	g := o.g
	snap := g.snapshot()
	ref := req.Ref
	var u *upstream
	switch ref.Type {
	case "ref/prompt":
		up, it, ok := g.route(ctx, snap, listIndex(server.ListPrompts), req.Principal, ref.Name)
		if !ok {
			return nil, errUnknown("prompt", ref.Name)
		}
		u, ref.Name = up, it.orig
	case "ref/resource":
		up, _, ok := g.route(ctx, snap, listIndex(server.ListTemplates), req.Principal, ref.URI)
		if !ok {
			var err error
			if up, err = g.routeURI(ctx, snap, req.Principal, ref.URI); err != nil {
				return nil, err
			}
			if up == nil {
				return nil, errUnknown("resource template", ref.URI)
			}
		}
		u = up
	default:
		return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "Invalid params: unknown ref type "+ref.Type, nil)
	}
	params := map[string]any{"ref": ref, "argument": req.Argument}
	if req.Context.Arguments != nil {
		params["context"] = req.Context
	}
	res, err := u.c.Request(ctx, mcp.MethodComplete, params)
	if err != nil {
		return nil, upstreamError(u, err)
	}
	var out struct {
		Completion mcp.Completion `json:"completion"`
	}
	if err := jsonrpc.UnmarshalParams(res, &out); err != nil {
		return nil, upstreamError(u, err)
	}
	return &out.Completion, nil
}

// ToolSchema finds the input schema of a tool in what the gateway keeps
// for the caller; a tool it keeps nothing of is not checked here (the
// upstream checks the headers the gateway sends it).
func (o origin) ToolSchema(principal, name string) (jsontext.Value, bool) {
	ups, cfg := o.g.upstreams()
	i := listIndex(server.ListTools)
	for _, u := range ups {
		it, ok := u.kept(i, principal, name)
		if !ok {
			continue
		}
		if !cfg.sees(o.g.ruleOfPrincipal(cfg, principal), u, name) {
			return nil, false
		}
		return it.schema, it.schema != nil
	}
	return nil, false
}

// Follow has the upstreams that serve uris follow them, on the one listen
// each keeps; release undoes it when the last listen here lets go.
func (o origin) Follow(principal string, uris []string) func() {
	g := o.g
	ctx := g.ctx
	// Only upstreams the caller's rule lets it see are asked to follow:
	// another's updates would not be told to it, and asking would tell
	// that upstream what the caller follows.
	snap := g.snapshot()
	r := g.ruleOfPrincipal(snap.cfg, principal)
	may := func(u *upstream) bool { return snap.cfg.allows(r, u) }
	type held struct {
		u   *upstream
		uri string
	}
	var hs []held
	var own []func()
	for _, uri := range uris {
		// The listen's grant has already held the URIs to the caller's
		// rule (the server's visibility). A URI no upstream lists or
		// matches may still be one an upstream serves: every upstream
		// with resources follows it.
		owners := []*upstream{}
		if u, tmpl, ok := ownerOf(ctx, snap.ups, principal, uri, may); ok {
			if tmpl == "" || checkSpelling(uri) == nil && u.keepsURI(uri) {
				owners = append(owners, u)
			}
		} else if checkSpelling(uri) == nil {
			for _, u := range snap.ups {
				if may(u) && u.offer().resources && u.keepsURI(uri) {
					owners = append(owners, u)
				}
			}
		}
		for _, u := range owners {
			if u.x != nil {
				// Followed on the caller's own listen there.
				own = append(own, u.x.follow(principal, uri))
				continue
			}
			hs = append(hs, held{u, uri})
			u.mu.Lock()
			u.follows[uri]++
			first := u.follows[uri] == 1
			u.mu.Unlock()
			if first {
				u.wake()
			}
		}
	}
	return func() {
		for _, release := range own {
			release()
		}
		for _, h := range hs {
			h.u.mu.Lock()
			h.u.follows[h.uri]--
			last := h.u.follows[h.uri] <= 0
			if last {
				delete(h.u.follows, h.uri)
			}
			h.u.mu.Unlock()
			if last {
				h.u.wake()
			}
		}
	}
}

// Forget drops what another replica says changed.
func (o origin) Forget(l server.List, uri string) {
	g := o.g
	if l == server.ReadResource {
		g.reads.forget(uri)
		return
	}
	i := listIndex(l)
	if i < 0 {
		return
	}
	ups, _ := g.upstreams()
	for _, u := range ups {
		u.forgetRemote(i)
	}
}

// wake asks the upstream's loop to listen again with the URIs followed now.
func (u *upstream) wake() {
	select {
	case u.refollow <- struct{}{}:
	default:
	}
}

// forCaller are the options of a request the gateway makes upstream to u
// for a caller: the input the caller can give (elicitation, sampling,
// roots) is declared, so that the upstream asks for no other, with the
// extensions the caller declared that u offers (see upstreamCaps); and
// the log messages the caller asked for are asked for and passed on.
func forCaller(u *upstream, req *server.Request) []client.CallOption {
	opts := []client.CallOption{client.WithCapabilities(upstreamCaps(u, req))}
	if level, ok := req.LogLevel(); ok {
		opts = append(opts, client.WithLogs(level, func(l mcp.LogLevel, logger string, data jsontext.Value) { _ = req.Log(l, logger, data) }))
	}
	return opts
}

// upstreamCaps are the capabilities the gateway declares to u for req's
// caller: the caller's own, with of its extensions only those u offers —
// what u does not offer it cannot use, and telling it of the others says
// more of the caller than it needs. The tasks extension is the gateway's
// to declare (withTasks): it follows a task for its caller.
func upstreamCaps(u *upstream, req *server.Request) mcp.ClientCaps {
	caps := req.Capabilities
	offered := u.offer().extensions
	var ext map[string]jsontext.Value
	for name, v := range caps.Extensions {
		if _, ok := offered[name]; ok && name != mcp.ExtensionTasks {
			if ext == nil {
				ext = map[string]jsontext.Value{}
			}
			ext[name] = v
		}
	}
	caps.Extensions = ext
	return caps
}

// Extensions are the extensions the upstreams offer (the tasks extension
// apart, which the server advertises itself while an upstream runs
// tasks): the gateway offers callers what any upstream does, and passes
// a caller's declaration on to the upstreams that offer it.
func (o origin) Extensions() map[string]jsontext.Value {
	ups, _ := o.g.upstreams()
	out := map[string]jsontext.Value{}
	for _, u := range ups {
		for name, v := range u.offer().extensions {
			if _, ok := out[name]; !ok {
				out[name] = v
			}
		}
	}
	return out
}
