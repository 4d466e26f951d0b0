package hub

import (
	"sync/atomic"
	"testing"
)

// TestNotifyTakesThePlaceOfWake: once a subscription has a Notify hook,
// a change calls it and leaves Wake empty; a wake-up already waiting is
// passed on to the hook at once; the hub's shutdown calls it with Ending
// set; and publishing still allocates nothing.
func TestNotifyTakesThePlaceOfWake(t *testing.T) {
	h := New()
	s, err := h.Subscribe(Filter{Kinds: ToolsList, URIs: []string{"res://a"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h.ListChanged(ToolsList) // before the hook: waits on Wake
	var calls atomic.Int64
	s.Notify(func() { calls.Add(1) })
	if n := calls.Load(); n != 1 {
		t.Fatalf("the wake-up waiting before Notify reached the hook %d times, want once", n)
	}
	if k, _ := s.Take(nil); k != ToolsList {
		t.Fatalf("Take = %v, want the tools list", k)
	}
	h.ResourceUpdated("res://a")
	if n := calls.Load(); n != 2 {
		t.Fatalf("hook called %d times after an update, want 2", n)
	}
	select {
	case <-s.Wake():
		t.Fatal("Wake received although the subscription has a hook")
	default:
	}
	if _, uris := s.Take(nil); len(uris) != 1 || uris[0] != "res://a" {
		t.Fatalf("Take = %v, want res://a", uris)
	}
	if a := testing.AllocsPerRun(100, func() { h.ResourceUpdated("res://a") }); a != 0 {
		t.Fatalf("publishing to a hooked subscription allocates %v times", a)
	}
	before := calls.Load()
	h.Shutdown()
	if calls.Load() != before+1 || !s.Ending() {
		t.Fatalf("shutdown: hook calls %d → %d, ending %v; want one call with Ending set", before, calls.Load(), s.Ending())
	}
}
