package server

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"tidings/bus"
	"tidings/hub"
	"tidings/mcp"
)

// entry is one registered item with its wire JSON encoded once, so a list
// page is mostly a byte copy.
type entry[T any] struct {
	key      string
	val      T
	json     []byte
	disabled bool
}

// snapshot is an immutable, sorted view of a registry. Readers load it
// with one atomic read and never lock, and find an item by binary search:
// a change then costs one copy of the sorted slice, not a map rebuilt or
// a sort, which matters for a source of a hundred thousand items.
type snapshot[T any] struct {
	items []*entry[T] // enabled entries, sorted by key
	// firstPage caches the encoded anonymous first page of the list
	// result; it is filled lazily and dies with the snapshot.
	firstPage atomic.Pointer[[]byte]
}

// registry holds items of one primitive and publishes a list change to the
// hub on every add, remove, enable or disable.
type registry[T any] struct {
	mu   sync.Mutex
	all  map[string]*entry[T]
	snap atomic.Pointer[snapshot[T]]
	list mcp.List
	hub  *hub.Hub
	bus  bus.Bus     // the other replicas (WithBus), nil for none
	used atomic.Bool // set once anything was ever registered
	// sees, when set (WithVisibility), reports whether a principal may
	// see the item keyed key: a change is told only to those who may see
	// one of the items it touched.
	sees func(principal, key string) bool
	// space is the List whose visibility sees asks about; it travels
	// with the keys of a change so that another replica can ask its own.
	space List
	// state, with shared state (WithSharedState), is whether each key the
	// shared state names is on: an entry put under a key it turns off
	// starts disabled. Keys it does not name are on. Guarded by mu.
	state map[string]bool
	// tel and road stamp the registry's changes (see publish).
	tel  *changeTelemetry
	road string
}

// changed tells this replica's listeners, and then the other replicas,
// that the items keyed keys changed.
func (r *registry[T]) changed(keys []string) { r.changedIn(context.Background(), keys) }

// changedIn is changed for a change whose trace continues the one ctx
// holds (see Server.ListChangedContext).
func (r *registry[T]) changedIn(ctx context.Context, keys []string) {
	publish(ctx, r.hub, r.bus, r.event(keys), r.tel, r.road)
}

// joinBus has the registry's changes told to the other replicas through
// b; New calls it before anything is registered.
func (r *registry[T]) joinBus(b bus.Bus) { r.bus = b }

// notifyLocal tells this replica's listeners only that the items keyed
// keys changed: the other replicas hear of it otherwise, or already have.
func (r *registry[T]) notifyLocal(keys []string) { r.hub.PublishRemote(r.event(keys).Event) }

// event is the change of the items keyed keys (nil for unknown keys).
func (r *registry[T]) event(keys []string) change {
	e := change{Event: hub.Event{Kinds: hub.Of(r.list)}}
	if r.sees != nil {
		if keys == nil {
			keys = []string{}
		}
		e.keys, e.list = keys, r.space
		e.Sees = func(principal string) bool {
			for _, k := range keys {
				if r.sees(principal, k) {
					return true
				}
			}
			return false
		}
	}
	return e
}

func newRegistry[T any](h *hub.Hub, list mcp.List) *registry[T] {
	r := &registry[T]{all: make(map[string]*entry[T]), list: list, hub: h}
	r.snap.Store(&snapshot[T]{})
	return r
}

// initState makes the registry follow shared state; New calls it before
// anything is registered.
func (r *registry[T]) initState() { r.state = make(map[string]bool) }

func (r *registry[T]) load() *snapshot[T] { return r.snap.Load() }

// put adds or replaces entries and publishes one change.
func (r *registry[T]) put(es ...*entry[T]) {
	if len(es) == 0 {
		return
	}
	r.mu.Lock()
	for _, e := range es {
		r.all[e.key] = e
	}
	// The newest of several entries with one key wins, as in the map.
	added := make([]*entry[T], 0, len(es))
	for _, e := range es {
		if r.all[e.key] == e {
			added = append(added, e)
		}
	}
	slices.SortFunc(added, byKey[T])
	added = slices.CompactFunc(added, func(a, b *entry[T]) bool { return a.key == b.key })
	shown, hidden := added, map[string]bool(nil)
	if r.state != nil {
		// What the shared state switched off stays off, however often the
		// item is registered again.
		shown = make([]*entry[T], 0, len(added))
		for _, e := range added {
			if on, ok := r.state[e.key]; ok && !on {
				e.disabled = true
				if hidden == nil {
					hidden = make(map[string]bool)
				}
				hidden[e.key] = true
				continue
			}
			shown = append(shown, e)
		}
	}
	r.replaceLocked(shown, hidden)
	r.mu.Unlock()
	r.used.Store(true)
	if r.sees == nil {
		r.changed(nil)
		return
	}
	keys := make([]string, len(added))
	for i, e := range added {
		keys[i] = e.key
	}
	r.changed(keys)
}

