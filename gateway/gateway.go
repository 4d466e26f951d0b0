// Package gateway serves many MCP servers behind one endpoint, and keeps
// what they answer fresh for many callers at the cost of one listen per
// server.
//
// The gateway is a server.Server whose items come from its upstreams
// (server.WithOrigin): serve it with streamhttp or stdio like any other,
// to callers of either protocol era. Each upstream is a client.Client,
// over HTTP or to a spawned stdio server, of any revision the client
// speaks. Its lists are kept below policy: the upstream's whole answer,
// for its ttlMs (capped by MaxTTL), shared by every caller when the
// upstream marked it public and kept per caller when it marked it
// private; renaming and the callers' rules apply per request on top, and
// a list filtered per caller is told as private. One subscriptions/listen
// per upstream, whatever the number of callers listening here, hears of
// its changes: what was kept is dropped first, then every listen here
// that follows the list is told at once, tagged as its own — or, under
// caller rules, once the re-read has named the changed items, only those
// that may see one. A listen that drops is healed by the client's
// Watcher, which re-reads and reports only real changes, compared by
// whole definitions, not names.
//
// Tasks (the tasks extension) pass through. The gateway advertises the
// extension while an upstream does (one not reached when the gateway
// began to follow it is taken to run none), and declares it upstream on
// a tools/call whose caller declared it. A task an upstream starts goes
// down under an id that names the upstream, sealed and bound to the
// caller: no other caller can poll, update, cancel or follow it, and a
// forged or another's id is told what an unknown task is. tasks/get,
// tasks/update and tasks/cancel go to the task's upstream, the task's
// requests for input down and the caller's answers up as they are. A
// listen here that follows a task has the gateway poll the task's
// upstream, at the interval the upstream suggests, while the listen
// lasts, and is told each change under the caller's id.
//
// The upstream never sees the caller's credential: the gateway presents
// its own, per upstream (Auth) — or, for an upstream that must know who
// calls, one an authorization server issued for that upstream in the
// caller's name, in exchange for the caller's token (RFC 8693,
// Auth.TokenExchange). Everything such an upstream answers is then kept
// per caller and credential, and its changes are heard on one listen per
// caller listening here, told to that caller alone. The gateway asks it
// nothing in its own name: what it offers, tasks among them, is learnt
// from the first caller's first request that depends on it, and a task
// it runs is polled in its caller's name.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/auth"
	"tidings/client"
	"tidings/internal/buildinfo"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// Gateway is a server in front of other servers. Make one with New.
type Gateway struct {
	cfg    *Config // replaced whole by Reload, never changed in place
	id     string  // tells this gateway from others (see IdentityMetaKey)
	log    *slog.Logger
	srv    *server.Server
	now    func() time.Time
	ctx    context.Context
	cancel context.CancelFunc
	// clientOpts are given to every upstream's client.
	clientOpts []client.Option

	mu  sync.RWMutex
	ups []*upstream // in the configuration's order

	// gen counts changes to any upstream's lists: a merged list kept
	// under an older one is stale.
	gen    atomic.Uint64
	merged sync.Map // mergedKey → *mergedView

	// callers are the tokens of the callers seen lately, by principal:
	// a change is told to a listener as the rules (which a reload may
	// change) say of its token.
	callersMu sync.Mutex
	callers   map[string]*auth.Info

	reads *keptReads

	// taskPolls follow upstream the tasks listens here follow.
	taskPolls taskPolls
	// ends are the releases of parked listens' holds under way.
	ends sync.WaitGroup
}

// mergedKey names a merged list kept for the callers of one rule.
type mergedKey struct {
	list int
	rule int
}

// mergedView is a merged list as served to the callers of one rule.
type mergedView struct {
	// cfg is the configuration whose rule it was merged under: under
	// another, the rule's index may name another rule.
	cfg     *Config
	gen     uint64
	items   []jsontext.Value
	keys    []string
	expires time.Time
	scope   mcp.CacheScope
	// missing are the upstreams whose items it lacks: they failed.
	missing []string
}

