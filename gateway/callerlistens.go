package gateway

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"tidings/auth"
	"tidings/client"
)

// The listens held on a token-exchange upstream for each caller: one
// listen per caller, opened with a token exchanged for the caller's own,
// following what the caller's own listens on the gateway follow, so that
// the upstream's changes reach the callers who may see them, and only
// them. The exchange of tokens itself is in exchange.go.

// watch is the listen held on the upstream for one caller.
type watch struct {
	refs   int
	latest *auth.SubjectToken // the caller's latest token, to exchange when the listen needs one
	uris   map[string]int     // the resources its listens follow
	w      *client.Watcher
	cancel context.CancelFunc
	gen    int // counts the watchers started, so that a stale one's events are ignored
}

// start records the upstream's context, under which the listens held
// per caller run.
func (x *exchanger) start(ctx context.Context) {
	x.mu.Lock()
	x.ctx = ctx
	x.mu.Unlock()
}

// note records tok as principal's latest token, for the listen held for
// it to exchange when it needs a token.
func (x *exchanger) note(principal string, tok *auth.SubjectToken) {
	x.mu.Lock()
	if w, ok := x.watches[principal]; ok {
		w.latest = tok
	}
	x.mu.Unlock()
}

// latest is principal's latest token, nil when no listen is held for it.
func (x *exchanger) latest(principal string) *auth.SubjectToken {
	x.mu.Lock()
	defer x.mu.Unlock()
	if w, ok := x.watches[principal]; ok {
		return w.latest
	}
	return nil
}

// hold has the upstream listened to for principal, whose token is tok,
// until release is called as many times as hold was: one listen per
// caller, whatever the number of its listens here.
func (x *exchanger) hold(principal string, tok *auth.SubjectToken) {
	x.mu.Lock()
	w, ok := x.watches[principal]
	if !ok {
		w = &watch{uris: map[string]int{}}
		x.watches[principal] = w
	}
	w.refs++
	w.latest = tok
	first := w.refs == 1
	x.mu.Unlock()
	if first {
		x.relisten(principal)
	}
}

// release lets go of one hold of principal's listen, and ends the listen
// with the last.
func (x *exchanger) release(principal string) {
	x.mu.Lock()
	w, ok := x.watches[principal]
	if !ok {
		x.mu.Unlock()
		return
	}
	w.refs--
	if w.refs > 0 {
		x.mu.Unlock()
		return
	}
	delete(x.watches, principal)
	old, cancel := w.w, w.cancel
	x.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if old != nil {
		old.Close()
	}
}

// follow has principal's listen follow uri until the returned function
// is called.
func (x *exchanger) follow(principal, uri string) func() {
	x.mu.Lock()
	w, ok := x.watches[principal]
	if !ok {
		x.mu.Unlock()
		return func() {} // no listen of this caller is held: nothing to follow on
	}
	w.uris[uri]++
	first := w.uris[uri] == 1
	x.mu.Unlock()
	if first {
		x.relisten(principal)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			x.mu.Lock()
			w, ok := x.watches[principal]
			last := false
			if ok {
				w.uris[uri]--
				if last = w.uris[uri] <= 0; last {
					delete(w.uris, uri)
				}
			}
			x.mu.Unlock()
			if last {
				x.relisten(principal)
			}
		})
	}
}

// relisten opens principal's listen on the upstream, following its lists
// and the URIs its listens follow, and closes the one it replaces.
func (x *exchanger) relisten(principal string) {
	x.mu.Lock()
	w, ok := x.watches[principal]
	if !ok || x.ctx == nil || x.ctx.Err() != nil {
		x.mu.Unlock()
		return
	}
	uris := make([]string, 0, len(w.uris))
	for uri := range w.uris {
		uris = append(uris, uri)
	}
	slices.Sort(uris)
	w.gen++
	gen := w.gen
	ctx, cancel := context.WithCancel(withCaller(x.ctx, caller{principal: principal}))
	x.mu.Unlock()
	var baseline [numLists]bool
	o := x.u.offer()
	nw := x.u.c.Watch(ctx, client.WatchOptions{Tools: o.tools, Prompts: o.prompts, Resources: o.resources, URIs: uris,
		MaxBackoff: 5 * time.Second, OnEvent: func(e client.Event) { x.event(principal, gen, &baseline, e) }})
	x.mu.Lock()
	cur, ok := x.watches[principal]
	if !ok || cur != w || w.gen != gen {
		// Released, or replaced, meanwhile.
		x.mu.Unlock()
		cancel()
		nw.Close()
		return
	}
	old, oldCancel := w.w, w.cancel
	w.w, w.cancel = nw, cancel
	x.mu.Unlock()
	if oldCancel != nil {
		oldCancel()
	}
	if old != nil {
		old.Close()
	}
}

