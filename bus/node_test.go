package bus

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"tidings/hub"
	"tidings/internal/testrig/testbroker"
)

// recorder is a Handler that remembers what it was told.
type recorder struct {
	mu      sync.Mutex
	events  []Event
	resyncs int
}

func (r *recorder) Deliver(e Event) { r.mu.Lock(); r.events = append(r.events, e); r.mu.Unlock() }
func (r *recorder) Resync()         { r.mu.Lock(); r.resyncs++; r.mu.Unlock() }

func (r *recorder) counts() (events, resyncs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.events), r.resyncs
}

func quiet() []Option {
	return []Option{WithHeartbeat(time.Hour), WithLogger(slog.New(slog.DiscardHandler))}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testbroker.WaitFor(t, what, cond)
}

func closeAll(t *testing.T, bs ...Bus) {
	t.Cleanup(func() {
		for _, b := range bs {
			if err := b.Close(); err != nil {
				t.Error(err)
			}
		}
	})
}

// listening joins a quiet bus to l that records what it is told and is
// closed when the test ends.
func listening(t *testing.T, l *Local) (Bus, *recorder) {
	b := New(l.Conn(), quiet()...)
	rec := &recorder{}
	b.Handle(rec)
	closeAll(t, b)
	return b, rec
}

var toolsChanged = Event{Kinds: hub.ToolsList}

