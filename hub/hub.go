// Package hub is the change hub: it tells every open subscription that
// something it asked about has changed.
//
// A change notification is an idempotent signal, not a message to queue.
// Each subscription therefore keeps only pending state — a few bits for the
// list kinds and one flag per URI it asked for — and a wake channel of
// capacity one. Publishing sets bits and pokes the channel; it never blocks,
// never allocates per subscriber, and costs O(matching subscriptions), not
// O(all subscriptions). However fast changes arrive and however slowly a
// subscriber drains them, its memory stays bounded by its own filter, and a
// subscriber that never drains delays nobody else.
package hub

import (
	"errors"
	mbits "math/bits"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"tidings/mcp"
)

// Kind is a set of lists (mcp.List), used as a bit set.
type Kind uint32

// The list kinds a subscription can follow, one bit per mcp.List.
const (
	ToolsList     Kind = 1 << mcp.ToolsList
	PromptsList   Kind = 1 << mcp.PromptsList
	ResourcesList Kind = 1 << mcp.ResourcesList
	// resourceBit marks that at least one URI flag is set: the first
	// bit after the lists'.
	resourceBit Kind = 1 << mcp.NumLists
	// taskBit marks that at least one task flag is set.
	taskBit Kind = resourceBit << 1
)

// Of returns the set of the given lists.
func Of(lists ...mcp.List) Kind {
	var k Kind
	for _, l := range lists {
		k |= 1 << l
	}
	return k
}

// Has reports whether l is in the set.
func (k Kind) Has(l mcp.List) bool { return k&(1<<l) != 0 }

// ErrClosed is returned by Subscribe after Shutdown.
var ErrClosed = errors.New("hub: shut down")

// Filter is what one subscription wants to hear about.
type Filter struct {
	// Kinds is the set of list kinds to follow.
	Kinds Kind
	// URIs are the resources whose updates to follow; duplicates are ignored.
	URIs []string
	// Tasks are the tasks (of the tasks extension) whose changes to
	// follow; duplicates are ignored.
	Tasks []string
	// Principal names who is listening; events with an audience reach only
	// the principals in it. Empty means anonymous.
	Principal string
}

// Event is one change.
type Event struct {
	// Kinds whose lists changed.
	Kinds Kind
	// URI of a resource whose content changed ("" for none).
	URI string
	// Task is a task whose state changed ("" for none).
	Task string
	// Audience, when not nil, limits the event to these principals: a change
	// only some callers can see must not reach the others.
	Audience []string
	// Sees, when not nil, also limits the event to the principals for
	// whom it reports true: a change of items only some callers may see
	// is told only to them. It is asked once per distinct principal and
	// event (again now and then while another event is delivered at the
	// same time), under the hub's read lock, so it must be quick, must
	// not publish, and must give one principal one answer. It is a function and cannot leave the process: a
	// publisher that forwards an event elsewhere sends what it built Sees
	// from along with it.
	Sees func(principal string) bool
	// Stamp, when not nil, says where and when this change (of Kinds, or
	// of URI) happened, for telemetry (see Stamp).
	Stamp *Stamp
}

// Stamp is where and when a change happened: the notifications that tell
// of a list's change, or of a resource's update, carry the trace context
// of the latest one, and the delay from At to each notification is
// measured. Only a change told to everyone is remembered: one whose
// Audience or Sees limits it clears the stamp instead, so that no
// notification carries the trace of a change its listener was not told
// of.
type Stamp struct {
	At          time.Time
	TraceParent string
	TraceState  string
	// Road is how the change came: "local", "bus", or "origin".
	Road string
	// Members are what a notification of the change adds to its _meta —
	// the time and the trace context — as members of a JSON object, each
	// after a comma (`,"traceparent":"00-…"`), encoded once for the
	// notifications of every listener.
	Members []byte
}

