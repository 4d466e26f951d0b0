package server_test

import (
	"slices"
	"strings"
	"testing"

	"tidings/mcp"
	"tidings/server"
)

// TestVisibility covers ORD-2 and CACHE-11: with a visibility rule, each
// principal lists only what it may see (paging keeps working over the
// filtered view), hidden items answer as unknown, and lists and reads
// become private because their content depends on who asks.
func TestVisibility(t *testing.T) {
	// alice sees the tools that start with "a" or "c"; bob those with "b"
	// or "c"; both see every resource but mem://secret, which only alice
	// reads.
	visible := func(principal string, l server.List, key string) bool {
		switch l {
		case server.ListTools:
			return strings.HasPrefix(key, "c") || strings.HasPrefix(key, principal[:1])
		case server.ListResources:
			return key != "mem://secret" || principal == "alice"
		}
		return true
	}
	h := newHarness(t, server.WithVisibility(visible), server.WithPageSize(2))
	for _, n := range []string{"a1", "a2", "a3", "b1", "b2", "c1"} {
		mustAddTool(t, h.srv, textTool(n), echoHandler(n))
	}
	mustAddResource(t, h.srv, "mem://open", textResource("mem://open", "open"))
	mustAddResource(t, h.srv, "mem://secret", textResource("mem://secret", "secret"))
	alice := &harness{t: t, srv: h.srv, principal: "alice"}
	bob := &harness{t: t, srv: h.srv, principal: "bob"}

	walk := func(h *harness) []string {
		var all []string
		var cursor *string
		for range 10 {
			keys, next, res := h.page(mcp.MethodToolsList, cursor)
			if res["cacheScope"] != string(mcp.ScopePrivate) {
				t.Errorf("%s: tools/list cacheScope = %v, want private", h.principal, res["cacheScope"])
			}
			all = append(all, keys...)
			if cursor = next; cursor == nil {
				return all
			}
		}
		t.Fatalf("%s: the walk did not end", h.principal)
		return nil
	}
	if got := walk(alice); !slices.Equal(got, []string{"a1", "a2", "a3", "c1"}) {
		t.Errorf("alice lists %v", got)
	}
	if got := walk(bob); !slices.Equal(got, []string{"b1", "b2", "c1"}) {
		t.Errorf("bob lists %v", got)
	}

	r, _ := bob.call(1, mcp.MethodToolsCall, P{"name": "a1"})
	r.fails(t, -32602)
	r, _ = alice.call(2, mcp.MethodToolsCall, P{"name": "a1"})
	r.ok(t)

	r, _ = bob.call(3, mcp.MethodResourcesRead, P{"uri": "mem://secret"})
	r.fails(t, -32602)
	r, _ = alice.call(4, mcp.MethodResourcesRead, P{"uri": "mem://secret"})
	if res := r.ok(t); res["cacheScope"] != string(mcp.ScopePrivate) {
		t.Errorf("read cacheScope = %v, want private", res["cacheScope"])
	}
	keys, _, _ := bob.page(mcp.MethodResourcesList, nil)
	if slices.Contains(keys, "mem://secret") {
		t.Errorf("bob lists %v, with a resource he may not see", keys)
	}
}
