package natsbus

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"tidings/bus"
	"tidings/internal/testrig/testbroker"
)

// failoverWait bounds how long the survivors of a cluster may take to
// answer again after a server is lost: JetStream elects a new leader for
// each stream the lost server led, which takes seconds (its election
// timeouts are 4 to 9s), and longer on a loaded machine.
const failoverWait = 45 * time.Second

// tryWait bounds one try of untilAnswered: short, so that the time to
// the first answer is measured to about that.
const tryWait = 100 * time.Millisecond

// untilAnswered calls op, each try bounded by tryWait, until it
// succeeds, and returns how long after since it did; it fails the test
// once failoverWait has passed since since. It logs the tries that
// failed, and the first error.
func untilAnswered(t *testing.T, what string, since time.Time, op func(context.Context) error) time.Duration {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var first error
	for tries := 0; ; tries++ {
		ctx, cancel := context.WithTimeout(context.Background(), tryWait)
		err := op(ctx)
		cancel()
		if err == nil {
			if tries > 0 {
				t.Logf("%s: %d tries failed first, the first with: %v", what, tries, first)
			}
			return time.Since(since)
		}
		if first == nil {
			first = err
		}
		if time.Since(since) > failoverWait {
			t.Fatalf("%s: still failing %v after the server was lost: %v", what, failoverWait, err)
		}
		<-tick.C
	}
}

// currentLeader waits until every replica of stream is current, and
// returns the name of its leader.
func currentLeader(t *testing.T, s *natsTasks, stream string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	var leader string
	testbroker.WaitFor(t, "the three replicas of "+stream+" to be current", func() bool {
		st, err := s.js.Stream(ctx, stream)
		if err != nil {
			return false
		}
		info := st.CachedInfo()
		if info.Config.Replicas != 3 {
			t.Fatalf("stream %s has %d replicas, want 3", stream, info.Config.Replicas)
		}
		if info.Cluster == nil || info.Cluster.Leader == "" || len(info.Cluster.Replicas) != 2 {
			return false
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current {
				return false
			}
		}
		leader = info.Cluster.Leader
		return true
	})
	return leader
}

