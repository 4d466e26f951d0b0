package bus

import (
	"bytes"
	"context"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

// testSecret is the secret testKey is derived from.
var testSecret = []byte("0123456789abcdef0123456789abcdef")

// logBuffer is a log a test can read while the bus writes it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.buf.String(), s)
}

// send puts msg on the group as a stranger would, not through a Bus.
func send(t *testing.T, l *Local, msgs ...[]byte) {
	t.Helper()
	raw := l.Conn()
	defer raw.Close()
	for _, msg := range msgs {
		if err := raw.Send(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
	}
}

func mustEncode(t *testing.T, key []byte, origin string, seq uint64, sent time.Time, e Event) []byte {
	t.Helper()
	b, err := encode(key, origin, seq, sent, false, e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestForgedMessagesAreRefused: a bus with a secret drops what is not
// signed with it — unsigned, signed with another key, unreadable — counts
// each by its reason, delivers none, re-notifies for none, says so in the
// log once for the lot, and delivers what is signed with it.
func TestForgedMessagesAreRefused(t *testing.T) {
	l := NewLocal()
	var log logBuffer
	b := New(l.Conn(), WithHeartbeat(time.Hour), WithSecret(testSecret), WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	rec := &recorder{}
	b.Handle(rec)
	closeAll(t, b)
	now := time.Now()
	const forger = "ffffffffffffffffffffffffffffffff"
	send(t, l,
		mustEncode(t, nil, forger, 1, now, toolsChanged),
		mustEncode(t, busKey([]byte("a guess")), forger, 2, now, toolsChanged),
		[]byte(`not json`),
		[]byte(`{"v":1,"type":"change","origin":"`+forger+`","seq":3,"kinds":1}`),
		mustEncode(t, nil, forger, math.MaxUint64, now, toolsChanged),
	)
	waitUntil(t, "B to refuse all five", func() bool { st := b.Stats(); return st.Unsigned+st.BadMAC == 5 })
	st := b.Stats()
	if st.Unsigned != 4 || st.BadMAC != 1 || st.Received != 0 || st.Invalid != 0 || st.Gaps != 0 || st.Resyncs != 0 || st.Peers != 0 {
		t.Errorf("B: %+v, want four unsigned and one bad MAC refused, and nothing else done", st)
	}
	if n, r := rec.counts(); n != 0 || r != 0 {
		t.Errorf("B told its handler %d events and %d re-notifications of forged messages", n, r)
	}
	if n := log.count("dropped messages not signed"); n != 1 {
		t.Errorf("%d warnings of refused messages, want one for the lot:\n%s", n, log.buf.String())
	}
	if n := log.count("neither signed nor checked"); n != 0 {
		t.Errorf("a bus with a secret warned it checks nothing")
	}

	send(t, l, mustEncode(t, testKey, forger, 1, now, toolsChanged))
	waitUntil(t, "B to receive the signed event", func() bool { n, _ := rec.counts(); return n == 1 })

	// Two buses of the secret hear each other.
	a := New(l.Conn(), append(quiet(), WithSecret(testSecret))...)
	closeAll(t, a)
	a.Publish(Event{URI: "res://x"})
	waitUntil(t, "B to receive A's event", func() bool { n, _ := rec.counts(); return n == 2 })
}

// TestUnsignedBusWarns: a bus without a secret says at start that it
// believes anyone, and does, as before.
func TestUnsignedBusWarns(t *testing.T) {
	l := NewLocal()
	var log logBuffer
	b := New(l.Conn(), WithHeartbeat(time.Hour), WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	rec := &recorder{}
	b.Handle(rec)
	closeAll(t, b)
	if n := log.count("level=WARN msg=\"bus: messages are neither signed nor checked"); n != 1 {
		t.Errorf("%d warnings at start, want one:\n%s", n, log.buf.String())
	}
	send(t, l, mustEncode(t, nil, testOrigin, 1, time.Now(), toolsChanged),
		mustEncode(t, busKey([]byte("any")), "ffffffffffffffffffffffffffffffff", 1, time.Now(), toolsChanged))
	waitUntil(t, "B to receive both", func() bool { n, _ := rec.counts(); return n == 2 })
}

// TestLagIgnoresImpossibleClocks: events whose sender's clock is far off
// (or made up: the lowest int64) are delivered but move neither lag
// figure; a real delay still does.
func TestLagIgnoresImpossibleClocks(t *testing.T) {
	l := NewLocal()
	b, rec := listening(t, l)
	now := time.Now()
	origins := []string{"10000000000000000000000000000000", "20000000000000000000000000000000",
		"30000000000000000000000000000000", "40000000000000000000000000000000"}
	send(t, l,
		mustEncode(t, nil, origins[0], 1, time.Unix(0, math.MinInt64), toolsChanged),
		mustEncode(t, nil, origins[1], 1, time.Unix(0, math.MaxInt64), toolsChanged),
		mustEncode(t, nil, origins[2], 1, now.Add(-2*time.Hour), toolsChanged),
		mustEncode(t, nil, origins[3], 1, now.Add(5*time.Minute), toolsChanged),
	)
	waitUntil(t, "B to receive all four", func() bool { n, _ := rec.counts(); return n == 4 })
	if st := b.Stats(); st.Lag != 0 || st.MaxLag != 0 {
		t.Errorf("lag %v, max %v after impossible send times, want both 0", st.Lag, st.MaxLag)
	}
	send(t, l, mustEncode(t, nil, origins[0], 2, time.Now().Add(-3*time.Second), toolsChanged))
	waitUntil(t, "B to receive the late event", func() bool { n, _ := rec.counts(); return n == 5 })
	if st := b.Stats(); st.MaxLag < 3*time.Second || st.MaxLag > time.Minute || st.Lag != st.MaxLag {
		t.Errorf("lag %v, max %v after an event 3s late", st.Lag, st.MaxLag)
	}
}
