package brokers_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"tidings/bus"
	"tidings/bus/brokers"
	"tidings/internal/testrig/testbroker"
)

// TestSentinelURL: a redis+sentinel URL opens a bus, a shared state and
// a task store on the primary the Sentinels name, as a redis URL does on
// one server: an event goes from one replica to another, a switch set is
// loaded, a task created is read back, and the bus names the primary.
func TestSentinelURL(t *testing.T) {
	sn := testbroker.StartSentinel(t)
	url := sn.URL()
	opts := []bus.Option{bus.WithLogger(slog.New(slog.DiscardHandler)), bus.WithHeartbeat(time.Hour)}
	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	var buses [2]bus.Bus
	for i := range buses {
		b, err := brokers.Open(ctx, url, opts...)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close()
		buses[i] = b
	}
	h := &events{}
	buses[1].Handle(h)
	state, err := brokers.OpenState(ctx, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer state.Close()
	tasks, err := brokers.OpenTasks(ctx, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer tasks.Close()

	if err := state.Set(ctx, "tool:x", true); err != nil {
		t.Fatal(err)
	}
	if m, err := state.Load(ctx); err != nil || !m["tool:x"] {
		t.Fatalf("state: %v, %v", m, err)
	}
	if err := tasks.Create(ctx, "t1", []byte("v1"), time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if rec, rev, err := tasks.Get(ctx, "t1"); err != nil || string(rec) != "v1" || rev != 1 {
		t.Fatalf("task: %q, %d, %v", rec, rev, err)
	}
	buses[0].Publish(bus.Event{URI: "file:///a"})
	testbroker.WaitFor(t, "the event to reach the other replica", func() bool {
		got, _ := h.snapshot()
		return len(got) == 1 && got[0].URI == "file:///a"
	})
	if st, want := buses[0].Stats(), sn.Primary(); st.Node != want {
		t.Errorf("the bus names the primary %q, want %s", st.Node, want)
	}
}
