package client

import (
	"container/list"
	"context"
	"fmt"
	"sync"
	"time"

	"tidings/mcp"
)

// Freshness says how far a cached answer can be trusted.
type Freshness int

// The freshness states of a cache entry.
const (
	// Fresh: inside its TTL and no change notification has arrived since.
	Fresh Freshness = iota
	// Stale: its TTL ran out, or a notification said it changed.
	Stale
	// Unknown: the listen stream that would have told us of changes broke;
	// until it is back and the entry re-read, it may or may not be current.
	Unknown
	// Missing: nothing is cached.
	Missing
)

func (f Freshness) String() string {
	switch f {
	case Fresh:
		return "fresh"
	case Stale:
		return "stale"
	case Unknown:
		return "unknown"
	}
	return "missing"
}

// Topics group cache entries by what invalidates them. A list's topic is
// its mcp.List name; the templates list changes with the resources list.
const (
	topicDiscover  = "discover"
	topicTools     = "tools"     // mcp.ToolsList
	topicPrompts   = "prompts"   // mcp.PromptsList
	topicResources = "resources" // mcp.ResourcesList
	topicTemplates = "templates" // also mcp.ResourcesList
	topicResource  = "resource:" // + URI
)

// listTopics returns the topics a change of list l invalidates.
func listTopics(l mcp.List) []string {
	if l == mcp.ResourcesList {
		return []string{topicResources, topicTemplates}
	}
	return []string{l.String()}
}

// cached is one stored answer.
type cached struct {
	key      string
	topic    string
	value    any
	received time.Time
	// expires is when the answer stops being fresh: received + ttl for a
	// single response, the earliest page expiry for a list snapshot.
	expires time.Time
	scope   mcp.CacheScope
	stale   bool
	unknown bool
	elem    *list.Element
	// gen is the topic generation when the fetch that produced the entry
	// started; an answer from an older fetch never replaces it.
	gen uint64
}

func (e *cached) freshness(now time.Time) Freshness {
	switch {
	case e.unknown:
		return Unknown
	case e.stale || !now.Before(e.expires):
		return Stale
	}
	return Fresh
}

type flight struct {
	done  chan struct{}
	value any
	err   error
	// gen is the topic generation when the flight started. A caller that
	// arrives after an invalidation does not join an older flight: its
	// answer may predate the change the caller is reacting to.
	gen uint64
	// foreign says the answer is private to another context than the one
	// the flight was shared in: only the caller whose fetch it was may
	// have it.
	foreign bool
	// waiters counts the callers waiting for the flight, and cancel ends
	// its fetch, once the last of them has given up (both under the
	// cache's lock).
	waiters int
	cancel  context.CancelFunc
}

// fetched is what a fetch function learns from the server.
type fetched struct {
	value any
	ttl   time.Duration
	// expires, when set, overrides received + ttl: a list assembled from
	// several pages is fresh only until the first of them expires
	// (CACHE-5), however long the walk took.
	expires time.Time
	scope   mcp.CacheScope
	// as is whose credentials the requests that got the answer carried. A
	// private answer is kept under it, and not at all when it is unknown
	// (the zero value).
	as authContext
	// noStore keeps the answer out of the cache.
	noStore bool
}

// cache stores cacheable results. Entries are keyed by method and the
// params that shape the result; private entries also by the
// authorization context, so they never cross contexts. Generation
// counters per topic make sure that a response which was already in flight
// when a change notification arrived is stored as stale, never as fresh.
//
// The context of a private entry is that of the answer (fetched.as): the
// hash of the Authorization header the HTTP request that got it actually
// carried, as net/http reports it, whatever set it. A lookup uses the
// context of the caller's next request (Client.lookupContext): the
// client's Authorization header, or what its Authorizer would set now.
// The two agree while the token does; when it changes, answers to the old
// one are no longer found, and the next is kept under the new. When the
// HTTP client changes or hides what it sends (a RoundTripper that adds a
// token), a context is unknown: no private answer is stored for it, and
// none is looked up, while public answers are cached and shared as ever.
// One context never gets another's private entry: an entry is only ever
// filed under credentials that were seen on the wire, and a caller that
// joined a fetch answered under other credentials fetches its own.
type cache struct {
	mu      sync.Mutex
	entries map[string]*cached
	lru     *list.List
	max     int
	gens    map[string]uint64
	flights map[string]*flight
	now     func() time.Time
	stale   bool // serve stale entries when a refresh fails
	// cover is what the Watchers sharing the cache hear of, for
	// FreshnessInfo; it has a lock of its own, never taken with mu held.
	cover coverage
}

