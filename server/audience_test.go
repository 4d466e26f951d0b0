package server_test

import (
	"context"
	"testing"
	"time"

	"tidings/internal/engine"
	"tidings/internal/legacy"
	"tidings/mcp"
	"tidings/server"
)

// onlyAlice lets alice see the tool "secret"; everyone sees the rest.
func onlyAlice(principal string, l server.List, key string) bool {
	return !(l == server.ListTools && key == "secret") || principal == "alice"
}

// TestChangeToldOnlyToWhoMaySeeIt: adding or disabling a tool only alice
// may see tells alice's listen and nobody else's — neither bob's
// 2026-07-28 listen nor bob's 2025-11-25 session stream. A resource
// update after the change shows that nothing was pending for bob: his
// stream sends what was pending in order, so a tools/list_changed would
// come first.
func TestChangeToldOnlyToWhoMaySeeIt(t *testing.T) {
	h := newHarness(t, server.WithVisibility(onlyAlice))
	mustAddTool(t, h.srv, textTool("open"), echoHandler("x"))
	mustAddResource(t, h.srv, "res://marker", textResource("res://marker", "m"))
	filter := P{"notifications": P{"toolsListChanged": true, "resourceSubscriptions": []string{"res://marker"}}}
	alice := (&harness{t: t, srv: h.srv, principal: "alice"}).startListen("a", filter)
	alice.ack(t)
	bob := (&harness{t: t, srv: h.srv, principal: "bob"}).startListen("b", filter)
	bob.ack(t)

	tbl := legacy.NewTable(engine.Of(h.srv), 10, 10, time.Hour)
	lsrvBob := &lsrv{Server: h.srv, tbl: tbl}
	ss, rep, _ := tbl.Open(context.Background(), legacyCall(t, lsrvBob, 0, mcp.MethodInitialize, map[string]any{
		"protocolVersion": mcp.LegacyVersion, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "bob", "version": "1"},
	}), "bob")
	if ss == nil {
		t.Fatalf("initialize: %s", rep.Body)
	}
	r, _ := serve(t, lsrvBob, ss, 1, mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://marker"})
	r.ok(t)
	st := openStream(t, lsrvBob, ss)

	for _, change := range []struct {
		name string
		do   func()
	}{
		{"add", func() { mustAddTool(t, h.srv, textTool("secret"), echoHandler("s")) }},
		{"disable", func() {
			if err := h.srv.Disable(t.Context(), server.Tool("secret")); err != nil {
				t.Fatal(err)
			}
		}},
		{"enable", func() {
			if err := h.srv.Enable(t.Context(), server.Tool("secret")); err != nil {
				t.Fatal(err)
			}
		}},
		{"remove", func() { h.srv.RemoveTools("secret") }},
	} {
		before := countMethod(decodeNotifs(t, alice.rec.messages()), mcp.NotifyToolsListChanged)
		change.do()
		alice.rec.waitUntil(t, "alice told of "+change.name, func(ns []notif) bool {
			return countMethod(ns, mcp.NotifyToolsListChanged) > before
		})
		h.srv.ResourceUpdated("res://marker")
		ns := bob.rec.waitUntil(t, "bob's marker after "+change.name, func(ns []notif) bool {
			return countMethod(ns, mcp.NotifyResourceUpdated) > 0
		})
		if n := countMethod(ns, mcp.NotifyToolsListChanged); n != 0 {
			t.Errorf("%s: bob's listen was told of a tool he may not see (%d list changes)", change.name, n)
		}
		st.out.waitFor(t, "bob's session marker after "+change.name, isUpdate("res://marker"))
		if n := st.out.count(isMethod(mcp.NotifyToolsListChanged)); n != 0 {
			t.Errorf("%s: bob's session stream was told of a tool he may not see (%d list changes)", change.name, n)
		}
		alice.rec.waitUntil(t, "alice's marker", func(ns []notif) bool { return countMethod(ns, mcp.NotifyResourceUpdated) > 0 })
		// Start the next round from empty records.
		bob.rec.reset()
		alice.rec.reset()
		st.out.reset()
	}
	// A change everyone may see still reaches bob.
	mustAddTool(t, h.srv, textTool("open2"), echoHandler("y"))
	bob.rec.waitUntil(t, "bob told of a public tool", func(ns []notif) bool { return countMethod(ns, mcp.NotifyToolsListChanged) == 1 })
	st.out.waitFor(t, "bob's session told of a public tool", isMethod(mcp.NotifyToolsListChanged))
	st.stop(t)
}

// reset forgets the messages recorded so far.
func (r *recorder) reset() {
	r.mu.Lock()
	r.msgs = nil
	r.mu.Unlock()
}

// reset forgets the messages recorded so far.
func (o *legacyOut) reset() {
	o.mu.Lock()
	o.msgs = nil
	o.mu.Unlock()
}

// TestLegacySubscribeRefusesHidden: a 2025-11-25 resources/subscribe of a
// resource the session's principal may not see is refused as if it did
// not exist; its owner may subscribe.
func TestLegacySubscribeRefusesHidden(t *testing.T) {
	h := newHarness(t, server.WithVisibility(func(p string, l server.List, key string) bool {
		return !(l == server.ListResources && key == "res://alice") || p == "alice"
	}))
	mustAddResource(t, h.srv, "res://alice", textResource("res://alice", "a"))
	tbl := legacy.NewTable(engine.Of(h.srv), 10, 10, time.Hour)
	srv := &lsrv{Server: h.srv, tbl: tbl}
	open := func(who string) *legacy.Session {
		ss, rep, _ := tbl.Open(context.Background(), legacyCall(t, srv, 0, mcp.MethodInitialize, map[string]any{
			"protocolVersion": mcp.LegacyVersion, "capabilities": map[string]any{},
			"clientInfo": map[string]any{"name": who, "version": "1"},
		}), who)
		if ss == nil {
			t.Fatalf("initialize: %s", rep.Body)
		}
		return ss
	}
	r, _ := serve(t, srv, open("bob"), 1, mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://alice"})
	r.fails(t, -32602)
	r, _ = serve(t, srv, open("alice"), 1, mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://alice"})
	r.ok(t)
}
