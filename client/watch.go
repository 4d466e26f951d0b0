package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"
	"go.opentelemetry.io/otel/trace"

	"tidings/internal/tracectx"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// WatchOptions says what a Watcher follows and how it heals.
type WatchOptions struct {
	// Tools, Prompts and Resources follow the lists; Resources covers
	// resources/list and resources/templates/list.
	Tools, Prompts, Resources bool
	// URIs are resources whose content to follow.
	URIs []string
	// OnAnnounce, when set, receives each change the server announces on
	// the listen as it arrives — after the cache has dropped what it
	// announces, before the re-read that finds out what really changed
	// (which OnEvent then reports, if anything did, with a Since no later
	// than the announcement's At) — with Kind and URI set and no items: a
	// proxy passes the word on at once. It runs on the connection's
	// reader and must not block.
	OnAnnounce func(Event)
	// OnEvent receives every event, in order, from the watcher's own
	// goroutine, never from the connection's reader: a slow callback holds
	// up the watcher's re-reads (which wait for room among the 64 events
	// not yet delivered), never the client's other requests.
	OnEvent func(Event)
	// PollInterval is how often kinds the server would not subscribe us to
	// are re-read (default 30s; jittered, and backed off on errors). A poll
	// goes through the cache, so an answer still inside its ttlMs is not
	// fetched again: the effective interval is at least the server's TTL.
	PollInterval time.Duration
	// MinBackoff and MaxBackoff bound the reconnect delay after a drop
	// (defaults 250ms and 30s; full jitter).
	MinBackoff, MaxBackoff time.Duration
}

// EventKind says what an Event reports.
type EventKind int

// The kinds of watch events.
const (
	// ToolsChanged, PromptsChanged, ResourcesChanged and TemplatesChanged
	// report a list whose content really changed (Added, Removed, Changed
	// name the items: tool and prompt names, resource URIs, templates).
	ToolsChanged EventKind = iota
	PromptsChanged
	ResourcesChanged
	TemplatesChanged
	// ResourceUpdated reports that a followed resource's content changed.
	ResourceUpdated
	// Connected reports an acknowledged listen; Granted says what the
	// server agreed to send (the rest is polled).
	Connected
	// Disconnected reports the end of a listen: Graceful when the server
	// closed it on purpose, otherwise a drop after which cached entries are
	// unknown until reconciled.
	Disconnected
	// ReadFailed reports a re-read that failed (Err says why).
	ReadFailed
)

var eventKindNames = [...]string{"tools_changed", "prompts_changed", "resources_changed", "templates_changed",
	"resource_updated", "connected", "disconnected", "read_failed"}