// TestNewPeersAreNoGap: a peer first heard of mid-stream is tracked from
// there, and a replica that restarts is a new peer: neither is a gap.
func TestNewPeersAreNoGap(t *testing.T) {
	l := NewLocal()
	a := New(l.Conn(), quiet()...)
	for range 3 {
		a.Publish(toolsChanged) // to no one yet
	}
	waitUntil(t, "A to send", func() bool { return a.Stats().Published == 3 })
	b, rec := listening(t, l)
	waitUntil(t, "B to hear of A", func() bool { return b.Stats().Peers == 1 }) // A answers B's hello
	a.Publish(toolsChanged)
	waitUntil(t, "B to receive A's fourth event", func() bool { n, _ := rec.counts(); return n == 1 })
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	a2 := New(l.Conn(), quiet()...)
	closeAll(t, a2)
	a2.Publish(Event{URI: "res://x"})
	waitUntil(t, "B to receive the restarted A's event", func() bool { n, _ := rec.counts(); return n == 2 })
	if st := b.Stats(); st.Gaps != 0 || st.Resyncs != 0 || st.Peers != 2 {
		t.Errorf("B: %+v, want two peers and no gap", st)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if e := rec.events[0]; e.Seq != 4 || e.Origin != a.Stats().Origin || e.Kinds != hub.ToolsList {
		t.Errorf("first event %+v, want A's fourth", e)
	}
	if e := rec.events[1]; e.Seq != 1 || e.Origin != a2.Stats().Origin || e.URI != "res://x" {
		t.Errorf("second event %+v, want the new origin's first", e)
	}
}

// gated holds every Send until it is opened, like a broker connection
// that stalls; entered is closed when the first Send starts waiting.
type gated struct {
	Conn
	open    chan struct{}
	entered chan struct{}
	once    sync.Once
}

func newGated(c Conn) *gated {
	return &gated{Conn: c, open: make(chan struct{}), entered: make(chan struct{})}
}

func (g *gated) Send(ctx context.Context, msg []byte) error {
	g.once.Do(func() { close(g.entered) })
	select {
	case <-g.open:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.Conn.Send(ctx, msg)
}

// TestQueueOverflow: Publish does not wait on a stalled connection; what
// does not fit in the queue is dropped and counted, and the peers find
// the gap at the next event and re-notify.
func TestQueueOverflow(t *testing.T) {
	l := NewLocal()
	b := New(l.Conn(), quiet()...)
	rec := &recorder{}
	b.Handle(rec)
	g := newGated(l.Conn())
	a := New(g, append(quiet(), WithQueue(2))...)
	closeAll(t, a, b)
	<-g.entered // the hello is stuck: nothing more leaves the queue
	for range 10 {
		a.Publish(toolsChanged) // returns at once although nothing can be sent
	}
	if st := a.Stats(); st.Dropped != 8 {
		t.Errorf("A dropped %d of 10 events with room for 2, want 8", st.Dropped)
	}
	close(g.open)
	waitUntil(t, "B to receive the two queued events", func() bool { n, _ := rec.counts(); return n == 2 })
	a.Publish(toolsChanged)
	waitUntil(t, "B to receive the next", func() bool { n, _ := rec.counts(); return n == 3 })
	if _, resyncs := rec.counts(); resyncs != 1 {
		t.Errorf("B re-notified %d times, want once", resyncs)
	}
	if st := b.Stats(); st.Gaps != 1 || st.Received != 3 {
		t.Errorf("B: %+v, want one gap", st)
	}
}

// TestUnreadableMessages: a message that cannot be read may have been a
// change, so it is re-notified.
func TestUnreadableMessages(t *testing.T) {
	l := NewLocal()
	b, rec := listening(t, l)
	raw := l.Conn()
	defer raw.Close()
	if err := raw.Send(context.Background(), []byte(`{"v":1,"type":"change"`)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "B to re-notify", func() bool { _, r := rec.counts(); return r == 1 })
	if st := b.Stats(); st.Invalid != 1 || st.Received != 0 {
		t.Errorf("B: %+v", st)
	}
}

// TestCloseSaysGoodbye: Close sends what is queued and a last heartbeat
// (so a peer that missed the last event finds out), and the bus takes no
// events after it.
func TestCloseSaysGoodbye(t *testing.T) {
	l := NewLocal()
	b, rec := listening(t, l)
	g := newGated(l.Conn())
	a := New(g, quiet()...)
	a.Publish(toolsChanged)
	a.Publish(toolsChanged)
	close(g.open)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	a.Publish(toolsChanged)
	if st := a.Stats(); st.Published != 2 || st.Dropped != 1 || st.Connected {
		t.Errorf("A after Close: %+v, want both events sent and the later one dropped", st)
	}
	waitUntil(t, "B to receive both", func() bool { n, _ := rec.counts(); return n == 2 })

	// A replica whose events are stuck when it closes drops them after
	// the flush timeout, and its goodbye still tells the peers they
	// missed them.
	s := &stalling{Conn: l.Conn()}
	c := New(s, quiet()...)
	waitUntil(t, "B to hear C's hello", func() bool { return b.Stats().Peers == 2 })
	c.Publish(toolsChanged)
	c.Publish(toolsChanged)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.Dropped != 2 {
		t.Errorf("C after Close: %+v, want both events dropped", st)
	}
	waitUntil(t, "B to see the gap C's goodbye reveals", func() bool { return b.Stats().Gaps == 1 })
	if _, resyncs := rec.counts(); resyncs != 1 {
		t.Errorf("B re-notified %d times, want once", resyncs)
	}
}

// stalling is a connection on which changes never get through (each Send
// waits for its context to end) while heartbeats do.
type stalling struct{ Conn }

func (s *stalling) Send(ctx context.Context, msg []byte) error {
	if m, err := decode(nil, msg); err == nil && !m.beat {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Conn.Send(ctx, msg)
}

// TestBackoff: reconnect delays double up to the cap, each drawn from
// the upper half of its step.
func TestBackoff(t *testing.T) {
	c := newConfig([]Option{WithBackoff(10*time.Millisecond, 80*time.Millisecond)})
	for n, step := range []time.Duration{10, 20, 40, 80, 80, 80} {
		step *= time.Millisecond
		for range 20 {
			if d := c.Backoff(n + 1); d < step/2 || d > step {
				t.Fatalf("attempt %d waits %v, want within [%v, %v]", n+1, d, step/2, step)
			}
		}
	}
}

// silentConn is a connection a test can make deaf and mute at once
// without it noticing: nothing it sends arrives, nothing arrives to it,
// and it reports no loss, as a subscription that stopped delivering.
type silentConn struct {
	Conn
	mu   sync.Mutex
	mute bool
}

func (c *silentConn) setMute(m bool) { c.mu.Lock(); c.mute = m; c.mu.Unlock() }

func (c *silentConn) Send(ctx context.Context, msg []byte) error {
	c.mu.Lock()
	mute := c.mute
	c.mu.Unlock()
	if mute {
		return nil
	}
	return c.Conn.Send(ctx, msg)
}

// TestSilentPeer: a peer that stops being heard without a word is
// noticed after three heartbeat intervals: re-notified for and no longer
// counted; when it is heard again, re-notified for once more.
func TestSilentPeer(t *testing.T) {
	l := NewLocal()
	opts := append(quiet(), WithHeartbeat(50*time.Millisecond))
	b := New(l.Conn(), opts...)
	rec := &recorder{}
	b.Handle(rec)
	sc := &silentConn{Conn: l.Conn()}
	a := New(sc, opts...)
	closeAll(t, a, b)
	waitUntil(t, "B to hear of A", func() bool { return b.Stats().Peers == 1 })
	_, before := rec.counts()
	sc.setMute(true)
	waitUntil(t, "B to notice A's silence", func() bool { return b.Stats().Peers == 0 })
	// The re-notification follows the silence, on B's own schedule.
	waitUntil(t, "B to re-notify for A's silence", func() bool { _, r := rec.counts(); return r > before })
	_, silent := rec.counts()
	sc.setMute(false)
	waitUntil(t, "B to hear A again", func() bool { return b.Stats().Peers == 1 })
	waitUntil(t, "B to re-notify for what A said while unheard", func() bool { _, r := rec.counts(); return r > silent })
}

// TestSequencePoisoning: a message with a peer's origin and a number far
// ahead of its real ones (forged or garbled) does not make the peer's
// later events stale: the jump back is taken as a restart.
func TestSequencePoisoning(t *testing.T) {
	l := NewLocal()
	b := New(l.Conn(), quiet()...)
	rec := &recorder{}
	b.Handle(rec)
	a := New(l.Conn(), quiet()...)
	closeAll(t, a, b)
	waitUntil(t, "B to hear of A", func() bool { return b.Stats().Peers == 1 })
	raw := l.Conn()
	defer raw.Close()
	msg, err := encode(nil, a.Stats().Origin, math.MaxUint64-1, time.Now(), true, Event{})
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Send(context.Background(), msg); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "B to take the forged number", func() bool { return b.Stats().Gaps == 1 })
	a.Publish(toolsChanged)
	waitUntil(t, "B to receive A's event", func() bool { n, _ := rec.counts(); return n == 1 })
	if st := b.Stats(); st.Stale != 0 || st.Gaps != 2 {
		t.Errorf("B: %+v, want A's event taken as a restart", st)
	}
}

// TestResyncsMerged: a flood of unreadable messages makes one
// re-notification at once and one trailing, not one each.
func TestResyncsMerged(t *testing.T) {
	l := NewLocal()
	b, rec := listening(t, l)
	raw := l.Conn()
	defer raw.Close()
	for range 20 {
		if err := raw.Send(context.Background(), []byte(`not json`)); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "B to read all", func() bool { return b.Stats().Invalid == 20 })
	waitUntil(t, "the trailing re-notification", func() bool { _, r := rec.counts(); return r >= 2 })
	if _, r := rec.counts(); r > 3 {
		t.Errorf("B re-notified %d times for 20 unreadable messages, want them merged", r)
	}
}

// TestTaskEventTravels: an event that names only a task (and who may
// hear of it) reaches the other replicas as it was published.
func TestTaskEventTravels(t *testing.T) {
	l := NewLocal()
	a, _ := listening(t, l)
	_, rec := listening(t, l)
	a.Publish(Event{Task: "T1", Audience: []string{"alice"}})
	waitUntil(t, "B to hear of the task", func() bool { n, _ := rec.counts(); return n == 1 })
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if e := rec.events[0]; e.Task != "T1" || len(e.Audience) != 1 || e.Audience[0] != "alice" || e.Kinds != 0 || e.URI != "" {
		t.Errorf("B heard %+v", e)
	}
}

// located is a Conn that says which broker server it is on.
type located struct {
	Conn
	node      string
	failovers int64
}

func (l located) Node() string     { return l.node }
func (l located) Failovers() int64 { return l.failovers }

// TestStatsNode: Stats names the broker server a Conn says it is on, and
// its failovers; a Conn that says nothing leaves both empty.
func TestStatsNode(t *testing.T) {
	l := NewLocal()
	b := New(located{l.Conn(), "n2 (nats://10.0.0.2:4222)", 3}, quiet()...)
	plain := New(l.Conn(), quiet()...)
	closeAll(t, b, plain)
	if st := b.Stats(); st.Node != "n2 (nats://10.0.0.2:4222)" || st.Failovers != 3 {
		t.Errorf("node %q, failovers %d; want what the connection says", st.Node, st.Failovers)
	}
	if st := plain.Stats(); st.Node != "" || st.Failovers != 0 {
		t.Errorf("node %q, failovers %d from a connection that says nothing", st.Node, st.Failovers)
	}
}
