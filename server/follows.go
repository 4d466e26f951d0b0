package server

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	"tidings/internal/engine"
	"tidings/jsonrpc"
)

// ListenLimits bound what change streams hold: how many listens are open
// and how many resource URIs they follow, per listen, per connection,
// per principal and in all. A listen holds memory for as long as it is
// open — a little for itself and some for every URI it follows — so
// without bounds one caller could open listens until the process runs
// out. The resources a 2025-11-25 session subscribes to count as
// followed URIs too, since the session keeps them; its stream is bounded
// by the session limits of the transport (streamhttp.WithSessionLimits)
// and is not counted as a listen. Zero fields keep their defaults.
type ListenLimits struct {
	// URIsPerListen bounds the resourceSubscriptions of one listen and
	// the resources one 2025-11-25 session subscribes to (default
	// 10 000). A listen that asks for more is refused with -32602: the
	// request itself is too large.
	URIsPerListen int
	// PerConnection bounds what the listens of one connection hold, on
	// transports whose connection carries many requests (stdio; default
	// 1000 listens and 100 000 URIs; stdio.WithMaxListens, 1000 by
	// default too, refuses a listen beyond it before the server sees
	// it). A Streamable HTTP listen is a request of its own, which only
	// PerPrincipal and Total bound.
	PerConnection Allowance
	// PerPrincipal bounds what the listens of one principal hold, on
	// every connection and transport (default 1000 listens and 100 000
	// URIs). The unauthenticated callers ("") share one allowance.
	PerPrincipal Allowance
	// Total bounds what every listen holds together (default 10 000
	// listens and 1 000 000 URIs).
	Total Allowance
}

// Allowance is one bound of ListenLimits.
type Allowance struct {
	// Listens bounds the open subscriptions/listen requests.
	Listens int
	// URIs bounds the resource URIs they follow (after the grant: one
	// the caller may not see is not followed), and that 2025-11-25
	// sessions subscribe to.
	URIs int
}

// The defaults of ListenLimits. A followed URI costs its string, once
// however many listens follow it, and 40 to 130 bytes for each listen
// that does, so the total default bounds what the URIs hold at some
// hundreds of megabytes even when every URI is long and distinct.
const (
	defaultURIsPerListen = 10000
	defaultConnListens   = 1000
	defaultConnURIs      = 100000
	defaultPrinListens   = 1000
	defaultPrinURIs      = 100000
	defaultTotalListens  = 10000
	defaultTotalURIs     = 1000000
)

// WithListenLimits bounds the listens the server keeps open and the
// resource URIs they follow (see ListenLimits for each bound and its
// default). A listen beyond URIsPerListen is refused with -32602, the
// request being too large. A listen, or a 2025-11-25
// resources/subscribe, that would pass another
// bound is refused with -32603, as a task beyond WithMaxTasks is: the
// request was valid and may succeed once other listens end. Either
// error names the bound and its value in its message, and its data
// holds them as {"limit": name, "value": n}; the names are those of
// ListenStats.Refused.
func WithListenLimits(l ListenLimits) Option {
	return func(c *config) {
		positive(&c.listens.URIsPerListen, l.URIsPerListen)
		for _, a := range []struct{ dst, src *Allowance }{
			{&c.listens.PerConnection, &l.PerConnection},
			{&c.listens.PerPrincipal, &l.PerPrincipal},
			{&c.listens.Total, &l.Total},
		} {
			positive(&a.dst.Listens, a.src.Listens)
			positive(&a.dst.URIs, a.src.URIs)
		}
	}
}

// DefaultListenLimits are the bounds WithListenLimits starts from.
func DefaultListenLimits() ListenLimits {
	return ListenLimits{
		URIsPerListen: defaultURIsPerListen,
		PerConnection: Allowance{Listens: defaultConnListens, URIs: defaultConnURIs},
		PerPrincipal:  Allowance{Listens: defaultPrinListens, URIs: defaultPrinURIs},
		Total:         Allowance{Listens: defaultTotalListens, URIs: defaultTotalURIs},
	}
}

// A limit of ListenLimits, as refusals and ListenStats name it.
type limit uint8

const (
	limitURIsPerListen limit = iota
	limitConnListens
	limitConnURIs
	limitPrinListens
	limitPrinURIs
	limitTotalListens
	limitTotalURIs
	numLimits
)

var limitNames = [numLimits]string{
	limitURIsPerListen: "urisPerListen",
	limitConnListens:   "listensPerConnection",
	limitConnURIs:      "urisPerConnection",
	limitPrinListens:   "listensPerPrincipal",
	limitPrinURIs:      "urisPerPrincipal",
	limitTotalListens:  "listens",
	limitTotalURIs:     "uris",
}

// what each limit's refusal says was passed; the value follows.
var limitPhrases = [numLimits]string{
	limitURIsPerListen: "more resource URIs than one listen or session may follow",
	limitConnListens:   "too many listens open on this connection",
	limitConnURIs:      "too many resource URIs followed by the listens of this connection",
	limitPrinListens:   "too many listens open for this caller",
	limitPrinURIs:      "too many resource URIs followed by this caller's listens and sessions",
	limitTotalListens:  "too many listens open on the server",
	limitTotalURIs:     "too many resource URIs followed on the server",
}

// ListenStats is what the server's listens hold and how often a limit
// of WithListenLimits refused one, for monitoring (see
// metrics.RegisterListens).
type ListenStats struct {
	// Listens is how many listens are open, and URIs how many resource
	// URIs they and 2025-11-25 sessions follow, counted per follower.
	Listens, URIs int
	// Refused counts the listens and subscribes refused, by the limit
	// they would have passed: urisPerListen, listensPerConnection,
	// urisPerConnection, listensPerPrincipal, urisPerPrincipal, listens
	// and uris (every name is present).
	Refused map[string]int64
}

