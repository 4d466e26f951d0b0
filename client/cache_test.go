package client

import (
	"context"
	"errors"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// primed returns a client whose era probe is done, so request counts
// below see only the reads under test.
func primed(t testing.TB, f *fixture, opts ...HTTPOption) *Client {
	t.Helper()
	c := f.client(t, opts...)
	if _, err := c.Era(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestCacheTTL checks that a list is fresh, and answered without a round
// trip, for exactly ttlMs after it was received, and re-fetched after.
func TestCacheTTL(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{sopts: []server.Option{
		server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: 5 * time.Second}),
	}})
	addTools(t, f.srv, "a", "b")
	clock := newFakeClock()
	c := primed(t, f, withClock(clock.Now))
	ctx := context.Background()

	if st := c.Freshness(mcp.MethodToolsList, "").State; st != Missing {
		t.Errorf("freshness before any read = %s, want missing", st)
	}
	_, err := c.Tools(ctx)
	must(t, err)
	info := c.Freshness(mcp.MethodToolsList, "")
	if info.State != Fresh || !info.ObservedAt.Equal(clock.Now()) || !info.Expires.Equal(clock.Now().Add(5*time.Second)) || info.Scope != mcp.ScopePublic {
		t.Errorf("freshness after a read = %+v, want fresh until +5s, public", info)
	}
	clock.Advance(5*time.Second - time.Millisecond)
	for range 3 {
		_, err = c.Tools(ctx)
		must(t, err)
	}
	if n := f.rec.count(mcp.MethodToolsList); n != 1 {
		t.Errorf("tools/list requests within the TTL = %d, want 1", n)
	}
	clock.Advance(time.Millisecond)
	if st := c.Freshness(mcp.MethodToolsList, "").State; st != Stale {
		t.Errorf("freshness at received+ttl = %s, want stale (fresh only while now < received+ttl)", st)
	}
	addTools(t, f.srv, "c")
	tools, err := c.Tools(ctx)
	must(t, err)
	if n := f.rec.count(mcp.MethodToolsList); n != 2 {
		t.Errorf("tools/list requests after the TTL = %d, want 2", n)
	}
	if !slices.Equal(names(tools), []string{"a", "b", "c"}) {
		t.Errorf("Tools after expiry = %v", names(tools))
	}
	if st := c.Freshness(mcp.MethodToolsList, "").State; st != Fresh {
		t.Errorf("freshness after the re-fetch = %s", st)
	}
}

// TestCacheTTLZero: ttlMs 0 means stale at once, so every read fetches.
func TestCacheTTLZero(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{sopts: []server.Option{
		server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: 0}),
	}})
	addTools(t, f.srv, "a")
	r := &textResource{body: "x"}
	must(t, f.srv.AddResource(mcp.Resource{URI: "res://zero"}, r.handler)) // reads default to ttlMs 0
	c := primed(t, f)
	ctx := context.Background()
	for range 3 {
		_, err := c.Tools(ctx)
		must(t, err)
		_, err = c.ReadResource(ctx, "res://zero")
		must(t, err)
	}
	if n := f.rec.count(mcp.MethodToolsList); n != 3 {
		t.Errorf("tools/list requests with ttlMs 0 = %d, want 3", n)
	}
	if n := f.rec.count(mcp.MethodResourcesRead); n != 3 {
		t.Errorf("resources/read requests with ttlMs 0 = %d, want 3", n)
	}
	if st := c.Freshness(mcp.MethodToolsList, "").State; st != Stale {
		t.Errorf("freshness with ttlMs 0 = %s, want stale", st)
	}
}

