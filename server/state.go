package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tidings/bus"
	"tidings/hub"
)

// WithSharedState makes what is switched on and off at run time (Enable
// and Disable) the same on every replica that is given
// the same st (brokers.OpenState on the bus's URL, or a bus.LocalState
// in one process), instead of a setting of the replica the
// call happened to reach. Every replica registers the same items in code;
// st holds only which of them are off, under keys made of the kind and the
// name ("tool:NAME", "prompt:NAME", "resource:URI"). A key no item here is
// registered under is kept for an item registered later, and otherwise
// ignored.
//
// How a change travels. A call applies on this replica at once (its
// lists show it and its listeners are told), then writes st, then —
// once the write has landed — publishes the list change on the bus (see
// WithBus). A replica that receives a list change of tools, prompts or
// resources from the bus loads st before it tells its listeners, so
// that a listener told of a change re-reads a list that already shows
// it: tools/list on any replica agrees with the others within one bus
// delivery. A replica whose load changes what it serves publishes that
// change again, since a listener told of it may have re-read, through a
// balancer, a replica that had not applied it yet: the last replica to
// apply a change tells everyone once all the others have it, so every
// listener ends up reading the change (a watcher may report it undone
// and done again on the way). Every such change costs the receiver one
// load of st, whatever it was. When the bus may have lost events (a gap, a
// reconnect), and when the server starts, the replica loads everything
// and tells its listeners what changed. Two replicas that switch one item
// at the same moment end with the value written last, everywhere.
//
// Failures. A write that fails leaves the change in force here, is
// logged, counted (StateStats) and retried — with backoff, and on every
// resync — until it lands, and only then published. Meanwhile a load
// does not undo it: a replica's own unwritten changes win over what it
// loads. Enable, Disable and SyncState wait for the write and report its
// error; a caller that does not want to wait gives them a ctx that ends
// soon, and the change is still made here and retried. A load that fails is retried too,
// and what it then finds is told to the listeners.
//
// Without a bus the state is loaded when the server starts and on
// SyncState only. The server owns st from then on: Shutdown closes it.
func WithSharedState(st bus.State) Option { return func(c *config) { c.state = st } }

// ErrNotRegistered is what Enable and Disable return for a key no item of its
// kind is registered under: there is nothing to switch, and nothing is
// written.
var ErrNotRegistered = errors.New("server: no such item is registered")

// StateStats is a snapshot of what a server did with its shared state.
type StateStats struct {
	// Loaded reports that the shared state has been loaded at least once,
	// so that what this replica serves reflects it.
	Loaded bool
	// Loads and LoadFailures count loads of the shared state and those
	// that failed; LastLoad is when the last one succeeded.
	Loads, LoadFailures int64
	LastLoad            time.Time
	// Writes and WriteFailures count writes to the store and those that
	// failed (each is retried).
	Writes, WriteFailures int64
	// Unwritten is how many local changes are not yet in the store: while
	// it is not zero this replica serves what the others may not.
	Unwritten int
}

// StateStats reports the shared state's health (the zero value without
// WithSharedState).
func (s *Server) StateStats() StateStats {
	if s.shared == nil {
		return StateStats{}
	}
	return s.shared.stats()
}

// An Item names one tool, prompt or resource for Enable and Disable.
// Only these three kinds are switched on and off, so only Tool, Prompt
// and Resource make one: a resource template or a cached result cannot
// be named. The zero Item names nothing, and switching it is an error.
type Item struct {
	list List
	key  string
}

// Tool names the tool registered under name.
func Tool(name string) Item { return Item{list: ListTools, key: name} }

// Prompt names the prompt registered under name.
func Prompt(name string) Item { return Item{list: ListPrompts, key: name} }

// Resource names the resource registered at uri.
func Resource(uri string) Item { return Item{list: ListResources, key: uri} }

// Enable shows an item hidden by Disable again, and tells listeners its
// list changed. See Disable for what it waits for and returns.
func (s *Server) Enable(ctx context.Context, it Item) error { return s.setEnabled(ctx, it, true) }

