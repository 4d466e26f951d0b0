package hub

import (
	"testing"
	"time"
)

// TestStampsAreKeptForEveryoneAndLetGo: a stamped change told to everyone
// is the list's (or the followed URI's) latest stamp; one told to some
// clears it; and a URI's stamp is let go of with its last follower.
func TestStampsAreKeptForEveryoneAndLetGo(t *testing.T) {
	h := New()
	s, err := h.Subscribe(Filter{Kinds: ToolsList, URIs: []string{"a://x"}})
	if err != nil {
		t.Fatal(err)
	}
	st := &Stamp{At: time.Now(), Road: "local"}
	h.Publish(Event{Kinds: ToolsList, Stamp: st})
	h.Publish(Event{URI: "a://x", Stamp: st})
	h.Publish(Event{URI: "a://unfollowed", Stamp: st})
	if h.Stamp(0) != st || h.URIStamp("a://x") != st || h.URIStamp("a://unfollowed") != nil {
		t.Fatalf("stamps: list %v, followed %v, unfollowed %v", h.Stamp(0), h.URIStamp("a://x"), h.URIStamp("a://unfollowed"))
	}
	h.Publish(Event{Kinds: ToolsList, Stamp: st, Audience: []string{"alice"}})
	h.Publish(Event{URI: "a://x", Stamp: st, Sees: func(string) bool { return true }})
	if h.Stamp(0) != nil || h.URIStamp("a://x") != nil {
		t.Fatalf("a change told to some left its stamp: list %v, uri %v", h.Stamp(0), h.URIStamp("a://x"))
	}
	h.Publish(Event{URI: "a://x", Stamp: st})
	s.Close()
	if h.URIStamp("a://x") != nil {
		t.Fatal("a URI nobody follows keeps its stamp")
	}
}