// TestCacheKeyedByParams: reads of different URIs are different entries,
// each with the TTL its own result carried.
func TestCacheKeyedByParams(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	a, b := &textResource{body: "A"}, &textResource{body: "B"}
	must(t, f.srv.AddResource(mcp.Resource{URI: "res://a"}, a.handler, server.WithResourceCache(server.CachePolicy{TTL: time.Hour})))
	must(t, f.srv.AddResource(mcp.Resource{URI: "res://b"}, b.handler, server.WithResourceCache(server.CachePolicy{TTL: time.Minute})))
	clock := newFakeClock()
	c := primed(t, f, withClock(clock.Now))
	ctx := context.Background()
	for range 2 {
		ra, err := c.ReadResource(ctx, "res://a")
		must(t, err)
		rb, err := c.ReadResource(ctx, "res://b")
		must(t, err)
		if contentText(t, ra) != "A" || contentText(t, rb) != "B" {
			t.Fatalf("reads crossed: a=%q b=%q", contentText(t, ra), contentText(t, rb))
		}
	}
	if n := f.rec.count(mcp.MethodResourcesRead); n != 2 {
		t.Errorf("resources/read requests = %d, want 2 (one per URI)", n)
	}
	clock.Advance(2 * time.Minute)
	if st := c.Freshness(mcp.MethodResourcesRead, "res://a").State; st != Fresh {
		t.Errorf("res://a (ttl 1h) after 2m = %s, want fresh", st)
	}
	if st := c.Freshness(mcp.MethodResourcesRead, "res://b").State; st != Stale {
		t.Errorf("res://b (ttl 1m) after 2m = %s, want stale", st)
	}
}

// TestNotificationBeatsTTL: a change notification makes a cached list
// stale at once, deep inside its TTL. The watcher's re-read is held at the
// server so the stale state can be seen before it is healed.
func TestNotificationBeatsTTL(t *testing.T) {
	g := newGate(mcp.MethodToolsList)
	f := newFixture(t, nil, fixtureOpts{gate: g, sopts: []server.Option{
		server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: time.Hour}),
	}})
	addTools(t, f.srv, "a")
	c := primed(t, f)
	_, log := watch(t, c, WatchOptions{Tools: true, PollInterval: time.Hour})
	log.waitFor(t, "connected", kindIs(Connected))
	log.waitFor(t, "initial read", kindIs(ToolsChanged))
	if st := c.Freshness(mcp.MethodToolsList, "").State; st != Fresh {
		t.Fatalf("freshness after the initial read = %s", st)
	}
	g.armed.Store(true)
	addTools(t, f.srv, "b")
	g.waitHeld(t) // the watcher is re-reading: the notification arrived
	if st := c.Freshness(mcp.MethodToolsList, "").State; st != Stale {
		t.Errorf("freshness after tools/list_changed, inside a 1h TTL = %s, want stale", st)
	}
	g.open()
	ev, _ := log.waitFor(t, "tools changed", kindIs(ToolsChanged))
	if !slices.Equal(ev.Added, []string{"b"}) {
		t.Errorf("ToolsChanged = %+v, want Added [b]", ev)
	}
	if st := c.Freshness(mcp.MethodToolsList, "").State; st != Fresh {
		t.Errorf("freshness after the re-read = %s, want fresh", st)
	}
}