// remove deletes entries by key and reports how many existed.
func (r *registry[T]) remove(keys ...string) int {
	r.mu.Lock()
	gone := make(map[string]bool, len(keys))
	for _, k := range keys {
		if _, ok := r.all[k]; ok {
			delete(r.all, k)
			gone[k] = true
		}
	}
	n := len(gone)
	if n > 0 {
		r.replaceLocked(nil, gone)
	}
	r.mu.Unlock()
	if n > 0 {
		r.changed(slices.Collect(maps.Keys(gone)))
	}
	return n
}

// setEnabled shows or hides an entry without forgetting it, and tells
// the hub (and through it the other replicas) if that changed anything.
func (r *registry[T]) setEnabled(key string, on bool) bool {
	ok, changed := r.switchLocal(key, on)
	if changed {
		r.changed([]string{key})
	}
	return ok
}

// switchLocal shows or hides an entry, telling no one: it reports whether
// the key is registered and whether its entry changed. With shared state
// it also notes on as the key's state.
func (r *registry[T]) switchLocal(key string, on bool) (registered, changed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.all[key]
	if !ok {
		return false, false
	}
	if r.state != nil {
		r.state[key] = on
	}
	if e.disabled != on {
		return true, false
	}
	cp := r.flipLocked(e)
	if on {
		r.replaceLocked([]*entry[T]{cp}, nil)
	} else {
		r.replaceLocked(nil, map[string]bool{key: true})
	}
	return true, true
}

// flipLocked replaces e with a copy whose disabled flag is turned over
// (snapshots share entries, so an entry is never changed in place).
func (r *registry[T]) flipLocked(e *entry[T]) *entry[T] {
	cp := *e
	cp.disabled = !cp.disabled
	r.all[e.key] = &cp
	return &cp
}

// applyState makes state (key → on, for keys of this registry) the
// shared state and shows or hides the entries it changes, in one new
// snapshot, telling no one: it returns the keys of the entries that
// changed. A key state does not name is on, including one it named
// before; a key no entry has is kept for an entry put later.
func (r *registry[T]) applyState(state map[string]bool) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.state
	r.state = state
	var shown []*entry[T]
	var hidden map[string]bool
	var keys []string
	check := func(key string) {
		e, ok := r.all[key]
		if !ok {
			return
		}
		on, named := state[key]
		if !named {
			on = true
		}
		if e.disabled != on {
			return
		}
		keys = append(keys, key)
		cp := r.flipLocked(e)
		if on {
			shown = append(shown, cp)
			return
		}
		if hidden == nil {
			hidden = make(map[string]bool)
		}
		hidden[key] = true
	}
	for key := range state {
		check(key)
	}
	for key := range old {
		if _, named := state[key]; !named {
			check(key)
		}
	}
	if len(keys) > 0 {
		slices.SortFunc(shown, byKey[T])
		r.replaceLocked(shown, hidden)
	}
	return keys
}

func byKey[T any](a, b *entry[T]) int { return strings.Compare(a.key, b.key) }

// replaceLocked publishes a new snapshot: the current items without the
// keys of added (which replace them) and without those in gone, merged
// with added, which is sorted by key and holds each key once. It costs
// one pass over the items.
func (r *registry[T]) replaceLocked(added []*entry[T], gone map[string]bool) {
	old := r.snap.Load().items
	items := make([]*entry[T], 0, len(old)+len(added))
	i := 0
	for _, e := range old {
		for i < len(added) && added[i].key < e.key {
			items = append(items, added[i])
			i++
		}
		if (i < len(added) && added[i].key == e.key) || gone[e.key] {
			continue // replaced by added[i], or removed
		}
		items = append(items, e)
	}
	items = append(items, added[i:]...)
	r.snap.Store(&snapshot[T]{items: items})
}

// get returns the enabled entry for key.
func (s *snapshot[T]) get(key string) (*entry[T], bool) {
	i, ok := slices.BinarySearchFunc(s.items, key, func(e *entry[T], k string) int { return strings.Compare(e.key, k) })
	if !ok {
		return nil, false
	}
	return s.items[i], true
}

// page returns up to size entries whose key sorts after `after` and
// whether more follow. Keyset paging means an item that exists for the
// whole walk is never skipped, whatever else is added or removed.
//
// keep, when not nil, hides the entries it refuses (items the caller may
// not see); the page then holds up to size visible entries.
func (s *snapshot[T]) page(after string, hasAfter bool, size int, keep func(key string) bool) ([]*entry[T], bool) {
	start := 0
	if hasAfter {
		start, _ = slices.BinarySearchFunc(s.items, after, func(e *entry[T], k string) int {
			return strings.Compare(e.key, k)
		})
		if start < len(s.items) && s.items[start].key == after {
			start++
		}
	}
	if keep == nil {
		end := min(start+size, len(s.items))
		return s.items[start:end], end < len(s.items)
	}
	var out []*entry[T]
	for i := start; i < len(s.items); i++ {
		if !keep(s.items[i].key) {
			continue
		}
		if len(out) == size {
			return out, true
		}
		out = append(out, s.items[i])
	}
	return out, false
}