// MissingMetaKey is the member of a list page's _meta that names, when
// there are any, the upstreams whose items the list lacks because they
// failed to answer: a host can tell a partial list from a whole one. The
// list is then kept only until they are asked again, about a second.
const MissingMetaKey = "io.github.tidings/missingUpstreams"

// Option configures a Gateway.
type Option func(*options)

type options struct {
	log        *slog.Logger
	srvOpts    []server.Option
	clientOpts []client.Option
	now        func() time.Time
}

// WithLogger sets where the gateway logs (default: discarded).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithServerOptions passes options to the gateway's server: its secret
// (which replicas share), bus, limits, middleware and the like.
// WithOrigin and WithVisibility are the gateway's own and are ignored.
func WithServerOptions(opts ...server.Option) Option {
	return func(o *options) { o.srvOpts = append(o.srvOpts, opts...) }
}

// WithClientOptions passes options to the gateway's client of every
// upstream: client.WithTracerProvider, so that the span of a call
// forwarded upstream is the child of the gateway's span of the caller's
// request and carries its trace context on, and client.WithMeterProvider.
// The gateway sets the clients' identity, protocol version and
// credentials itself, from the configuration.
func WithClientOptions(opts ...client.Option) Option {
	return func(o *options) { o.clientOpts = append(o.clientOpts, opts...) }
}

// WithClock sets the gateway's clock, for tests.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// ruleAll is the rule of every caller when there are no caller rules.
const ruleAll = -1

// New starts a gateway in front of cfg's upstreams. It opens one listen
// on each and reads their lists once, so that a name two upstreams
// offer under one prefix is an error here, not a silent choice later;
// an upstream that cannot be reached is logged and left out until it
// answers. Close stops it.
func New(ctx context.Context, cfg Config, opts ...Option) (*Gateway, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	o := options{log: slog.New(slog.DiscardHandler), now: time.Now}
	for _, opt := range opts {
		opt(&o)
	}
	g := &Gateway{cfg: &cfg, log: o.log, now: o.now, clientOpts: o.clientOpts, callers: map[string]*auth.Info{}, reads: newKeptReads(), id: newGatewayID()}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	srvOpts := append([]server.Option{
		server.WithCapabilities(server.Tools, server.Prompts, server.Resources, server.Completions),
		server.WithPageSize(cfg.pageSize()),
	}, o.srvOpts...)
	// Visibility is installed even without caller rules, which a reload
	// may bring.
	srvOpts = append(srvOpts, server.WithOrigin(origin{g}), server.WithMiddleware(g.noteCaller), server.WithVisibility(g.visible),
		server.WithDiscoverMeta(g.discoverMeta))
	g.srv = server.New(mcp.Implementation{Name: "tidings-gateway", Version: buildinfo.Version("")}, srvOpts...)
	for _, uc := range cfg.Upstreams {
		u, err := newUpstream(ctx, g, uc)
		if err != nil {
			g.Close()
			return nil, err
		}
		g.ups = append(g.ups, u)
	}
	if err := g.checkClashes(ctx, g.ups); err != nil {
		g.Close()
		return nil, err
	}
	for _, u := range g.ups {
		u.start(g.ctx)
	}
	return g, nil
}

// Server is the gateway's server, to serve with streamhttp.New or
// stdio.Serve.
func (g *Gateway) Server() *server.Server { return g.srv }

