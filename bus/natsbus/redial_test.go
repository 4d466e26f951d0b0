package natsbus

import (
	"context"
	"testing"
	"time"

	"tidings/bus"
	"tidings/internal/testrig/testbroker"
)

// TestNATSClientGivesUp: when the NATS client closes itself for good (as
// it does after repeated authorization failures), the connection dials a
// new one instead of leaving the replica deaf and mute until it restarts.
func TestNATSClientGivesUp(t *testing.T) {
	br := testbroker.StartNATS(t)
	dial := func() bus.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := Dial(ctx, br.URL(), quiet()...)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ca := dial()
	a, b := bus.New(ca, quiet()...), bus.New(dial(), quiet()...)
	rec := &recorder{}
	b.Handle(rec)
	closeAll(t, a, b)
	testbroker.WaitFor(t, "B to hear of A", func() bool { return b.Stats().Peers == 1 })

	nc, _ := ca.(*natsConn).current()
	nc.Close() // what the client does by itself when it gives up
	testbroker.WaitFor(t, "A to be connected again", func() bool {
		st := a.Stats()
		return st.Connected && st.Reconnects == 1
	})
	a.Publish(toolsChanged)
	testbroker.WaitFor(t, "B to receive A's event", func() bool { n, _ := rec.counts(); return n == 1 })
}