// TestInFlightAnswerStoredStale: an answer that was in flight when a change
// notification arrived must not be stored as fresh, or the change would be
// hidden for a whole TTL. The watcher's first read is held at the server
// (its answer computed before the change), a tool is added (the listen
// delivers list_changed), then the answer is let go: what gets stored is
// stale, and the next read goes back to the server.
func TestInFlightAnswerStoredStale(t *testing.T) {
	g := newGate(mcp.MethodToolsList)
	f := newFixture(t, nil, fixtureOpts{gate: g, sopts: []server.Option{
		server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: time.Hour}),
	}})
	addTools(t, f.srv, "a")
	c := primed(t, f)
	g.armed.Store(true)
	w, log := watch(t, c, WatchOptions{Tools: true, PollInterval: time.Hour})
	log.waitFor(t, "connected", kindIs(Connected))
	g.waitHeld(t) // the initial read's answer, [a], is in flight
	gen := c.cache.gen(topicTools)
	addTools(t, f.srv, "b")
	waitUntil(t, "the notification to invalidate the tools topic", func() bool { return c.cache.gen(topicTools) != gen })
	if w.Stats().Notifications < 1 {
		t.Errorf("notifications = %d", w.Stats().Notifications)
	}
	g.releaseOne(t) // the stale answer lands
	// The walk notices the change and reads again; hold that read too, so
	// nothing heals the entry behind the test's back.
	g.waitHeld(t)
	g.releaseOne(t)
	// Whatever the in-flight walk returned was stored as stale, so the next
	// read (the watcher's, for the notification) goes to the server.
	g.waitHeld(t)
	info := c.Freshness(mcp.MethodToolsList, "")
	if info.State != Stale {
		t.Errorf("freshness of the answer that was in flight during the change = %s, want stale", info.State)
	}
	before := f.rec.count(mcp.MethodToolsList)
	g.open()
	tools, err := c.Tools(context.Background())
	must(t, err)
	if !slices.Equal(names(tools), []string{"a", "b"}) {
		t.Errorf("Tools = %v, want [a b]", names(tools))
	}
	if st := c.Freshness(mcp.MethodToolsList, "").State; st != Fresh {
		t.Errorf("freshness after the re-read = %s, want fresh", st)
	}
	if n := f.rec.count(mcp.MethodToolsList); n != before {
		// The held read was the re-fetch; Tools joined it or found its
		// fresh answer. Nothing more went out.
		t.Errorf("tools/list requests after release = %d, want %d", n, before)
	}
	ev, _ := log.waitFor(t, "tools list", kindIs(ToolsChanged))
	if !slices.Contains(ev.Added, "b") {
		t.Errorf("watcher reported %+v, want b added", ev)
	}
}

// TestResourceUpdateDuringInFlightRead: a read in flight when the resource
// is announced as updated must not swallow the update. The watcher's
// re-read for the notification has to fetch anew instead of joining the
// older read, or it would see the old content, find nothing changed and
// report nothing.
func TestResourceUpdateDuringInFlightRead(t *testing.T) {
	g := newGate(mcp.MethodResourcesRead)
	f := newFixture(t, nil, fixtureOpts{gate: g})
	doc := &textResource{body: "v1"}
	must(t, f.srv.AddResource(mcp.Resource{URI: "res://doc"}, doc.handler, server.WithResourceCache(server.CachePolicy{TTL: 0})))
	c := primed(t, f)
	_, log := watch(t, c, WatchOptions{URIs: []string{"res://doc"}, PollInterval: time.Hour})
	log.waitFor(t, "connected", kindIs(Connected))
	log.waitFor(t, "initial read", kindIs(ResourceUpdated))

	g.armed.Store(true)
	type result struct {
		text string
		err  error
	}
	old := make(chan result, 1)
	go func() {
		r, err := c.ReadResource(context.Background(), "res://doc")
		if err != nil {
			old <- result{err: err}
			return
		}
		old <- result{text: *r.Contents[0].Text}
	}()
	g.waitHeld(t) // a read of v1 is in flight
	g.armed.Store(false)
	doc.set("v2")
	f.srv.ResourceUpdated("res://doc")
	ev, _ := log.waitFor(t, "resource updated", kindIs(ResourceUpdated))
	if ev.URI != "res://doc" || !slices.Equal(ev.Changed, []string{"res://doc"}) {
		t.Errorf("ResourceUpdated = %+v", ev)
	}
	g.open()
	if r := <-old; r.err != nil || r.text != "v1" {
		t.Errorf("the read that was in flight returned %q, %v; want v1 (it started before the change)", r.text, r.err)
	}
	rr, err := c.ReadResource(context.Background(), "res://doc")
	must(t, err)
	if got := contentText(t, rr); got != "v2" {
		t.Errorf("read after the update = %q, want v2", got)
	}
}

// goroutinesIn counts goroutines whose stack holds fn.
func goroutinesIn(fn string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, fn) {
			count++
		}
	}
	return count
}

