package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"tidings/hub"
	"tidings/internal/engine"
	"tidings/mcp"
	"tidings/server"
)

// fast reconnects keep fault tests short.
var fastBackoff = WatchOptions{MinBackoff: 5 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, PollInterval: time.Hour}

func withKinds(o WatchOptions, tools, prompts, resources bool, uris ...string) WatchOptions {
	o.Tools, o.Prompts, o.Resources, o.URIs = tools, prompts, resources, uris
	return o
}

// TestWatcherReportsChanges: the first read after the acknowledgement
// reports what is there; every later change is reported by name as added,
// removed or changed.
func TestWatcherReportsChanges(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	addTools(t, f.srv, "a", "b")
	c := primed(t, f)
	w, log := watch(t, c, withKinds(fastBackoff, true, false, false))
	ev, _ := log.waitFor(t, "connected", kindIs(Connected))
	if !ev.Granted.ToolsListChanged || ev.Granted.PromptsListChanged {
		t.Errorf("granted = %+v", ev.Granted)
	}
	if w.State() != Live {
		t.Errorf("state = %s, want live", w.State())
	}
	ev, _ = log.waitFor(t, "initial read", kindIs(ToolsChanged))
	if !slices.Equal(ev.Added, []string{"a", "b"}) {
		t.Errorf("initial ToolsChanged = %+v", ev)
	}
	addTools(t, f.srv, "c")
	ev, _ = log.waitFor(t, "added", kindIs(ToolsChanged))
	if !slices.Equal(ev.Added, []string{"c"}) || len(ev.Removed)+len(ev.Changed) != 0 {
		t.Errorf("after adding c: %+v", ev)
	}
	f.srv.RemoveTools("a")
	ev, _ = log.waitFor(t, "removed", kindIs(ToolsChanged))
	if !slices.Equal(ev.Removed, []string{"a"}) || len(ev.Added)+len(ev.Changed) != 0 {
		t.Errorf("after removing a: %+v", ev)
	}
	must(t, f.srv.AddTool(mcp.Tool{Name: "b", Description: "new words"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) { return text("b"), nil }))
	ev, _ = log.waitFor(t, "changed", kindIs(ToolsChanged))
	if !slices.Equal(ev.Changed, []string{"b"}) || len(ev.Added)+len(ev.Removed) != 0 {
		t.Errorf("after redefining b: %+v", ev)
	}
	tools, err := c.Tools(context.Background())
	must(t, err)
	if !slices.Equal(names(tools), []string{"b", "c"}) || tools[0].Description != "new words" {
		t.Errorf("Tools = %+v", tools)
	}
}

// TestWatcherServerKilledMidStream: the HTTP server dies under an open
// listen. The watcher reports an abrupt drop, marks what it covered
// unknown, retries with backoff while the server is down, and once the
// server is back on the same address reconnects and reports the change
// made while it was away.
func TestWatcherServerKilledMidStream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	f := newFixture(t, nil, fixtureOpts{ln: ln, sopts: []server.Option{
		server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: time.Hour}),
	}})
	addTools(t, f.srv, "a")
	c := primed(t, f)
	w, log := watch(t, c, withKinds(fastBackoff, true, false, false))
	log.waitFor(t, "connected", kindIs(Connected))
	log.waitFor(t, "initial read", kindIs(ToolsChanged))
	if st := c.Freshness(mcp.MethodToolsList, "").State; st != Fresh {
		t.Fatalf("freshness before the kill = %s", st)
	}

	f.stop() // kill: every connection cut, nothing listening
	ev, _ := log.waitFor(t, "disconnected", kindIs(Disconnected))
	if ev.Graceful || ev.Err == nil {
		t.Errorf("Disconnected = %+v, want an abrupt drop with its error", ev)
	}
	if st := c.Freshness(mcp.MethodToolsList, "").State; st != Unknown {
		t.Errorf("freshness after the drop = %s, want unknown", st)
	}
	addTools(t, f.srv, "b") // a change nobody can announce
	waitUntil(t, "reconnect attempts while down", func() bool { return w.Stats().Reconnects >= 2 })
	if st := w.State(); st == Live {
		t.Errorf("state while the server is down = %s", st)
	}

	var ln2 net.Listener
	waitUntil(t, "the address to be free again", func() bool {
		ln2, err = net.Listen("tcp", addr)
		return err == nil
	})
	newFixture(t, f.srv, fixtureOpts{ln: ln2})
	log.waitFor(t, "reconnected", kindIs(Connected))
	ev, skipped := log.waitFor(t, "the missed change", kindIs(ToolsChanged))
	if !slices.Equal(ev.Added, []string{"b"}) || len(ev.Removed)+len(ev.Changed) != 0 {
		t.Errorf("after reconnecting: %+v, want Added [b]", ev)
	}
	for _, e := range skipped {
		if e.Kind == ToolsChanged {
			t.Errorf("unexpected %s before the reconciliation", describe([]Event{e}))
		}
	}
	if st := c.Freshness(mcp.MethodToolsList, "").State; st != Fresh {
		t.Errorf("freshness after reconciling = %s, want fresh", st)
	}
	if w.State() != Live {
		t.Errorf("state = %s, want live", w.State())
	}
}

