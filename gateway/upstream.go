package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/yosida95/uritemplate/v3"

	"tidings/client"
	"tidings/client/oauth"
	"tidings/internal/buildinfo"
	"tidings/internal/jsonscan"
	"tidings/internal/tracectx"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// lists are the four lists an upstream has, in the order of the arrays
// indexed by listIndex.
var listsOf = [...]server.List{server.ListTools, server.ListPrompts, server.ListResources, server.ListTemplates}

const numLists = len(listsOf)

// listNames name the lists in logs, in listsOf's order.
var listNames = [numLists]string{"tools", "prompts", "resources", "resourceTemplates"}

// listIndex is the index of l in listsOf, -1 for others.
func listIndex(l server.List) int {
	for i, x := range listsOf {
		if x == l {
			return i
		}
	}
	return -1
}

// item is one item of an upstream's list as the gateway serves it.
type item struct {
	key  string         // the name or URI callers see
	orig string         // the upstream's own name or URI
	json jsontext.Value // the item with key in place of orig
	tmpl *uritemplate.Template
	// schema is a tool's inputSchema, a sub-slice of json, found once
	// when the list is kept rather than at each call (see ToolSchema).
	schema jsontext.Value
}

// view is an upstream's whole list as the gateway keeps it: below
// policy, the same for every caller who gets it.
type view struct {
	items   []item // sorted by key
	byKey   map[string]int
	expires time.Time
	scope   mcp.CacheScope
}

func (v *view) fresh(now time.Time) bool { return v != nil && now.Before(v.expires) }

// upstream is one server behind the gateway: a client, the lists kept
// from it, and one listen that hears of its changes.
type upstream struct {
	g      *Gateway
	cfg    Upstream
	prefix string
	c      *client.Client
	log    *slog.Logger

	// mu guards what follows, down to announced; cancel and flow are set
	// before the upstream starts and only read after.
	mu sync.Mutex
	// public are the lists the upstream marked public, shared by all.
	public [numLists]*view
	// private are the lists it marked private, per downstream principal:
	// never shared among callers.
	private [numLists]map[string]*view
	// isPrivate says the upstream answers list i privately: it is then
	// fetched for each caller.
	isPrivate [numLists]bool
	// gen counts invalidations of each list, so that an answer fetched
	// before one is not kept as fresh.
	gen [numLists]uint64
	// fetching counts the reads of each list on their way: while one
	// is, a caller may be served what an invalidation then finds no
	// trace of (see exchanger.event).
	fetching [numLists]atomic.Int32
	// stale says list i changed on another replica's word: the client's
	// cache, which only this replica's listen keeps honest, may not know
	// yet, so the next fetch goes past it.
	stale [numLists]bool
	// follows counts the listens following each URI this upstream serves.
	follows map[string]int
	watcher *client.Watcher
	// refollow wakes the loop that re-listens with a new set of URIs.
	refollow chan struct{}
	// offers are the lists the listen follows, and whether the upstream
	// runs tasks (see offer): set before the listen opens, or, for an
	// upstream that is asked only in a caller's name, once one asked.
	offers atomic.Pointer[offered]
	// cancel ends what start started (nil before it).
	cancel context.CancelFunc
	// flow obtains the gateway's own tokens (client_credentials), nil
	// for other ways.
	flow *oauth.Flow
	// x exchanges each caller's token for the one presented upstream
	// (token_exchange), nil for other ways.
	x *exchanger
	// announced holds when the announcements passed on were made, whose
	// re-read has not reported yet, by topic (a list's index, or "uri:"
	// and the URI).
	announced map[string][]time.Time
	// down is set while the upstream does not answer; its items are
	// then left out, and asked for again from retryAt (Unix nanoseconds).
	down    atomic.Bool
	retryAt atomic.Int64
	// problem is why it went down last.
	problem atomic.Pointer[string]
	// loop says whether the upstream leads back to this gateway, and
	// reaches are the gateways it is or reaches (see identify).
	loop    loopState
	reaches atomic.Pointer[[]string]

	// stderr logs a spawned upstream's stderr (nil for others).
	stderr *stderrLog

	st upstreamCounters
	wg sync.WaitGroup
}

