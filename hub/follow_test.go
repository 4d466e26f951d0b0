package hub

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// takeURIs drains s and returns the URIs it took, sorted.
func takeURIs(s *Subscription) []string {
	_, uris := s.Take(nil)
	slices.Sort(uris)
	return uris
}

// TestSubscriptionsShareURIs: subscriptions that follow the same URI,
// each from its own copy of the string, keep the hub's one copy, so that
// a URI many listens follow is held once.
func TestSubscriptionsShareURIs(t *testing.T) {
	h := New()
	uri := func() string { return strings.Clone("file:///a/long/path/" + strings.Repeat("x", 200)) }
	first := subscribe(t, h, Filter{URIs: []string{uri(), uri()}})
	second := subscribe(t, h, Filter{URIs: []string{uri()}})
	later := subscribe(t, h, Filter{})
	later.Follow(uri())
	if len(first.uris) != 1 {
		t.Fatalf("a URI given twice is followed %d times, want once", len(first.uris))
	}
	held := unsafe.StringData(first.uris[0])
	for name, s := range map[string]*Subscription{"second": second, "later": later} {
		if got := unsafe.StringData(s.uris[0]); got != held {
			t.Errorf("the %s subscription keeps its own copy of the URI, not the hub's", name)
		}
	}
	for key := range h.byURI {
		if unsafe.StringData(key) != held {
			t.Error("the index is keyed by a copy of the URI other than the one the subscriptions keep")
		}
	}
}

// TestFollowAndUnfollow: a subscription grows and shrinks one URI at a
// time; what it follows afterwards is exactly what was added and not
// removed, with the changes pending for them kept and those of a removed
// URI dropped.
func TestFollowAndUnfollow(t *testing.T) {
	h := New()
	s := subscribe(t, h, Filter{URIs: []string{"u://0"}})
	other := subscribe(t, h, Filter{URIs: []string{"u://0", "u://1"}})
	// Enough URIs to span three flag words.
	for i := 1; i < 150; i++ {
		s.Follow(fmt.Sprintf("u://%d", i))
	}
	s.Follow("u://7") // followed already: nothing
	if len(s.uris) != 150 {
		t.Fatalf("following 150 distinct URIs (one twice) made %d", len(s.uris))
	}
	h.ResourceUpdated("u://149") // pending on the last URI, which moves
	h.ResourceUpdated("u://3")   // pending on a URI about to go
	s.Unfollow("u://3")
	s.Unfollow("u://0")
	s.Unfollow("u://nothing") // not followed: nothing
	if got := takeURIs(s); !slices.Equal(got, []string{"u://149"}) {
		t.Fatalf("after unfollowing u://3 with its change pending, Take = %q, want only u://149", got)
	}
	for i := range 150 {
		h.ResourceUpdated(fmt.Sprintf("u://%d", i))
	}
	var want []string
	for i := 1; i < 150; i++ {
		if i != 3 {
			want = append(want, fmt.Sprintf("u://%d", i))
		}
	}
	slices.Sort(want)
	if got := takeURIs(s); !slices.Equal(got, want) {
		t.Fatalf("after the changes of every URI, Take = %d URIs, want the %d still followed", len(got), len(want))
	}
	if got := takeURIs(other); !slices.Equal(got, []string{"u://0", "u://1"}) {
		t.Fatalf("the other subscription took %q, want both of its URIs: unfollowing is one subscription's", got)
	}
	s.Close()
	s.Follow("u://late") // closed: nothing
	if _, ok := h.byURI["u://late"]; ok || len(h.byURI) != 2 {
		t.Fatalf("with one subscription left, %d URIs are indexed, want its 2", len(h.byURI))
	}
}

// BenchmarkFollow is one Follow on a subscription that follows many
// URIs already: it must cost the same however many.
func BenchmarkFollow(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			h := New()
			uris := make([]string, n+b.N)
			for i := range uris {
				uris[i] = fmt.Sprintf("u://%d", i)
			}
			s, err := h.Subscribe(Filter{URIs: uris[:n]})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				s.Follow(uris[n+i])
			}
		})
	}
}