// Close stops every upstream's listen and client (and the spawned
// servers). Shut the server down first, so that its listens end with
// their complete result.
func (g *Gateway) Close() {
	g.cancel()
	g.mu.Lock()
	ups := g.ups
	g.ups = nil
	g.mu.Unlock()
	// A follow under way adds its poll under the polls' lock, having
	// found g.ctx not done; once the lock is had here, every later one
	// finds it done, and Wait runs after the last Add.
	g.taskPolls.mu.Lock()
	//lint:ignore SA2001 the lock is taken only to wait for a follow under way.
	g.taskPolls.mu.Unlock()
	g.taskPolls.wg.Wait()
	g.ends.Wait()
	for _, u := range ups {
		u.stop()
	}
}

// Reload makes the gateway serve cfg: upstreams that are new are
// connected, those gone are closed, those whose settings changed are
// connected again, and, unless nothing changed, every listener here is
// told the lists changed. A configuration that does not check, or whose
// upstreams would offer one name twice, is refused and the old one goes
// on.
func (g *Gateway) Reload(ctx context.Context, cfg Config) error {
	if err := cfg.Check(); err != nil {
		return err
	}
	g.mu.RLock()
	old := map[string]*upstream{}
	for _, u := range g.ups {
		old[u.cfg.ID] = u
	}
	g.mu.RUnlock()
	var next, started []*upstream
	kept := map[*upstream]bool{}
	for _, uc := range cfg.Upstreams {
		if u, ok := old[uc.ID]; ok && sameUpstream(u.cfg, uc) {
			next = append(next, u)
			kept[u] = true
			continue
		}
		u, err := newUpstream(ctx, g, uc)
		if err != nil {
			for _, s := range started {
				s.stop()
			}
			return err
		}
		next, started = append(next, u), append(started, u)
	}
	if err := g.checkClashes(ctx, next); err != nil {
		for _, s := range started {
			s.stop()
		}
		return err
	}
	for _, u := range started {
		u.start(g.ctx)
	}
	g.mu.Lock()
	same := len(started) == 0 && len(kept) == len(old) && reflect.DeepEqual(g.cfg.Callers, cfg.Callers) &&
		g.cfg.maxTTL() == cfg.maxTTL() && g.cfg.pageSize() == cfg.pageSize()
	g.cfg = &cfg
	g.ups = next
	relisten := adoptListens(old, started)
	g.mu.Unlock()
	relisten()
	if same {
		// A file saved again, or in another order: nothing to tell.
		return nil
	}
	for _, u := range old {
		if !kept[u] {
			u.stop()
		}
	}
	g.bump()
	for _, l := range listsOf {
		g.srv.ListChanged(l)
	}
	g.log.Info("configuration reloaded", "upstreams", len(next))
	return nil
}

// sameUpstream reports whether two settings of an upstream are alike, so
// that its client, listen and what it kept can be kept.
func sameUpstream(a, b Upstream) bool {
	return a.prefix() == b.prefix() && reflect.DeepEqual(a.withoutPrefix(), b.withoutPrefix())
}

// withoutPrefix is u with its prefix unset, to compare the rest.
func (u Upstream) withoutPrefix() Upstream {
	u.Prefix = nil
	return u
}

// checkClashes reads the tool, prompt and resource lists of ups and
// reports a name or URI two of them offer: the gateway would route it to
// the first, unseen. Resource URIs are not prefixed, so that a
// reference to one in an item (an MCP Apps tool's _meta.ui.resourceUri)
// stays true. An upstream that does not answer is passed over.
func (g *Gateway) checkClashes(ctx context.Context, ups []*upstream) error {
	for _, i := range []int{listIndex(server.ListTools), listIndex(server.ListPrompts), listIndex(server.ListResources)} {
		owner := map[string]string{}
		for _, u := range ups {
			if u.x != nil {
				continue // its lists are each caller's: there is none to compare
			}
			// One that does not answer soon is left for later, so that
			// it holds up neither the start nor a reload.
			lctx, cancel := context.WithTimeout(ctx, probeTimeout)
			v, err := u.list(lctx, i, "")
			cancel()
			if err != nil {
				u.log.Warn("upstream did not answer; its items are left out until it does", "err", err)
				continue
			}
			for _, it := range v.items {
				if other, ok := owner[it.key]; ok {
					switch listsOf[i] {
					case server.ListResources:
						return fmt.Errorf("upstreams %s and %s both serve the resource %q: resource URIs keep their names, so leave it out of one of them (exclude)", other, u.cfg.ID, it.key)
					case server.ListPrompts:
						return fmt.Errorf("upstreams %s and %s both offer a prompt named %q: give one of them a prefix", other, u.cfg.ID, it.key)
					}
					return fmt.Errorf("upstreams %s and %s both offer a tool named %q: give one of them a prefix", other, u.cfg.ID, it.key)
				}
				owner[it.key] = u.cfg.ID
			}
		}
	}
	return nil
}

