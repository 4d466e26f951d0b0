package server

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"tidings/hub"
	"tidings/mcp"
)

// TestRegistryMatchesModel: after any sequence of puts (single and
// batched, with replacements and duplicate keys), removals, enables and
// disables, the snapshot lists exactly the enabled keys in sorted order,
// and get finds each of them and nothing else.
func TestRegistryMatchesModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	r := newRegistry[int](hub.New(), mcp.ToolsList)
	model := map[string]bool{} // key → enabled
	key := func() string { return fmt.Sprintf("k%03d", rng.IntN(300)) }
	for step := range 5000 {
		switch rng.IntN(4) {
		case 0:
			var es []*entry[int]
			for range rng.IntN(5) + 1 {
				k := key()
				es = append(es, &entry[int]{key: k, val: step})
				model[k] = true
			}
			r.put(es...)
		case 1:
			var ks []string
			for range rng.IntN(3) + 1 {
				k := key()
				ks = append(ks, k)
				delete(model, k)
			}
			r.remove(ks...)
		case 2, 3:
			k, on := key(), rng.IntN(2) == 0
			if _, ok := model[k]; ok {
				model[k] = on
			}
			r.setEnabled(k, on)
		}
		var want []string
		for k, on := range model {
			if on {
				want = append(want, k)
			}
		}
		slices.Sort(want)
		snap := r.load()
		got := make([]string, 0, len(snap.items))
		for _, e := range snap.items {
			got = append(got, e.key)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("step %d: snapshot %v, want %v", step, got, want)
		}
		for k, on := range model {
			if _, ok := snap.get(k); ok != on {
				t.Fatalf("step %d: get(%s) = %v, want %v", step, k, ok, on)
			}
		}
		if _, ok := snap.get("absent"); ok {
			t.Fatalf("step %d: get of an absent key succeeded", step)
		}
	}
}
