package parked

import (
	"errors"
	"net"
	"testing"
	"time"
)

// TestTickPeriod: the ticker keeps the keep-alive interval and the write
// timeout each to within a quarter of itself, and does not run when
// neither is set.
func TestTickPeriod(t *testing.T) {
	for _, tc := range []struct{ ka, wt, want time.Duration }{
		{15 * time.Second, 10 * time.Second, 2500 * time.Millisecond},
		{time.Second, 10 * time.Second, 250 * time.Millisecond},
		{0, 200 * time.Millisecond, 50 * time.Millisecond},
		{20 * time.Millisecond, 0, 5 * time.Millisecond},
		{time.Microsecond, 0, time.Millisecond},
		{0, 0, 0},
	} {
		if got := TickPeriod(tc.ka, tc.wt); got != tc.want {
			t.Errorf("TickPeriod(%v, %v) = %v, want %v", tc.ka, tc.wt, got, tc.want)
		}
	}
}

// TestParkRefusesAConnectionWithoutASocket: a connection that hides its
// socket is not taken, and the caller keeps it.
func TestParkRefusesAConnectionWithoutASocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	p := New(Config{WriteTimeout: time.Second})
	if p == nil {
		t.Skip("no parking here")
	}
	if err := p.Park(a, nil); !errors.Is(err, errNoSocket) {
		t.Fatalf("Park of a pipe: %v, want errNoSocket", err)
	}
	if n := p.Len(); n != 0 {
		t.Fatalf("%d parked after a refusal", n)
	}
}