// TestSingleFlight: concurrent misses for one list share one walk. With
// ttlMs 0 nothing can come from the cache, so one request for N callers
// proves they waited on the same fetch.
func TestSingleFlight(t *testing.T) {
	g := newGate(mcp.MethodToolsList)
	f := newFixture(t, nil, fixtureOpts{gate: g, sopts: []server.Option{
		server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: 0}),
	}})
	addTools(t, f.srv, "a", "b")
	c := primed(t, f)
	g.armed.Store(true)
	const n = 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			tools, err := c.Tools(context.Background())
			if err == nil && len(tools) != 2 {
				err = errors.New("short list")
			}
			errs <- err
		})
	}
	g.waitHeld(t)
	// All n callers are parked in the cache waiting for the shared fetch
	// (their own goroutines, plus the fetch itself).
	waitUntil(t, "all callers to wait on the flight", func() bool { return goroutinesIn("client.(*cache).get(") >= n })
	g.open()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := f.rec.count(mcp.MethodToolsList); got != 1 {
		t.Errorf("tools/list requests for %d concurrent callers = %d, want 1", n, got)
	}
}

// TestCacheSizeBound: the cache holds at most WithCacheSize answers,
// dropping the least recently used.
func TestCacheSizeBound(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	for _, u := range []string{"res://1", "res://2", "res://3"} {
		r := &textResource{body: u}
		must(t, f.srv.AddResource(mcp.Resource{URI: u}, r.handler, server.WithResourceCache(server.CachePolicy{TTL: time.Hour})))
	}
	c := primed(t, f, WithCacheSize(2))
	ctx := context.Background()
	read := func(u string) {
		t.Helper()
		r, err := c.ReadResource(ctx, u)
		must(t, err)
		if contentText(t, r) != u {
			t.Fatalf("read %s = %q", u, contentText(t, r))
		}
	}
	read("res://1")
	read("res://2")
	read("res://1") // 1 is now the most recently used
	read("res://3") // evicts 2
	if n := c.cache.len(); n != 2 {
		t.Errorf("cache holds %d entries, want 2", n)
	}
	if st := c.Freshness(mcp.MethodResourcesRead, "res://2").State; st != Missing {
		t.Errorf("res://2 = %s, want evicted", st)
	}
	before := f.rec.count(mcp.MethodResourcesRead)
	read("res://1")
	read("res://3")
	if n := f.rec.count(mcp.MethodResourcesRead); n != before {
		t.Errorf("reads of cached entries went to the server %d times", n-before)
	}
	read("res://2")
	if n := f.rec.count(mcp.MethodResourcesRead); n != before+1 {
		t.Errorf("read of the evicted entry: %d requests, want 1", n-before)
	}
}

// TestServeStale: with WithServeStale a failed refresh returns the last
// answer; without it, the error.
func TestServeStale(t *testing.T) {
	for _, stale := range []bool{true, false} {
		t.Run(map[bool]string{true: "serve stale", false: "strict"}[stale], func(t *testing.T) {
			f := newFixture(t, nil, fixtureOpts{sopts: []server.Option{
				server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: time.Minute}),
			}})
			addTools(t, f.srv, "a")
			clock := newFakeClock()
			opts := []HTTPOption{withClock(clock.Now)}
			if stale {
				opts = append(opts, WithServeStale())
			}
			c := primed(t, f, opts...)
			ctx := context.Background()
			_, err := c.Tools(ctx)
			must(t, err)
			f.stop() // the server goes away
			clock.Advance(2 * time.Minute)
			tools, err := c.Tools(ctx)
			if stale {
				if err != nil || !slices.Equal(names(tools), []string{"a"}) {
					t.Errorf("Tools with the server down = %v, %v; want the old answer", names(tools), err)
				}
				if st := c.Freshness(mcp.MethodToolsList, "").State; st != Stale {
					t.Errorf("freshness of the served answer = %s, want stale", st)
				}
			} else if err == nil {
				t.Errorf("Tools with the server down returned %v, want an error", names(tools))
			}
		})
	}
}