// Disable hides a registered item without forgetting it: a disabled tool
// is neither listed nor callable, a prompt neither listed nor rendered, a
// resource neither listed nor readable, and listeners are told the list
// changed. The item is hidden here at once. With shared state (see
// WithSharedState) it is hidden on every replica, and Disable waits until
// the change is in the store: it returns the store's error, if any, and
// ctx's if ctx ends first — the change then still applies here and is
// retried, so the error says only that the other replicas may not see it
// yet. An item that is not registered is ErrNotRegistered, and nothing
// changes.
func (s *Server) Disable(ctx context.Context, it Item) error { return s.setEnabled(ctx, it, false) }

func (s *Server) setEnabled(ctx context.Context, it Item, on bool) error {
	sw := s.switchable(it.list)
	if sw == nil {
		return errors.New("server: the zero Item names nothing to switch on or off; make one with Tool, Prompt or Resource")
	}
	if s.shared == nil {
		if !sw.setEnabled(it.key, on) {
			return fmt.Errorf("server: %s %q: %w", kindName(it.list), it.key, ErrNotRegistered)
		}
		return nil
	}
	done := make(chan error, 1)
	if !s.shared.set(sw, it.key, on, done) {
		return fmt.Errorf("server: %s %q: %w", kindName(it.list), it.key, ErrNotRegistered)
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("server: %s %q switched here, not yet in the shared state: %w", kindName(it.list), it.key, ctx.Err())
	}
}

// SyncState writes what this replica could not write before, then loads
// the shared state and applies it, telling listeners what changed. A
// replica that starts calls it once its items are registered, so that it
// serves the shared state from its first request; the server also does
// this on its own when it starts and after bus gaps, without waiting. It
// returns the first error, or ctx's; nil without shared state.
func (s *Server) SyncState(ctx context.Context) error {
	if s.shared == nil {
		return nil
	}
	done := make(chan error, 1)
	s.shared.sync(done)
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("server: sync state: %w", ctx.Err())
	}
}

// switchable is a registry whose items can be switched on and off.
type switchable interface {
	setEnabled(key string, on bool) bool
	switchLocal(key string, on bool) (registered, changed bool)
	applyState(state map[string]bool) []string
	notifyLocal(keys []string)
	event(keys []string) change
}

func (s *Server) switchable(l List) switchable {
	switch l {
	case ListTools:
		return s.tools
	case ListPrompts:
		return s.prompts
	case ListResources:
		return s.resources
	}
	return nil
}

// switchedLists are the lists whose items can be switched on and off.
func switchedLists() []List { return []List{ListTools, ListPrompts, ListResources} }

// kindName names the kind of item of l, as the shared state's keys do.
func kindName(l List) string {
	switch l {
	case ListTools:
		return "tool"
	case ListPrompts:
		return "prompt"
	case ListResources:
		return "resource"
	}
	return fmt.Sprintf("list %d", l)
}

// stateKey is the shared state's key of the item keyed key in l.
func stateKey(l List, key string) string { return kindName(l) + ":" + key }

// sharedKinds are the lists a load of the shared state may change.
const sharedKinds = hub.ToolsList | hub.PromptsList | hub.ResourcesList

// Timing of the shared state's I/O.
const (
	stateOpTimeout    = 5 * time.Second        // one load or write
	stateFlushTimeout = 2 * time.Second        // the last writes, at shutdown
	stateMinRetry     = 100 * time.Millisecond // first retry after a failure
	stateMaxRetry     = 10 * time.Second       // slowest retry
	// stateMaxQueued bounds the remote changes held for the next load;
	// past it, every listener is told everything instead.
	stateMaxQueued = 1024
)

var errStopped = errors.New("server: shut down before the shared state was written")