// upstreams returns the upstreams and the configuration, as one.
func (g *Gateway) upstreams() ([]*upstream, *Config) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.ups, g.cfg
}

// snapshot is the configuration in force and the upstreams it names, read
// together. A request takes one and judges everything by it to the end:
// a reload between two of its steps must not pair a rule's index in one
// configuration with the rules or upstreams of the next, which would show
// a caller what its rule hides.
type snapshot struct {
	cfg *Config
	ups []*upstream
}

// snapshot returns the configuration and upstreams in force.
func (g *Gateway) snapshot() snapshot {
	ups, cfg := g.upstreams()
	return snapshot{cfg: cfg, ups: ups}
}

// ruleFor returns the index of the rule the caller of ctx falls under
// (ruleAll without rules; -2 when none matches).
func (s snapshot) ruleFor(ctx context.Context) int {
	info, _ := auth.FromContext(ctx)
	return s.cfg.ruleOf(info)
}

// config returns the configuration in force.
func (g *Gateway) config() *Config {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.cfg
}

// bump makes every merged list stale.
func (g *Gateway) bump() { g.gen.Add(1) }

// forgetRead drops the kept read of uri.
func (g *Gateway) forgetRead(uri string) { g.reads.forget(uri) }

// ---- callers ----

// noteCaller is middleware that remembers each caller's token, so that
// a change can later be told only to those its rule lets see it.
func (g *Gateway) noteCaller(next server.MethodHandler) server.MethodHandler {
	return func(ctx context.Context, req *server.Request) error {
		ctx, release := g.exchangeCaller(ctx, req)
		// A listen's holds last as long as the listen: past its handler
		// when the transport parked it. Letting go closes listens
		// upstream and waits for them, which the parked listens' shared
		// writer that runs the end must not: it is done aside.
		parked := false
		defer func() {
			if !parked {
				release()
			}
		}()
		defer func() {
			parked = req.AfterEnd(func(error) {
				g.ends.Add(1)
				go func() {
					defer g.ends.Done()
					release()
				}()
			})
		}()
		if _, cfg := g.upstreams(); len(cfg.Callers) > 0 {
			info, _ := auth.FromContext(ctx)
			g.callersMu.Lock()
			if len(g.callers) >= maxCallers {
				clear(g.callers)
			}
			g.callers[req.Principal] = info
			g.callersMu.Unlock()
		}
		if req.Method == mcp.MethodListen || req.Method == mcp.MethodResourcesSubscribe {
			g.readResourceLists(ctx, req.Principal)
		}
		return next(ctx, req)
	}
}

// readResourceLists has the resource lists and templates of every
// upstream the caller of ctx may see read for it, if they are not kept
// already: the server judges the URIs a listen or subscription names by
// what the gateway keeps (visible), which must know them from the
// listen's first moment, not only once somebody listed resources. An
// upstream that does not answer within probeTimeout is passed over.
func (g *Gateway) readResourceLists(ctx context.Context, principal string) {
	snap := g.snapshot()
	r := snap.ruleFor(ctx)
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	for _, u := range snap.ups {
		if !snap.cfg.allows(r, u) || !u.offer().resources {
			continue
		}
		for _, l := range []server.List{server.ListResources, server.ListTemplates} {
			_, _ = u.list(ctx, listIndex(l), principal)
		}
	}
}

