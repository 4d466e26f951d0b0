package engine

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"tidings/hub"
	"tidings/mcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lateSource is a Source whose hub shuts down while its first drain is
// being written, right after one more change landed: the change a
// graceful end must not lose.
type lateSource struct {
	mu      sync.Mutex
	wake    chan struct{}
	takes   int
	ending  bool
	pending hub.Kind
}

func (s *lateSource) Wake() <-chan struct{} { return s.wake }
func (s *lateSource) TakeMerged() int       { return 0 }

func (s *lateSource) Ending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ending
}

func (s *lateSource) Take(buf []string) (hub.Kind, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.takes++
	k := s.pending
	s.pending = 0
	if s.takes == 1 {
		// After this drain: a prompts change, then the shutdown, each
		// poking the one wake-up slot as the hub does.
		s.pending = hub.PromptsList
		s.ending = true
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
	return k, buf
}

// sent records what a pump writes.
type sent struct {
	mu   sync.Mutex
	msgs []string
}

func (s *sent) Send(msg []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = append(s.msgs, string(msg))
	return nil
}

func (s *sent) KeepAlive() error { return nil }

type names struct{}

func (names) ListChanged(l mcp.List) ([]byte, bool)         { return []byte(l.Changed()), false }
func (names) Updated(buf []byte, uri string) ([]byte, bool) { return append(buf, uri...), true }

// TestPumpDrainsWhatLandsWhileEnding: a change that lands between a
// drain and the hub's shutdown is still written before the pump ends
// gracefully, since Drained promises that nothing was missed.
func TestPumpDrainsWhatLandsWhileEnding(t *testing.T) {
	src := &lateSource{wake: make(chan struct{}, 1), pending: hub.ToolsList}
	src.wake <- struct{}{}
	out := &sent{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if end := Pump(ctx, src, out, names{}, PumpOptions{}); end != Drained {
		t.Fatalf("pump ended %v, want Drained", end)
	}
	want := []string{mcp.NotifyToolsListChanged, mcp.NotifyPromptsListChanged}
	if len(out.msgs) != len(want) || out.msgs[0] != want[0] || out.msgs[1] != want[1] {
		t.Errorf("wrote %q, want %q", out.msgs, want)
	}
}
