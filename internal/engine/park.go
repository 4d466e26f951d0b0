package engine

import (
	"time"

	"tidings/hub"
)

// Parker is a Stream that can carry a listen on after the request's own
// goroutine has returned: Streamable HTTP over HTTP/1.1 on Linux hands
// the connection to one poller and a few writers shared by every parked
// listen, so that an open listen costs its pending state and a socket,
// not a goroutine and its buffers.
type Parker interface {
	// Park takes the listen over and returns true, or returns false
	// having taken nothing, and the caller pumps the listen itself.
	Park(l *ParkedListen) bool
}

// ParkedListen is a listen handed to a Parker once its acknowledgement
// is written. The parker does what Pump would: it drains Sub whenever
// Sub notifies it, writes one notification per kind and URI, keeps the
// stream alive, cuts a reader stuck past its write timeout, and reports
// to Observer; then it calls End once and writes the reply End returns.
type ParkedListen struct {
	// Sub is the listen's subscription; the parker sets its Notify.
	Sub *hub.Subscription
	// Notices encode what Sub drains.
	Notices Notices
	// KeepAlive is the keep-alive interval (0: none), as in PumpOptions.
	KeepAlive time.Duration
	// Observer, when set, hears of each flush and of a cut-off.
	Observer StreamObserver
	// End ends the listen, once: it lets go of what the listen holds and
	// returns its last reply for the way it ended, as the request would
	// have after Pump returned. The parker writes the reply's body
	// (unless Outcome is Broken: then it cuts the connection) and then
	// releases it.
	End func(PumpEnd) Reply
}
