package brokers_test

import (
	"testing"
	"time"

	"tidings/bus"
	"tidings/bus/bustest"
	"tidings/internal/testrig/testbroker"
	"tidings/mcp"
)

// TestLostMessagesAreRenotified: on every bus, a message lost, reordered
// or repeated between two replicas is detected by its sequence number,
// and a loss is made good by re-notifying the listeners who may have
// missed it.
func TestLostMessagesAreRenotified(t *testing.T) {
	forEachBus(t, func(t *testing.T, br broker) {
		t.Run("dropped", func(t *testing.T) {
			c := newCluster(t, br, 2, clusterOpts{})
			a, b := c.reps[0], c.reps[1]
			lb := b.listen(t, "", filter{Tools: true})
			a.faults.Drop(1, bustest.IsChange)
			c.addTool(a, "lost")
			// A change nobody on B follows, which carries the next number.
			a.srv.ResourceUpdated("res://other")
			lb.expect(t, mcp.NotifyToolsListChanged, "")
			if st := b.bus.Stats(); st.Gaps != 1 || st.Resyncs != 1 {
				t.Errorf("B: %+v, want one gap and one re-notification", st)
			}
		})
		t.Run("reordered", func(t *testing.T) {
			c := newCluster(t, br, 2, clusterOpts{})
			a, b := c.reps[0], c.reps[1]
			lb := b.listen(t, "", filter{Tools: true})
			a.faults.Reorder(bustest.IsChange)
			c.addTool(a, "first")                // held back...
			a.srv.ResourceUpdated("res://other") // ...until this one is sent
			lb.expect(t, mcp.NotifyToolsListChanged, "")
			testbroker.WaitFor(t, "B to see the late event", func() bool { return b.bus.Stats().Stale == 1 })
			if st := b.bus.Stats(); st.Gaps != 1 || st.Resyncs != 1 {
				t.Errorf("B: %+v, want one gap and one re-notification", st)
			}
		})
		t.Run("repeated", func(t *testing.T) {
			c := newCluster(t, br, 2, clusterOpts{})
			a, b := c.reps[0], c.reps[1]
			lb := b.listen(t, "", filter{Tools: true, URIs: []string{"res://other"}})
			before := b.bus.Stats().Received
			a.faults.Duplicate(1, bustest.IsChange)
			c.addTool(a, "twice")
			lb.expect(t, mcp.NotifyToolsListChanged, "")
			testbroker.WaitFor(t, "B to see the repeat", func() bool { return b.bus.Stats().Stale == 1 })
			a.srv.ResourceUpdated("res://other")
			lb.expect(t, mcp.NotifyResourceUpdated, "res://other")
			if st := b.bus.Stats(); st.Gaps != 0 || st.Resyncs != 0 || st.Received != before+2 {
				t.Errorf("B: %+v, want two events received and no gap", st)
			}
		})
		t.Run("last of a burst", func(t *testing.T) {
			// Nothing follows the lost message but heartbeats, which
			// carry A's latest number.
			c := newCluster(t, br, 2, clusterOpts{bus: []bus.Option{bus.WithHeartbeat(50 * time.Millisecond)}})
			a, b := c.reps[0], c.reps[1]
			lb := b.listen(t, "", filter{Tools: true})
			a.faults.Drop(1, bustest.IsChange)
			c.addTool(a, "last")
			lb.expect(t, mcp.NotifyToolsListChanged, "")
			if st := b.bus.Stats(); st.Gaps != 1 {
				t.Errorf("B: %+v, want the gap found by a heartbeat", st)
			}
		})
	})
}
