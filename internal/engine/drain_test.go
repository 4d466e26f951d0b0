package engine

import (
	"errors"
	"slices"
	"testing"

	"tidings/hub"
	"tidings/mcp"
)

// pendingSource has one drain's worth pending.
type pendingSource struct {
	kinds hub.Kind
	uris  []string
}

func (s *pendingSource) Wake() <-chan struct{} { return nil }
func (s *pendingSource) Ending() bool          { return false }
func (s *pendingSource) TakeMerged() int       { return 0 }
func (s *pendingSource) Take(buf []string) (hub.Kind, []string) {
	k, u := s.kinds, s.uris
	s.kinds, s.uris = 0, nil
	return k, append(buf, u...)
}

// stampedPrompts are names whose prompts list change was made for the
// change at hand (once), as a traced change's is.
type stampedPrompts struct{ names }

func (stampedPrompts) ListChanged(l mcp.List) ([]byte, bool) {
	return []byte(l.Changed()), l == mcp.PromptsList
}

// TestDrainHandsOnEveryNotice: a drain hands on one notice per list that
// changed, in the lists' order, then one per updated URI; a list's own
// message is Kept, one made for the change and a URI's update are not;
// and the first failure stops it, counting only what was taken.
func TestDrainHandsOnEveryNotice(t *testing.T) {
	src := &pendingSource{kinds: hub.ResourcesList | hub.ToolsList | hub.PromptsList, uris: []string{"file:///a", "file:///b"}}
	var d Drain
	var got []string
	var kept []bool
	sent, err := d.Take(src, stampedPrompts{}, func(n Notice) error {
		got = append(got, string(n.Msg))
		kept = append(kept, n.Kept)
		if n.Kept && n.List.Changed() != string(n.Msg) {
			t.Errorf("a kept notice names list %v but is %s", n.List, n.Msg)
		}
		return nil
	})
	want := []string{mcp.NotifyToolsListChanged, mcp.NotifyPromptsListChanged, mcp.NotifyResourcesListChanged, "file:///a", "file:///b"}
	if err != nil || sent != len(want) || !slices.Equal(got, want) {
		t.Fatalf("drain = %d, %v: %q; want %d: %q", sent, err, got, len(want), want)
	}
	if wantKept := []bool{true, false, true, false, false}; !slices.Equal(kept, wantKept) {
		t.Errorf("kept %v, want %v", kept, wantKept)
	}

	src = &pendingSource{kinds: hub.ToolsList, uris: []string{"file:///a", "file:///b"}}
	broken := errors.New("broken pipe")
	calls := 0
	sent, err = d.Take(src, names{}, func(n Notice) error {
		if calls++; calls == 2 {
			return broken
		}
		return nil
	})
	if !errors.Is(err, broken) || sent != 1 || calls != 2 {
		t.Errorf("a drain whose second write fails: sent %d, %v after %d calls; want 1, the failure, 2", sent, err, calls)
	}
}