// TestNATSClusterFailover: on a cluster of three named by its seeds, the
// state and tasks buckets have three replicas; when the server that leads
// the tasks bucket is lost, tasks are read, changed and created, and the
// state written and loaded, through the two left, by a store that was
// on the lost server as by one that was not; and a bus connection that
// was on it moves to another server, says so in its stats, and carries
// events again.
func TestNATSClusterFailover(t *testing.T) {
	c := testbroker.StartNATSCluster(t, 3)
	seeds := c.Seeds()
	ctx, cancel := context.WithTimeout(context.Background(), testbroker.Wait)
	defer cancel()
	viaSeeds := openTasksAt(t, seeds).(*natsTasks)
	state, err := OpenState(ctx, seeds, quiet()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = state.Close() })
	leader := currentLeader(t, viaSeeds, viaSeeds.stream)
	currentLeader(t, viaSeeds, "KV_tidings_2Etest")
	lost := c.Index(leader)
	if lost < 0 {
		t.Fatalf("the tasks bucket's leader %q is none of the cluster's servers", leader)
	}
	other := (lost + 1) % 3

	// A store and a bus connection dialled through the leader alone,
	// which learn the other servers from it.
	onLost := openTasksAt(t, c.URL(lost)).(*natsTasks)
	if got := onLost.nc.ConnectedServerName(); got != leader {
		t.Fatalf("the store dialled through %s is on %s", leader, got)
	}
	dial := func(url string) bus.Conn {
		t.Helper()
		conn, err := Dial(ctx, url, quiet()...)
		if err != nil {
			t.Fatal(err)
		}
		return conn
	}
	// With heartbeats: A's first word may be lost, for B's interest
	// reaches A's server across the cluster a moment after B subscribed.
	beating := []bus.Option{bus.WithHeartbeat(200 * time.Millisecond), bus.WithLogger(slog.New(slog.DiscardHandler))}
	a, b := bus.New(dial(c.URL(lost)), beating...), bus.New(dial(c.URL(other)), beating...)
	rec := &recorder{}
	b.Handle(rec)
	closeAll(t, a, b)
	testbroker.WaitFor(t, "B to hear of A", func() bool { return b.Stats().Peers == 1 })
	if st := a.Stats(); !strings.HasPrefix(st.Node, leader+" (nats://127.0.0.1:") || st.Failovers != 0 {
		t.Fatalf("A's stats say it is on %q after %d failovers, want %s and none", st.Node, st.Failovers, leader)
	}

	stores := []struct {
		what, id string
		s        *natsTasks
	}{{"the store dialled through the seeds", "seeds", viaSeeds}, {"the store on the lost server", "lost", onLost}}
	for _, st := range stores {
		if err := st.s.Create(ctx, "before-"+st.id, []byte("v1"), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if err := state.Set(ctx, "before", true); err != nil {
		t.Fatal(err)
	}

	t.Logf("the tasks bucket's leader is %s; the store dialled through the seeds is on %s", leader, viaSeeds.nc.ConnectedServerName())
	killed := time.Now()
	c.Kill(lost)

	for _, st := range stores {
		what, s, id := st.what, st.s, "before-"+st.id
		got := untilAnswered(t, what+": get", killed, func(ctx context.Context) error {
			rec, _, err := s.Get(ctx, id)
			if err == nil && string(rec) != "v1" {
				t.Fatalf("%s: get %q after the loss: %q, want v1", what, id, rec)
			}
			return err
		})
		t.Logf("%s: the first Get answered %v after the tasks bucket's leader was killed", what, got.Round(time.Millisecond))
		got = untilAnswered(t, what+": update", killed, func(ctx context.Context) error {
			_, rev, err := s.Get(ctx, id)
			if err != nil {
				return err
			}
			_, err = s.Update(ctx, id, []byte("v2"), rev)
			return err
		})
		t.Logf("%s: the first Update answered %v after the kill", what, got.Round(time.Millisecond))
		untilAnswered(t, what+": create", killed, func(ctx context.Context) error {
			err := s.Create(ctx, "after-"+st.id, []byte("new"), time.Now().Add(time.Hour))
			if errors.Is(err, bus.ErrTaskExists) {
				return nil // an earlier try landed, unacknowledged
			}
			return err
		})
	}
	for _, st := range stores {
		for _, o := range stores {
			for id, want := range map[string]string{"before-" + o.id: "v2", "after-" + o.id: "new"} {
				rec, _, err := st.s.Get(ctx, id)
				if err != nil || !bytes.Equal(rec, []byte(want)) {
					t.Errorf("%s: get %q: %q (%v), want %q", st.what, id, rec, err, want)
				}
			}
		}
	}
	if got := onLost.nc.ConnectedServerName(); got == leader || got == "" {
		t.Errorf("the store on the lost server is on %q", got)
	}

	got := untilAnswered(t, "state: set", killed, func(ctx context.Context) error { return state.Set(ctx, "after", true) })
	t.Logf("the shared state took its first write %v after the kill", got.Round(time.Millisecond))
	m, err := state.Load(ctx)
	if err != nil || !m["before"] || !m["after"] {
		t.Errorf("the state after the loss: %v (%v), want before and after on", m, err)
	}

	testbroker.WaitFor(t, "A to be connected to another server", func() bool {
		st := a.Stats()
		return st.Connected && st.Failovers == 1 && st.Node != "" && !strings.HasPrefix(st.Node, leader+" ")
	})
	t.Logf("the bus connection that was on %s is on %s", leader, a.Stats().Node)
	a.Publish(toolsChanged)
	testbroker.WaitFor(t, "B to receive A's event after A moved", func() bool { n, _ := rec.counts(); return n == 1 })
}
