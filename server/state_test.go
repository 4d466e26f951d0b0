package server_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"tidings/bus"
	"tidings/bus/bustest"
	"tidings/hub"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// stateHarness is a server on shared state, with tools "a" and "b", a
// prompt "p" and a resource mem://r. It is shut down at the end of the
// test.
func stateHarness(t *testing.T, st bus.State, opts ...server.Option) *harness {
	t.Helper()
	h := newHarness(t, append([]server.Option{server.WithSharedState(st)}, opts...)...)
	mustAddTool(t, h.srv, textTool("a"), echoHandler("a"))
	mustAddTool(t, h.srv, textTool("b"), echoHandler("b"))
	mustAddPrompt(t, h.srv, mcp.Prompt{Name: "p"}, simplePrompt)
	mustAddResource(t, h.srv, "mem://r", textResource("mem://r", "R"))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
		defer cancel()
		if err := h.srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return h
}

// names lists what a list method returns, by member and field.
func (h *harness) names(method, member, field string) []string {
	h.t.Helper()
	r, _ := h.call(1, method, P{})
	var out []string
	for _, it := range r.ok(h.t)[member].([]any) {
		out = append(out, it.(map[string]any)[field].(string))
	}
	return out
}

func (h *harness) tools() []string { return h.names(mcp.MethodToolsList, "tools", "name") }

func syncState(t *testing.T, srv *server.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := srv.SyncState(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitUntil polls cond until it holds, or fails the test after waitLimit.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond) // polling, with a deadline
	}
}

// TestSharedStateAppliesToRegistration: what the shared state switched
// off stays off on a server that starts later, whether its items are
// registered before the state is loaded or after, and however often they
// are registered again; keys of items nobody registered are ignored.
func TestSharedStateAppliesToRegistration(t *testing.T) {
	st := bus.NewLocalState()
	ctx := context.Background()
	for key, on := range map[string]bool{"tool:b": false, "prompt:p": false, "resource:mem://r": false,
		"tool:ghost": false, "other:x": false, "tool:a": true} {
		if err := st.Set(ctx, key, on); err != nil {
			t.Fatal(err)
		}
	}
	h := stateHarness(t, st) // registered, perhaps before the first load
	l := h.startListen("L", P{"notifications": P{"toolsListChanged": true}})
	l.ack(t)
	syncState(t, h.srv)
	if got := h.tools(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("tools after the load = %v, want [a]", got)
	}
	if got := h.names(mcp.MethodPromptsList, "prompts", "name"); len(got) != 0 {
		t.Errorf("prompts = %v, want none", got)
	}
	if got := h.names(mcp.MethodResourcesList, "resources", "uri"); len(got) != 0 {
		t.Errorf("resources = %v, want none", got)
	}
	r, _ := h.call(2, mcp.MethodResourcesRead, P{"uri": "mem://r"})
	r.fails(t, jsonrpc.CodeInvalidParams)
	r, _ = h.call(3, mcp.MethodToolsCall, P{"name": "b", "arguments": P{}})
	r.fails(t, jsonrpc.CodeInvalidParams)

	mustAddTool(t, h.srv, textTool("b"), echoHandler("b again"))
	mustAddTool(t, h.srv, textTool("c"), echoHandler("c"))
	if got := h.tools(); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("tools after registering b again = %v, want [a c]", got)
	}
	if err := h.srv.Enable(ctx, server.Tool("b")); err != nil {
		t.Fatal(err)
	}
	if got := h.tools(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("tools after Enable(Tool(b)) = %v", got)
	}
	waitUntil(t, "the write of tool:b", func() bool { return h.srv.StateStats().Unwritten == 0 })
	if m, _ := st.Load(ctx); m["tool:b"] != true {
		t.Errorf("the store holds %v, want tool:b on", m)
	}
	l.rec.waitUntil(t, "a tools list change", func(ns []notif) bool {
		return countMethod(ns, mcp.NotifyToolsListChanged) > 0
	})
}

// TestSharedStateWriteFailure: a change the store cannot take applies here
// at once, Disable says so, a load does not undo it, and it is written
// by itself once the store is back.
func TestSharedStateWriteFailure(t *testing.T) {
	local := bus.NewLocalState()
	fs := bustest.WrapState(local)
	h := stateHarness(t, fs)
	syncState(t, h.srv)
	fs.Cut()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	err := h.srv.Disable(ctx, server.Tool("a"))
	if !errors.Is(err, bustest.ErrCut) {
		t.Fatalf("Disable with the store cut off: %v, want ErrCut", err)
	}
	if got := h.tools(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("tools = %v, want [b]: the change applies here", got)
	}
	if st := h.srv.StateStats(); st.Unwritten != 1 || st.WriteFailures == 0 {
		t.Errorf("stats %+v, want one unwritten change and a failure", st)
	}
	// Another replica writes tool:a on meanwhile; this one's change is
	// still to be written and wins: a load while the store refuses writes
	// does not undo it.
	if err := local.Set(ctx, "tool:a", true); err != nil {
		t.Fatal(err)
	}
	fs.Restore()
	fs.ReadOnly()
	if err := h.srv.SyncState(ctx); !errors.Is(err, bustest.ErrCut) {
		t.Fatalf("SyncState with the store refusing writes: %v, want ErrCut", err)
	}
	if got := h.tools(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("tools after a load = %v, want [b]: the unwritten change stays", got)
	}
	fs.Restore()
	waitUntil(t, "the retried write", func() bool { return h.srv.StateStats().Unwritten == 0 })
	if m, _ := local.Load(ctx); m["tool:a"] != false {
		t.Errorf("the store holds %v, want tool:a off", m)
	}
	syncState(t, h.srv)
	if got := h.tools(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("tools after the store came back = %v, want [b]", got)
	}
	if err := h.srv.Disable(ctx, server.Tool("nope")); !errors.Is(err, server.ErrNotRegistered) {
		t.Errorf("Disable of an unknown tool: %v", err)
	}
	if err := h.srv.Disable(ctx, server.Item{}); err == nil || errors.Is(err, server.ErrNotRegistered) {
		t.Errorf("Disable of the zero Item: %v, want an error naming the mistake", err)
	}
}