// sharedState runs a server's shared state: one goroutine, owned by the
// server (started by New, stopped by Shutdown), does every write and
// load, so that they never overlap and never hold a lock across I/O.
type sharedState struct {
	st  bus.State
	srv *Server
	log *slog.Logger

	// mu guards what follows; it is taken before a registry's mutex
	// (switchLocal, applyState) and never held across I/O.
	mu        sync.Mutex
	gen       uint64
	unwritten map[string]*intent // key → this replica's latest change not yet in the store
	events    []change           // remote list changes to tell once loaded
	overflow  bool               // more than stateMaxQueued: tell everyone everything
	resync    bool               // the bus may have lost events
	owed      bool               // a load is due (start, a failed load)
	syncs     []chan<- error     // SyncState calls waiting
	stopped   bool

	kick   chan struct{} // capacity 1: there is work
	ctx    context.Context
	cancel context.CancelFunc // ends the I/O in flight, at shutdown
	stop   chan struct{}
	done   chan struct{}

	closeOnce sync.Once
	closeErr  error

	loaded                               atomic.Bool
	loads, loadFails, writes, writeFails atomic.Int64
	lastLoad                             atomic.Int64 // unix nanos
	failing                              atomic.Bool  // the last I/O failed: log the next success
	nUnwritten                           atomic.Int64
}

// intent is a change made here, with the calls waiting for its write.
type intent struct {
	sw      switchable
	on      bool
	gen     uint64
	waiters []chan<- error
}

func newSharedState(srv *Server, st bus.State) *sharedState {
	sh := &sharedState{st: st, srv: srv, log: srv.log, unwritten: make(map[string]*intent),
		owed: true, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	sh.ctx, sh.cancel = context.WithCancel(context.Background())
	sh.poke()
	go sh.run()
	return sh
}

func (sh *sharedState) poke() {
	select {
	case sh.kick <- struct{}{}:
	default:
	}
}

func (sh *sharedState) listOf(sw switchable) List {
	for _, l := range switchedLists() {
		if sh.srv.switchable(l) == sw {
			return l
		}
	}
	return -1
}

// set applies a change here, tells the local listeners, and queues its
// write; done, if not nil, hears how the write went. It reports whether
// the key is registered.
func (sh *sharedState) set(sw switchable, key string, on bool, done chan<- error) bool {
	sk := stateKey(sh.listOf(sw), key)
	sh.mu.Lock()
	registered, changed := sw.switchLocal(key, on)
	if registered {
		sh.gen++
		in := &intent{sw: sw, on: on, gen: sh.gen}
		if old := sh.unwritten[sk]; old != nil {
			in.waiters = old.waiters // answered by the write of the newer value
		}
		if done != nil {
			in.waiters = append(in.waiters, done)
		}
		if sh.stopped {
			for _, w := range in.waiters {
				w <- errStopped
			}
			in.waiters = nil
		}
		sh.unwritten[sk] = in
		sh.nUnwritten.Store(int64(len(sh.unwritten)))
	}
	sh.mu.Unlock()
	if !registered {
		return false
	}
	if changed {
		sw.notifyLocal([]string{key})
	}
	sh.poke()
	return true
}

// sync queues a SyncState.
func (sh *sharedState) sync(done chan<- error) {
	sh.mu.Lock()
	if sh.stopped {
		sh.mu.Unlock()
		done <- errStopped
		return
	}
	sh.syncs = append(sh.syncs, done)
	sh.mu.Unlock()
	sh.poke()
}

// remote holds a list change from another replica until the state is
// loaded; other events need no load and are told at once.
func (sh *sharedState) remote(e change) {
	if e.Kinds&sharedKinds == 0 {
		sh.srv.hub.PublishRemote(e.Event)
		return
	}
	sh.mu.Lock()
	if len(sh.events) < stateMaxQueued {
		sh.events = append(sh.events, e)
	} else {
		sh.overflow = true
		sh.events = nil
	}
	sh.mu.Unlock()
	sh.poke()
}

// resyncAll reloads everything and then tells every listener everything.
func (sh *sharedState) resyncAll() {
	sh.mu.Lock()
	sh.resync = true
	sh.mu.Unlock()
	sh.poke()
}

// close writes what is still unwritten (for a short while at most),
// stops the goroutine and closes the store. It is safe to call more than
// once.
func (sh *sharedState) close() error {
	sh.closeOnce.Do(func() {
		close(sh.stop)
		t := time.AfterFunc(stateFlushTimeout, sh.cancel)
		<-sh.done
		t.Stop()
		sh.cancel()
		if err := sh.st.Close(); err != nil {
			sh.closeErr = fmt.Errorf("server: close shared state: %w", err)
		}
	})
	return sh.closeErr
}

func (sh *sharedState) stats() StateStats {
	st := StateStats{
		Loaded:        sh.loaded.Load(),
		Loads:         sh.loads.Load(),
		LoadFailures:  sh.loadFails.Load(),
		Writes:        sh.writes.Load(),
		WriteFailures: sh.writeFails.Load(),
		Unwritten:     int(sh.nUnwritten.Load()),
	}
	if n := sh.lastLoad.Load(); n != 0 {
		st.LastLoad = time.Unix(0, n)
	}
	return st
}

func (sh *sharedState) run() {
	defer close(sh.done)
	ctx := sh.ctx
	retry := time.NewTimer(time.Hour)
	retry.Stop()
	defer retry.Stop()
	fails := 0
	for {
		select {
		case <-sh.stop:
			// A change made just before shutdown still reaches the others.
			if err := sh.write(ctx); err != nil {
				sh.log.Warn("server: changes not in the shared state at shutdown; the other replicas do not see them", "err", err)
			}
			sh.finish()
			return
		case <-sh.kick:
		case <-retry.C:
		}
		if sh.round(ctx) {
			fails = 0
			continue
		}
		if ctx.Err() != nil {
			continue
		}
		fails++
		d := stateMinRetry
		for i := 1; i < fails && d < stateMaxRetry; i++ {
			d *= 2
		}
		retry.Reset(min(d, stateMaxRetry))
	}
}

// finish answers everyone still waiting when the server shuts down.
func (sh *sharedState) finish() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.stopped = true
	for _, in := range sh.unwritten {
		for _, w := range in.waiters {
			w <- errStopped
		}
		in.waiters = nil
	}
	for _, w := range sh.syncs {
		w <- errStopped
	}
	sh.syncs = nil
}