// Hub routes events to subscriptions. The zero value is not usable; call New.
type Hub struct {
	mu     sync.RWMutex
	kinds  mcp.PerList[followersOf]           // the subscriptions that follow each list
	stamps mcp.PerList[atomic.Pointer[Stamp]] // each list's latest change's
	// uriStamps holds, by URI, the latest stamped update's stamp, while
	// the URI is followed; uriStamped says whether any ever was, so that
	// a hub whose events carry no stamps never touches it.
	uriStamps  sync.Map
	uriStamped atomic.Bool
	all        map[*Subscription]struct{}
	byURI      map[string]followers // by URI, the subscriptions that follow it
	byTask     map[string][]ref     // by task id, the subscriptions that follow it
	closed     bool
	done       chan struct{}
	drained    chan struct{}
	count      atomic.Int64
	// principals holds, by principal, what its subscriptions share: the
	// answer of an event's Sees, asked once per principal and event.
	principals map[string]*principal
	// events numbers the events delivered, so that a principal's kept
	// answer is known to be this event's.
	events atomic.Uint64
	// Observer, when set before use, sees every event published locally
	// (after local delivery). Buses use it to forward events to replicas.
	observer func(Event)
}

// ref is one subscription's interest in one key of an index (byURI,
// byTask): the key is its idx'th URI or task, whose flag is its idx'th
// flag or tflag.
type ref struct {
	sub *Subscription
	idx int
}

// principal is what the subscriptions of one principal share. The
// hub's lock guards subs.
type principal struct {
	subs int
	// seen is the answer of Sees for the event numbered seen>>1, in its
	// low bit: every subscription of the principal after the first
	// reads it instead of asking again, and nothing is allocated per
	// event however many principals listen. Two events delivered at
	// once may take turns overwriting it; each then asks again.
	seen atomic.Uint64
}

// followers are the subscriptions that follow one URI, and the URI
// itself: every subscription keeps this one copy of it, however many
// follow it, so that a URI a thousand listens follow is held once, not
// a thousand times (a listen's URIs may be as long as a request allows).
type followers struct {
	uri  string
	refs []ref
}

// New returns an empty hub.
func New() *Hub {
	h := &Hub{byURI: make(map[string]followers), byTask: make(map[string][]ref), all: make(map[*Subscription]struct{}),
		principals: make(map[string]*principal), done: make(chan struct{}), drained: make(chan struct{})}
	return h
}

// followersOf holds the subscriptions that follow one list, in a slice
// in the order they subscribed but for removals, which move the last
// into the hole. A change visits them in that order: a listen's state,
// its connection and the kernel's socket were made about together, so
// visiting them in order touches memory in order, which at tens of
// thousands of listens is measurably faster than a map's random order.
type followersOf struct{ subs []*Subscription }

// add appends s, which is not in f, as the follower of list i.
func (f *followersOf) add(s *Subscription, i int) {
	s.at[i] = int32(len(f.subs))
	f.subs = append(f.subs, s)
}

// remove takes s, the follower of list i, out of f.
func (f *followersOf) remove(s *Subscription, i int) {
	j, n := s.at[i], len(f.subs)-1
	last := f.subs[n]
	f.subs[j], last.at[i] = last, j
	f.subs[n] = nil
	f.subs = f.subs[:n]
	if cap(f.subs) > 64 && n < cap(f.subs)/4 {
		f.subs = slices.Clip(f.subs) // let a shrunk list's array go
	}
}

// Stamp returns the stamp of the latest change of list l, or nil when it
// had none or was not told to everyone.
func (h *Hub) Stamp(l mcp.List) *Stamp { return h.stamps[l].Load() }

// URIStamp returns the stamp of the latest update of uri, while it is
// followed, or nil when it had none or was not told to everyone.
func (h *Hub) URIStamp(uri string) *Stamp {
	if !h.uriStamped.Load() {
		return nil
	}
	st, _ := h.uriStamps.Load(uri)
	p, _ := st.(*Stamp)
	return p
}

// SetObserver installs fn to be called with every event published through
// Publish (not PublishRemote). Call it before the hub is in use.
func (h *Hub) SetObserver(fn func(Event)) { h.observer = fn }