// TestSharedStateLoadFailure: a load that fails is retried, and what it
// then finds is applied and told to the listeners.
func TestSharedStateLoadFailure(t *testing.T) {
	local := bus.NewLocalState()
	fs := bustest.WrapState(local)
	fs.Cut()
	h := stateHarness(t, fs)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := h.srv.SyncState(ctx); !errors.Is(err, bustest.ErrCut) {
		t.Fatalf("SyncState with the store cut off: %v", err)
	}
	if st := h.srv.StateStats(); st.Loaded || st.LoadFailures == 0 {
		t.Errorf("stats %+v, want failed loads only", st)
	}
	l := h.startListen("L", P{"notifications": P{"toolsListChanged": true}})
	l.ack(t)
	if err := local.Set(ctx, "tool:a", false); err != nil {
		t.Fatal(err)
	}
	fs.Restore()
	l.rec.waitUntil(t, "a tools list change", func(ns []notif) bool {
		return countMethod(ns, mcp.NotifyToolsListChanged) > 0
	})
	if got := h.tools(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("tools = %v, want [b]", got)
	}
	if !h.srv.StateStats().Loaded {
		t.Error("not loaded")
	}
}

// TestSharedStateFlushedAtShutdown: a change made just before Shutdown is
// in the store once Shutdown returns.
func TestSharedStateFlushedAtShutdown(t *testing.T) {
	st := bus.NewLocalState()
	h := newHarness(t, server.WithSharedState(st))
	mustAddTool(t, h.srv, textTool("a"), echoHandler("a"))
	// A ctx that has ended stops only the wait: the write is still to be
	// made when Shutdown begins.
	ended, end := context.WithCancel(context.Background())
	end()
	if err := h.srv.Disable(ended, server.Tool("a")); errors.Is(err, server.ErrNotRegistered) {
		t.Fatal(err)
	}
	if err := h.srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Shutdown(context.Background()); err != nil {
		t.Fatalf("a second Shutdown: %v", err)
	}
	if m, _ := st.Load(context.Background()); m["tool:a"] != false || len(m) != 1 {
		t.Errorf("the store holds %v, want tool:a off", m)
	}
}

// TestResourceSwitch: a disabled resource is neither listed nor readable,
// with shared state or without.
func TestResourceSwitch(t *testing.T) {
	h := newHarness(t)
	mustAddResource(t, h.srv, "mem://r", textResource("mem://r", "R"))
	if err := h.srv.Disable(t.Context(), server.Resource("mem://r")); err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Disable(t.Context(), server.Resource("mem://none")); !errors.Is(err, server.ErrNotRegistered) {
		t.Fatalf("Disable of an unregistered resource: %v, want ErrNotRegistered", err)
	}
	if got := h.names(mcp.MethodResourcesList, "resources", "uri"); len(got) != 0 {
		t.Fatalf("resources = %v, want none", got)
	}
	r, _ := h.call(2, mcp.MethodResourcesRead, P{"uri": "mem://r"})
	r.fails(t, jsonrpc.CodeInvalidParams)
	if err := h.srv.Enable(t.Context(), server.Resource("mem://r")); err != nil {
		t.Fatal(err)
	}
	r, _ = h.call(3, mcp.MethodResourcesRead, P{"uri": "mem://r"})
	r.ok(t)
}

// TestSharedStateLoadTellsUncoveredKeys: when a load finds several items
// of a kind changed but the event being told names only some of them, a
// caller who may see only another changed item is told too — by this
// replica, since no event reaches him.
func TestSharedStateLoadTellsUncoveredKeys(t *testing.T) {
	group, st := bus.NewLocal(), bus.NewLocalState()
	quiet := bus.WithLogger(slog.New(slog.DiscardHandler))
	b := stateHarness(t, st, server.WithBus(bus.New(group.Conn(), quiet)),
		server.WithVisibility(func(p string, l server.List, key string) bool {
			return l != server.ListTools || p == "alice" && key == "a" || p == "bob" && key == "b"
		}))
	syncState(t, b.srv)
	b.principal = "bob"
	l := b.startListen("L", P{"notifications": P{"toolsListChanged": true}})
	l.ack(t)

	// Another replica switched a and b off, and only a's event arrives.
	other := bus.New(group.Conn(), quiet)
	defer other.Close()
	ctx := context.Background()
	for _, k := range []string{"tool:a", "tool:b"} {
		if err := st.Set(ctx, k, false); err != nil {
			t.Fatal(err)
		}
	}
	other.Publish(bus.Event{Kinds: hub.ToolsList, Keys: []string{"a"}, Space: bus.SpaceTools})
	l.rec.waitUntil(t, "bob to be told that b changed", func(ns []notif) bool {
		return countMethod(ns, mcp.NotifyToolsListChanged) > 0
	})
}