// upstreamCounters are what Stats reports of an upstream.
type upstreamCounters struct {
	requests, hits, misses, failures atomic.Int64
	// cut counts lists cut at max_items.
	cut atomic.Int64
	// restarts counts the spawned upstream's new processes after one
	// died, downs the times it was found down.
	restarts, downs atomic.Int64
	// readBytes are the bytes of its reads the gateway keeps now, and
	// readsEvicted counts those dropped to make room (MaxKeptBytes).
	readBytes, readsEvicted atomic.Int64
	lastLagNanos            atomic.Int64
}

// newUpstream connects (lazily) to the server cfg names.
func newUpstream(ctx context.Context, g *Gateway, cfg Upstream) (*upstream, error) {
	u := &upstream{g: g, cfg: cfg, prefix: cfg.prefix(), log: g.log.With("upstream", cfg.ID),
		follows: map[string]int{}, refollow: make(chan struct{}, 1)}
	for i := range u.private {
		u.private[i] = map[string]*view{}
	}
	opts := append(slices.Clip(g.clientOpts), client.WithClientInfo(mcp.Implementation{Name: "tidings-gateway", Version: buildinfo.Version("")}),
		client.WithoutTasks(), client.WithLogger(u.log))
	if cfg.Protocol != "" {
		opts = append(opts, client.WithProtocolVersion(cfg.Protocol))
	}
	if cfg.URL != "" {
		hopts := make([]client.HTTPOption, 0, len(opts)+1)
		for _, o := range opts {
			hopts = append(hopts, o)
		}
		cred, err := readCredential(cfg.Auth)
		if err != nil {
			return nil, fmt.Errorf("upstream %s: %w", cfg.ID, err)
		}
		if cred.name != "" {
			hopts = append(hopts, client.WithHeader(cred.name, cred.value))
		}
		if cc := cfg.Auth.ClientCredentials; cc != nil {
			f, err := u.clientFlow("client_credentials", *cc, nil)
			if err != nil {
				return nil, fmt.Errorf("upstream %s: %w", cfg.ID, err)
			}
			u.flow = f
			hopts = append(hopts, client.WithAuthorizer(f))
		}
		if cfg.Auth.TokenExchange != nil {
			x, err := newExchanger(u)
			if err != nil {
				return nil, fmt.Errorf("upstream %s: %w", cfg.ID, err)
			}
			u.x = x
			hopts = append(hopts, client.WithAuthorizer(x))
		}
		u.c = client.NewHTTP(cfg.URL, hopts...)
	} else {
		copts := make([]client.CommandOption, 0, len(opts)+2)
		for _, o := range opts {
			copts = append(copts, o)
		}
		u.stderr = &stderrLog{log: u.log, now: g.now}
		copts = append(copts, client.WithStderr(u.stderr), client.WithRestarted(u.restarted))
		c, err := client.NewCommand(ctx, cfg.Command[0], cfg.Command[1:], copts...)
		if err != nil {
			return nil, fmt.Errorf("upstream %s: starting %s: %w", cfg.ID, cfg.Command[0], err)
		}
		u.c = c
	}
	return u, nil
}

type credential struct{ name, value string }

// readLine reads a file that holds one line, a credential.
func readLine(f string) (string, error) {
	b, err := os.ReadFile(f)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if v == "" || strings.ContainsAny(v, "\r\n") {
		return "", fmt.Errorf("%s must hold one line, the credential", f)
	}
	return v, nil
}

// clientFlow reads the secret of cc and makes the flow by which the
// gateway obtains tokens as that client of cc.Issuer, by the client
// credentials grant: its own tokens for u (client_credentials) and its
// callers' exchanged (token_exchange) are both asked for so. what names
// the setting in the error; now is the flow's clock (nil: time.Now).
func (u *upstream) clientFlow(what string, cc ClientCredentials, now func() time.Time) (*oauth.Flow, error) {
	secret, err := readLine(cc.SecretFile)
	if err != nil {
		return nil, fmt.Errorf("auth: %s: %w", what, err)
	}
	f, err := oauth.New(oauth.Config{Grant: oauth.ClientCredentials{}, ClientID: cc.ClientID, ClientSecret: secret,
		ClientIssuer: cc.Issuer, Scopes: cc.Scopes, Logger: u.log, Now: now})
	if err != nil {
		return nil, fmt.Errorf("auth: %s: %w", what, err)
	}
	return f, nil
}

