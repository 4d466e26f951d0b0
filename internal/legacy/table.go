package legacy

import (
	"container/list"
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"tidings/internal/engine"
	"tidings/jsonrpc"
)

// Table is a bounded set of sessions for a transport on which a client
// names its session on every request (Mcp-Session-Id on HTTP): at most max
// at once and perPrincipal of any one principal, idle ones expiring. A
// principal at its quota loses its own least recently used session to a
// new one; once the table is full, a new session is refused: no
// principal's sessions make room for another's, so that one caller
// opening sessions in a loop evicts nobody but itself.
type Table struct {
	srv   engine.Server
	max   int
	perPr int
	idle  time.Duration

	mu  sync.Mutex
	m   map[string]*Session
	lru *list.List // of *Session, front: most recently used
	// own holds each principal's sessions the same way, for evicting a
	// principal's own at its quota.
	own map[string]*list.List

	evicted, expired, refused atomic.Int64
}

// TableStats is what a table holds and did, for monitoring.
type TableStats struct {
	// Open is the number of live sessions.
	Open int
	// Evicted counts sessions ended to make room for a newer one of the
	// same principal, at its quota; Expired, sessions ended for being
	// idle; Refused, sessions refused because the table was full.
	Evicted, Expired, Refused int64
}

// ErrFull reports a session refused because the table holds as many
// sessions as it may; the client may try again once some end or expire.
var ErrFull = errors.New("legacy: the session table is full")

// NewTable returns an empty table for sessions of srv: at most max
// sessions at once, perPrincipal of one principal, each ending once it
// is idle for longer than idle.
func NewTable(srv engine.Server, max, perPrincipal int, idle time.Duration) *Table {
	return &Table{srv: srv, max: max, perPr: perPrincipal, idle: idle,
		m: map[string]*Session{}, lru: list.New(), own: map[string]*list.List{}}
}

// Len returns the number of live sessions.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// Stats returns what the table holds now and what it did so far.
func (t *Table) Stats() TableStats {
	return TableStats{Open: t.Len(), Evicted: t.evicted.Load(), Expired: t.expired.Load(), Refused: t.refused.Load()}
}

// Open answers initialize with a new session kept in the table, bound to
// principal. When the table is full it opens none and returns ErrFull,
// with the reply that says so to the client (-32603, naming the limit
// and its value).
func (t *Table) Open(ctx context.Context, c *engine.Call, principal string) (*Session, engine.Reply, error) {
	now := t.srv.Now()
	// Checked first too, so that a full table runs no initialize; add
	// makes the room once the session is opened.
	if !t.hasRoom(principal, now) {
		return nil, t.full(c), ErrFull
	}
	ss, rep := Open(ctx, t.srv, c, principal)
	if ss == nil {
		return nil, rep, nil
	}
	ss.table = t
	if !t.add(ss, now) {
		ss.end()
		rep.Release()
		return nil, t.full(c), ErrFull
	}
	return ss, rep, nil
}

// full is the refusal of a session when the table is full.
func (t *Table) full(c *engine.Call) engine.Reply {
	t.refused.Add(1)
	return engine.Fail(c.Msg.ID, jsonrpc.CodeInternalError,
		"Internal error: too many sessions open on this server (limit "+strconv.Itoa(t.max)+
			"); try again later, or speak protocol version 2026-07-28, which needs none",
		map[string]any{"limit": "sessions", "value": t.max})
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
	if t.expiredAt(ss, now) {
		t.expired.Add(1)
		t.removeLocked(ss)
		return nil, false
	}
	ss.lastSeen.Store(now.UnixNano())
	t.lru.MoveToFront(ss.lruElem)
	t.own[ss.principal].MoveToFront(ss.ownElem)
	return ss, true
}

// touch marks ss in use now, as Get does, for a session whose stream
// is open however quiet it is: it moves to the warm end of the table,
// where the sweep of expired sessions, which starts at the cold end and
// stops at the first live one, does not meet it before the idle ones.
func (t *Table) touch(ss *Session) {
	now := t.srv.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	ss.lastSeen.Store(now.UnixNano())
	if t.m[ss.id] != ss {
		return // ended meanwhile
	}
	t.lru.MoveToFront(ss.lruElem)
	t.own[ss.principal].MoveToFront(ss.ownElem)
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

func (t *Table) expiredAt(ss *Session, now time.Time) bool {
	return now.Sub(time.Unix(0, ss.lastSeen.Load())) > t.idle
}

func (t *Table) removeLocked(ss *Session) {
	delete(t.m, ss.id)
	t.lru.Remove(ss.lruElem)
	own := t.own[ss.principal]
	own.Remove(ss.ownElem)
	if own.Len() == 0 {
		delete(t.own, ss.principal)
	}
	ss.end()
}

// hasRoom reports whether roomLocked would find room, changing nothing.
func (t *Table) hasRoom(principal string, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.m) < t.max {
		return true
	}
	if own := t.own[principal]; own != nil && own.Len() >= t.perPr {
		return true
	}
	back := t.lru.Back()
	return back != nil && t.expiredAt(back.Value.(*Session), now)
}

// roomLocked makes room for a session of principal if it can, and
// reports whether there is: expired sessions go first, from the cold
// end; then, with principal at its quota, its own least recently used
// session. A full table otherwise has no room.
func (t *Table) roomLocked(principal string, now time.Time) bool {
	for e := t.lru.Back(); e != nil; {
		old := e.Value.(*Session)
		prev := e.Prev()
		if !t.expiredAt(old, now) {
			break
		}
		t.expired.Add(1)
		t.removeLocked(old)
		e = prev
	}
	if own := t.own[principal]; own != nil && own.Len() >= t.perPr {
		t.evicted.Add(1)
		t.removeLocked(own.Back().Value.(*Session))
	}
	return len(t.m) < t.max
}

// add admits a session if there is room for it.
func (t *Table) add(ss *Session, now time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.roomLocked(ss.principal, now) {
		return false
	}
	own := t.own[ss.principal]
	if own == nil {
		own = list.New()
		t.own[ss.principal] = own
	}
	ss.lruElem = t.lru.PushFront(ss)
	ss.ownElem = own.PushFront(ss)
	t.m[ss.id] = ss
	return true
}
