package h2

import (
	"testing"
	"time"
)

// TestStreamStates walks a stream through RFC 9113's states (5.1) by
// the only moves that change them.
func TestStreamStates(t *testing.T) {
	tests := []struct {
		name  string
		moves []func(*stream)
		want  streamState
		reset resetSide
	}{
		{"opened", nil, stateOpen, notReset},
		{"request ended", []func(*stream){(*stream).endRemoteLocked}, stateHalfClosedRemote, notReset},
		{"answer ended", []func(*stream){(*stream).endLocalLocked}, stateHalfClosedLocal, notReset},
		{"both ended", []func(*stream){(*stream).endRemoteLocked, (*stream).endLocalLocked}, stateClosed, notReset},
		{"both ended, answer first", []func(*stream){(*stream).endLocalLocked, (*stream).endRemoteLocked}, stateClosed, notReset},
		{"request ended twice", []func(*stream){(*stream).endRemoteLocked, (*stream).endRemoteLocked}, stateHalfClosedRemote, notReset},
		{"reset while open", []func(*stream){resetByTheServer}, stateClosed, resetByServer},
		{"reset after the answer", []func(*stream){(*stream).endLocalLocked, resetByTheServer}, stateClosed, resetByServer},
		{"ended after a reset", []func(*stream){resetByTheServer, (*stream).endRemoteLocked, (*stream).endLocalLocked}, stateClosed, resetByServer},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &conn{junk: newBudget(DefaultFrameBudget, time.Now())}
			s := newStream(c, 1)
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, move := range tc.moves {
				move(s)
			}
			if s.state != tc.want || s.resetBy != tc.reset {
				t.Errorf("state %s, reset by %d; want %s, %d", s.state, s.resetBy, tc.want, tc.reset)
			}
			if s.remoteEnded() != (tc.want == stateHalfClosedRemote || tc.want == stateClosed) ||
				s.localEnded() != (tc.want == stateHalfClosedLocal || tc.want == stateClosed) {
				t.Errorf("remoteEnded %v, localEnded %v in state %s", s.remoteEnded(), s.localEnded(), s.state)
			}
		})
	}
}

func resetByTheServer(s *stream) { s.resetLocked(0, false, errReset) }