// TestPrivateEntriesNeverCrossContexts: a read the server marks private
// is cached per authorization context; a public one is shared by all.
func TestPrivateEntriesNeverCrossContexts(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{
		sopts: []server.Option{server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: time.Hour})},
		hopts: []streamhttp.Option{streamhttp.WithPrincipal(func(r *http.Request) string {
			return strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		})},
	})
	addTools(t, f.srv, "shared")
	must(t, f.srv.AddResource(mcp.Resource{URI: "res://me"}, func(_ context.Context, r *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		r.SetCache(server.CachePolicy{TTL: time.Hour, Scope: mcp.ScopePrivate})
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(r.URI, "", "secret of "+r.Principal)}}, nil
	}))
	pub := &textResource{body: "for everyone"}
	must(t, f.srv.AddResource(mcp.Resource{URI: "res://pub"}, pub.handler, server.WithResourceCache(server.CachePolicy{TTL: time.Hour})))

	base := primed(t, f)
	a, b := base.As("Bearer alice"), base.As("Bearer bob")
	ctx := context.Background()
	readAs := func(c *Client, uri string) string {
		t.Helper()
		r, err := c.ReadResource(ctx, uri)
		must(t, err)
		return contentText(t, r)
	}
	if got := readAs(a, "res://me"); got != "secret of alice" {
		t.Fatalf("alice read %q", got)
	}
	if got := readAs(b, "res://me"); got != "secret of bob" {
		t.Errorf("bob read %q, want his own content, never alice's cached one", got)
	}
	if got := readAs(a, "res://me"); got != "secret of alice" {
		t.Errorf("alice read %q on the second read", got)
	}
	if got := readAs(base, "res://me"); got != "secret of " {
		t.Errorf("the anonymous client read %q", got)
	}
	reads := f.rec.requests(mcp.MethodResourcesRead)
	if len(reads) != 3 {
		t.Errorf("private reads reached the server %d times, want 3 (one per context)", len(reads))
	}
	if info := a.Freshness(mcp.MethodResourcesRead, "res://me"); info.State != Fresh || info.Scope != mcp.ScopePrivate {
		t.Errorf("alice's entry = %+v, want fresh and private", info)
	}
	if st := base.As("Bearer carol").Freshness(mcp.MethodResourcesRead, "res://me").State; st != Missing {
		t.Errorf("carol sees a cached private entry (%s)", st)
	}

	before := f.rec.count(mcp.MethodResourcesRead)
	for _, c := range []*Client{a, b, base} {
		if got := readAs(c, "res://pub"); got != "for everyone" {
			t.Errorf("public read = %q", got)
		}
	}
	if n := f.rec.count(mcp.MethodResourcesRead) - before; n != 1 {
		t.Errorf("public reads by three contexts reached the server %d times, want 1", n)
	}
	before = f.rec.count(mcp.MethodToolsList)
	for _, c := range []*Client{a, b, base} {
		_, err := c.Tools(ctx)
		must(t, err)
	}
	if n := f.rec.count(mcp.MethodToolsList) - before; n != 1 {
		t.Errorf("a public tools list read by three contexts reached the server %d times, want 1", n)
	}
	// Each private read carried its own context's token, once.
	var auths []string
	for _, r := range reads {
		auths = append(auths, strings.Join(r.Header.Values("Authorization"), ","))
	}
	if want := []string{"Bearer alice", "Bearer bob", ""}; !slices.Equal(auths, want) {
		t.Errorf("Authorization of the private reads = %q, want %q", auths, want)
	}
}

// TestPrivatePageMakesListPrivate: one private page makes the whole list
// private, so another context walks it itself.
func TestPrivatePageMakesListPrivate(t *testing.T) {
	ts, rec := rawServer(t, func(_ int, r rawRequest) (string, string) {
		if _, ok := r.Params["cursor"]; ok {
			return `{"tools":[{"name":"b","inputSchema":{"type":"object"}}],"resultType":"complete","ttlMs":60000,"cacheScope":"private"}`, ""
		}
		return `{"tools":[{"name":"a","inputSchema":{"type":"object"}}],"nextCursor":"p2","resultType":"complete","ttlMs":60000,"cacheScope":"public"}`, ""
	})
	base := rawClient(t, ts.URL)
	a, b := base.As("Bearer alice"), base.As("Bearer bob")
	for _, c := range []*Client{a, a, b} {
		tools, err := c.Tools(context.Background())
		must(t, err)
		if !slices.Equal(names(tools), []string{"a", "b"}) {
			t.Errorf("Tools = %v", names(tools))
		}
	}
	if n := rec.count(mcp.MethodToolsList); n != 4 {
		t.Errorf("tools/list requests = %d, want 4 (two pages per context)", n)
	}
	if info := a.Freshness(mcp.MethodToolsList, ""); info.Scope != mcp.ScopePrivate {
		t.Errorf("list scope = %s, want private", info.Scope)
	}
}

