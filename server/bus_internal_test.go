package server

import (
	"slices"
	"testing"

	"tidings/bus"
	"tidings/hub"
)

// TestChangeOnBus: every list whose items' visibility is decided travels
// as its own key space and comes back as the same list, keys and all; an
// event with keys of a kind this server does not know is not taken for
// one it does.
func TestChangeOnBus(t *testing.T) {
	want := map[List]bus.Space{ListTools: bus.SpaceTools, ListPrompts: bus.SpacePrompts,
		ListResources: bus.SpaceResources, ListTemplates: bus.SpaceTemplates}
	for l, sp := range want {
		c := change{Event: hub.Event{Kinds: hub.ResourcesList, Audience: []string{"alice"}}, keys: []string{"k"}, list: l}
		e := c.onBus()
		if e.Space != sp || !slices.Equal(e.Keys, c.keys) || !slices.Equal(e.Audience, c.Audience) || e.Kinds != c.Kinds {
			t.Errorf("list %d travels as %+v, want key space %q", l, e, sp)
		}
		back, ok := changeOf(e)
		if !ok || back.list != l || !slices.Equal(back.keys, c.keys) || back.Kinds != c.Kinds || !slices.Equal(back.Audience, c.Audience) {
			t.Errorf("list %d comes back as %+v, %v", l, back, ok)
		}
	}
	if e := (change{Event: hub.Event{Kinds: hub.ToolsList}}).onBus(); e.Keys != nil || e.Space != "" {
		t.Errorf("a change without keys travels as %+v", e)
	}
	if _, ok := changeOf(bus.Event{Kinds: hub.ToolsList, Keys: []string{"k"}, Space: "widgets"}); ok {
		t.Error("keys of an unknown kind of item were taken for a known one")
	}
}