func newCache(max int, now func() time.Time, serveStale bool) *cache {
	if max <= 0 {
		max = 1024
	}
	return &cache{
		entries: map[string]*cached{}, lru: list.New(), max: max,
		gens: map[string]uint64{}, flights: map[string]*flight{},
		now: now, stale: serveStale,
	}
}

// privateKey is where a private answer for key is stored: under the
// authorization context it was given to, and only there.
func privateKey(key string, as authContext) string { return key + "\x00private\x00" + string(as) }

// lookupLocked finds the entry for key: a public one, or one private to
// as. Nothing is private to an unknown context.
func (c *cache) lookupLocked(key string, as authContext) *cached {
	if e := c.entries[key]; e != nil {
		return e
	}
	if as == unknownAuth {
		return nil
	}
	return c.entries[privateKey(key, as)]
}

// get returns the cached value for key when fresh; otherwise it fetches
// through fn, with concurrent misses for one key sharing one fetch.
func (c *cache) get(ctx context.Context, key, topic string, authCtx authContext, fn func(context.Context) (fetched, error)) (any, error) {
	for {
		c.mu.Lock()
		e := c.lookupLocked(key, authCtx)
		if e != nil && e.freshness(c.now()) == Fresh {
			c.lru.MoveToFront(e.elem)
			v := e.value
			c.mu.Unlock()
			return v, nil
		}
		// Concurrent misses share a flight only within one authorization
		// context: another context's answer may be private. Callers of
		// unknown contexts share none, as they may be anyone.
		fkey := key + "\x00" + string(authCtx)
		f := c.flights[fkey]
		mine := false
		if gen := c.gens[topic]; f == nil || f.gen != gen || authCtx == unknownAuth {
			fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			f, mine = &flight{done: make(chan struct{}), gen: gen, cancel: cancel}, true
			if authCtx != unknownAuth {
				c.flights[fkey] = f
			}
			f.waiters++
			c.mu.Unlock()
			go c.run(fctx, key, fkey, topic, authCtx, gen, f, fn)
		} else {
			f.waiters++
			c.mu.Unlock()
		}
		select {
		case <-f.done:
			if f.foreign && !mine {
				// The fetch we joined was answered privately under other
				// credentials than ours would be (its caller's Authorizer
				// got a token on the way): fetch our own.
				continue
			}
			return f.value, f.err
		case <-ctx.Done():
			c.leave(fkey, f)
			return nil, ctx.Err()
		}
	}
}

// leave is a caller giving up on flight f. The last one to leave ends
// its fetch, which nobody waits for any more, and takes it out of the
// flights so that no later caller joins it.
func (c *cache) leave(fkey string, f *flight) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f.waiters--
	if f.waiters > 0 {
		return
	}
	if c.flights[fkey] == f {
		delete(c.flights, fkey)
	}
	f.cancel()
}

// cachedAs is get for answers of type T: the one place where a stored
// answer meets its type. An entry of another type (two methods sharing a
// key by mistake) is an error, never a panic.
func cachedAs[T any](ctx context.Context, c *cache, key, topic string, authCtx authContext, fn func(context.Context) (fetched, error)) (T, error) {
	v, err := c.get(ctx, key, topic, authCtx, fn)
	if err != nil {
		var zero T
		return zero, err
	}
	return as[T](key, v)
}

// peekTrustedAs is peekTrusted for answers of type T.
func peekTrustedAs[T any](c *cache, key string, authCtx authContext) (T, bool) {
	v, ok := c.peekTrusted(key, authCtx)
	if !ok {
		var zero T
		return zero, false
	}
	t, err := as[T](key, v)
	return t, err == nil
}

func as[T any](key string, v any) (T, error) {
	t, ok := v.(T)
	if !ok {
		return t, fmt.Errorf("client: cached answer for %q is a %T, not a %T", key, v, t)
	}
	return t, nil
}