// maxCallers bounds the callers whose token is remembered.
const maxCallers = 100000

// ruleOf returns the index of the first rule the caller whose token says
// info (nil: none) falls under, ruleAll without rules, and -2 when none
// matches.
func (cfg *Config) ruleOf(info *auth.Info) int {
	if len(cfg.Callers) == 0 {
		return ruleAll
	}
	for i := range cfg.Callers {
		if cfg.Callers[i].matches(info) {
			return i
		}
	}
	return -2
}

// ruleOfPrincipal is the rule of cfg that principal falls under, as its
// latest token says: for what is decided outside a request of its own (a
// change told to its listens). A caller not seen since the rules came (a
// reload) is judged as one without a token until its next request.
func (g *Gateway) ruleOfPrincipal(cfg *Config, principal string) int {
	if len(cfg.Callers) == 0 {
		return ruleAll
	}
	g.callersMu.Lock()
	info := g.callers[principal]
	g.callersMu.Unlock()
	return cfg.ruleOf(info)
}

// matches reports whether the caller whose token says info (nil: no
// token) falls under r.
func (r *CallerRule) matches(info *auth.Info) bool {
	if r.Scope == "" && r.Subject == "" {
		return true
	}
	if info == nil {
		return false
	}
	if r.Subject != "" && info.Subject != r.Subject {
		return false
	}
	if r.Scope != "" {
		for _, s := range info.Scopes {
			if s == r.Scope {
				return true
			}
		}
		return false
	}
	return true
}

// sees reports whether the callers of rule r may see the item key of
// upstream u.
func (cfg *Config) sees(r int, u *upstream, key string) bool {
	return cfg.allows(r, u) && (r == ruleAll || !matchAny(cfg.Callers[r].Exclude, key))
}

// seesURI reports whether the callers of rule r may see the resource uri
// of upstream u: their rule's exclude is matched against the URI and the
// names it may stand for (uriVariants).
func (cfg *Config) seesURI(r int, u *upstream, uri string) bool {
	return cfg.allows(r, u) && (r == ruleAll || !excludesURI(cfg.Callers[r].Exclude, uri))
}

// allows reports whether the callers of rule r may see anything of u.
func (cfg *Config) allows(r int, u *upstream) bool {
	switch {
	case r == ruleAll:
		return true
	case r < 0:
		return false
	}
	ids := cfg.Callers[r].Upstreams
	return len(ids) == 0 || slices.Contains(ids, u.cfg.ID)
}

// visible is the server's visibility rule: whether principal may see the
// item key of list l, as the rule it last came under says.
func (g *Gateway) visible(principal string, l server.List, key string) bool {
	ups, cfg := g.upstreams()
	if len(cfg.Callers) == 0 {
		return true
	}
	r := g.ruleOfPrincipal(cfg, principal)
	i := listIndex(l)
	if l == server.ListResources {
		return g.visibleURI(ups, cfg, r, principal, key)
	}
	for _, u := range ups {
		if i >= 0 && u.owns(i, key) {
			return cfg.sees(r, u, key)
		}
	}
	// An item no upstream has any more (it was removed): told to those
	// who see everything.
	return r == ruleAll || (r >= 0 && len(cfg.Callers[r].Upstreams) == 0 && !matchAny(cfg.Callers[r].Exclude, key))
}

