package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"tidings/hub"
	"tidings/internal/engine"
	"tidings/mcp"
	"tidings/server"
)

// listenServer has tools and resources but no prompts.
func listenServer(t testing.TB, opts ...server.Option) *harness {
	h := newHarness(t, opts...)
	mustAddTool(t, h.srv, textTool("base"), echoHandler("b"))
	mustAddResource(t, h.srv, "mem://a", textResource("mem://a", "A"))
	return h
}

var allKinds = P{"notifications": P{
	"toolsListChanged":      true,
	"promptsListChanged":    true,
	"resourcesListChanged":  true,
	"resourceSubscriptions": []string{"mem://b", "mem://a", "mem://a"},
}}

// TestListenAckGrant covers SUB-3/4: the ack is the first message and
// carries the granted subset; promptsListChanged is not granted without
// prompts, resource subscriptions not without resources.
func TestListenAckGrant(t *testing.T) {
	h := listenServer(t)
	l := h.startListen("L1", allKinds)
	g := l.ack(t)
	if g["toolsListChanged"] != true || g["resourcesListChanged"] != true {
		t.Errorf("grant = %v, want tools and resources list changes", g)
	}
	if _, ok := g["promptsListChanged"]; ok {
		t.Errorf("grant = %v: promptsListChanged granted by a server without prompts", g)
	}
	if subs := fmt.Sprint(g["resourceSubscriptions"]); subs != "[mem://a mem://b]" {
		t.Errorf("granted resourceSubscriptions = %s, want [mem://a mem://b]", subs)
	}
	l.stop(t)

	toolsOnly := newHarness(t)
	mustAddTool(t, toolsOnly.srv, textTool("x"), echoHandler("x"))
	l = toolsOnly.startListen(2, allKinds)
	g = l.ack(t)
	if len(g) != 1 || g["toolsListChanged"] != true {
		t.Errorf("tools-only grant = %v, want only toolsListChanged", g)
	}
	l.stop(t)

	// An empty filter is acknowledged with an empty grant and stays open.
	l = h.startListen(3, P{"notifications": P{}})
	if g := l.ack(t); len(g) != 0 {
		t.Errorf("empty filter granted %v", g)
	}
	l.stop(t)

	// Malformed listens are refused before any ack.
	for _, params := range []P{{}, {"notifications": 5}, {"notifications": P{"toolsListChanged": "yes"}}} {
		r, rec := h.call(4, mcp.MethodListen, params)
		r.fails(t, -32602)
		if n := len(rec.messages()); n != 0 {
			t.Errorf("refused listen wrote %d messages", n)
		}
	}
	many := make([]string, 10001)
	for i := range many {
		many[i] = fmt.Sprintf("mem://r/%d", i)
	}
	r, _ := h.call(5, mcp.MethodListen, P{"notifications": P{"resourceSubscriptions": many}})
	r.fails(t, -32602)
}

// TestListenTags covers SUB-6 and META-7: the ack and every notification
// carry the listen id under subscriptionId with its JSON type, for
// integer, string and digit-string ids on concurrent listens.
func TestListenTags(t *testing.T) {
	h := listenServer(t)
	ids := []any{5, "5", "listen-α", json.RawMessage(`9007199254740993`)}
	var ls []*listen
	for _, id := range ids {
		l := h.startListen(id, allKinds)
		l.ack(t)
		ls = append(ls, l)
	}
	mustAddTool(t, h.srv, textTool("new"), echoHandler("n"))
	h.srv.ResourceUpdated("mem://a")
	for _, l := range ls {
		ns := l.rec.waitUntil(t, "tool and resource notifications", func(ns []notif) bool {
			return countMethod(ns, mcp.NotifyToolsListChanged) > 0 && countMethod(ns, mcp.NotifyResourceUpdated) > 0
		})
		for _, n := range ns {
			l.checkTag(t, n)
		}
	}
	for _, l := range ls {
		l.stop(t)
	}
}