// round writes what is unwritten, loads if anything asks for it, then
// tells the listeners. It reports whether everything it tried succeeded.
func (sh *sharedState) round(ctx context.Context) bool {
	sh.mu.Lock()
	events, overflow, resync, owed, syncs := sh.events, sh.overflow, sh.resync, sh.owed, sh.syncs
	sh.events, sh.overflow, sh.resync, sh.owed, sh.syncs = nil, false, false, false, nil
	sh.mu.Unlock()

	werr := sh.write(ctx)
	var lerr error
	if len(events) > 0 || overflow || resync || owed || len(syncs) > 0 {
		if lerr = sh.load(ctx, events, overflow || resync); lerr != nil {
			sh.mu.Lock()
			sh.owed = true // and what it finds is told to the listeners
			sh.mu.Unlock()
		}
	}
	// The listeners are told after the load: what they re-read shows the
	// change they were told of. When the load failed they are told all
	// the same — what they read is then this replica's latest — and the
	// retry tells them again of what it finds.
	if overflow || resync {
		sh.srv.hub.MarkAllDirty()
	} else {
		for _, e := range events {
			sh.srv.hub.PublishRemote(e.Event)
		}
	}
	err := errors.Join(werr, lerr)
	for _, w := range syncs {
		w <- err
	}
	sh.note(err)
	return err == nil
}

// note logs the first failure of a run of them, and the recovery.
func (sh *sharedState) note(err error) {
	switch {
	case err != nil && !sh.failing.Swap(true):
		sh.log.Warn("server: shared state unreachable; this replica keeps serving what it has and retries", "err", err)
	case err != nil:
		sh.log.Debug("server: shared state still unreachable", "err", err)
	case sh.failing.Swap(false):
		sh.log.Info("server: shared state reachable again")
	}
}