// TestWatcherConnectionCut: the connection is cut while the server stays
// up (a proxy dropping it): drop reported, then a quick reconnect.
func TestWatcherConnectionCut(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	addTools(t, f.srv, "a")
	c := primed(t, f)
	w, log := watch(t, c, withKinds(fastBackoff, true, false, false))
	log.waitFor(t, "connected", kindIs(Connected))
	log.waitFor(t, "initial read", kindIs(ToolsChanged))
	f.ts.CloseClientConnections()
	ev, _ := log.waitFor(t, "disconnected", kindIs(Disconnected))
	if ev.Graceful {
		t.Errorf("a cut connection was reported as graceful")
	}
	log.waitFor(t, "reconnected", kindIs(Connected))
	if w.Stats().Reconnects < 1 {
		t.Errorf("reconnects = %d", w.Stats().Reconnects)
	}
	addTools(t, f.srv, "b")
	ev, _ = log.waitFor(t, "change after reconnect", func(e Event) bool { return e.Kind == ToolsChanged && slices.Contains(e.Added, "b") })
	if len(ev.Removed) != 0 {
		t.Errorf("ToolsChanged = %+v", ev)
	}
}

// attemptBound is how many listen attempts a capped exponential backoff
// with full jitter allows in elapsed time, with a wide margin: the delay
// before attempt k is drawn from (0, min·2^k], so the attempts in a window
// grow with log2(elapsed/min), not with elapsed/min.
func attemptBound(elapsed, minBackoff time.Duration) int {
	return int(math.Ceil(math.Log2(float64(elapsed)/float64(minBackoff)+1))) + 6
}

// TestWatcherGracefulShutdownNoStorm: srv.Shutdown ends the listen with
// its complete result: a graceful Disconnected, cached entries still
// trusted. The server keeps answering, but every new listen is ended at
// once; the watcher must back off between attempts instead of hammering.
func TestWatcherGracefulShutdownNoStorm(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{sopts: []server.Option{
		server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: time.Hour}),
	}})
	addTools(t, f.srv, "a")
	c := primed(t, f)
	const minB = 5 * time.Millisecond
	_, log := watch(t, c, WatchOptions{Tools: true, MinBackoff: minB, MaxBackoff: time.Minute, PollInterval: time.Hour})
	log.waitFor(t, "connected", kindIs(Connected))
	log.waitFor(t, "initial read", kindIs(ToolsChanged))

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	must(t, f.srv.Shutdown(ctx))
	ev, _ := log.waitFor(t, "disconnected", kindIs(Disconnected))
	if !ev.Graceful || ev.Err != nil {
		t.Errorf("Disconnected = %+v, want graceful", ev)
	}
	if st := c.Freshness(mcp.MethodToolsList, "").State; st == Unknown {
		t.Errorf("freshness after a graceful end = %s; nothing was missed", st)
	}
	start := f.rec.count(mcp.MethodListen)
	observe(t, time.Second, func(elapsed time.Duration) {
		n := f.rec.count(mcp.MethodListen) - start
		if limit := attemptBound(elapsed, minB); n > limit {
			t.Fatalf("%d listens %v after a graceful shutdown, backoff allows about %d", n, elapsed, limit)
		}
	})
	t.Logf("listens in the second after shutdown: %d", f.rec.count(mcp.MethodListen)-start)
}