// TestListenOnlyRequested covers SUB-2 and SUB-9: a listen hears only the
// types it asked for, and never progress or log messages, even when its
// own _meta asks for them.
func TestListenOnlyRequested(t *testing.T) {
	h := listenServer(t)
	mustAddPrompt(t, h.srv, mcp.Prompt{Name: "p"}, simplePrompt)
	for _, c := range []struct {
		name   string
		filter P
		want   string // the one notification method allowed
		final  func()
	}{
		{"tools", P{"toolsListChanged": true}, mcp.NotifyToolsListChanged,
			func() { mustAddTool(t, h.srv, textTool("final"), echoHandler("f")) }},
		{"prompts", P{"promptsListChanged": true}, mcp.NotifyPromptsListChanged,
			func() { mustAddPrompt(t, h.srv, mcp.Prompt{Name: "final"}, simplePrompt) }},
		{"resources", P{"resourcesListChanged": true}, mcp.NotifyResourcesListChanged,
			func() { mustAddResource(t, h.srv, "mem://final", textResource("mem://final", "f")) }},
		{"uri", P{"resourceSubscriptions": []string{"mem://watched"}}, mcp.NotifyResourceUpdated,
			func() { h.srv.ResourceUpdated("mem://watched") }},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := h.startListen("only-"+c.name, P{
				"notifications": c.filter,
				"_meta":         P{mcp.MetaProgressToken: "pt", mcp.MetaLogLevel: "debug"},
			})
			l.ack(t)
			// Every other kind of change, then the one this listen wants.
			mustAddTool(t, h.srv, textTool("noise-"+c.name), echoHandler("n"))
			h.srv.RemoveTools("noise-" + c.name)
			mustAddPrompt(t, h.srv, mcp.Prompt{Name: "noise-" + c.name}, simplePrompt)
			mustAddResource(t, h.srv, "mem://noise-"+c.name, textResource("", "n"))
			if err := h.srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "mem://noise-" + c.name + "/{x}"}, textResource("", "n")); err != nil {
				t.Fatal(err)
			}
			h.srv.ResourceUpdated("mem://a")
			h.srv.ResourceUpdated("mem://watched/child")
			c.final()
			l.rec.waitUntil(t, c.want, func(ns []notif) bool { return countMethod(ns, c.want) > 0 })
			ns := l.stop(t)
			for _, n := range ns[1:] {
				if n.Method != c.want {
					t.Errorf("unrequested %s on a listen for %s (SUB-2): %s", n.Method, c.name, n.raw)
				}
				if n.Method == mcp.NotifyResourceUpdated && n.Params["uri"] != "mem://watched" {
					t.Errorf("update for unwatched %v", n.Params["uri"])
				}
			}
		})
	}
}

// TestListenListChanged covers SUB-10: a list_changed for every add,
// remove, replace, disable and enable, of tools, prompts, resources and
// templates.
func TestListenListChanged(t *testing.T) {
	h := listenServer(t)
	mustAddPrompt(t, h.srv, mcp.Prompt{Name: "p"}, simplePrompt)
	l := h.startListen(1, P{"notifications": P{"toolsListChanged": true, "promptsListChanged": true, "resourcesListChanged": true}})
	l.ack(t)
	for _, op := range []struct {
		name   string
		method string
		do     func()
	}{
		{"add tool", mcp.NotifyToolsListChanged, func() { mustAddTool(t, h.srv, textTool("t1"), echoHandler("1")) }},
		{"replace tool", mcp.NotifyToolsListChanged, func() { mustAddTool(t, h.srv, textTool("t1"), echoHandler("2")) }},
		{"disable tool", mcp.NotifyToolsListChanged, func() {
			if err := h.srv.Disable(t.Context(), server.Tool("t1")); err != nil {
				t.Fatal(err)
			}
		}},
		{"enable tool", mcp.NotifyToolsListChanged, func() {
			if err := h.srv.Enable(t.Context(), server.Tool("t1")); err != nil {
				t.Fatal(err)
			}
		}},
		{"remove tool", mcp.NotifyToolsListChanged, func() { h.srv.RemoveTools("t1") }},
		{"add prompt", mcp.NotifyPromptsListChanged, func() { mustAddPrompt(t, h.srv, mcp.Prompt{Name: "p1"}, simplePrompt) }},
		{"disable prompt", mcp.NotifyPromptsListChanged, func() {
			if err := h.srv.Disable(t.Context(), server.Prompt("p1")); err != nil {
				t.Fatal(err)
			}
		}},
		{"enable prompt", mcp.NotifyPromptsListChanged, func() {
			if err := h.srv.Enable(t.Context(), server.Prompt("p1")); err != nil {
				t.Fatal(err)
			}
		}},
		{"remove prompt", mcp.NotifyPromptsListChanged, func() { h.srv.RemovePrompts("p1") }},
		{"add resource", mcp.NotifyResourcesListChanged, func() { mustAddResource(t, h.srv, "mem://r1", textResource("", "r")) }},
		{"remove resource", mcp.NotifyResourcesListChanged, func() { h.srv.RemoveResources("mem://r1") }},
		{"add template", mcp.NotifyResourcesListChanged, func() {
			if err := h.srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "mem://t/{x}"}, textResource("", "t")); err != nil {
				t.Fatal(err)
			}
		}},
		{"remove template", mcp.NotifyResourcesListChanged, func() { h.srv.RemoveResourceTemplates("mem://t/{x}") }},
	} {
		before := countMethod(decodeNotifs(t, l.rec.messages()), op.method)
		op.do()
		l.rec.waitUntil(t, op.name+" → "+op.method, func(ns []notif) bool { return countMethod(ns, op.method) > before })
	}
	// The tool is listed again after enable and gone after remove.
	r, _ := h.call(1, mcp.MethodToolsList, P{})
	var names []string
	for _, tl := range r.ok(t)["tools"].([]any) {
		names = append(names, tl.(map[string]any)["name"].(string))
	}
	if !slices.Equal(names, []string{"base"}) {
		t.Errorf("tools after the walk: %v", names)
	}
	ns := l.stop(t)
	for _, n := range ns {
		l.checkTag(t, n)
	}
}