// Subscription is one listener's pending state. Its owner waits on Wake,
// then calls Take to drain what changed.
type Subscription struct {
	hub       *Hub
	principal string
	who       *principal
	tasks     []string
	bits      atomic.Uint32
	tflags    []atomic.Bool
	ending    atomic.Bool
	// closed (under the hub's lock) keeps Follow from indexing a closed
	// subscription again.
	closed bool
	// follows are the lists whose followers hold the subscription, at
	// at[l] of each (under the hub's lock).
	follows Kind
	at      mcp.PerList[int32]

	// uris are the URIs followed, each the hub's one copy of it, and
	// flags their pending bits, bit i%64 of word i/64 for uris[i]:
	// a followed URI costs a string header and a bit here. Publishers set
	// bits atomically under the hub's read lock; Follow and Unfollow
	// change the slices under the hub's lock and mu, and Take reads them
	// under mu, so that none of them needs the hub's lock to drain.
	mu    sync.Mutex
	uris  []string
	flags []uint64

	// merged counts changes that found their bit or flag already set:
	// changes the subscription's next notification stands for as well.
	merged atomic.Int64
	wake   chan struct{}
	// notify, when set (under the hub's lock), is called in place of
	// poking wake: see Notify.
	notify func()
	once   sync.Once
}

// Subscribe registers a subscription for f. Duplicate URIs and task ids
// are folded, so that each is one flag, and one change of it one entry
// in Take or TakeTasks. The subscription keeps none of f's slices: a URI
// is kept as the hub's one copy of it (f.URIs may be let go of), and
// the first subscription to follow a URI lends the hub its string.
func (h *Hub) Subscribe(f Filter) (*Subscription, error) {
	s := &Subscription{hub: h, principal: f.Principal, wake: make(chan struct{}, 1)}
	s.tasks = distinct(f.Tasks)
	s.tflags = make([]atomic.Bool, len(s.tasks))
	if len(f.URIs) > 0 {
		s.uris = make([]string, 0, len(f.URIs))
		s.flags = make([]uint64, 0, words(len(f.URIs)))
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, ErrClosed
	}
	for i := range h.kinds {
		if f.Kinds&(1<<i) != 0 {
			h.kinds[i].add(s, i)
			s.follows |= 1 << i
		}
	}
	for _, u := range f.URIs {
		fl := h.byURI[u]
		if n := len(fl.refs); n > 0 && fl.refs[n-1].sub == s {
			continue // a repeat: this subscription's ref is the newest
		}
		h.follow(s, u, fl)
	}
	for i, t := range s.tasks {
		h.byTask[t] = append(h.byTask[t], ref{s, i})
	}
	s.who = h.principals[s.principal]
	if s.who == nil {
		s.who = &principal{}
		h.principals[s.principal] = s.who
	}
	s.who.subs++
	h.all[s] = struct{}{}
	h.count.Add(1)
	return s, nil
}

// follow indexes uri, whose followers are fl, as s's next URI. The
// caller holds h.mu and knows that s does not follow uri yet.
func (h *Hub) follow(s *Subscription, uri string, fl followers) {
	if fl.uri == "" {
		fl.uri = uri
	}
	i := len(s.uris)
	s.uris = append(s.uris, fl.uri)
	if i%64 == 0 {
		s.flags = append(s.flags, 0)
	}
	fl.refs = append(fl.refs, ref{s, i})
	// Keyed by the hub's own copy: assigning under a string key stores
	// the key given, and the caller's copy would stay alive as the key.
	h.byURI[fl.uri] = fl
}

// words is how many flag words hold n flags.
func words(n int) int { return (n + 63) / 64 }

// distinct returns keys without their repeats, in the order each first
// appears.
func distinct(keys []string) []string {
	var out []string
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if _, dup := seen[k]; !dup {
			seen[k] = struct{}{}
			out = append(out, k)
		}
	}
	return out
}

// Len returns the number of open subscriptions.
func (h *Hub) Len() int { return int(h.count.Load()) }

// Done is closed when the hub shuts down; every subscription's owner
// should then end its stream gracefully.
func (h *Hub) Done() <-chan struct{} { return h.done }