// TestWatcherServerStaysDown: after the server is gone for good, attempts
// follow the backoff schedule: logarithmic in time while below the cap.
func TestWatcherServerStaysDown(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	addTools(t, f.srv, "a")
	c := primed(t, f)
	const minB = 5 * time.Millisecond
	w, log := watch(t, c, WatchOptions{Tools: true, MinBackoff: minB, MaxBackoff: time.Minute, PollInterval: time.Hour})
	log.waitFor(t, "connected", kindIs(Connected))
	log.waitFor(t, "initial read", kindIs(ToolsChanged))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	must(t, f.srv.Shutdown(ctx))
	f.stop()
	log.waitFor(t, "disconnected", kindIs(Disconnected))
	start := w.Stats().Reconnects
	observe(t, time.Second, func(elapsed time.Duration) {
		n := int(w.Stats().Reconnects - start)
		if limit := attemptBound(elapsed, minB); n > limit {
			t.Fatalf("%d reconnect attempts %v into an outage, backoff allows about %d", n, elapsed, limit)
		}
	})
	if n := w.Stats().Reconnects - start; n < 1 {
		t.Errorf("no reconnect attempt in a second of outage")
	}
	t.Logf("reconnect attempts in the first second of an outage: %d", w.Stats().Reconnects-start)
}

// TestWatcherOnlyRealChanges: a list_changed after which the list reads
// the same reports nothing; the next real change is reported alone.
func TestWatcherOnlyRealChanges(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	addTools(t, f.srv, "a")
	c := primed(t, f)
	w, log := watch(t, c, withKinds(fastBackoff, true, false, false))
	log.waitFor(t, "connected", kindIs(Connected))
	log.waitFor(t, "initial read", kindIs(ToolsChanged))
	reads := f.rec.count(mcp.MethodToolsList)

	engine.Of(f.srv).Hub().ListChanged(hub.ToolsList) // nothing really changed
	waitUntil(t, "the no-op notification to be re-read", func() bool {
		return f.rec.count(mcp.MethodToolsList) > reads && c.Freshness(mcp.MethodToolsList, "").State == Fresh
	})
	if w.Stats().Notifications < 1 {
		t.Errorf("notifications = %d", w.Stats().Notifications)
	}
	addTools(t, f.srv, "b")
	ev, skipped := log.waitFor(t, "the real change", kindIs(ToolsChanged))
	if !slices.Equal(ev.Added, []string{"b"}) {
		t.Errorf("ToolsChanged = %+v, want Added [b]", ev)
	}
	if len(skipped) != 0 {
		t.Errorf("events for a list that did not change: %s", describe(skipped))
	}
}

// TestWatcherResourceUpdated: resources/updated leads to a re-read and a
// ResourceUpdated event only when the content differs.
func TestWatcherResourceUpdated(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	doc := &textResource{body: "v1"}
	other := &textResource{body: "o1"}
	must(t, f.srv.AddResource(mcp.Resource{URI: "res://doc"}, doc.handler))
	must(t, f.srv.AddResource(mcp.Resource{URI: "res://other"}, other.handler))
	c := primed(t, f)
	w, log := watch(t, c, withKinds(fastBackoff, false, false, false, "res://doc"))
	ev, _ := log.waitFor(t, "connected", kindIs(Connected))
	if !slices.Equal(ev.Granted.ResourceSubscriptions, []string{"res://doc"}) {
		t.Errorf("granted = %+v", ev.Granted)
	}
	log.waitFor(t, "initial read", kindIs(ResourceUpdated))
	reads := f.rec.answered(mcp.MethodResourcesRead)

	f.srv.ResourceUpdated("res://doc") // same content
	waitUntil(t, "the re-read", func() bool { return f.rec.answered(mcp.MethodResourcesRead) > reads })
	other.set("o2")
	f.srv.ResourceUpdated("res://other") // not followed: never sent
	doc.set("v2")
	f.srv.ResourceUpdated("res://doc")
	ev, skipped := log.waitFor(t, "update", kindIs(ResourceUpdated))
	if ev.URI != "res://doc" || !slices.Equal(ev.Changed, []string{"res://doc"}) {
		t.Errorf("ResourceUpdated = %+v", ev)
	}
	if len(skipped) != 0 {
		t.Errorf("events before the real update: %s", describe(skipped))
	}
	for _, r := range f.rec.requests(mcp.MethodResourcesRead) {
		if string(r.Params["uri"]) != `"res://doc"` {
			t.Errorf("read of an unfollowed resource: %s", r.Params["uri"])
		}
	}
	if n := w.Stats().Notifications; n < 2 {
		t.Errorf("notifications = %d, want 2", n)
	}
}