// readCredential reads the credential a sends as a header.
func readCredential(a Auth) (credential, error) {
	read := func(f string) (string, error) {
		v, err := readLine(f)
		if err != nil {
			return "", fmt.Errorf("auth: %w", err)
		}
		return v, nil
	}
	switch {
	case a.BearerFile != "":
		v, err := read(a.BearerFile)
		return credential{"Authorization", "Bearer " + v}, err
	case a.HeaderFile != "":
		v, err := read(a.HeaderFile)
		return credential{a.Header, v}, err
	}
	return credential{}, nil
}

// offered says which lists an upstream offers, and whether it runs
// tasks, as it said when the gateway started following it.
type offered struct {
	tools, prompts, resources, tasks bool
	// extensions are the others it offers, with their settings.
	extensions map[string]jsontext.Value
}

// offer is what u offers, as it said. Until it has said, the gateway
// takes it to offer every list, so that none goes unfollowed, and no
// tasks, which are never asked of an upstream that has not said it runs
// them.
func (u *upstream) offer() offered {
	if o := u.offers.Load(); o != nil {
		return *o
	}
	return offered{tools: true, prompts: true, resources: true}
}

// offeredBy reads what capabilities offer.
func offeredBy(caps mcp.ServerCaps) *offered {
	o := &offered{tools: caps.Tools != nil, prompts: caps.Prompts != nil, resources: caps.Resources != nil, tasks: mcp.DeclaresTasks(caps.Extensions)}
	for name, v := range caps.Extensions {
		if name != mcp.ExtensionTasks {
			if o.extensions == nil {
				o.extensions = map[string]jsontext.Value{}
			}
			o.extensions[name] = v
		}
	}
	return o
}

// start opens the upstream's listen and the loop that renews it when
// the URIs followed change. ctx is the gateway's. The listen follows the
// lists the upstream offers; one that does not say follows them all.
func (u *upstream) start(ctx context.Context) {
	ctx, u.cancel = context.WithCancel(ctx)
	if u.x != nil {
		// Nothing is asked of it but in a caller's name: its listens are
		// each caller's (exchanger.hold).
		u.x.start(ctx)
		return
	}
	dctx, cancel := context.WithTimeout(ctx, probeTimeout)
	d, err := u.c.Discover(dctx)
	cancel()
	if err == nil {
		u.offers.Store(offeredBy(d.Capabilities))
		if u.noteIdentity(d) != nil {
			return
		}
	}
	u.listen(ctx, nil)
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-u.refollow:
			}
			u.mu.Lock()
			uris := make([]string, 0, len(u.follows))
			for uri := range u.follows {
				uris = append(uris, uri)
			}
			u.mu.Unlock()
			slices.Sort(uris)
			u.listen(ctx, uris)
		}
	}()
}

// listen opens the upstream's one listen, following the lists the
// upstream offers and uris, and closes the one it replaces: the new
// listen's first reads find whatever changed in between.
func (u *upstream) listen(ctx context.Context, uris []string) {
	// A new listen's first read of each list reports every item as
	// added: it is a baseline, told only where it differs from what the
	// gateway serves.
	var baseline [numLists]bool
	onEvent := func(e client.Event) {
		if i := int(e.Kind - client.ToolsChanged); i >= 0 && i < numLists && !baseline[i] {
			baseline[i] = true
			if u.sameAsKept(ctx, i) {
				return
			}
		}
		u.event(e)
	}
	o := u.offer()
	w := u.c.Watch(ctx, client.WatchOptions{Tools: o.tools, Prompts: o.prompts, Resources: o.resources,
		URIs: uris, OnEvent: onEvent, OnAnnounce: u.announce, MaxBackoff: 5 * time.Second})
	u.mu.Lock()
	old := u.watcher
	u.watcher = w
	u.mu.Unlock()
	if old != nil {
		old.Close()
	}
}

// sameAsKept reports whether list i, as the client now has it, is what
// the gateway keeps and serves of it. Nothing kept is never the same.
func (u *upstream) sameAsKept(ctx context.Context, i int) bool {
	u.mu.Lock()
	kept := u.public[i]
	u.mu.Unlock()
	if kept == nil {
		return false
	}
	raw, keys, expires, scope, err := u.fetchCached(ctx, i)
	if err != nil || scope != mcp.ScopePublic {
		return false
	}
	now := u.build(i, raw, keys, expires, scope)
	if !slices.EqualFunc(now.items, kept.items, func(a, b item) bool { return a.key == b.key && bytes.Equal(a.json, b.json) }) {
		return false
	}
	u.mu.Lock()
	if u.public[i] == kept {
		u.public[i] = now // as fresh as the read just made
	}
	u.mu.Unlock()
	return true
}