// Shutdown closes the hub: Done is closed and new subscriptions fail.
// Existing subscriptions stay registered until their owners close them;
// Drained is closed when the last one is.
func (h *Hub) Shutdown() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.closed {
		h.closed = true
		close(h.done)
		// Each subscription also hears of it on its own wake channel, so
		// owners need not all wait on the one Done channel: ten thousand
		// goroutines parked on a shared channel make every wake-up
		// contend for its lock.
		for s := range h.all {
			s.ending.Store(true)
			s.poke()
		}
		if h.count.Load() == 0 {
			close(h.drained)
		}
	}
}

// Drained is closed once the hub is shut down and every subscription has
// been closed by its owner.
func (h *Hub) Drained() <-chan struct{} { return h.drained }

// ListChanged publishes a list change of the given kinds to everyone.
func (h *Hub) ListChanged(k Kind) { h.Publish(Event{Kinds: k}) }

// ResourceUpdated publishes a content change of uri to everyone.
func (h *Hub) ResourceUpdated(uri string) { h.Publish(Event{URI: uri}) }

// Publish delivers e to every matching subscription and then to the
// observer, if any.
func (h *Hub) Publish(e Event) {
	h.deliver(e)
	if h.observer != nil {
		h.observer(e)
	}
}

// PublishRemote delivers e without passing it to the observer: an event
// that came from another replica, which must not be echoed back onto the
// bus, or one whose publisher forwards it itself.
func (h *Hub) PublishRemote(e Event) { h.deliver(e) }

// MarkAllDirty tells every subscription that everything its filter covers
// may have changed. A replica calls it after losing events (for example
// after a bus reconnect): correctness comes from re-reads, not from
// exactly-once delivery.
func (h *Hub) MarkAllDirty() {
	h.mu.RLock()
	defer h.mu.RUnlock()
	seen := make(map[*Subscription]struct{})
	for i := range h.kinds {
		for _, s := range h.kinds[i].subs {
			s.bits.Or(uint32(1) << i)
			seen[s] = struct{}{}
		}
	}
	for _, fl := range h.byURI {
		for _, r := range fl.refs {
			r.sub.mark(r.idx)
			r.sub.bits.Or(uint32(resourceBit))
			seen[r.sub] = struct{}{}
		}
	}
	for _, refs := range h.byTask {
		for _, r := range refs {
			r.sub.tflags[r.idx].Store(true)
			r.sub.bits.Or(uint32(taskBit))
			seen[r.sub] = struct{}{}
		}
	}
	for s := range seen {
		s.poke()
	}
}

func (h *Hub) deliver(e Event) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	var ev uint64 // this event's number, taken when Sees is first asked
	admits := func(s *Subscription) bool {
		if !s.admits(e.Audience) {
			return false
		}
		if e.Sees == nil {
			return true
		}
		if ev == 0 {
			ev = h.events.Add(1)
		}
		if kept := s.who.seen.Load(); kept>>1 == ev {
			return kept&1 != 0
		}
		ok := e.Sees(s.principal)
		kept := ev << 1
		if ok {
			kept |= 1
		}
		s.who.seen.Store(kept)
		return ok
	}
	if e.Kinds != 0 {
		for i := range h.kinds {
			bit := Kind(1) << i
			if e.Kinds&bit == 0 {
				continue
			}
			if e.Stamp != nil && e.Audience == nil && e.Sees == nil {
				h.stamps[i].Store(e.Stamp)
			} else if h.stamps[i].Load() != nil {
				h.stamps[i].Store(nil)
			}
			for _, s := range h.kinds[i].subs {
				if admits(s) {
					if s.bits.Or(uint32(bit))&uint32(bit) != 0 {
						s.merged.Add(1)
					}
					s.poke()
				}
			}
		}
	}
	if e.URI != "" {
		fl, followed := h.byURI[e.URI]
		if e.Stamp != nil && e.Audience == nil && e.Sees == nil && followed {
			h.uriStamped.Store(true)
			h.uriStamps.Store(e.URI, e.Stamp)
		} else if h.uriStamped.Load() {
			h.uriStamps.Delete(e.URI)
		}
		for _, r := range fl.refs {
			if admits(r.sub) {
				if r.sub.mark(r.idx) {
					r.sub.merged.Add(1)
				}
				r.sub.bits.Or(uint32(resourceBit))
				r.sub.poke()
			}
		}
	}
	if e.Task != "" {
		for _, r := range h.byTask[e.Task] {
			if admits(r.sub) {
				if r.sub.tflags[r.idx].Swap(true) {
					r.sub.merged.Add(1)
				}
				r.sub.bits.Or(uint32(taskBit))
				r.sub.poke()
			}
		}
	}
}

