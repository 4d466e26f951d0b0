package client

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tidings/mcp"
	"tidings/server"
)

// benchTools is the size of the tool list the list benchmarks read.
const benchTools = 20

func benchFixture(b *testing.B, ttl time.Duration) *Client {
	b.Helper()
	f := newFixture(b, nil, fixtureOpts{sopts: []server.Option{
		server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: ttl}),
	}})
	for i := range benchTools {
		addTools(b, f.srv, fmt.Sprintf("tool%02d", i))
	}
	c := primed(b, f)
	if tools, err := c.Tools(context.Background()); err != nil || len(tools) != benchTools {
		b.Fatalf("warm-up: %d tools, %v", len(tools), err)
	}
	return c
}

// BenchmarkCachedToolsList is Tools on a warm, fresh cache: what a host
// pays for asking for the tool list whenever it needs it.
func BenchmarkCachedToolsList(b *testing.B) {
	c := benchFixture(b, time.Hour)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Tools(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUncachedToolsListRoundTrip is the same list from a server that
// sends ttlMs 0: every Tools is a tools/list round trip over loopback HTTP.
func BenchmarkUncachedToolsListRoundTrip(b *testing.B) {
	c := benchFixture(b, 0)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Tools(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRequestToolsList is one raw tools/list through Request (no
// cache, no decoding of the tools), for comparison.
func BenchmarkRequestToolsList(b *testing.B) {
	c := benchFixture(b, time.Hour)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Request(ctx, mcp.MethodToolsList, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// burst adds n tools one by one (n list changes, as fast as the server
// takes them) and waits until the watcher has reported every one of them
// and the cache holds the final list.
func burst(t testing.TB, f *fixture, c *Client, log *eventLog, prefix string, n int) {
	t.Helper()
	want := make(map[string]bool, n)
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("%s%04d", prefix, i)
		want[names[i]] = true
	}
	addTools(t, f.srv, names...)
	for len(want) > 0 {
		ev, _ := log.waitFor(t, fmt.Sprintf("%d more added tools", len(want)), kindIs(ToolsChanged))
		for _, a := range ev.Added {
			delete(want, a)
		}
	}
}

// TestCoalescingRatio fires 1,000 tool additions in a burst at a watched
// server and counts what the watcher did: every change is an idempotent
// signal, so a burst must cost a handful of re-reads, not a thousand,
// and still end in the exact final state.
func TestCoalescingRatio(t *testing.T) {
	const n = 1000
	f := newFixture(t, nil, fixtureOpts{sopts: []server.Option{
		server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: time.Hour}),
	}})
	addTools(t, f.srv, "base")
	c := primed(t, f)
	w, log := watch(t, c, withKinds(fastBackoff, true, false, false))
	log.waitFor(t, "connected", kindIs(Connected))
	log.waitFor(t, "initial read", kindIs(ToolsChanged))
	before := w.Stats()
	lists := f.rec.count(mcp.MethodToolsList)

	burst(t, f, c, log, "burst", n)

	after := w.Stats()
	notes, rereads := after.Notifications-before.Notifications, after.Rereads-before.Rereads
	t.Logf("%d tool additions: %d list_changed notifications received, %d re-reads, %d tools/list requests",
		n, notes, rereads, f.rec.count(mcp.MethodToolsList)-lists)
	if rereads >= 50 {
		t.Errorf("%d re-reads for a burst of %d changes, want far fewer (< 50)", rereads, n)
	}
	if rereads > notes {
		t.Errorf("%d re-reads for %d notifications: re-reads must not exceed notifications", rereads, notes)
	}
	tools, err := c.Tools(context.Background())
	must(t, err)
	if len(tools) != n+1 {
		t.Errorf("final list has %d tools, want %d", len(tools), n+1)
	}
}

// TestCoalescingRawBurst: a server that sends 1,000 list_changed
// notifications back to back (no server-side coalescing at all). The
// watcher counts every one and re-reads far fewer times.
func TestCoalescingRawBurst(t *testing.T) {
	const n = 1000
	url, rec := burstServer(t, n)
	c := rawClient(t, url)
	w, log := watch(t, c, withKinds(fastBackoff, true, false, false))
	log.waitFor(t, "connected", kindIs(Connected))
	waitUntil(t, "every notification", func() bool { return w.Stats().Notifications == n })
	// The last notification's re-read has run once the cache is fresh.
	waitUntil(t, "the last re-read", func() bool { return c.Freshness(mcp.MethodToolsList, "").State == Fresh })
	st := w.Stats()
	t.Logf("%d notifications received back to back: %d re-reads, %d tools/list requests", st.Notifications, st.Rereads, rec.count(mcp.MethodToolsList))
	if st.Rereads >= n/10 {
		t.Errorf("%d re-reads for %d notifications, want far fewer", st.Rereads, n)
	}
	var changed []Event
	for _, e := range log.all() {
		if e.Kind == ToolsChanged {
			changed = append(changed, e)
		}
	}
	// One report, for the first read; the thousand re-reads found the same
	// list and said nothing.
	if len(changed) != 1 || len(changed[0].Added) != 1 || changed[0].Added[0] != "only" {
		t.Errorf("ToolsChanged events = %s, want one adding [only]", describe(changed))
	}
}

// BenchmarkNotificationBurst measures one burst of 1,000 tool additions
// from the first change to the watcher having reported all of them, and
// reports how many notifications and re-reads a burst cost.
func BenchmarkNotificationBurst(b *testing.B) {
	const n = 1000
	f := newFixture(b, nil, fixtureOpts{sopts: []server.Option{
		server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: time.Hour}),
	}})
	addTools(b, f.srv, "base")
	c := primed(b, f)
	w, log := watch(b, c, withKinds(fastBackoff, true, false, false))
	log.waitFor(b, "connected", kindIs(Connected))
	log.waitFor(b, "initial read", kindIs(ToolsChanged))
	var notes, rereads int64
	i := 0
	for b.Loop() {
		prefix := fmt.Sprintf("b%d_", i)
		before := w.Stats()
		burst(b, f, c, log, prefix, n)
		after := w.Stats()
		notes += after.Notifications - before.Notifications
		rereads += after.Rereads - before.Rereads
		b.StopTimer()
		removed := make([]string, n)
		for j := range n {
			removed[j] = fmt.Sprintf("%s%04d", prefix, j)
		}
		f.srv.RemoveTools(removed...)
		// One removal may be reported in steps: a walk that overlaps the
		// change can see part of it before its notification arrives.
		gone := 0
		for gone < n {
			ev, _ := log.waitFor(b, "removal", kindIs(ToolsChanged))
			gone += len(ev.Removed)
		}
		b.StartTimer()
		i++
	}
	b.ReportMetric(float64(notes)/float64(i), "notifications/burst")
	b.ReportMetric(float64(rereads)/float64(i), "rereads/burst")
}
