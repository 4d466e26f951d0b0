package brokers_test

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"tidings/bus"
	"tidings/hub"
	"tidings/internal/testrig/testbroker"
)

// events is a Handler that keeps what it is told.
type events struct {
	mu      sync.Mutex
	got     []bus.Event
	resyncs int
}

func (h *events) Deliver(e bus.Event) { h.mu.Lock(); h.got = append(h.got, e); h.mu.Unlock() }
func (h *events) Resync()             { h.mu.Lock(); h.resyncs++; h.mu.Unlock() }

func (h *events) snapshot() ([]bus.Event, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]bus.Event(nil), h.got...), h.resyncs
}

// TestOnlySignedMessagesAreBelieved: on every broker, a replica with the
// shared secret hears the replicas that have it, and drops and counts
// what a replica without it or with another sends, hello included, with
// no re-notification.
func TestOnlySignedMessagesAreBelieved(t *testing.T) {
	forEachBus(t, func(t *testing.T, br broker) {
		secret := []byte("the replicas' shared secret, 32+ bytes")
		opts := func(more ...bus.Option) []bus.Option {
			return append([]bus.Option{bus.WithHeartbeat(time.Hour), bus.WithLogger(slog.New(slog.DiscardHandler))}, more...)
		}
		newBus := func(more ...bus.Option) bus.Bus {
			b := bus.New(br.conn(t, opts(more...)...), opts(more...)...)
			t.Cleanup(func() {
				if err := b.Close(); err != nil {
					t.Error(err)
				}
			})
			return b
		}
		b := newBus(bus.WithSecret(secret))
		h := &events{}
		b.Handle(h)
		a := newBus(bus.WithSecret(secret))
		unsigned := newBus()
		other := newBus(bus.WithSecret([]byte("another deployment's secret")))
		testbroker.WaitFor(t, "B to hear A", func() bool { return b.Stats().Peers == 1 })
		// The hellos first: a bus that has an event queued when it starts
		// sends no hello ahead of it.
		testbroker.WaitFor(t, "B to refuse the hellos", func() bool { st := b.Stats(); return st.Unsigned >= 1 && st.BadMAC == 1 })
		unsigned.Publish(bus.Event{Kinds: hub.ToolsList})
		other.Publish(bus.Event{Kinds: hub.ToolsList})
		testbroker.WaitFor(t, "B to refuse the events", func() bool { st := b.Stats(); return st.Unsigned >= 2 && st.BadMAC == 2 })
		a.Publish(bus.Event{URI: "res://signed"})
		testbroker.WaitFor(t, "B to receive A's event", func() bool { got, _ := h.snapshot(); return len(got) == 1 })
		got, resyncs := h.snapshot()
		if e := got[0]; e.URI != "res://signed" || e.Origin != a.Stats().Origin {
			t.Errorf("B received %+v, want A's event", e)
		}
		if st := b.Stats(); st.Peers != 1 || st.Invalid != 0 || st.Gaps != 0 || resyncs != 0 {
			t.Errorf("B: %+v (%d re-notifications), want A its only peer and nothing re-notified", st, resyncs)
		}
		// The unsigned replica believes anyone, as a bus without a secret
		// always has.
		if st := unsigned.Stats(); st.Unsigned != 0 || st.BadMAC != 0 {
			t.Errorf("the replica without a secret refused messages: %+v", st)
		}
	})
}
