package hub

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
)

// These tests pin the hub's two cost promises: publishing allocates
// nothing, and a subscription's pending state does not grow however many
// changes pile up while nobody drains it.

func subscribeMany(t *testing.T, h *Hub, n int) []*Subscription {
	t.Helper()
	subs := make([]*Subscription, 0, n)
	for i := range n {
		f := Filter{Kinds: ToolsList | ResourcesList, URIs: []string{"res://a", fmt.Sprintf("res://own/%d", i)}}
		if i%2 == 0 {
			f.Principal = "alice"
		}
		s, err := h.Subscribe(f)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	t.Cleanup(func() {
		for _, s := range subs {
			s.Close()
		}
	})
	return subs
}

func TestPublishDoesNotAllocate(t *testing.T) {
	h := New()
	subscribeMany(t, h, 100)
	audience := []string{"alice"}
	events := []struct {
		name string
		ev   Event
	}{
		{"list change", Event{Kinds: ToolsList | PromptsList}},
		{"shared URI", Event{URI: "res://a"}},
		{"one subscriber's URI", Event{URI: "res://own/7"}},
		{"unwatched URI", Event{URI: "res://nobody"}},
		{"audience", Event{Kinds: ResourcesList, URI: "res://a", Audience: audience}},
	}
	for _, e := range events {
		t.Run(e.name, func(t *testing.T) {
			if n := testing.AllocsPerRun(10_000, func() { h.Publish(e.ev) }); n != 0 {
				t.Fatalf("Publish allocates %v times per call", n)
			}
		})
	}
	t.Run("with observer", func(t *testing.T) {
		seen := 0
		h.SetObserver(func(Event) { seen++ })
		if n := testing.AllocsPerRun(10_000, func() { h.ListChanged(ToolsList) }); n != 0 {
			t.Fatalf("Publish allocates %v times per call", n)
		}
		if seen == 0 {
			t.Fatal("observer not called")
		}
		h.SetObserver(nil)
	})
}

// pendingSize is everything a subscription holds between drains.
type pendingSize struct {
	flags, flagsCap, uris, wake int
}

func sizeOf(s *Subscription) pendingSize {
	return pendingSize{len(s.flags), cap(s.flags), len(s.uris), len(s.wake)}
}

func TestPendingStateIsBounded(t *testing.T) {
	h := New()
	subs := subscribeMany(t, h, 10)
	s := subs[3]
	publish := func() {
		h.ListChanged(ToolsList)
		h.ResourceUpdated("res://a")
		h.ResourceUpdated("res://own/3")
		h.ResourceUpdated("res://own/4") // someone else's
	}

	publish()
	one := sizeOf(s)
	runtime.GC()
	var m0 runtime.MemStats
	runtime.ReadMemStats(&m0)

	const n = 1_000_000
	for range n {
		publish()
	}
	runtime.GC()
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	many := sizeOf(s)

	if one != many {
		t.Fatalf("pending state after 1 publish %+v, after %d: %+v", one, n, many)
	}
	if many.wake > 1 {
		t.Fatalf("wake channel holds %d tokens, want at most 1", many.wake)
	}
	// 4M publishes: anything per publish would show up as megabytes.
	if grew := int64(m1.HeapAlloc) - int64(m0.HeapAlloc); grew > 64<<10 {
		t.Fatalf("heap grew by %d bytes over %d publishes", grew, 4*n)
	}
	if mallocs := m1.Mallocs - m0.Mallocs; mallocs > 100 {
		t.Fatalf("%d allocations during %d publishes", mallocs, 4*n)
	}

	// Draining yields each change once, however often it happened.
	kinds, uris := s.Take(nil)
	if kinds != ToolsList {
		t.Fatalf("Take kinds = %b, want tools only", kinds)
	}
	slices.Sort(uris)
	if want := []string{"res://a", "res://own/3"}; !slices.Equal(uris, want) {
		t.Fatalf("Take URIs = %q, want %q", uris, want)
	}
	if kinds, uris := s.Take(nil); kinds != 0 || len(uris) != 0 {
		t.Fatalf("second Take = %b %q, want nothing", kinds, uris)
	}
}