// TestListenResourceUpdated covers SUB-10 for URIs: updates only for the
// URIs this listen subscribed to, each with its uri.
func TestListenResourceUpdated(t *testing.T) {
	h := listenServer(t)
	l := h.startListen("u", P{"notifications": P{"resourceSubscriptions": []string{"mem://a", "mem://b"}}})
	l.ack(t)
	h.srv.ResourceUpdated("mem://c")
	h.srv.ResourceUpdated("mem://a/child")
	h.srv.ResourceUpdated("mem://a")
	l.rec.waitUntil(t, "update of mem://a", func(ns []notif) bool { return countMethod(ns, mcp.NotifyResourceUpdated) >= 1 })
	h.srv.ResourceUpdated("mem://b")
	l.rec.waitUntil(t, "update of mem://b", func(ns []notif) bool {
		for _, n := range ns {
			if n.Method == mcp.NotifyResourceUpdated && n.Params["uri"] == "mem://b" {
				return true
			}
		}
		return false
	})
	ns := l.stop(t)
	var uris []string
	for _, n := range ns[1:] {
		uris = append(uris, fmt.Sprint(n.Params["uri"]))
	}
	if !slices.Equal(uris, []string{"mem://a", "mem://b"}) {
		t.Errorf("updates for %v, want [mem://a mem://b]", uris)
	}
}

// TestListenAudience: an event with an audience reaches only listens of
// principals in it.
func TestListenAudience(t *testing.T) {
	h := listenServer(t)
	alice := &harness{t: t, srv: h.srv, principal: "alice"}
	bob := &harness{t: t, srv: h.srv, principal: "bob"}
	la := alice.startListen(1, P{"notifications": P{"toolsListChanged": true}})
	lb := bob.startListen(1, P{"notifications": P{"toolsListChanged": true}})
	la.ack(t)
	lb.ack(t)
	engine.Of(h.srv).Hub().Publish(hub.Event{Kinds: hub.ToolsList, Audience: []string{"alice"}})
	la.rec.waitUntil(t, "alice's change", func(ns []notif) bool { return countMethod(ns, mcp.NotifyToolsListChanged) == 1 })
	// Then one for bob only; had he heard alice's, he would have two.
	engine.Of(h.srv).Hub().Publish(hub.Event{Kinds: hub.ToolsList, Audience: []string{"bob"}})
	lb.rec.waitUntil(t, "bob's change", func(ns []notif) bool { return countMethod(ns, mcp.NotifyToolsListChanged) >= 1 })
	if n := countMethod(lb.stop(t), mcp.NotifyToolsListChanged); n != 1 {
		t.Errorf("bob heard %d changes, want only his own", n)
	}
	if n := countMethod(la.stop(t), mcp.NotifyToolsListChanged); n != 1 {
		t.Errorf("alice heard %d changes, want only her own", n)
	}
}

