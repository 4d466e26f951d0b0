package legacy

import (
	"container/list"
	"context"
	"sync"
	"time"

	"tidings/internal/engine"
)

// Table is a bounded set of sessions for a transport on which a client
// names its session on every request (Mcp-Session-Id on HTTP): at most max
// at once, the least recently used evicted to admit a new one, and idle
// ones expiring.
type Table struct {
	srv  engine.Server
	mu   sync.Mutex
	m    map[string]*Session
	lru  *list.List // of *Session, front: most recently used
	elem map[*Session]*list.Element
	max  int
	idle time.Duration
}

// NewTable returns an empty table for sessions of srv.
func NewTable(srv engine.Server, max int, idle time.Duration) *Table {
	return &Table{srv: srv, m: map[string]*Session{}, lru: list.New(), elem: map[*Session]*list.Element{}, max: max, idle: idle}
}

// Len returns the number of live sessions.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// Open answers initialize with a new session kept in the table, bound to
// principal.
func (t *Table) Open(ctx context.Context, c *engine.Call, principal string) (*Session, engine.Reply) {
	ss, rep := Open(ctx, t.srv, c, principal)
	if ss != nil {
		ss.table = t
		t.add(ss, t.srv.Now())
	}
	return ss, rep
}

// Get returns the live session with id opened by principal, refreshing
// its idle clock. A session of another principal is reported as absent,
// as if the id were unknown: holding an id is not enough to use it.
// Expired sessions are removed and reported as absent.
func (t *Table) Get(id, principal string) (*Session, bool) {
	now := t.srv.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	ss, ok := t.m[id]
	if !ok || ss.principal != principal {
		return nil, false
	}
	if now.Sub(time.Unix(0, ss.lastSeen.Load())) > t.idle {
		t.removeLocked(ss)
		return nil, false
	}
	ss.lastSeen.Store(now.UnixNano())
	t.lru.MoveToFront(t.elem[ss])
	return ss, true
}

// End ends a session (a DELETE, or the client going away) and reports
// whether it was live.
func (t *Table) End(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	ss, ok := t.m[id]
	if ok {
		t.removeLocked(ss)
	}
	return ok
}

func (t *Table) removeLocked(ss *Session) {
	delete(t.m, ss.id)
	t.lru.Remove(t.elem[ss])
	delete(t.elem, ss)
	ss.end()
}

// add admits a session, first dropping expired ones from the cold end
// and then, at the cap, evicting the least recently used.
func (t *Table) add(ss *Session, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for e := t.lru.Back(); e != nil; {
		old := e.Value.(*Session)
		prev := e.Prev()
		if now.Sub(time.Unix(0, old.lastSeen.Load())) <= t.idle && len(t.m) < t.max {
			break
		}
		t.removeLocked(old)
		e = prev
	}
	t.elem[ss] = t.lru.PushFront(ss)
	t.m[ss.id] = ss
}