func (s *Subscription) admits(audience []string) bool {
	if audience == nil {
		return true
	}
	for _, p := range audience {
		if p == s.principal {
			return true
		}
	}
	return false
}

// mark sets the pending flag of uris[i] and reports whether it was set
// already. The caller holds the hub's lock, read or write, which keeps
// Follow and Unfollow from moving the flags.
func (s *Subscription) mark(i int) bool {
	bit := uint64(1) << (i % 64)
	return atomic.OrUint64(&s.flags[i/64], bit)&bit != 0
}

// poke tells the owner that something may be pending. Every caller
// holds the hub's lock, read or write, which orders it after Notify.
func (s *Subscription) poke() {
	if s.notify != nil {
		s.notify()
		return
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Notify has fn called, from then on, wherever Wake would receive: so
// that an owner that keeps many subscriptions needs no goroutine waiting
// on each one's channel (a transport that parks its listens on one
// poller). fn runs on the publisher's goroutine under the hub's lock: it
// must not block, publish, or touch the hub, and should not allocate,
// since a change calls it once per subscription it reaches. A wake-up
// already waiting on the channel is passed on to fn at once.
func (s *Subscription) Notify(fn func()) {
	h := s.hub
	h.mu.Lock()
	s.notify = fn
	waiting := false
	select {
	case <-s.wake:
		waiting = true
	default:
	}
	h.mu.Unlock()
	if waiting {
		fn()
	}
}

// Ending reports that the hub is shutting down; it becomes true before the
// subscription's wake channel is poked for it.
func (s *Subscription) Ending() bool { return s.ending.Load() }

// Wake receives a value whenever pending state may be non-empty, and once
// when the hub shuts down (see Ending).
func (s *Subscription) Wake() <-chan struct{} { return s.wake }

// Take drains pending state: the list kinds that changed and the URIs that
// were updated since the last Take. It appends URIs to buf to let the
// owner reuse one slice. Changed tasks stay pending for TakeTasks.
func (s *Subscription) Take(buf []string) (Kind, []string) {
	bits := Kind(s.bits.Swap(0))
	if bits&taskBit != 0 {
		s.bits.Or(uint32(taskBit))
	}
	if bits&resourceBit != 0 {
		s.mu.Lock()
		for w := range s.flags {
			if atomic.LoadUint64(&s.flags[w]) == 0 {
				continue // a load is cheaper than a swap, and most words are clear
			}
			for set := atomic.SwapUint64(&s.flags[w], 0); set != 0; set &= set - 1 {
				buf = append(buf, s.uris[w*64+mbits.TrailingZeros64(set)])
			}
		}
		s.mu.Unlock()
	}
	return bits &^ (resourceBit | taskBit), buf
}

// TakeTasks drains the tasks that changed since the last TakeTasks,
// appending their ids to buf.
func (s *Subscription) TakeTasks(buf []string) []string {
	if Kind(s.bits.And(^uint32(taskBit)))&taskBit == 0 {
		return buf
	}
	for i := range s.tflags {
		if s.tflags[i].Swap(false) {
			buf = append(buf, s.tasks[i])
		}
	}
	return buf
}

// TakeMerged returns how many changes were folded into pending state
// that was already set since the last call (a change to a list whose
// change the subscriber has not yet been told of), and resets it: what
// coalescing saved.
func (s *Subscription) TakeMerged() int { return int(s.merged.Swap(0)) }

// Close removes the subscription from the hub. It is safe to call more
// than once.
func (s *Subscription) Close() {
	s.once.Do(func() {
		h := s.hub
		h.mu.Lock()
		defer h.mu.Unlock()
		for i := range h.kinds {
			if s.follows&(1<<i) != 0 {
				h.kinds[i].remove(s, i)
			}
		}
		delete(h.all, s)
		if s.who.subs--; s.who.subs == 0 {
			delete(h.principals, s.principal)
		}
		s.closed = true
		for _, u := range s.uris {
			h.unfollow(s, u)
		}
		unindex(h.byTask, s.tasks, s)
		if h.count.Add(-1) == 0 && h.closed {
			close(h.drained)
		}
	})
}

// Follow adds uri to what the subscription follows: a change of uri
// published once Follow has returned reaches it. It does nothing for a
// URI followed already, or once the subscription is closed. Its cost is
// that of one URI, however many the subscription follows, so that a
// subscription can grow one URI at a time (a 2025-11-25 session's
// resources/subscribe) without being made again.
func (s *Subscription) Follow(uri string) {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	fl := h.byURI[uri]
	if s.closed || slices.ContainsFunc(fl.refs, func(r ref) bool { return r.sub == s }) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	h.follow(s, uri, fl)
}

// Unfollow takes uri out of what the subscription follows, with any
// change of it still pending: once Unfollow has returned, Take never
// returns uri, unless it is followed again. Like Follow, it costs one
// URI's work.
func (s *Subscription) Unfollow(uri string) {
	h := s.hub
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.closed {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := h.unfollow(s, uri)
	if !ok {
		return
	}
	// The last URI moves into the hole, flag and all, so that the slices
	// stay dense.
	last := len(s.uris) - 1
	s.clear(i)
	if i != last {
		moved := s.uris[last]
		s.uris[i] = moved
		if s.clear(last) {
			s.mark(i)
		}
		fl := h.byURI[moved]
		for k := range fl.refs {
			if fl.refs[k].sub == s {
				fl.refs[k].idx = i
				break
			}
		}
	}
	s.uris[last] = ""
	s.uris = s.uris[:last]
	if last%64 == 0 {
		s.flags = s.flags[:len(s.flags)-1]
	}
}

// clear clears the pending flag of uris[i] and reports whether it was
// set. The caller holds the hub's lock.
func (s *Subscription) clear(i int) bool {
	bit := uint64(1) << (i % 64)
	return atomic.AndUint64(&s.flags[i/64], ^bit)&bit != 0
}

// unfollow removes s from the followers of uri, dropping a URI nobody
// follows any more, and returns the index s knew it by. Refs past the
// end of what is kept are zeroed, so that the backing array does not
// keep a closed subscription alive. The caller holds h.mu.
func (h *Hub) unfollow(s *Subscription, uri string) (int, bool) {
	fl, ok := h.byURI[uri]
	if !ok {
		return 0, false
	}
	k := slices.IndexFunc(fl.refs, func(r ref) bool { return r.sub == s })
	if k < 0 {
		return 0, false
	}
	idx := fl.refs[k].idx
	if len(fl.refs) == 1 {
		delete(h.byURI, uri)
		if h.uriStamped.Load() {
			h.uriStamps.Delete(uri)
		}
		return idx, true
	}
	last := len(fl.refs) - 1
	fl.refs[k] = fl.refs[last]
	fl.refs[last] = ref{}
	fl.refs = fl.refs[:last]
	h.byURI[fl.uri] = fl
	return idx, true
}

// unindex removes s from index under each of keys, and drops a key no
// subscription is left under, so that an index holds only what is
// followed. Refs past the end of what is kept are zeroed, so that the
// backing array does not keep a closed subscription alive.
func unindex(index map[string][]ref, keys []string, s *Subscription) {
	for _, k := range keys {
		refs := index[k]
		out := refs[:0]
		for _, r := range refs {
			if r.sub != s {
				out = append(out, r)
			}
		}
		if len(out) == 0 {
			delete(index, k)
		} else {
			clear(refs[len(out):])
			index[k] = out
		}
	}
}
