package hub

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestChangeVisitsFollowersInOrder: a list change reaches its followers
// in the order they subscribed, and after closes in any order it still
// reaches every open follower once and no closed one. (The order is what
// keeps a change to tens of thousands of listens near the kernel's
// floor: their memory is touched in the order it was allocated.)
func TestChangeVisitsFollowersInOrder(t *testing.T) {
	h := New()
	const n = 200
	var got []int
	subs := make([]*Subscription, n)
	for i := range n {
		kinds := ToolsList
		if i%3 == 0 {
			kinds |= PromptsList // in two lists' followers
		}
		s, err := h.Subscribe(Filter{Kinds: kinds})
		if err != nil {
			t.Fatal(err)
		}
		s.Notify(func() { got = append(got, i) })
		subs[i] = s
	}
	h.ListChanged(ToolsList)
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(got, want) {
		t.Fatalf("a change visited its followers in the order %v, want the order they subscribed", got)
	}

	open := map[int]bool{}
	for i := range n {
		open[i] = true
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, i := range r.Perm(n)[:n/2] {
		subs[i].Close()
		delete(open, i)
	}
	for _, kinds := range []Kind{ToolsList, PromptsList} {
		got = got[:0]
		h.ListChanged(kinds)
		seen := map[int]int{}
		for _, i := range got {
			seen[i]++
		}
		for i := range n {
			wantOne := open[i] && (kinds == ToolsList || i%3 == 0)
			if c := seen[i]; (c == 1) != wantOne || c > 1 {
				t.Fatalf("after closes, a change of %v reached subscription %d %d times (open %v)", kinds, i, c, open[i])
			}
		}
	}
	for i := range open {
		subs[i].Close()
	}
	for i, f := range h.kinds {
		if len(f.subs) != 0 {
			t.Errorf("list %d still has %d followers after every subscription closed", i, len(f.subs))
		}
	}
}
