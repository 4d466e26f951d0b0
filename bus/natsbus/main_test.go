package natsbus

import (
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"tidings/bus"
	"tidings/hub"
)

// TestMain fails the package when a test leaves a goroutine behind: every
// connection, store, bus and test broker a test starts must be stopped by
// it, after broker outages as after a clean run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// quiet are the options of a bus or store whose log a test does not read,
// and whose heartbeats it does not wait for.
func quiet() []bus.Option {
	return []bus.Option{bus.WithHeartbeat(time.Hour), bus.WithLogger(slog.New(slog.DiscardHandler))}
}

// recorder is a bus.Handler that counts what it is told.
type recorder struct {
	mu      sync.Mutex
	events  int
	resyncs int
}

func (r *recorder) Deliver(bus.Event) { r.mu.Lock(); r.events++; r.mu.Unlock() }
func (r *recorder) Resync()           { r.mu.Lock(); r.resyncs++; r.mu.Unlock() }

func (r *recorder) counts() (events, resyncs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events, r.resyncs
}

// closeAll closes bs when the test ends.
func closeAll(t *testing.T, bs ...bus.Bus) {
	t.Cleanup(func() {
		for _, b := range bs {
			if err := b.Close(); err != nil {
				t.Error(err)
			}
		}
	})
}

var toolsChanged = bus.Event{Kinds: hub.ToolsList}