// stop ends the listen and the client.
func (u *upstream) stop() {
	if u.cancel != nil {
		u.cancel()
	}
	u.mu.Lock()
	w := u.watcher
	u.mu.Unlock()
	if w != nil {
		w.Close()
	}
	u.wg.Wait()
	if u.x != nil {
		u.x.stop()
	}
	_ = u.c.Close()
	if u.stderr != nil {
		u.stderr.flush()
	}
	if u.flow != nil {
		_ = u.flow.Close()
	}
}

// event handles what the upstream's Watcher observed: what the gateway
// kept is dropped first, then the listeners are told.
func (u *upstream) event(e client.Event) {
	switch e.Kind {
	case client.ToolsChanged, client.PromptsChanged, client.ResourcesChanged, client.TemplatesChanged:
		i := int(e.Kind - client.ToolsChanged)
		keys := u.keysOf(i, e)
		u.forget(i)
		if u.takeAnnounced(strconv.Itoa(i), e.Since) {
			return // everyone who follows the list was told already
		}
		u.g.srv.ListChangedContext(changeContext(e), listsOf[i], keys...)
		u.lag(e)
	case client.ResourceUpdated:
		u.g.forgetRead(e.URI)
		if u.takeAnnounced("uri:"+e.URI, e.Since) {
			return
		}
		u.g.srv.ResourceUpdatedContext(changeContext(e), e.URI)
		u.lag(e)
	case client.Connected:
		// What answers at the upstream's address may be another server
		// than before: a gateway, perhaps this one.
		if u.identify(u.g.ctx, true) != nil {
			return
		}
		u.setDown(false, nil)
	case client.Disconnected:
		if !e.Graceful {
			// A listen that drops may be a blip or the upstream gone: a
			// read past every cache tells which, and the lists follow.
			ctx, cancel := context.WithTimeout(u.g.ctx, probeTimeout)
			_, err := u.fetch(ctx, listIndex(server.ListTools), true)
			cancel()
			u.setDown(err != nil, err)
		}
	case client.ReadFailed:
		u.log.Debug("re-read failed", "err", e.Err)
	}
}

// announce passes an upstream's word of a change on at once: what the
// gateway kept is dropped first, then every listener here that follows
// the list (or the resource) is told. Under caller rules a list's change
// waits for the re-read instead, which names the items that changed, so
// that only those who may see one are told, once.
func (u *upstream) announce(e client.Event) {
	if e.Kind == client.ResourceUpdated {
		u.g.forgetRead(e.URI)
		u.g.srv.ResourceUpdatedContext(changeContext(e), e.URI)
		u.noteAnnounced("uri:"+e.URI, e.At)
		u.lag(e)
		return
	}
	i := int(e.Kind - client.ToolsChanged)
	if _, cfg := u.g.upstreams(); i < 0 || i >= numLists || len(cfg.Callers) > 0 {
		return
	}
	u.forget(i)
	u.noteAnnounced(strconv.Itoa(i), e.At)
	u.g.srv.ListChangedContext(changeContext(e), listsOf[i])
	u.lag(e)
}

// changeContext holds the trace context of the upstream's notification of
// e, if it carried one: the gateway's change continues that trace.
func changeContext(e client.Event) context.Context {
	return tracectx.Extract(context.Background(), e.TraceParent, "")
}

// noteAnnounced records that an announcement of topic, made at at, was
// passed on.
func (u *upstream) noteAnnounced(topic string, at time.Time) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.announced == nil {
		u.announced = map[string][]time.Time{}
	}
	if len(u.announced) >= maxAnnounced {
		clear(u.announced)
	}
	ats := u.announced[topic]
	if len(ats) == maxAnnouncedPerTopic {
		ats = ats[1:]
	}
	u.announced[topic] = append(ats, at)
}

// Bounds on the announcements remembered: topics per upstream, and
// announcements per topic whose re-read has not reported.
const (
	maxAnnounced         = 10000
	maxAnnouncedPerTopic = 64
)