// ListenStats returns what the listens hold now and the refusals so far.
func (s *Server) ListenStats() ListenStats {
	f := s.follows
	f.mu.Lock()
	st := ListenStats{Listens: f.total.Listens, URIs: f.total.URIs, Refused: make(map[string]int64, numLimits)}
	f.mu.Unlock()
	for l := range numLimits {
		st.Refused[limitNames[l]] = f.refused[l].Load()
	}
	return st
}

// followSet keeps what the listens hold against ListenLimits.
type followSet struct {
	lim     ListenLimits
	refused [numLimits]atomic.Int64

	mu          sync.Mutex
	total       engine.Conn // listens and URIs, as a connection's are kept
	byPrincipal map[string]*engine.Conn
}

func newFollowSet(lim ListenLimits) *followSet {
	return &followSet{lim: lim, byPrincipal: make(map[string]*engine.Conn)}
}

// lease returns an empty lease for principal, on the connection ctx
// carries if any.
func (f *followSet) lease(ctx context.Context, principal string) *lease {
	return &lease{set: f, principal: principal, conn: engine.ConnOf(ctx)}
}

// refusal is the error for a request that would pass l.
func (f *followSet) refusal(l limit) *jsonrpc.Error {
	f.refused[l].Add(1)
	value := f.value(l)
	code, prefix := jsonrpc.CodeInternalError, "Internal error: "
	if l == limitURIsPerListen {
		code, prefix = jsonrpc.CodeInvalidParams, "Invalid params: "
	}
	return jsonrpc.NewError(code, prefix+limitPhrases[l]+" (limit "+strconv.Itoa(value)+")",
		map[string]any{"limit": limitNames[l], "value": value})
}

func (f *followSet) value(l limit) int {
	switch l {
	case limitURIsPerListen:
		return f.lim.URIsPerListen
	case limitConnListens:
		return f.lim.PerConnection.Listens
	case limitConnURIs:
		return f.lim.PerConnection.URIs
	case limitPrinListens:
		return f.lim.PerPrincipal.Listens
	case limitPrinURIs:
		return f.lim.PerPrincipal.URIs
	case limitTotalListens:
		return f.lim.Total.Listens
	}
	return f.lim.Total.URIs
}

// lease is what one listen or session holds (engine.Lease).
type lease struct {
	set       *followSet
	principal string
	conn      *engine.Conn
	// listens and uris are what the lease holds, and released whether
	// Release gave it all back for good, under set.mu.
	listens, uris int
	released      bool
}

// errLeaseReleased refuses to grow a lease its listen or session gave
// back: a subscribe that raced the end of its session, say, which
// nothing would give back again.
func errLeaseReleased() *jsonrpc.Error {
	return jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Invalid Request: the session or listen has ended", nil)
}

// Grow takes listens and uris from every allowance the lease draws on,
// narrowest first, so that a refusal names what the caller can change.
func (l *lease) Grow(listens, uris int) *jsonrpc.Error {
	f := l.set
	f.mu.Lock()
	defer f.mu.Unlock()
	if l.released {
		return errLeaseReleased()
	}
	if l.uris+uris > f.lim.URIsPerListen {
		return f.refusal(limitURIsPerListen)
	}
	type scope struct {
		held                  *engine.Conn
		lim                   Allowance
		overListens, overURIs limit
	}
	p := f.byPrincipal[l.principal]
	if p == nil {
		p = &engine.Conn{}
	}
	scopes := []scope{
		{l.conn, f.lim.PerConnection, limitConnListens, limitConnURIs},
		{p, f.lim.PerPrincipal, limitPrinListens, limitPrinURIs},
		{&f.total, f.lim.Total, limitTotalListens, limitTotalURIs},
	}
	for _, sc := range scopes {
		switch {
		case sc.held == nil:
		case listens > 0 && sc.held.Listens+listens > sc.lim.Listens:
			return f.refusal(sc.overListens)
		case uris > 0 && sc.held.URIs+uris > sc.lim.URIs:
			return f.refusal(sc.overURIs)
		}
	}
	for _, sc := range scopes {
		if sc.held != nil {
			sc.held.Listens += listens
			sc.held.URIs += uris
		}
	}
	f.byPrincipal[l.principal] = p
	l.listens += listens
	l.uris += uris
	return nil
}

// Shrink gives back uris followed URIs.
func (l *lease) Shrink(uris int) {
	f := l.set
	f.mu.Lock()
	defer f.mu.Unlock()
	l.give(0, min(uris, l.uris))
}

// Release gives back everything, and the lease grows no more.
func (l *lease) Release() {
	f := l.set
	f.mu.Lock()
	defer f.mu.Unlock()
	l.released = true
	l.give(l.listens, l.uris)
}

// give returns what the lease holds to each allowance; the caller holds
// set.mu.
func (l *lease) give(listens, uris int) {
	if listens == 0 && uris == 0 {
		return
	}
	f := l.set
	p := f.byPrincipal[l.principal]
	for _, held := range []*engine.Conn{l.conn, p, &f.total} {
		if held != nil {
			held.Listens -= listens
			held.URIs -= uris
		}
	}
	if p.Listens == 0 && p.URIs == 0 {
		delete(f.byPrincipal, l.principal)
	}
	l.listens -= listens
	l.uris -= uris
}
