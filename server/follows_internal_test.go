package server

import (
	"context"
	"testing"
)

// TestLeaseGrowsNoMoreOnceReleased: a lease given back refuses to grow,
// so that a subscribe racing the end of its session cannot take from the
// allowances what nothing would give back.
func TestLeaseGrowsNoMoreOnceReleased(t *testing.T) {
	f := newFollowSet(DefaultListenLimits())
	l := f.lease(context.Background(), "alice")
	if err := l.Grow(1, 3); err != nil {
		t.Fatal(err)
	}
	l.Release()
	if err := l.Grow(0, 1); err == nil {
		t.Fatal("a released lease grew")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.total.Listens != 0 || f.total.URIs != 0 || len(f.byPrincipal) != 0 {
		t.Errorf("after the release and the refused growth, the set holds %+v, by principal %v; want nothing", f.total, f.byPrincipal)
	}
}