// run performs one shared fetch. Its context keeps the first caller's
// values, not its cancellation, so that one impatient caller does not
// fail the others: the fetch ends when the last of its callers gives up
// (see leave), and each of its requests is bounded by the request
// timeout. No fixed deadline bounds it as a whole: the time an
// Authorizer waits for a sign-in is not the server's to account for.
func (c *cache) run(fctx context.Context, key, fkey, topic string, authCtx authContext, gen uint64, f *flight, fn func(context.Context) (fetched, error)) {
	defer f.cancel()
	res, err := fn(fctx)
	received := c.now() // the answer's receipt time, not whenever the lock is free
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.flights[fkey] == f {
		delete(c.flights, fkey)
	}
	if err != nil {
		if old := c.lookupLocked(key, authCtx); old != nil && c.stale {
			f.value = old.value
		} else {
			f.err = err
		}
		close(f.done)
		return
	}
	if !res.noStore {
		c.putLocked(key, topic, res, gen, received)
	}
	f.value = res.value
	f.foreign = res.scope == mcp.ScopePrivate && res.as != authCtx
	close(f.done)
}

// putLocked stores an answer whose fetch started at generation gen: as
// stale when the topic was invalidated since, and not at all when a newer
// fetch already stored its answer. A private answer goes under the
// context it was given to; one given to an unknown context only displaces
// the entry it replaces.
func (c *cache) putLocked(key, topic string, res fetched, gen uint64, received time.Time) {
	if old := c.lookupLocked(key, res.as); old != nil {
		if old.gen > gen {
			return
		}
		c.removeLocked(old)
	}
	k := key
	if res.scope == mcp.ScopePrivate {
		if res.as == unknownAuth {
			return
		}
		k = privateKey(key, res.as)
	}
	stale := c.gens[topic] != gen
	expires := res.expires
	if expires.IsZero() {
		expires = received.Add(res.ttl)
	}
	e := &cached{key: k, topic: topic, value: res.value, received: received, expires: expires, scope: res.scope, stale: stale, gen: gen}
	e.elem = c.lru.PushFront(e)
	c.entries[k] = e
	for c.lru.Len() > c.max {
		c.removeLocked(c.lru.Back().Value.(*cached))
	}
}

func (c *cache) removeLocked(e *cached) {
	c.lru.Remove(e.elem)
	delete(c.entries, e.key)
}

// gen returns the generation of a topic.
func (c *cache) gen(topic string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gens[topic]
}

// invalidate marks every entry of the topics stale at once, whatever their
// TTL, and bumps their generations so in-flight answers land stale.
func (c *cache) invalidate(topics ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, t := range topics {
		c.gens[t]++
	}
	for _, e := range c.entries {
		for _, t := range topics {
			if e.topic == t {
				e.stale = true
			}
		}
	}
}

// markUnknown flags the entries of the topics a broken listen covered,
// and bumps the generation of every one of those topics, whether or not it
// has entries yet: a first fetch in flight during the drop must land
// unknown-stale too, never fresh.
func (c *cache) markUnknown(topics ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	covered := make(map[string]bool, len(topics))
	for _, t := range topics {
		if !covered[t] {
			covered[t] = true
			c.gens[t]++
		}
	}
	for _, e := range c.entries {
		if covered[e.topic] {
			e.unknown = true
		}
	}
}

// FreshnessInfo describes one cached answer.
type FreshnessInfo struct {
	State Freshness
	// ObservedAt is when the answer was received.
	ObservedAt time.Time
	// Expires is when its TTL runs out.
	Expires time.Time
	// Scope is the cacheScope the server gave.
	Scope mcp.CacheScope
	// Notice says how the Watchers of the client and its views hear of a
	// change of the answer, as their latest listens were granted, whether
	// or not an answer is cached.
	Notice Notice
	// Live says the answer is current on a notification's word, whatever
	// its TTL says: a Watcher's listen that is up announces its changes
	// (Notice is not Unnotified), the answer was read since that listen
	// was acknowledged, and no change was announced since. A TTL that ran
	// out leaves State stale and the answer live: a change would have
	// been heard.
	Live bool
}

// info describes the answer cached under key, of the given topic.
func (c *cache) info(key, topic string, authCtx authContext) FreshnessInfo {
	notice, since := c.cover.of(topic)
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.lookupLocked(key, authCtx)
	if e == nil {
		return FreshnessInfo{State: Missing, Notice: notice}
	}
	return FreshnessInfo{
		State: e.freshness(c.now()), ObservedAt: e.received, Expires: e.expires, Scope: e.scope,
		Notice: notice,
		Live:   !since.IsZero() && !e.stale && !e.unknown && !e.received.Before(since),
	}
}

// peekTrusted returns a cached value however old, unless a change
// notification or a broken listen has put it in doubt.
func (c *cache) peekTrusted(key string, authCtx authContext) (any, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.lookupLocked(key, authCtx); e != nil && !e.stale && !e.unknown {
		return e.value, true
	}
	return nil, false
}

func (c *cache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}