// TestWatcherPollsWhatIsNotGranted: a server without prompts does not
// grant promptsListChanged, so the watcher polls prompts and still sees
// their changes (here: prompts appear later). Tools stay live.
func TestWatcherPollsWhatIsNotGranted(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{sopts: []server.Option{
		server.WithCachePolicy(server.ListPrompts, server.CachePolicy{TTL: 0}),
	}})
	addTools(t, f.srv, "a")
	c := primed(t, f)
	w, log := watch(t, c, WatchOptions{Tools: true, Prompts: true, PollInterval: 10 * time.Millisecond, MaxBackoff: 20 * time.Millisecond})
	ev, _ := log.waitFor(t, "connected", kindIs(Connected))
	if !ev.Granted.ToolsListChanged || ev.Granted.PromptsListChanged {
		t.Errorf("granted = %+v, want tools only", ev.Granted)
	}
	if g := w.Granted(); g.PromptsListChanged {
		t.Errorf("Granted() = %+v", g)
	}
	addPrompt := func(name string) {
		must(t, f.srv.AddPrompt(mcp.Prompt{Name: name}, func(context.Context, *server.PromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{}, nil
		}))
	}
	addPrompt("p1")
	ev, _ = log.waitFor(t, "polled prompt", kindIs(PromptsChanged))
	if !slices.Equal(ev.Added, []string{"p1"}) {
		t.Errorf("PromptsChanged = %+v", ev)
	}
	addPrompt("p2")
	ev, _ = log.waitFor(t, "second polled prompt", kindIs(PromptsChanged))
	if !slices.Equal(ev.Added, []string{"p2"}) {
		t.Errorf("PromptsChanged = %+v", ev)
	}
	if w.State() != Live {
		t.Errorf("state = %s, want live (tools still come by notification)", w.State())
	}
}

// TestWatcherPollBacksOff: polls that fail back off (CACHE-6: a client
// that polls must add jitter and backoff).
func TestWatcherPollBacksOff(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	addTools(t, f.srv, "a") // no prompts: every prompts/list fails
	c := primed(t, f)
	const every = 5 * time.Millisecond
	_, log := watch(t, c, WatchOptions{Tools: true, Prompts: true, PollInterval: every})
	log.waitFor(t, "connected", kindIs(Connected))
	log.waitFor(t, "failed poll", kindIs(ReadFailed))
	start := f.rec.count(mcp.MethodPromptsList)
	observe(t, time.Second, func(elapsed time.Duration) {
		n := f.rec.count(mcp.MethodPromptsList) - start
		// Without backoff: about elapsed/every polls (200 in a second).
		if limit := int(elapsed/(8*every)) + 8; n > limit {
			t.Fatalf("%d failing polls in %v at a %v interval; polls must back off", n, elapsed, every)
		}
	})
	t.Logf("failing polls in a second at a %v interval: %d", every, f.rec.count(mcp.MethodPromptsList)-start)
}

// TestWatcherWithoutListen: a server with no subscriptions/listen (it
// answers -32601) is polled for everything.
func TestWatcherWithoutListen(t *testing.T) {
	var mu sync.Mutex
	tools := []string{"a"}
	ts, _ := rawServer(t, func(_ int, r rawRequest) (string, string) {
		switch r.Method {
		case mcp.MethodListen:
			return "", `{"code":-32601,"message":"Method not found"}`
		case mcp.MethodToolsList:
			mu.Lock()
			defer mu.Unlock()
			var b []byte
			for _, n := range tools {
				b = fmt.Appendf(b, `%s{"name":%q,"inputSchema":{"type":"object"}}`, map[bool]string{true: "", false: ","}[len(b) == 0], n)
			}
			return `{"tools":[` + string(b) + `],"resultType":"complete","ttlMs":0,"cacheScope":"public"}`, ""
		}
		return "", `{"code":-32601,"message":"Method not found"}`
	})
	c := rawClient(t, ts.URL)
	w, log := watch(t, c, WatchOptions{Tools: true, PollInterval: 5 * time.Millisecond})
	ev, _ := log.waitFor(t, "initial read", kindIs(ToolsChanged))
	if !slices.Equal(ev.Added, []string{"a"}) {
		t.Errorf("initial = %+v", ev)
	}
	if w.State() != Polling {
		t.Errorf("state = %s, want polling", w.State())
	}
	mu.Lock()
	tools = append(tools, "b")
	mu.Unlock()
	ev, _ = log.waitFor(t, "polled change", kindIs(ToolsChanged))
	if !slices.Equal(ev.Added, []string{"b"}) {
		t.Errorf("polled = %+v", ev)
	}
}

