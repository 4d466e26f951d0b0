package streamhttp_test

import (
	"context"
	"net/http"
	"testing"

	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// TestChangeReachesOnlyWhoMaySeeIt, over real HTTP: alice and bob listen
// (2026-07-28), and an anonymous 2025-11-25 session has its GET stream
// open. Adding a tool only alice may see is told to alice alone; a
// resource update right after shows that nothing was pending for the
// others, whose streams would have sent it first.
func TestChangeReachesOnlyWhoMaySeeIt(t *testing.T) {
	visible := func(p string, l server.List, key string) bool {
		return l != server.ListTools || key != "secret" || p == "alice"
	}
	f := newFixture(t, []server.Option{server.WithVisibility(visible)},
		streamhttp.WithPrincipal(func(r *http.Request) string { return r.Header.Get("X-User") }))
	as := func(user string, h http.Header) http.Header { h.Set("X-User", user); return h }
	filter := `{"toolsListChanged":true,"resourceSubscriptions":["res://doc"]}`
	alice := f.open(t, context.Background(), listenBody(1, filter), as("alice", headers(mcp.MethodListen, "")))
	bob := f.open(t, context.Background(), listenBody(2, filter), as("bob", headers(mcp.MethodListen, "")))
	for _, s := range []*stream{alice, bob} {
		if e := s.next(t); e.Method != mcp.NotifyAcknowledged {
			t.Fatalf("first event %s, want the acknowledgement", e.Method)
		}
	}
	sid := legacyInitialize(t, f, nil)
	if r := f.post(t, legacyBody(1, mcp.MethodResourcesSubscribe, map[string]any{"uri": "res://doc"}), legacyHeaders(sid)); r.status != http.StatusOK {
		t.Fatalf("subscribe: %d %s", r.status, r.body)
	}
	old := f.getStream(t, sid)

	if err := f.srv.AddTool(mcp.Tool{Name: "secret"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if e := alice.next(t); e.Method != mcp.NotifyToolsListChanged {
		t.Fatalf("alice got %s, want tools/list_changed", e.Method)
	}
	f.srv.ResourceUpdated("res://doc")
	if e := bob.next(t); e.Method != mcp.NotifyResourceUpdated {
		t.Errorf("bob got %s first, want resources/updated: he may not see the new tool", e.Method)
	}
	old.waitFor(t, "the session's update", updateOf("res://doc"))
	if n := old.count(methodIs(mcp.NotifyToolsListChanged)); n != 0 {
		t.Errorf("the anonymous session was told of a tool it may not see (%d list changes)", n)
	}
	if e := alice.next(t); e.Method != mcp.NotifyResourceUpdated {
		t.Errorf("alice got %s, want resources/updated", e.Method)
	}
}
