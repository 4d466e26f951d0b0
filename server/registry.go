package server

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

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
// with one atomic read and never lock.
type snapshot[T any] struct {
	items []*entry[T] // enabled entries, sorted by key
	byKey map[string]*entry[T]
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
	used atomic.Bool // set once anything was ever registered
}

func newRegistry[T any](h *hub.Hub, list mcp.List) *registry[T] {
	r := &registry[T]{all: make(map[string]*entry[T]), list: list, hub: h}
	r.snap.Store(&snapshot[T]{byKey: map[string]*entry[T]{}})
	return r
}

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
	r.rebuildLocked()
	r.mu.Unlock()
	r.used.Store(true)
	r.hub.ListChanged(hub.Of(r.list))
}

// remove deletes entries by key and reports how many existed.
func (r *registry[T]) remove(keys ...string) int {
	r.mu.Lock()
	n := 0
	for _, k := range keys {
		if _, ok := r.all[k]; ok {
			delete(r.all, k)
			n++
		}
	}
	if n > 0 {
		r.rebuildLocked()
	}
	r.mu.Unlock()
	if n > 0 {
		r.hub.ListChanged(hub.Of(r.list))
	}
	return n
}

// setEnabled shows or hides an entry without forgetting it.
func (r *registry[T]) setEnabled(key string, on bool) bool {
	r.mu.Lock()
	e, ok := r.all[key]
	changed := ok && e.disabled == on
	if changed {
		cp := *e
		cp.disabled = !on
		r.all[key] = &cp
		r.rebuildLocked()
	}
	r.mu.Unlock()
	if changed {
		r.hub.ListChanged(hub.Of(r.list))
	}
	return ok
}

func (r *registry[T]) rebuildLocked() {
	s := &snapshot[T]{byKey: make(map[string]*entry[T], len(r.all))}
	s.items = make([]*entry[T], 0, len(r.all))
	for k, e := range r.all {
		if e.disabled {
			continue
		}
		s.byKey[k] = e
		s.items = append(s.items, e)
	}
	slices.SortFunc(s.items, func(a, b *entry[T]) int { return strings.Compare(a.key, b.key) })
	r.snap.Store(s)
}

// get returns the enabled entry for key.
func (s *snapshot[T]) get(key string) (*entry[T], bool) {
	e, ok := s.byKey[key]
	return e, ok
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
