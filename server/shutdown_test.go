package server_test

import (
	"context"
	"testing"
	"testing/synctest"

	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// TestShutdownWaitsForTheListensLastWrite: Shutdown does not return while
// a transport still has a listen's last message (its complete result) to
// write, and returns once the transport has released the reply.
func TestShutdownWaitsForTheListensLastWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t)
		serveListen := func(id int) engine.Reply {
			msg, err := jsonrpc.Decode(encodeRequest(t, id, mcp.MethodListen, P{"notifications": P{"toolsListChanged": true}}), 0)
			if err != nil {
				t.Fatal(err)
			}
			c, rep := engine.Parse(msg)
			if rep != nil {
				t.Fatalf("refused: %s", rep.Body)
			}
			return engine.Of(h.srv).Serve(context.Background(), c, "", nil, newRecorder(t))
		}
		replies := make(chan engine.Reply, 1)
		go func() { replies <- serveListen(1) }()
		synctest.Wait() // the listen is open and idle
		shut := make(chan error, 1)
		go func() { shut <- h.srv.Shutdown(context.Background()) }()
		rep := <-replies
		if !rep.ListenEnded || rep.Body == nil {
			t.Fatalf("listen ended without its complete result: %+v", rep)
		}
		synctest.Wait() // Shutdown is blocked, or it has returned
		select {
		case err := <-shut:
			t.Fatalf("Shutdown returned (%v) before the listen's last message was written", err)
		default:
		}
		rep.Release()
		rep.Release() // more than once is harmless
		if err := <-shut; err != nil {
			t.Fatal(err)
		}
		// A listen after the shutdown ends at once and blocks nothing.
		late := serveListen(2)
		if !late.ListenEnded {
			t.Errorf("a listen after Shutdown did not end with its complete result")
		}
		late.Release()
	})
}