// visibleURI is visible for a resource: whether an upstream the callers of
// rule r may see serves uri, as listed or by a template, as kept for
// principal. It asks no upstream; the middleware has the lists a listen
// or a subscription depends on read first (see noteCaller).
func (g *Gateway) visibleURI(ups []*upstream, cfg *Config, r int, principal, uri string) bool {
	for _, u := range ups {
		if !cfg.allows(r, u) {
			continue
		}
		if tmpl, ok := u.servesKept(principal, uri); ok {
			return cfg.seesURI(r, u, uri) && (tmpl == "" || cfg.sees(r, u, tmpl))
		}
	}
	// A resource no upstream it may see serves (any more): told to those
	// who see every upstream, as its exclude allows.
	return r == ruleAll || (r >= 0 && len(cfg.Callers[r].Upstreams) == 0 && !excludesURI(cfg.Callers[r].Exclude, uri) &&
		checkSpelling(uri) == nil)
}

// owns reports whether key is, or was lately, an item of u's list i.
func (u *upstream) owns(i int, key string) bool {
	if (listsOf[i] == server.ListTools || listsOf[i] == server.ListPrompts) && u.prefix != "" {
		return len(key) > len(u.prefix) && key[:len(u.prefix)] == u.prefix
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if v := u.public[i]; v != nil {
		_, ok := v.byKey[key]
		return ok
	}
	return false
}

// ---- lists ----

// mergedList returns list i as the callers of rule r of s see it, merged
// from every upstream they may see.
func (g *Gateway) mergedList(ctx context.Context, s snapshot, i int, principal string, r int) *mergedView {
	gen := g.gen.Load()
	key := mergedKey{i, r}
	now := g.now()
	if v, ok := g.merged.Load(key); ok {
		if mv := v.(*mergedView); mv.cfg == s.cfg && mv.gen == gen && now.Before(mv.expires) {
			return mv
		}
	}
	ups, cfg := s.ups, s.cfg
	type part struct {
		u *upstream
		v *view
	}
	parts := make([]part, 0, len(ups))
	expires := now.Add(cfg.maxTTL())
	scope := mcp.ScopePublic
	if len(cfg.Callers) > 0 {
		scope = mcp.ScopePrivate // what a caller sees depends on who asks
	}
	shareable := true
	var missing []string
	for _, u := range ups {
		if !cfg.allows(r, u) {
			continue
		}
		v, err := u.list(ctx, i, principal)
		if err != nil {
			// Left out, and named as missing; the list is kept for the
			// others of the rule until the upstream is asked again
			// (retryDown), so that they are not held up by it — unless
			// what failed was this caller's own request.
			if e := now.Add(retryDown); e.Before(expires) {
				expires = e
			}
			if ctx.Err() != nil {
				shareable = false
			}
			missing = append(missing, u.cfg.ID)
			continue
		}
		if v.expires.Before(expires) {
			expires = v.expires
		}
		if v.scope != mcp.ScopePublic {
			scope, shareable = mcp.ScopePrivate, false
		}
		parts = append(parts, part{u, v})
	}
	n := 0
	for _, p := range parts {
		n += len(p.v.items)
	}
	type entry struct {
		key  string
		json jsontext.Value
	}
	all := make([]entry, 0, n)
	for _, p := range parts {
		for _, it := range p.v.items {
			if cfg.sees(r, p.u, it.key) {
				all = append(all, entry{it.key, it.json})
			}
		}
	}
	// Stable: on a name two upstreams offer (which only a reload racing
	// a change can make), the first upstream's item wins.
	sort.SliceStable(all, func(a, b int) bool { return all[a].key < all[b].key })
	mv := &mergedView{cfg: cfg, gen: gen, expires: expires, scope: scope, missing: missing}
	for j, e := range all {
		if j > 0 && e.key == all[j-1].key {
			continue
		}
		mv.items = append(mv.items, e.json)
		mv.keys = append(mv.keys, e.key)
	}
	if shareable {
		g.merged.Store(key, mv)
	}
	return mv
}

// ---- routing ----

// errUnknown is the error told for an item the caller cannot reach.
func errUnknown(what, name string) error {
	return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "Unknown "+what+": "+strconv.Quote(name), nil)
}