// TestInvalidCursorRestartsWalk: when a cursor stops working mid-walk (the
// server behind the address was replaced and no longer accepts the old
// server's cursors), the walk starts over from the first page and still
// returns the whole list.
func TestInvalidCursorRestartsWalk(t *testing.T) {
	mk := func() *server.Server {
		s := server.New(mcp.Implementation{Name: "replica", Version: "1"}, server.WithPageSize(2), server.WithLogger(quietLogger()))
		addTools(t, s, "t1", "t2", "t3", "t4", "t5")
		return s
	}
	first, second := streamhttp.New(mk()), streamhttp.New(mk()) // different cursor keys
	var mu sync.Mutex
	pages := 0
	var cursors []bool
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		target := first
		if r.Header.Get(mcp.HeaderMethod) == mcp.MethodToolsList {
			pages++
			if pages > 1 {
				target = second // replaced after the first page
			}
		}
		mu.Unlock()
		target.ServeHTTP(w, r)
	})
	rec := &recorder{next: h}
	f := newFixtureHandler(t, rec)
	c := rawClient(t, f)
	tools, err := c.Tools(context.Background())
	must(t, err)
	if !slices.Equal(names(tools), []string{"t1", "t2", "t3", "t4", "t5"}) {
		t.Errorf("Tools = %v, want all five once", names(tools))
	}
	for _, r := range rec.requests(mcp.MethodToolsList) {
		_, ok := r.Params["cursor"]
		cursors = append(cursors, ok)
	}
	// page 1 (old server), page 2 refused, then a whole walk of 3 pages.
	if want := []bool{false, true, false, true, true}; !slices.Equal(cursors, want) {
		t.Errorf("cursor use per tools/list request = %v, want %v", cursors, want)
	}
}

// TestCacheHintsMissingOrNegative: a result without ttlMs (an older
// server) or with a negative one counts as ttlMs 0: never fresh.
func TestCacheHintsMissingOrNegative(t *testing.T) {
	for _, hint := range []string{``, `,"ttlMs":-5`, `,"ttlMs":0`} {
		ts, rec := rawServer(t, func(int, rawRequest) (string, string) {
			return `{"tools":[{"name":"a","inputSchema":{"type":"object"}}],"resultType":"complete"` + hint + `}`, ""
		})
		c := rawClient(t, ts.URL)
		for range 2 {
			_, err := c.Tools(context.Background())
			must(t, err)
		}
		if n := rec.count(mcp.MethodToolsList); n != 2 {
			t.Errorf("hint %q: tools/list requests = %d, want 2", hint, n)
		}
	}
}

// TestNoRequestTimeout: WithTimeout(0) means no timeout, for cached reads
// too (their shared fetch must not get a deadline of zero).
func TestNoRequestTimeout(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	addTools(t, f.srv, "a")
	c := primed(t, f, WithTimeout(0))
	tools, err := c.Tools(context.Background())
	if err != nil || len(tools) != 1 {
		t.Fatalf("Tools with no timeout = %v, %v", names(tools), err)
	}
}

// TestListTopicsFollowMCPLists: the cache's list topics are the mcp.List
// names, so a listen grant, a notification and a cached list agree on
// which list is meant.
func TestListTopicsFollowMCPLists(t *testing.T) {
	for l, want := range map[mcp.List][]string{
		mcp.ToolsList:     {topicTools},
		mcp.PromptsList:   {topicPrompts},
		mcp.ResourcesList: {topicResources, topicTemplates},
	} {
		if got := listTopics(l); !slices.Equal(got, want) {
			t.Errorf("listTopics(%v) = %v, want %v", l, got, want)
		}
	}
}
