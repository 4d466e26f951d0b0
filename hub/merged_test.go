package hub

import "testing"

// TestTakeMerged: changes that land on pending state already set are
// counted once each, and the count resets when taken.
func TestTakeMerged(t *testing.T) {
	h := New()
	s, err := h.Subscribe(Filter{Kinds: ToolsList, URIs: []string{"a://x"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for range 3 {
		h.ListChanged(ToolsList)
		h.ResourceUpdated("a://x")
	}
	if n := s.TakeMerged(); n != 4 {
		t.Errorf("merged = %d, want 4 (two changes of each kind folded into the first)", n)
	}
	s.Take(nil)
	h.ListChanged(ToolsList)
	if n := s.TakeMerged(); n != 0 {
		t.Errorf("merged = %d after a drain and one change, want 0", n)
	}
}