// event handles what principal's listen observed: what the gateway kept
// for principal is dropped, then principal's listens here — and no
// other's — are told. A new listen's first read of a list reports every
// item as added: it is told only when its names differ from what the
// gateway keeps for principal.
func (x *exchanger) event(principal string, gen int, baseline *[numLists]bool, e client.Event) {
	x.mu.Lock()
	w, ok := x.watches[principal]
	current := ok && w.gen == gen
	x.mu.Unlock()
	if !current {
		return
	}
	u := x.u
	switch e.Kind {
	case client.ToolsChanged, client.PromptsChanged, client.ResourcesChanged, client.TemplatesChanged:
		i := int(e.Kind - client.ToolsChanged)
		first := !baseline[i]
		baseline[i] = true
		var v *view
		tok := x.latest(principal)
		u.mu.Lock()
		if tok != nil {
			v = u.private[i][credentialKey(principal, tok)]
		}
		// A read on its way now may serve the caller what the upstream
		// had before the change, and keep no trace of it.
		reading := u.fetching[i].Load() > 0
		u.mu.Unlock()
		if first && v != nil && sameNames(v, e.Added) && len(e.Removed) == 0 && len(e.Changed) == 0 {
			return
		}
		// Every list kept for the caller goes, whichever of its tokens
		// it was read with, and a read on its way is not kept: it may
		// have left the upstream before the change.
		prefix := principal + "\x00"
		u.mu.Lock()
		for k := range u.private[i] {
			if k == principal || strings.HasPrefix(k, prefix) {
				delete(u.private[i], k)
			}
		}
		u.gen[i]++
		u.mu.Unlock()
		if first && v == nil && !reading {
			return // nothing was served that could be stale
		}
		u.g.srv.ListChangedFor(principal, listsOf[i])
		u.lag(e)
	case client.ResourceUpdated:
		u.g.srv.ResourceUpdatedFor(principal, e.URI)
		u.lag(e)
	case client.ReadFailed:
		u.log.Debug("re-read for a caller failed", "err", e.Err)
	}
}

// sameNames reports whether the upstream's names in v are names.
func sameNames(v *view, names []string) bool {
	if len(v.items) != len(names) {
		return false
	}
	have := make(map[string]bool, len(v.items))
	for _, it := range v.items {
		have[it.orig] = true
	}
	for _, n := range names {
		if !have[n] {
			return false
		}
	}
	return true
}

// live counts the callers' listens on the upstream that are up.
func (x *exchanger) live() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := 0
	for _, w := range x.watches {
		if w.w != nil && w.w.State() == client.Live {
			n++
		}
	}
	return n
}

// stop ends every caller's listen.
func (x *exchanger) stop() {
	x.mu.Lock()
	ws := x.watches
	x.watches = map[string]*watch{}
	x.mu.Unlock()
	for _, w := range ws {
		if w.cancel != nil {
			w.cancel()
		}
		if w.w != nil {
			w.w.Close()
		}
	}
	_ = x.flow.Close()
}

// stats adds the exchanger's counts to s.
func (x *exchanger) stats(s *UpstreamStats) {
	s.Listens = x.live()
	s.Exchanges, s.ExchangeFailures, s.ExchangedEvicted = x.exchanges.Load(), x.failures.Load(), x.evicted.Load()
	x.mu.Lock()
	s.ExchangedTokens = x.lru.Len()
	x.mu.Unlock()
}