// takeAnnounced reports whether the change a re-read reports, the re-read
// of what was learnt at since, answers an announcement of topic passed
// on already: the watcher dates that re-read by the announcement's own
// time. Announcements up to since are forgotten either way (their
// re-reads have run).
func (u *upstream) takeAnnounced(topic string, since time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	ats := u.announced[topic]
	found := slices.ContainsFunc(ats, func(at time.Time) bool { return at.Equal(since) })
	ats = slices.DeleteFunc(ats, func(at time.Time) bool { return !at.After(since) })
	if len(ats) == 0 {
		delete(u.announced, topic)
	} else {
		u.announced[topic] = ats
	}
	return found
}

// lag records how long the change e reports took from the upstream's
// word to this gateway's listeners being told: the re-read in between.
func (u *upstream) lag(e client.Event) {
	if !e.Since.IsZero() {
		u.st.lastLagNanos.Store(int64(u.g.now().Sub(e.Since)))
	}
}

// keysOf maps the upstream's names in e to the names callers see; nil
// (everything) when it cannot tell.
func (u *upstream) keysOf(i int, e client.Event) []string {
	n := len(e.Added) + len(e.Removed) + len(e.Changed)
	if n == 0 {
		return nil
	}
	keys := make([]string, 0, n)
	for _, group := range [][]string{e.Added, e.Removed, e.Changed} {
		for _, k := range group {
			keys = append(keys, u.downstreamKey(i, k))
		}
	}
	return keys
}

// downstreamKey is the name callers see for the upstream's key k.
func (u *upstream) downstreamKey(i int, k string) string {
	if listsOf[i] == server.ListTools || listsOf[i] == server.ListPrompts {
		return u.prefix + k
	}
	return k
}

// forgetRemote drops what the gateway keeps of list i because another
// replica heard it changed: the next fetch goes to the upstream itself.
func (u *upstream) forgetRemote(i int) {
	u.mu.Lock()
	u.stale[i] = true
	u.mu.Unlock()
	u.forget(i)
}

// forget drops what the gateway keeps of list i.
func (u *upstream) forget(i int) {
	u.mu.Lock()
	u.public[i] = nil
	clear(u.private[i])
	u.gen[i]++
	u.mu.Unlock()
	u.g.bump()
}

// probeTimeout bounds the read that tells whether an upstream is down.
const probeTimeout = 5 * time.Second

// retryDown is how often a list asks again of an upstream that is down.
const retryDown = time.Second

// setDown records whether the upstream is down (err says why). On a
// change either way its lists are dropped and every listener is told:
// its items leave the lists, or come back.
func (u *upstream) setDown(down bool, err error) {
	if down {
		u.retryAt.Store(u.g.now().Add(retryDown).UnixNano())
		if err != nil {
			p := err.Error()
			u.problem.Store(&p)
		}
	}
	if u.down.Swap(down) == down {
		return
	}
	if down {
		u.st.downs.Add(1)
		u.log.Warn("upstream is down; its items leave the lists until it answers", "err", err)
	} else {
		u.log.Info("upstream is back")
	}
	u.forgetAll()
}

// forgetAll drops every list and tells every listener: the upstream
// went down or came back, and its items left or return.
func (u *upstream) forgetAll() {
	for i := range listsOf {
		u.forget(i)
		u.g.srv.ListChanged(listsOf[i])
	}
}