// route finds the upstream and the upstream's own name of the item key
// of list i, as the caller of ctx may see it under s.
func (g *Gateway) route(ctx context.Context, s snapshot, i int, principal, key string) (*upstream, item, bool) {
	r := s.ruleFor(ctx)
	for _, u := range s.ups {
		if (listsOf[i] == server.ListTools || listsOf[i] == server.ListPrompts) && u.prefix != "" &&
			(len(key) <= len(u.prefix) || key[:len(u.prefix)] != u.prefix) {
			continue
		}
		if !s.cfg.allows(r, u) {
			continue
		}
		v, err := u.list(ctx, i, principal)
		if err != nil {
			continue
		}
		if j, ok := v.byKey[key]; ok && s.cfg.sees(r, u, key) {
			return u, v.items[j], true
		}
	}
	return nil, item{}, false
}

// routeURI finds the upstream that serves the resource uri to the caller
// of ctx under s: the first upstream its rule lets it see that lists uri
// as it is, else the first whose template matches it. Each rule is
// judged against uri itself: the upstream's include and exclude, the
// caller's exclude, and, for a template, the template too. A uri reached
// by a template must be spelt so that no upstream could read it as
// another (checkSpelling): what the rules cannot judge is refused.
// Neither found nor refused is (nil, nil).
func (g *Gateway) routeURI(ctx context.Context, s snapshot, principal, uri string) (*upstream, error) {
	r := s.ruleFor(ctx)
	u, tmpl, ok := ownerOf(ctx, s.ups, principal, uri, func(u *upstream) bool { return s.cfg.allows(r, u) })
	if !ok {
		return nil, nil
	}
	if tmpl != "" {
		if err := checkSpelling(uri); err != nil {
			return nil, jsonrpc.NewError(jsonrpc.CodeInvalidParams,
				"resource URI "+strconv.Quote(uri)+" is not one the gateway can judge by its rules: "+err.Error(), nil)
		}
		if !u.keepsURI(uri) || !s.cfg.sees(r, u, tmpl) {
			return nil, nil
		}
	}
	if !s.cfg.seesURI(r, u, uri) {
		return nil, nil
	}
	return u, nil
}

// ownerOf finds, among the upstreams of ups that may, the one that serves
// the resource uri: the first that lists it, else the first whose template
// matches it. tmpl is that template, "" for a listed URI.
func ownerOf(ctx context.Context, ups []*upstream, principal, uri string, may func(*upstream) bool) (u *upstream, tmpl string, ok bool) {
	ri, ti := listIndex(server.ListResources), listIndex(server.ListTemplates)
	for _, u := range ups {
		if !may(u) {
			continue
		}
		if v, err := u.list(ctx, ri, principal); err == nil {
			if _, ok := v.byKey[uri]; ok {
				return u, "", true
			}
		}
	}
	for _, u := range ups {
		if !may(u) {
			continue
		}
		v, err := u.list(ctx, ti, principal)
		if err != nil {
			continue
		}
		for _, it := range v.items {
			if it.tmpl != nil && it.tmpl.Match(uri) != nil {
				return u, it.key, true
			}
		}
	}
	return nil, "", false
}

// upstreamError is what a caller is told when an upstream fails a
// request: its own JSON-RPC error as it is, anything else in words that
// name the upstream.
func upstreamError(u *upstream, err error) error {
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		return je
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	return jsonrpc.Wrap(jsonrpc.CodeInternalError, "upstream "+u.cfg.ID+" failed: ", err)
}

// rawResult is what the gateway reads of an upstream's result.
type rawResult struct {
	ResultType    string                      `json:"resultType"`
	InputRequests map[string]mcp.InputRequest `json:"inputRequests"`
	RequestState  string                      `json:"requestState"`
	TTL           *int64                      `json:"ttlMs"`
	Scope         mcp.CacheScope              `json:"cacheScope"`
}

