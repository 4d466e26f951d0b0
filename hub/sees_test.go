package hub

import (
	"sync"
	"testing"
)

// TestSeesOncePerPrincipal: an event's Sees is asked once for each
// principal with subscriptions, however many each has, and its answer
// for one event is never taken for the next one's.
func TestSeesOncePerPrincipal(t *testing.T) {
	h := New()
	subs := map[string][]*Subscription{}
	for range 3 {
		for _, p := range []string{"alice", "bob", ""} {
			s, err := h.Subscribe(Filter{Kinds: ToolsList, Principal: p})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			subs[p] = append(subs[p], s)
		}
	}
	// Each event is seen by one principal only, a different one each
	// time: an answer kept from the event before would be wrong.
	for _, seer := range []string{"alice", "bob", "", "alice"} {
		asked := map[string]int{}
		h.Publish(Event{Kinds: ToolsList, Sees: func(p string) bool {
			asked[p]++
			return p == seer
		}})
		for p, ss := range subs {
			if asked[p] != 1 {
				t.Errorf("Sees asked %d times of %q, want once", asked[p], p)
			}
			for _, s := range ss {
				k, _ := s.Take(nil)
				if got := k.Has(0); got != (p == seer) {
					t.Errorf("event seen by %q only: %q's subscription told %v", seer, p, got)
				}
			}
		}
	}
}

// TestSeesConcurrentEvents: events published at once, each seen by
// different principals, each reach exactly their own, though they share
// where a principal's answer is kept.
func TestSeesConcurrentEvents(t *testing.T) {
	h := New()
	principals := []string{"a", "b", "c", "d"}
	subs := map[string]*Subscription{}
	for _, p := range principals {
		s, err := h.Subscribe(Filter{Kinds: ToolsList | PromptsList, Principal: p})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		subs[p] = s
	}
	for range 200 {
		var wg sync.WaitGroup
		// Tools changes are seen by a and b, prompts changes by c and d.
		wg.Go(func() {
			h.Publish(Event{Kinds: ToolsList, Sees: func(p string) bool { return p == "a" || p == "b" }})
		})
		wg.Go(func() {
			h.Publish(Event{Kinds: PromptsList, Sees: func(p string) bool { return p == "c" || p == "d" }})
		})
		wg.Wait()
		for p, s := range subs {
			k, _ := s.Take(nil)
			tools := p == "a" || p == "b"
			if k != map[bool]Kind{true: ToolsList, false: PromptsList}[tools] {
				t.Fatalf("%q was told %b", p, k)
			}
		}
	}
}