// TestListenManyAndShutdown covers SUB-8 and SUB-13: many concurrent
// listens, each acked and notified under its own id, then Shutdown ends
// every one with the complete result carrying its subscriptionId.
func TestListenManyAndShutdown(t *testing.T) {
	h := listenServer(t)
	const n = 100
	ls := make([]*listen, n)
	for i := range ls {
		var id any = i
		if i%2 == 1 {
			id = fmt.Sprintf("s%d", i)
		}
		ls[i] = h.startListen(id, P{"notifications": P{
			"toolsListChanged":      true,
			"resourceSubscriptions": []string{fmt.Sprintf("mem://r/%d", i)},
		}})
	}
	for _, l := range ls {
		l.ack(t)
	}
	mustAddTool(t, h.srv, textTool("new"), echoHandler("n"))
	h.srv.ResourceUpdated("mem://r/7")
	for i, l := range ls {
		want := 1
		if i == 7 {
			want = 2
		}
		ns := l.rec.waitCount(t, 1+want)
		for _, m := range ns {
			l.checkTag(t, m)
		}
	}
	ns := ls[7].rec.waitUntil(t, "update of mem://r/7", func(ns []notif) bool { return countMethod(ns, mcp.NotifyResourceUpdated) == 1 })
	for _, m := range ns {
		if m.Method == mcp.NotifyResourceUpdated && m.Params["uri"] != "mem://r/7" {
			t.Errorf("listen 7 got update for %v", m.Params["uri"])
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	for i, l := range ls {
		rep := l.wait(t)
		if !rep.ListenEnded {
			t.Errorf("listen %v: ListenEnded not set", l.id)
		}
		r := decodeResponse(t, mcp.MethodListen, l.id, rep)
		res := r.ok(t)
		meta, _ := res["_meta"].(map[string]any)
		got, _ := json.Marshal(meta[mcp.MetaSubscriptionID])
		want, _ := json.Marshal(l.id)
		if string(got) != string(want) {
			t.Errorf("listen %d: complete result subscriptionId %s, want %s", i, got, want)
		}
		for _, k := range []string{"ttlMs", "cacheScope"} {
			if _, ok := res[k]; ok {
				t.Errorf("listen result carries %s", k)
			}
		}
		if meta[mcp.MetaServerInfo] == nil {
			t.Errorf("listen result without serverInfo (META-4)")
		}
	}
	if got := engine.Of(h.srv).Hub().Len(); got != 0 {
		t.Errorf("%d subscriptions left in the hub after shutdown", got)
	}

	// After shutdown a new listen is acknowledged and ended at once, and
	// other requests are still served.
	l := h.startListen("late", P{"notifications": P{"toolsListChanged": true}})
	l.ack(t)
	r := decodeResponse(t, mcp.MethodListen, "late", l.wait(t))
	r.ok(t)
	if ns := l.rec.messages(); len(ns) != 1 {
		t.Errorf("late listen wrote %d messages, want only the ack", len(ns))
	}
	rr, _ := h.call(1, mcp.MethodToolsList, P{})
	rr.ok(t)
}

// TestShutdownWaitsForStuckListen: Shutdown gives up when its context
// ends while a listen is stuck writing, and the listen still ends once
// its writer moves.
func TestShutdownWaitsForStuckListen(t *testing.T) {
	h := listenServer(t)
	rec := newRecorder(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	sent := 0
	rec.hook = func(msg []byte) error {
		sent++ // the listen's single writer calls Send, so no lock is needed
		if sent == 2 {
			once.Do(func() { close(entered) })
			<-release
		}
		return nil
	}
	l := h.startListenOn("stuck", P{"notifications": P{"toolsListChanged": true}}, rec)
	l.ack(t)
	mustAddTool(t, h.srv, textTool("x"), echoHandler("x"))
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := h.srv.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown with a stuck listen = %v, want a deadline error", err)
	}
	close(release)
	rep := l.wait(t)
	if !rep.ListenEnded {
		t.Errorf("stuck listen did not end with the complete result: %+v", rep)
	}
	decodeResponse(t, mcp.MethodListen, "stuck", rep).ok(t)
}

// TestListenClientCancel: a listen the client cancels ends with no
// response and nothing more on its stream.
func TestListenClientCancel(t *testing.T) {
	h := listenServer(t)
	l := h.startListen(1, P{"notifications": P{"toolsListChanged": true}})
	l.ack(t)
	ns := l.stop(t)
	if len(ns) != 1 {
		t.Errorf("%d messages, want only the ack", len(ns))
	}
	// Changes after the end reach nobody (the recorder reports late sends).
	mustAddTool(t, h.srv, textTool("after"), echoHandler("a"))
	if got := engine.Of(h.srv).Hub().Len(); got != 0 {
		t.Errorf("%d subscriptions left after cancel", got)
	}
}

// TestListenBrokenStream: a stream that fails ends the listen abruptly,
// without the complete result, so the client knows to reconnect.
func TestListenBrokenStream(t *testing.T) {
	h := listenServer(t)
	for _, okSends := range []int{0, 1} {
		rec := newRecorder(t)
		rec.hook = errAfter(okSends)
		l := h.startListenOn(okSends, P{"notifications": P{"toolsListChanged": true}}, rec)
		if okSends > 0 {
			l.ack(t)
			mustAddTool(t, h.srv, textTool(fmt.Sprint("b", okSends)), echoHandler("b"))
		}
		rep := l.wait(t)
		if rep.Body != nil || rep.Outcome != engine.Broken {
			t.Errorf("after %d good sends: reply %+v, want Abort and no body", okSends, rep)
		}
	}
}

// TestListenKeepAlive: an idle listen gets transport keep-alives.
func TestListenKeepAlive(t *testing.T) {
	h := listenServer(t, server.WithKeepAlive(5*time.Millisecond))
	l := h.startListen(1, P{"notifications": P{"toolsListChanged": true}})
	l.ack(t)
	deadline := time.Now().Add(waitLimit)
	for {
		l.rec.mu.Lock()
		n := l.rec.keepAlives
		l.rec.mu.Unlock()
		if n >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keep-alives", n)
		}
		<-l.rec.poke
	}
	l.stop(t)
}

// TestHubCoalescing: a reader stuck on one notification while many
// changes arrive gets them coalesced once it moves, and the last change
// is never lost.
func TestHubCoalescing(t *testing.T) {
	h := listenServer(t)
	rec := newRecorder(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	sent := 0
	rec.hook = func([]byte) error {
		sent++ // single writer
		if sent == 2 {
			close(entered)
			<-release
		}
		return nil
	}
	l := h.startListenOn("slow", P{"notifications": P{"toolsListChanged": true, "resourceSubscriptions": []string{"mem://a", "mem://b"}}}, rec)
	l.ack(t)
	mustAddTool(t, h.srv, textTool("first"), echoHandler("f"))
	<-entered // the writer is now stuck sending the first change
	for i := range 1000 {
		h.srv.ResourceUpdated("mem://a")
		if i%10 == 0 {
			mustAddTool(t, h.srv, textTool(fmt.Sprint("burst", i)), echoHandler("b"))
		}
	}
	close(release)
	l.rec.waitUntil(t, "the coalesced changes", func(ns []notif) bool {
		return countMethod(ns, mcp.NotifyToolsListChanged) >= 2 && countMethod(ns, mcp.NotifyResourceUpdated) >= 1
	})
	ns := l.stop(t)
	// ack, the stuck tools change, then one tools change and one update.
	if len(ns) != 4 {
		t.Errorf("%d messages, want 4 (changes coalesced):\n%s", len(ns), dump(ns))
	}
}

// TestHubConcurrentPublishers: changes published from many goroutines
// while the listen is draining all end up reported.
func TestHubConcurrentPublishers(t *testing.T) {
	h := listenServer(t)
	uris := []string{"mem://u0", "mem://u1", "mem://u2", "mem://u3"}
	l := h.startListen("busy", P{"notifications": P{"toolsListChanged": true, "resourceSubscriptions": uris}})
	l.ack(t)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				h.srv.ResourceUpdated(uris[(g+i)%len(uris)])
				if i%50 == 0 {
					mustAddTool(t, h.srv, textTool(fmt.Sprintf("g%d-%d", g, i)), echoHandler("x"))
				}
			}
		})
	}
	wg.Wait()
	l.rec.waitUntil(t, "every URI and the tool list", func(ns []notif) bool {
		seen := map[any]bool{}
		for _, n := range ns {
			if n.Method == mcp.NotifyResourceUpdated {
				seen[n.Params["uri"]] = true
			}
		}
		return len(seen) == len(uris) && countMethod(ns, mcp.NotifyToolsListChanged) > 0
	})
	l.stop(t)
}