// write stores every unwritten change, in the order of their making, and
// publishes on the bus the kinds of the changes that landed. It stops at
// the first failure: the store is then likely down, and the rest wait for
// the retry.
func (sh *sharedState) write(ctx context.Context) error {
	type job struct {
		key string
		in  intent
	}
	sh.mu.Lock()
	jobs := make([]job, 0, len(sh.unwritten))
	for k, in := range sh.unwritten {
		jobs = append(jobs, job{k, *in})
		in.waiters = nil
	}
	sh.mu.Unlock()
	if len(jobs) == 0 {
		return nil
	}
	slices.SortFunc(jobs, func(a, b job) int { return cmp.Compare(a.in.gen, b.in.gen) })
	var err error
	landed := map[switchable][]string{}
	for _, j := range jobs {
		if err == nil {
			octx, cancel := context.WithTimeout(ctx, stateOpTimeout)
			err = sh.st.Set(octx, j.key, j.in.on)
			cancel()
			sh.writes.Add(1)
			if err != nil {
				sh.writeFails.Add(1)
				err = fmt.Errorf("server: write shared state: %w", err)
			} else {
				_, name, _ := strings.Cut(j.key, ":") // as load reads a key
				landed[j.in.sw] = append(landed[j.in.sw], name)
			}
		}
		sh.mu.Lock()
		if cur := sh.unwritten[j.key]; err == nil && cur != nil && cur.gen == j.in.gen {
			delete(sh.unwritten, j.key) // else it is retried, or a newer change is to be written
		}
		sh.nUnwritten.Store(int64(len(sh.unwritten)))
		sh.mu.Unlock()
		for _, w := range j.in.waiters {
			w <- err
		}
	}
	if b := sh.srv.cfg.bus; b != nil {
		for sw, keys := range landed {
			b.Publish(sw.event(keys).onBus())
		}
	}
	return err
}

// load reads the shared state and applies it: this replica's unwritten
// changes stay as they are. The changed items that no event in events
// covers are told to the listeners here; with all, every listener is to be
// told everything afterwards, and none is told here.
func (sh *sharedState) load(ctx context.Context, events []change, all bool) error {
	octx, cancel := context.WithTimeout(ctx, stateOpTimeout)
	m, err := sh.st.Load(octx)
	cancel()
	sh.loads.Add(1)
	if err != nil {
		sh.loadFails.Add(1)
		return fmt.Errorf("server: load shared state: %w", err)
	}
	per := make(map[List]map[string]bool, 3)
	for _, l := range switchedLists() {
		per[l] = make(map[string]bool)
	}
	put := func(key string, on bool) {
		kind, name, ok := strings.Cut(key, ":")
		for _, l := range switchedLists() {
			if ok && kind == kindName(l) {
				per[l][name] = on
				return
			}
		}
	}
	changed := make(map[List][]string)
	sh.mu.Lock()
	for key, on := range m {
		put(key, on)
	}
	for key, in := range sh.unwritten {
		put(key, in.on)
	}
	for _, l := range switchedLists() {
		if keys := sh.srv.switchable(l).applyState(per[l]); len(keys) > 0 {
			changed[l] = keys
		}
	}
	sh.mu.Unlock()
	sh.loaded.Store(true)
	sh.lastLoad.Store(time.Now().UnixNano())
	// What this replica serves changed, so the others' listeners are told
	// again: one of them may have re-read this replica's list, through a
	// balancer, before the change reached it. The replica that applies a
	// change last tells everyone after every other has it, so that their
	// next read agrees; a replica whose load changes nothing tells no one,
	// so the re-telling ends.
	if b := sh.srv.cfg.bus; b != nil {
		for l, keys := range changed {
			b.Publish(sh.srv.switchable(l).event(keys).onBus())
		}
	}
	if all {
		return nil
	}
	for l, keys := range changed {
		sw := sh.srv.switchable(l)
		if keys = uncovered(events, sw.event(nil).Kinds, l, keys); len(keys) > 0 {
			sw.notifyLocal(keys)
		}
	}
	return nil
}

// uncovered returns the keys of items of l (of list kind kind) that no event in events tells
// every caller who may see them of. An event of l's kind without an
// audience or visibility limit covers them all; one limited to the
// callers who may see its keys covers those keys only (a caller who may
// see another changed item is not among its recipients); one limited to
// an audience covers none, since who else may see an item is unknown.
func uncovered(events []change, kind hub.Kind, l List, keys []string) []string {
	named := make(map[string]bool)
	for _, e := range events {
		switch {
		case e.Kinds&kind == 0 || e.Audience != nil:
		case e.Sees == nil:
			return nil
		case e.list == l:
			for _, k := range e.keys {
				named[k] = true
			}
		}
	}
	return slices.DeleteFunc(keys, func(k string) bool { return named[k] })
}