// String names the kind; a value outside the known kinds (a zero value
// from a newer or corrupted source) is printed as EventKind(n), never a
// panic.
func (k EventKind) String() string {
	if k >= 0 && int(k) < len(eventKindNames) {
		return eventKindNames[k]
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is one thing a Watcher observed.
type Event struct {
	Kind EventKind
	// At is when the event was reported.
	At time.Time
	// Since, on a change, is when the watcher first learnt the topic
	// might have changed — a notification, a poll or a reconnection —
	// so that At - Since is how long finding out what changed took.
	Since    time.Time
	URI      string
	Added    []string
	Removed  []string
	Changed  []string
	Granted  mcp.SubscriptionFilter
	Graceful bool
	Err      error
	// TraceParent, on a change or its announcement, is the W3C trace
	// context the server's notification of it carried (a traced server
	// stamps each change), the change's trace: with WithTracerProvider,
	// the re-read it prompted is a span of that trace too. Empty when the
	// notification carried none, or nothing was announced (a poll, a
	// reconnection).
	TraceParent string
	// ChangedAt, on a change or its announcement, is when the change
	// happened by the server's clock, as its notification said (a server
	// that traces or measures its changes says so): At - ChangedAt is the
	// age of the change when it was reported, between the server's clock
	// and this one. Zero when the notification did not say.
	ChangedAt time.Time
}

// ConnState is the state of a Watcher's listen stream.
type ConnState int32

// Listen stream states.
const (
	Connecting ConnState = iota
	Live
	Polling // the server has no listen; everything is polled
	Down
)

var connStateNames = [...]string{"connecting", "live", "polling", "down"}

// String names the state; an unknown value is printed as ConnState(n).
func (s ConnState) String() string {
	if s >= 0 && int(s) < len(connStateNames) {
		return connStateNames[s]
	}
	return "ConnState(" + strconv.Itoa(int(s)) + ")"
}

// WatchStats counts what a Watcher did, for coalescing measurements.
type WatchStats struct {
	Notifications int64 // change notifications received
	Rereads       int64 // re-reads performed
	Reconnects    int64 // listens opened after the first
}

// Watcher keeps one subscriptions/listen open on a server and the
// client's cache honest: notifications invalidate at once and trigger a
// coalesced re-read through the normal path; a dropped stream marks what
// it covered unknown, reconnects with capped exponential backoff and full
// jitter, and reconciles by re-reading everything it covers; only content
// that really changed is reported.
type Watcher struct {
	c      *Client
	opts   WatchOptions
	cancel context.CancelFunc
	wg     sync.WaitGroup

	state atomic.Int32
	stats struct{ notes, rereads, reconnects atomic.Int64 }

	mu    sync.Mutex
	dirty map[string]time.Time // topics to re-read, and since when
	// stamps are what the latest notification of each dirty topic said
	// of its change: its trace context and time.
	stamps map[string]changeStamp
	polled map[string]bool
	// pollFails counts the consecutive failed re-reads of each polled
	// topic; polling slows down while any of them keeps failing.
	pollFails map[string]int
	granted   mcp.SubscriptionFilter
	seen      map[string]map[string][32]byte // topic → item key → content hash
	// reported says the current outage has been reported; only the listen
	// loop's goroutine uses it.
	reported bool
	// told stands in for the connection's notes on a transport that
	// keeps none (one from outside the package).
	told   peerNotes
	wake   chan struct{}
	events chan Event
}

// Watch starts a Watcher. It runs until ctx ends or Close is called.
func (c *Client) Watch(ctx context.Context, opts WatchOptions) *Watcher {
	if opts.PollInterval <= 0 {
		opts.PollInterval = 30 * time.Second
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = 250 * time.Millisecond
	}
	if opts.MaxBackoff <= 0 {
		opts.MaxBackoff = 30 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Watcher{
		c: c, opts: opts, cancel: cancel,
		dirty: map[string]time.Time{}, stamps: map[string]changeStamp{}, polled: map[string]bool{}, pollFails: map[string]int{},
		seen: map[string]map[string][32]byte{},
		wake: make(chan struct{}, 1), events: make(chan Event, 64),
	}
	w.wg.Add(4)
	go func() { defer w.wg.Done(); w.listenLoop(ctx) }()
	go func() { defer w.wg.Done(); w.rereadLoop(ctx) }()
	go func() { defer w.wg.Done(); w.pollLoop(ctx) }()
	go func() { defer w.wg.Done(); w.deliverLoop(ctx) }()
	return w
}

// Close stops the watcher and waits for its goroutines.
func (w *Watcher) Close() {
	w.cancel()
	w.wg.Wait()
}

// State returns the listen stream's state.
func (w *Watcher) State() ConnState { return ConnState(w.state.Load()) }

// Granted returns what the server agreed to notify about.
func (w *Watcher) Granted() mcp.SubscriptionFilter {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.granted
}

// Stats returns counters of the watcher's work so far.
func (w *Watcher) Stats() WatchStats {
	return WatchStats{Notifications: w.stats.notes.Load(), Rereads: w.stats.rereads.Load(), Reconnects: w.stats.reconnects.Load()}
}

// filter is the subscription filter the options ask for.
func (w *Watcher) filter() mcp.SubscriptionFilter {
	return mcp.SubscriptionFilter{
		ToolsListChanged:      w.opts.Tools,
		PromptsListChanged:    w.opts.Prompts,
		ResourcesListChanged:  w.opts.Resources,
		ResourceSubscriptions: w.opts.URIs,
	}
}

// filterTopics lists the cache topics a subscription filter covers: the
// one mapping from what is asked of (or granted by) a listen to what it
// keeps honest in the cache.
func filterTopics(f mcp.SubscriptionFilter) []string {
	var t []string
	for _, l := range mcp.Lists() {
		if f.Wants(l) {
			t = append(t, listTopics(l)...)
		}
	}
	for _, u := range f.ResourceSubscriptions {
		t = append(t, topicResource+u)
	}
	return t
}

// topics lists every cache topic the options cover.
func (w *Watcher) topics() []string { return filterTopics(w.filter()) }

func (w *Watcher) covers(topic string) bool { return slices.Contains(w.topics(), topic) }

func (w *Watcher) emit(ctx context.Context, e Event) {
	e.At = w.c.cfg.now()
	select {
	case w.events <- e:
	case <-ctx.Done():
	}
}

func (w *Watcher) deliverLoop(ctx context.Context) {
	for {
		select {
		case e := <-w.events:
			if w.opts.OnEvent != nil {
				w.opts.OnEvent(e)
			}
		case <-ctx.Done():
			return
		}
	}
}

// markDirty schedules topics for a re-read; bursts coalesce because the
// set only records that a topic is dirty, not how often.
func (w *Watcher) markDirty(topics ...string) { w.markDirtyAt(w.c.cfg.now(), topics...) }

// markDirtyAt is markDirty for what was learnt at now: a re-read's event
// then says since when (Event.Since).
func (w *Watcher) markDirtyAt(now time.Time, topics ...string) {
	w.mu.Lock()
	for _, t := range topics {
		if _, ok := w.dirty[t]; !ok {
			w.dirty[t] = now
		}
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// backoff yields capped exponential delays with full jitter.
type backoff struct {
	min, max time.Duration
	n        int
}

func (b *backoff) next() time.Duration {
	d := b.min << min(b.n, 20)
	if d > b.max || d <= 0 {
		d = b.max
	}
	b.n++
	return time.Duration(rand.Int64N(int64(d)) + 1)
}

func (b *backoff) reset() { b.n = 0 }

// proven reports whether a stream that opened at since has stayed up long
// enough to reset the reconnect backoff: MaxBackoff. A stream the server
// ends, or that breaks, sooner counts as a failed attempt, so a server
// that accepts listens and ends them at once (one shutting down, or
// behind a proxy that cuts streams) is retried ever more slowly, not in a
// tight loop; a stream that lived longer is followed by a quick reconnect.
func (w *Watcher) proven(since time.Time) bool {
	return time.Since(since) >= w.opts.MaxBackoff
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (w *Watcher) listenLoop(ctx context.Context) {
	w.c.cache.cover.register(w)
	defer w.c.cache.cover.remove(w)
	bo := &backoff{min: w.opts.MinBackoff, max: w.opts.MaxBackoff}
	want := w.filter()
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			w.stats.reconnects.Add(1)
		}
		w.state.Store(int32(Connecting))
		d, err := w.c.ensureEra(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.state.Store(int32(Down))
			w.emit(ctx, Event{Kind: Disconnected, Err: err})
			if errors.Is(err, ErrClosed) {
				<-ctx.Done() // closed, or a server that cannot come back
				return
			}
			if !sleepCtx(ctx, bo.next()) {
				return
			}
			continue
		}
		if !d.follow(ctx, w, want, bo) {
			return
		}
	}
}

// listen follows a 2026-07-28 server for one connection: one
// subscriptions/listen, read until it ends; what the grant leaves out is
// polled. It reports whether the loop should go on.
func (w *Watcher) listen(ctx context.Context, want mcp.SubscriptionFilter, bo *backoff) bool {
	var acked atomic.Bool
	var ackedAt atomic.Int64 // unix nanoseconds
	acks := w.handleAcks(ctx, want)
	onMsg := func(m *jsonrpc.Message) {
		if m.Method == mcp.NotifyAcknowledged {
			var p struct {
				Notifications mcp.SubscriptionFilter `json:"notifications"`
			}
			_ = jsonrpc.UnmarshalParams(m.Params, &p)
			ackedAt.Store(time.Now().UnixNano())
			acked.Store(true)
			acks.put(p.Notifications)
			return
		}
		w.notification(m, tieOf(m))
	}
	_, err := w.c.do(ctx, mcp.MethodListen, map[string]any{"notifications": want}, callOpts{onMsg: onMsg, noLimit: true})
	acks.stop()
	w.c.cache.cover.down(w)
	if ctx.Err() != nil {
		return false
	}
	if acked.Load() {
		w.reported = false
		if w.proven(time.Unix(0, ackedAt.Load())) {
			bo.reset()
		}
	}
	var rpc *jsonrpc.Error
	switch {
	case errors.Is(err, ErrClosed):
		// The client was closed, or its server process is gone: no
		// attempt can succeed, so stop instead of retrying forever
		// (reporting the end unless the drop before this was).
		w.state.Store(int32(Down))
		w.c.cache.markUnknown(w.topics()...)
		if !w.reported {
			w.emit(ctx, Event{Kind: Disconnected, Err: err})
		}
		<-ctx.Done()
		return false
	case err == nil || errors.Is(err, errServerEnded):
		// The server ended the listen on purpose: nothing was missed so
		// far. Reconnect politely, then reconcile what may change in
		// between.
		w.state.Store(int32(Down))
		w.emit(ctx, Event{Kind: Disconnected, Graceful: true})
		w.reported = true
		return sleepCtx(ctx, bo.next())
	case errors.As(err, &rpc) && rpc.Code == jsonrpc.CodeMethodNotFound && !acked.Load():
		// No listen here: poll everything. Any other error before the
		// acknowledgement (an internal error, a server overloaded for a
		// moment) is treated as a drop below: backed off and retried.
		w.state.Store(int32(Polling))
		w.setPolled(w.topics())
		w.markDirty(w.topics()...)
		<-ctx.Done()
		return false
	default:
		// An abrupt drop: changes may have been missed.
		w.state.Store(int32(Down))
		w.c.cache.markUnknown(w.topics()...)
		w.emit(ctx, Event{Kind: Disconnected, Err: err})
		w.reported = true
		return sleepCtx(ctx, bo.next())
	}
}

// tieOf tells whether a notification on a 2026-07-28 listen names its
// subscription.
func tieOf(m *jsonrpc.Message) tie {
	if tagged(m) {
		return tied
	}
	return untagged
}

// ackHandler takes a listen's acknowledgements off the transport's
// reader, which serves every request on stdio and so must never wait for
// the event callback. Its goroutine handles them (emitting Connected may
// wait for the callback); acknowledgements that arrive meanwhile coalesce
// into the latest.
type ackHandler struct {
	acks chan mcp.SubscriptionFilter // holds at most the latest
	quit chan struct{}
	done chan struct{}
}

// handleAcks starts the goroutine that handles one listen's
// acknowledgements; stop ends it.
func (w *Watcher) handleAcks(ctx context.Context, want mcp.SubscriptionFilter) *ackHandler {
	h := &ackHandler{acks: make(chan mcp.SubscriptionFilter, 1), quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(h.done)
		for {
			select {
			case got := <-h.acks:
				w.acknowledged(ctx, want, got)
			case <-h.quit:
				select {
				case got := <-h.acks:
					w.acknowledged(ctx, want, got)
				default:
				}
				return
			}
		}
	}()
	return h
}

// put hands over an acknowledgement without blocking, replacing one not
// yet handled. The reader is the only caller.
func (h *ackHandler) put(got mcp.SubscriptionFilter) {
	for {
		select {
		case h.acks <- got:
			return
		default:
		}
		select {
		case <-h.acks:
		default:
		}
	}
}

// stop waits until the acknowledgement handed over last is handled (so
// that Connected comes before whatever the listen's end reports) and ends
// the goroutine.
func (h *ackHandler) stop() {
	close(h.quit)
	<-h.done
}

// acknowledged compares the grant with the request: what was granted is
// followed by notifications; the rest is polled. Then it reconciles.
func (w *Watcher) acknowledged(ctx context.Context, want, got mcp.SubscriptionFilter) {
	granted := filterTopics(got)
	var polled []string
	for _, t := range filterTopics(want) {
		if !slices.Contains(granted, t) {
			polled = append(polled, t)
		}
	}
	w.mu.Lock()
	w.granted = got
	w.mu.Unlock()
	w.setPolled(polled)
	// Before the reads below: what they bring back is heard of from now on.
	var heard []string
	for _, t := range granted {
		if w.covers(t) {
			heard = append(heard, t)
		}
	}
	w.c.cache.cover.acknowledged(w, w.c.cfg.now(), heard)
	w.state.Store(int32(Live))
	w.emit(ctx, Event{Kind: Connected, Granted: got})
	// Listen first, then read: whatever changed before the ack is seen by
	// this read, whatever changes after it is announced. The read must go
	// to the server: an answer cached before the ack, however fresh its
	// TTL says it is, may predate a change nobody could announce (one made
	// before the first listen, or between a graceful end and this one).
	w.c.cache.invalidate(w.topics()...)
	w.markDirty(w.topics()...)
}

func (w *Watcher) setPolled(topics []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polled = map[string]bool{}
	for _, t := range topics {
		w.polled[t] = true
	}
}

// tie says how a change notification is tied to the listen it arrived
// on.
type tie int

const (
	// tied: the server sent it for the listen, as it agreed to.
	tied tie = iota
	// untagged: it names no subscription (2026-07-28), which the server
	// must do.
	untagged
	// undeclared: on a 2025-11-25 session, it announces what the
	// session's capabilities and subscriptions leave out.
	undeclared
)

// notification turns a change notification into an invalidation and a
// scheduled re-read. It is a reason to re-read, never the new state. A
// notification the server did not tie to the listen counts all the same,
// and what it covers is recorded as heard untagged.
func (w *Watcher) notification(m *jsonrpc.Message, how tie) {
	var topics []string
	if l, ok := mcp.ChangedList(m.Method); ok {
		topics = listTopics(l)
	} else if uri, ok := updatedURI(m); ok {
		topics = []string{topicResource + uri}
		if !w.covers(topics[0]) {
			// The update may name a sub-resource of one we follow (the
			// schema allows it): that followed resource changed too.
			for _, u := range w.opts.URIs {
				if subResource(uri, u) {
					topics = append(topics, topicResource+u)
				}
			}
		}
	} else {
		return
	}
	w.stats.notes.Add(1)
	w.c.cache.invalidate(topics...)
	var covered []string
	for _, t := range topics {
		if w.covers(t) {
			covered = append(covered, t)
		}
	}
	if how != tied && len(covered) > 0 {
		// Before the re-read: whoever sees its outcome sees this too.
		w.c.cache.cover.heardUntagged(w, covered)
		w.reportUntied(m.Method, how)
	}
	now := w.c.cfg.now()
	st := stampOf(m)
	if w.opts.OnAnnounce != nil {
		for _, t := range covered {
			e := announced(t, now)
			e.TraceParent, e.ChangedAt = st.traceParent, st.at
			w.opts.OnAnnounce(e)
		}
	}
	if st != (changeStamp{}) {
		w.mu.Lock()
		for _, t := range covered {
			w.stamps[t] = st
		}
		w.mu.Unlock()
	}
	w.markDirtyAt(now, covered...)
}

// changeStamp is what a notification says of its change beside the news
// of it: its trace context and when it happened.
type changeStamp struct {
	traceParent string
	at          time.Time
}

// stampOf reads a notification's changeStamp from its _meta; a trace
// context that is not well formed is left out.
func stampOf(m *jsonrpc.Message) changeStamp {
	if !bytes.Contains(m.Params, []byte(`"`+mcp.MetaTraceParent+`"`)) && !bytes.Contains(m.Params, []byte(`"`+mcp.MetaChangedAt+`"`)) {
		return changeStamp{} // the common case, told without decoding
	}
	var p struct {
		Meta struct {
			TraceParent string    `json:"traceparent"`
			ChangedAt   time.Time `json:"io.github.tidings/changedAt"`
		} `json:"_meta"`
	}
	if jsonrpc.UnmarshalParams(m.Params, &p) != nil {
		return changeStamp{}
	}
	st := changeStamp{at: p.Meta.ChangedAt}
	if p.Meta.TraceParent != "" {
		sc := trace.SpanContextFromContext(tracectx.Extract(context.Background(), p.Meta.TraceParent, ""))
		if sc.IsValid() {
			st.traceParent = p.Meta.TraceParent
		}
	}
	return st
}

// announced is the event that tells a change of topic was announced.
func announced(topic string, at time.Time) Event {
	e := Event{At: at, Since: at}
	switch topic {
	case topicTools:
		e.Kind = ToolsChanged
	case topicPrompts:
		e.Kind = PromptsChanged
	case topicResources:
		e.Kind = ResourcesChanged
	case topicTemplates:
		e.Kind = TemplatesChanged
	default:
		e.Kind, e.URI = ResourceUpdated, strings.TrimPrefix(topic, topicResource)
	}
	return e
}

// reportUntied logs, once per connection, that the server sends change
// notifications it did not tie to the listen.
func (w *Watcher) reportUntied(method string, how tie) {
	notes := &w.told
	if n, ok := w.c.t.(noting); ok {
		notes = n.toldOfPeer()
	}
	if !notes.first(strconv.Itoa(int(how))) {
		return
	}
	if how == undeclared {
		w.c.cfg.logger.Info("mcp: the server announces changes its capabilities do not declare; they are followed", "notification", method)
		return
	}
	w.c.cfg.logger.Warn("mcp: the server omits the subscription id from change notifications; each one counts for every listen it could belong to", "notification", method)
}

// subResource reports whether uri names a part of the resource at parent:
// parent followed by a path, fragment or query boundary, or any longer URI
// under a parent that ends in "/". A bare string prefix is not enough:
// file:///a/bc is not part of file:///a/b.
func subResource(uri, parent string) bool {
	if len(uri) <= len(parent) || !strings.HasPrefix(uri, parent) {
		return false
	}
	if strings.HasSuffix(parent, "/") {
		return true
	}
	switch uri[len(parent)] {
	case '/', '#', '?':
		return true
	}
	return false
}

func (w *Watcher) pollLoop(ctx context.Context) {
	interval := w.opts.PollInterval
	for {
		// ±20% jitter keeps many clients from polling in step, and failures
		// double the interval (up to 16 times) so that a server in trouble
		// is not polled at full speed (CACHE-6).
		w.mu.Lock()
		fails := 0
		for t := range w.polled {
			fails = max(fails, w.pollFails[t])
		}
		w.mu.Unlock()
		d := jitter(interval)
		d <<= min(fails, 4)
		if !sleepCtx(ctx, d) {
			return
		}
		w.mu.Lock()
		var topics []string
		for t := range w.polled {
			topics = append(topics, t)
		}
		w.mu.Unlock()
		if len(topics) > 0 {
			w.markDirty(topics...)
		}
	}
}

func (w *Watcher) rereadLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		}
		w.mu.Lock()
		topics := make([]string, 0, len(w.dirty))
		since := make(map[string]time.Time, len(w.dirty))
		for t, at := range w.dirty {
			topics = append(topics, t)
			since[t] = at
		}
		clear(w.dirty)
		var stamps map[string]changeStamp // most notifications carry none
		if len(w.stamps) > 0 {
			stamps, w.stamps = w.stamps, map[string]changeStamp{}
		}
		w.mu.Unlock()
		slices.Sort(topics)
		for _, t := range topics {
			if ctx.Err() != nil {
				return
			}
			w.reread(ctx, t, since[t], stamps[t])
		}
	}
}

// reread reads one topic through the normal path and reports what changed
// by content since the last read.
func (w *Watcher) reread(ctx context.Context, topic string, since time.Time, st changeStamp) {
	w.stats.rereads.Add(1)
	if st.traceParent != "" && w.c.cfg.tracer != nil {
		// The re-read joins the trace of the change that prompted it.
		ctx = tracectx.Extract(ctx, st.traceParent, "")
	}
	items := map[string][32]byte{}
	var kind EventKind
	var err error
	// Each item is encoded straight into one hasher: a list re-read on
	// every change is not encoded into a buffer of its own item by item.
	h := sha256.New()
	var sum [32]byte
	hash := func(v any) [32]byte {
		h.Reset()
		_ = json.MarshalWrite(h, v, json.Deterministic(true))
		return [32]byte(h.Sum(sum[:0]))
	}
	switch {
	case topic == topicTools:
		kind = ToolsChanged
		var ts []mcp.Tool
		if ts, err = w.c.Tools(ctx); err == nil {
			for _, t := range ts {
				items[t.Name] = hash(t)
			}
		}
	case topic == topicPrompts:
		kind = PromptsChanged
		var ps []mcp.Prompt
		if ps, err = w.c.Prompts(ctx); err == nil {
			for _, p := range ps {
				items[p.Name] = hash(p)
			}
		}
	case topic == topicResources:
		kind = ResourcesChanged
		var rs []mcp.Resource
		if rs, err = w.c.Resources(ctx); err == nil {
			for _, r := range rs {
				items[r.URI] = hash(r)
			}
		}
	case topic == topicTemplates:
		kind = TemplatesChanged
		var ts []mcp.ResourceTemplate
		if ts, err = w.c.ResourceTemplates(ctx); err == nil {
			for _, t := range ts {
				items[t.URITemplate] = hash(t)
			}
		}
	default:
		kind = ResourceUpdated
		uri := topic[len(topicResource):]
		var r *mcp.ReadResourceResult
		if r, err = w.c.ReadResource(ctx, uri); err == nil {
			items[uri] = hash(r.Contents)
		} else {
			var rpc *jsonrpc.Error
			if errors.As(err, &rpc) && (rpc.Code == jsonrpc.CodeInvalidParams || rpc.Code == mcp.CodeLegacyResourceNotFound) {
				err = nil // gone: an empty content set
			}
		}
	}
	w.mu.Lock()
	if err == nil {
		delete(w.pollFails, topic)
	} else if w.polled[topic] && ctx.Err() == nil {
		w.pollFails[topic]++
	}
	w.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			w.emit(ctx, Event{Kind: ReadFailed, Err: err})
		}
		return
	}
	w.mu.Lock()
	prev, had := w.seen[topic]
	w.seen[topic] = items
	w.mu.Unlock()
	var e Event
	e.Kind = kind
	for k, h := range items {
		ph, ok := prev[k]
		switch {
		case !ok:
			e.Added = append(e.Added, k)
		case ph != h:
			e.Changed = append(e.Changed, k)
		}
	}
	for k := range prev {
		if _, ok := items[k]; !ok {
			e.Removed = append(e.Removed, k)
		}
	}
	if had && len(e.Added)+len(e.Removed)+len(e.Changed) == 0 {
		return
	}
	slices.Sort(e.Added)
	slices.Sort(e.Removed)
	slices.Sort(e.Changed)
	if kind == ResourceUpdated {
		e.URI = topic[len(topicResource):]
	}
	e.Since, e.TraceParent, e.ChangedAt = since, st.traceParent, st.at
	w.emit(ctx, e)
}
