package server_test

import (
	"context"
	"testing"
	"testing/synctest"
)

// TestShutdownWaitsForTrackedWriters: Shutdown does not return while a
// transport still has a listen's last message to write, and returns once
// it has.
func TestShutdownWaitsForTrackedWriters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		written := h.srv.TrackListen()
		shut := make(chan error, 1)
		go func() { shut <- h.srv.Shutdown(context.Background()) }()
		synctest.Wait() // Shutdown is blocked, or it has returned
		select {
		case err := <-shut:
			t.Fatalf("Shutdown returned (%v) before the listen's last message was written", err)
		default:
		}
		written()
		written() // more than once is harmless
		if err := <-shut; err != nil {
			t.Fatal(err)
		}
		// A listen tracked after the shutdown neither blocks nor panics.
		h.srv.TrackListen()()
	})
}