// TestWatcherCloseIsClean: Close returns promptly in every state and
// leaves no goroutine behind (TestMain checks), also after Client.Close.
func TestWatcherCloseIsClean(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	addTools(t, f.srv, "a")
	c := primed(t, f)
	w := c.Watch(context.Background(), withKinds(fastBackoff, true, false, false))
	waitUntil(t, "live", func() bool { return w.State() == Live })
	w.Close()
	w.Close() // idempotent
	// A watcher on a closed client settles and closes too.
	c2 := f.client(t)
	must(t, c2.Close())
	w2 := c2.Watch(context.Background(), withKinds(fastBackoff, true, false, false))
	w2.Close()
	// Cancelling the context stops it as well.
	ctx, cancel := context.WithCancel(context.Background())
	w3 := c.Watch(ctx, withKinds(fastBackoff, true, false, false))
	waitUntil(t, "live", func() bool { return w3.State() == Live })
	cancel()
	w3.Close()
	if _, err := c2.Tools(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Tools after Close: %v, want ErrClosed", err)
	}
}

// burstServer is a raw server whose listen acknowledges and then sends n
// tools/list_changed notifications back to back, for measuring how the
// watcher coalesces; its tool list is fixed.
func burstServer(t testing.TB, n int) (string, *recorder) {
	t.Helper()
	h := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		var r rawRequest
		_ = json.NewDecoder(req.Body).Decode(&r)
		switch r.Method {
		case mcp.MethodDiscover:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, r.ID, rawDiscover)
		case mcp.MethodToolsList:
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"only","inputSchema":{"type":"object"}}],"resultType":"complete","ttlMs":60000,"cacheScope":"public"}}`, r.ID)
		case mcp.MethodListen:
			w.Header().Set("Content-Type", "text/event-stream")
			meta := `{"io.modelcontextprotocol/subscriptionId":` + string(r.ID) + `}`
			fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\",\"params\":{\"_meta\":%s,\"notifications\":{\"toolsListChanged\":true}}}\n\n", meta)
			w.(http.Flusher).Flush()
			for range n {
				fmt.Fprintf(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\",\"params\":{\"_meta\":%s}}\n\n", meta)
			}
			w.(http.Flusher).Flush()
			<-req.Context().Done()
		}
	})
	rec := &recorder{next: h}
	return newFixtureHandler(t, rec), rec
}

// TestWatcherReconcilesOnConnect: a change made between an earlier read
// (still fresh in the cache) and the listen's acknowledgement is seen by
// the watcher's first read: listen first, then read from the server, not
// from the cache.
func TestWatcherReconcilesOnConnect(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{sopts: []server.Option{
		server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: time.Hour}),
	}})
	addTools(t, f.srv, "a")
	c := primed(t, f)
	_, err := c.Tools(context.Background())
	must(t, err)
	addTools(t, f.srv, "b") // nobody listens yet
	_, log := watch(t, c, withKinds(fastBackoff, true, false, false))
	log.waitFor(t, "connected", kindIs(Connected))
	ev, _ := log.waitFor(t, "initial read", kindIs(ToolsChanged))
	if !slices.Equal(ev.Added, []string{"a", "b"}) {
		t.Errorf("initial ToolsChanged = %+v, want Added [a b]", ev)
	}
}

// TestWatcherGracefulHandOver: a server shuts down gracefully and another
// takes its place on the same address (a rolling deploy) with a different
// tool list. The graceful end leaves the cache trusted, but after
// reconnecting the watcher re-reads from the new server and reports the
// difference.
func TestWatcherGracefulHandOver(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	addr := ln.Addr().String()
	opts := []server.Option{server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: time.Hour})}
	old := newFixture(t, nil, fixtureOpts{ln: ln, sopts: opts})
	addTools(t, old.srv, "a")
	c := primed(t, old)
	_, log := watch(t, c, withKinds(fastBackoff, true, false, false))
	log.waitFor(t, "connected", kindIs(Connected))
	log.waitFor(t, "initial read", kindIs(ToolsChanged))

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	must(t, old.srv.Shutdown(ctx))
	old.stop()
	ev, _ := log.waitFor(t, "disconnected", kindIs(Disconnected))
	if !ev.Graceful {
		t.Errorf("Disconnected = %+v, want graceful", ev)
	}
	var ln2 net.Listener
	waitUntil(t, "the address to be free again", func() bool {
		ln2, err = net.Listen("tcp", addr)
		return err == nil
	})
	next := newFixture(t, nil, fixtureOpts{ln: ln2, sopts: opts})
	addTools(t, next.srv, "a", "b")
	log.waitFor(t, "connected to the new server", kindIs(Connected))
	ev, _ = log.waitFor(t, "reconciled", kindIs(ToolsChanged))
	if !slices.Equal(ev.Added, []string{"b"}) {
		t.Errorf("after the hand-over: %+v, want Added [b]", ev)
	}
}