// list returns the upstream's list i as principal may be served it:
// kept if fresh, fetched otherwise.
func (u *upstream) list(ctx context.Context, i int, principal string) (*view, error) {
	if u.x != nil {
		principal = viewKey(ctx, principal)
	}
	now := u.g.now()
	u.mu.Lock()
	v := u.public[i]
	// An upstream spoken to in each caller's name answers each alone.
	priv := u.isPrivate[i] || u.x != nil
	if priv {
		v = u.private[i][principal]
	}
	gen := u.gen[i]
	past := priv || u.stale[i]
	u.mu.Unlock()
	if v.fresh(now) {
		u.st.hits.Add(1)
		return v, nil
	}
	if err := u.identify(ctx, false); err != nil {
		return nil, err
	}
	if u.down.Load() && now.UnixNano() < u.retryAt.Load() {
		return nil, errDown
	}
	u.st.misses.Add(1)
	u.fetching[i].Add(1)
	defer u.fetching[i].Add(-1) // once what was read is kept, or not
	v, err := u.fetch(ctx, i, past)
	if err != nil {
		u.st.failures.Add(1)
		var rpc *jsonrpc.Error
		if ctx.Err() == nil && !errors.As(err, &rpc) {
			u.setDown(true, err) // an error of its own is an answer
		}
		return nil, err
	}
	u.setDown(false, nil)
	if u.x != nil {
		v.scope = mcp.ScopePrivate
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.gen[i] == gen {
		u.stale[i] = false
	}
	if u.gen[i] != gen {
		// A change was announced while this was on its way: serve it
		// to this caller, keep it for nobody.
		return v, nil
	}
	if v.scope == mcp.ScopePublic {
		u.public[i] = v
		u.isPrivate[i] = false
		return v, nil
	}
	u.isPrivate[i] = true
	if !priv {
		// This answer may have come from the client's cache, filled
		// for another caller: it is not kept, and the next caller's
		// is fetched for them alone.
		return v, nil
	}
	if len(u.private[i]) >= maxPrivateViews {
		clear(u.private[i])
	}
	u.private[i][principal] = v
	return v, nil
}

// errDown is the error of a list of an upstream that is down.
var errDown = errors.New("the upstream is down")

// kept returns the item key of list i from what the gateway keeps for
// principal, fresh or not, without asking the upstream.
func (u *upstream) kept(i int, principal, key string) (item, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, v := range []*view{u.public[i], u.private[i][principal]} {
		if v == nil {
			continue
		}
		if j, ok := v.byKey[key]; ok {
			return v.items[j], true
		}
	}
	return item{}, false
}

// maxPrivateViews bounds the private lists kept per upstream and list.
const maxPrivateViews = 4096

// fetch reads the upstream's whole list i: through the client's cache,
// or, past it, page by page (for a list the upstream answers privately,
// for this caller alone).
func (u *upstream) fetch(ctx context.Context, i int, private bool) (*view, error) {
	u.st.requests.Add(1)
	var raw []jsontext.Value
	var keys []string
	var expires time.Time
	scope := mcp.ScopePrivate
	var err error
	if private {
		raw, keys, expires, scope, err = u.fetchPages(ctx, i)
	} else {
		raw, keys, expires, scope, err = u.fetchCached(ctx, i)
	}
	var rpc *jsonrpc.Error
	if errors.As(err, &rpc) && rpc.Code == jsonrpc.CodeMethodNotFound {
		// An upstream that does not offer the list has none: it
		// answered, so it is not down.
		raw, keys, expires, scope, err = nil, nil, u.g.now().Add(u.g.config().maxTTL()), mcp.ScopePublic, nil
	}
	if err != nil {
		return nil, err
	}
	if scope != mcp.ScopePublic && u.x == nil {
		// A 2025-11-25 answer carries no scope, which the client takes
		// as private; but the gateway asked with its own credential, on
		// its own session, so the answer is the same whoever the caller
		// is: it is shared like a public one.
		if era, _ := u.c.Era(ctx); era == client.EraLegacy {
			scope = mcp.ScopePublic
		}
	}
	limit := u.g.now().Add(u.g.config().maxTTL())
	if expires.After(limit) {
		expires = limit
	}
	return u.build(i, raw, keys, expires, scope), nil
}

// fetchCached reads list i through the client's cache, which the
// upstream's listen keeps honest.
func (u *upstream) fetchCached(ctx context.Context, i int) (raw []jsontext.Value, keys []string, expires time.Time, scope mcp.CacheScope, err error) {
	var method string
	add := func(k string, v any) {
		b, merr := jsonrpc.Marshal(v)
		if merr == nil {
			raw, keys = append(raw, b), append(keys, k)
		}
	}
	switch listsOf[i] {
	case server.ListTools:
		method = mcp.MethodToolsList
		var ts []mcp.Tool
		if ts, err = u.c.Tools(ctx); err == nil {
			for _, t := range ts {
				add(t.Name, t)
			}
		}
	case server.ListPrompts:
		method = mcp.MethodPromptsList
		var ps []mcp.Prompt
		if ps, err = u.c.Prompts(ctx); err == nil {
			for _, p := range ps {
				add(p.Name, p)
			}
		}
	case server.ListResources:
		method = mcp.MethodResourcesList
		var rs []mcp.Resource
		if rs, err = u.c.Resources(ctx); err == nil {
			for _, r := range rs {
				add(r.URI, r)
			}
		}
	case server.ListTemplates:
		method = mcp.MethodResourcesTemplates
		var ts []mcp.ResourceTemplate
		if ts, err = u.c.ResourceTemplates(ctx); err == nil {
			for _, t := range ts {
				add(t.URITemplate, t)
			}
		}
	}
	if err != nil {
		return nil, nil, time.Time{}, "", err
	}
	f := u.c.Freshness(method, "")
	return raw, keys, f.Expires, f.Scope, nil
}

// maxPages bounds a walk through one upstream list.
const maxPages = 100

// fetchPages walks list i page by page, past every cache.
func (u *upstream) fetchPages(ctx context.Context, i int) (raw []jsontext.Value, keys []string, expires time.Time, scope mcp.CacheScope, err error) {
	method, _, _ := listMethod(listsOf[i])
	// A 2025-11-25 answer carries no cache hints, whatever members it
	// holds (go-sdk adds both): as the client does, it is private, and
	// fresh while the upstream's listen is up and announces the list.
	era, _ := u.c.Era(ctx)
	legacy := era == client.EraLegacy
	scope = mcp.ScopePublic
	start := u.g.now()
	expires = start.Add(u.g.config().maxTTL())
	var cursor string
	for page := 0; ; page++ {
		if page == maxPages {
			return nil, nil, time.Time{}, "", fmt.Errorf("the %s walk passed %d pages", method, maxPages)
		}
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		res, rerr := u.c.Request(ctx, method, params)
		if rerr != nil {
			return nil, nil, time.Time{}, "", rerr
		}
		p, err := decodePage(res, listsOf[i])
		if err != nil {
			return nil, nil, time.Time{}, "", fmt.Errorf("%s: %w", method, err)
		}
		raw, keys = append(raw, p.items...), append(keys, p.keys...)
		if len(raw) > u.g.config().maxItems() {
			// No more can be served: the walk stops here (build says so).
			return raw, keys, expires, scope, nil
		}
		if legacy {
			p.TTL, p.Scope = nil, mcp.ScopePrivate
		}
		ttl := time.Duration(0)
		switch {
		case legacy && u.announces(i):
			ttl = u.g.config().maxTTL()
		case p.TTL != nil && *p.TTL > 0:
			ttl = time.Duration(*p.TTL) * time.Millisecond
		}
		if e := start.Add(ttl); e.Before(expires) {
			expires = e
		}
		if p.Scope != mcp.ScopePublic {
			scope = mcp.ScopePrivate
		}
		if p.NextCursor == "" {
			return raw, keys, expires, scope, nil
		}
		cursor = p.NextCursor
	}
}

// page is one page of an upstream's list, as the gateway reads it.
type page struct {
	items      []jsontext.Value // each item, encoded again from its type
	keys       []string         // each item's name or URI
	NextCursor string           `json:"nextCursor"`
	TTL        *int64           `json:"ttlMs"`
	Scope      mcp.CacheScope   `json:"cacheScope"`
}

// decodePage reads one page of list l as an upstream sent it. Items are
// decoded into their types and encoded again, as the client's cache has
// them, so that members the protocol does not define do not pass; an
// item without its name or URI is left out.
func decodePage(res jsontext.Value, l server.List) (*page, error) {
	var p page
	if err := jsonrpc.UnmarshalParams(res, &p); err != nil {
		return nil, err
	}
	add := func(k string, v any) {
		if k == "" {
			return
		}
		if b, err := jsonrpc.Marshal(v); err == nil {
			p.items, p.keys = append(p.items, b), append(p.keys, k)
		}
	}
	var err error
	switch l {
	case server.ListTools:
		var r struct {
			Tools []mcp.Tool `json:"tools"`
		}
		if err = jsonrpc.UnmarshalParams(res, &r); err == nil {
			for _, t := range r.Tools {
				add(t.Name, t)
			}
		}
	case server.ListPrompts:
		var r struct {
			Prompts []mcp.Prompt `json:"prompts"`
		}
		if err = jsonrpc.UnmarshalParams(res, &r); err == nil {
			for _, x := range r.Prompts {
				add(x.Name, x)
			}
		}
	case server.ListResources:
		var r struct {
			Resources []mcp.Resource `json:"resources"`
		}
		if err = jsonrpc.UnmarshalParams(res, &r); err == nil {
			for _, x := range r.Resources {
				add(x.URI, x)
			}
		}
	default:
		var r struct {
			Templates []mcp.ResourceTemplate `json:"resourceTemplates"`
		}
		if err = jsonrpc.UnmarshalParams(res, &r); err == nil {
			for _, x := range r.Templates {
				add(x.URITemplate, x)
			}
		}
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// announces reports whether the upstream's listen is up and was granted
// the announcements of list i: what the gateway keeps of it is then
// dropped when it changes.
func (u *upstream) announces(i int) bool {
	u.mu.Lock()
	w := u.watcher
	u.mu.Unlock()
	if w == nil || w.State() != client.Live {
		return false
	}
	g := w.Granted()
	switch listsOf[i] {
	case server.ListTools:
		return g.ToolsListChanged
	case server.ListPrompts:
		return g.PromptsListChanged
	}
	return g.ResourcesListChanged
}

// listMethod names the method of list l, the member holding its items
// and each item's key.
func listMethod(l server.List) (method, field, key string) {
	switch l {
	case server.ListTools:
		return mcp.MethodToolsList, "tools", "name"
	case server.ListPrompts:
		return mcp.MethodPromptsList, "prompts", "name"
	case server.ListResources:
		return mcp.MethodResourcesList, "resources", "uri"
	}
	return mcp.MethodResourcesTemplates, "resourceTemplates", "uriTemplate"
}

// build turns an upstream's items into the view callers are served:
// filtered by the upstream's include and exclude, renamed, sorted.
func (u *upstream) build(i int, raw []jsontext.Value, keys []string, expires time.Time, scope mcp.CacheScope) *view {
	l := listsOf[i]
	_, _, keyField := listMethod(l)
	v := &view{expires: expires, scope: scope, byKey: make(map[string]int, min(len(raw), u.g.config().maxItems()))}
	for j, b := range raw {
		if len(v.items) == u.g.config().maxItems() {
			u.st.cut.Add(1)
			u.log.Warn("list cut at max_items: the rest of the upstream's items are left out", "list", listNames[i],
				"max_items", u.g.config().maxItems(), "offered", len(raw))
			break
		}
		orig := keys[j]
		if len(u.cfg.Include) > 0 && !matchAny(u.cfg.Include, orig) || matchAny(u.cfg.Exclude, orig) {
			continue
		}
		it := item{key: u.downstreamKey(i, orig), orig: orig, json: b}
		if l == server.ListTools {
			// The rules hold for the name callers see, prefix and all.
			if err := server.CheckToolName(it.key); err != nil {
				u.log.Warn("tool left out: its name as served breaks the rules", "tool", orig, "err", err)
				continue
			}
		}
		if it.key != orig {
			renamed, err := rename(b, keyField, it.key)
			if err != nil {
				continue
			}
			it.json = renamed
		}
		if l == server.ListTools {
			it.schema = inputSchema(it.json)
		}
		if l == server.ListTemplates {
			t, err := uritemplate.New(orig)
			if err != nil {
				continue
			}
			it.tmpl = t
		}
		v.items = append(v.items, it)
	}
	slices.SortFunc(v.items, func(a, b item) int { return strings.Compare(a.key, b.key) })
	v.items = slices.CompactFunc(v.items, func(a, b item) bool { return a.key == b.key })
	for j, it := range v.items {
		v.byKey[it.key] = j
	}
	return v
}

// rename returns the item b with its member field set to name.
func rename(b jsontext.Value, field, name string) (jsontext.Value, error) {
	var m map[string]jsontext.Value
	if err := jsonrpc.UnmarshalParams(b, &m); err != nil {
		return nil, err
	}
	q, err := jsontext.AppendQuote(nil, name)
	if err != nil {
		return nil, err
	}
	m[field] = q
	return jsonrpc.Marshal(m)
}

// inputSchema returns the inputSchema member of tool, a tool's valid JSON,
// as a sub-slice of it; nil when it has none.
func inputSchema(tool jsontext.Value) jsontext.Value {
	o := jsonscan.NewObject(tool)
	for {
		name, value, ok := o.Next()
		if !ok {
			return nil
		}
		if string(name) == "inputSchema" {
			return value
		}
	}
}