// interim reads what an upstream's result says of itself; an
// input_required one is returned as the caller's *server.InputRequired.
func interim(u *upstream, res jsontext.Value) (*rawResult, error) {
	var rr rawResult
	if err := jsonrpc.UnmarshalParams(res, &rr); err != nil {
		return nil, upstreamError(u, err)
	}
	if rr.ResultType == mcp.ResultInputRequired {
		ir := &server.InputRequired{Requests: rr.InputRequests}
		if rr.RequestState != "" {
			ir.State = []byte(rr.RequestState)
		}
		return &rr, ir
	}
	return &rr, nil
}

// retryParams adds to params what a retried request carries: the
// caller's answers and the upstream's state.
func retryParams(params map[string]any, req *server.Request) {
	if len(req.InputResponses) > 0 {
		params["inputResponses"] = req.InputResponses
	}
	if st := req.State(); st != nil {
		params["requestState"] = string(st)
	}
}

// ---- observability ----

// UpstreamStats is what Stats reports of one upstream.
type UpstreamStats struct {
	// ID is the upstream's id.
	ID string
	// Up is false while the upstream does not answer; its items are then
	// left out of the lists.
	Up bool
	// Problem says why it is not up ("" while it is): its latest
	// failure, or the loop it makes (see IdentityMetaKey).
	Problem string
	// Restarts counts the new processes of a spawned upstream started
	// after one died, and Downs the times the upstream was found down.
	Restarts, Downs int64
	// KeptReadBytes are the bytes of the upstream's resources/read
	// answers kept now, and KeptReadsEvicted counts those dropped to
	// stay within MaxKeptBytes.
	KeptReadBytes, KeptReadsEvicted int64
	// Listens is how many listens the gateway holds on the upstream: one
	// while it is up, whatever the number of callers listening here — or,
	// for an upstream spoken to with each caller's token exchanged, one
	// per caller listening here.
	Listens int
	// Requests counts the lists and reads the gateway asked of the
	// upstream, Hits the answers served from what it kept, Misses those
	// it had to ask for, and Failures the asks that failed.
	Requests, Hits, Misses, Failures int64
	// Cut counts the lists of the upstream cut at MaxItems.
	Cut int64
	// Exchanges counts the token exchanges asked for the upstream's
	// callers (token_exchange), ExchangeFailures those refused, and
	// ExchangedEvicted the exchanged tokens dropped at
	// max_exchanged_tokens; ExchangedTokens is how many are kept now.
	Exchanges, ExchangeFailures, ExchangedEvicted int64
	ExchangedTokens                               int
	// Lag is how long the latest change took from the upstream's word
	// (its notification, or a poll or reconnection that found it) to the
	// gateway's own listeners being told: the re-read in between.
	Lag time.Duration
}

// Stats reports every upstream's state and counts, in the
// configuration's order.
func (g *Gateway) Stats() []UpstreamStats {
	ups, _ := g.upstreams()
	out := make([]UpstreamStats, 0, len(ups))
	for _, u := range ups {
		s := UpstreamStats{ID: u.cfg.ID, Up: !u.down.Load(),
			Requests: u.st.requests.Load(), Hits: u.st.hits.Load(), Misses: u.st.misses.Load(),
			Failures: u.st.failures.Load(), Cut: u.st.cut.Load(), Lag: time.Duration(u.st.lastLagNanos.Load()),
			Restarts: u.st.restarts.Load(), Downs: u.st.downs.Load(),
			KeptReadBytes: u.st.readBytes.Load(), KeptReadsEvicted: u.st.readsEvicted.Load()}
		if !s.Up {
			if p := u.problem.Load(); p != nil {
				s.Problem = *p
			}
		}
		u.mu.Lock()
		if u.watcher != nil && u.watcher.State() == client.Live {
			s.Listens = 1
		}
		u.mu.Unlock()
		if u.x != nil {
			u.x.stats(&s)
		}
		out = append(out, s)
	}
	return out
}
