package client

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tidings/jsonrpc"
	"tidings/mcp"
)

// TestStringOutOfRange: String never panics on a value outside the known
// kinds and states.
func TestStringOutOfRange(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{ReadFailed.String(), "read_failed"},
		{EventKind(8).String(), "EventKind(8)"},
		{EventKind(-1).String(), "EventKind(-1)"},
		{Down.String(), "down"},
		{ConnState(7).String(), "ConnState(7)"},
		{ConnState(-2).String(), "ConnState(-2)"},
	} {
		if c.got != c.want {
			t.Errorf("String = %q, want %q", c.got, c.want)
		}
	}
}

// TestFilterTopics: the one filter→topic mapping covers every part of a
// filter.
func TestFilterTopics(t *testing.T) {
	got := filterTopics(mcp.SubscriptionFilter{ToolsListChanged: true, PromptsListChanged: true, ResourcesListChanged: true, ResourceSubscriptions: []string{"a:x"}})
	want := []string{topicTools, topicPrompts, topicResources, topicTemplates, topicResource + "a:x"}
	if !slices.Equal(got, want) {
		t.Errorf("filterTopics = %v, want %v", got, want)
	}
	if got := filterTopics(mcp.SubscriptionFilter{}); len(got) != 0 {
		t.Errorf("empty filter covers %v", got)
	}
}

// TestCacheHintsDefaultPrivate: only an explicit "public" makes an answer
// shareable; a missing or unknown cacheScope is private.
func TestCacheHintsDefaultPrivate(t *testing.T) {
	for in, want := range map[string]mcp.CacheScope{
		`{"ttlMs":1000}`:                         mcp.ScopePrivate,
		`{"ttlMs":1000,"cacheScope":"shared"}`:   mcp.ScopePrivate,
		`{"ttlMs":1000,"cacheScope":""}`:         mcp.ScopePrivate,
		`{"ttlMs":1000,"cacheScope":"private"}`:  mcp.ScopePrivate,
		`{"ttlMs":1000,"cacheScope":"public"}`:   mcp.ScopePublic,
		`{"ttlMs":1000,"cacheScope":"PUBLIC"}`:   mcp.ScopePrivate,
		`{"ttlMs":1000,"cacheScope":["public"]}`: mcp.ScopePrivate,
		`{"ttlMs":1000,"cacheScope":null}`:       mcp.ScopePrivate,
		`{"ttlMs":1000,"cacheScope":"public "}`:  mcp.ScopePrivate,
		`{"ttlMs":1000,"cacheScope":"public\n"}`: mcp.ScopePrivate,
	} {
		if _, got := cacheHints(jsonValue(in)); got != want {
			t.Errorf("cacheHints(%s) scope = %q, want %q", in, got, want)
		}
	}
}

// TestMarkUnknownCoversFirstFetch: a first fetch of a topic (no entry
// yet) in flight when the listen drops lands unknown, never fresh.
func TestMarkUnknownCoversFirstFetch(t *testing.T) {
	clock := newFakeClock()
	c := newCache(0, clock.Now, false)
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := c.get(context.Background(), mcp.MethodToolsList, topicTools, "", func(context.Context) (fetched, error) {
			close(started)
			<-release
			return fetched{value: "v", ttl: time.Hour, scope: mcp.ScopePublic}, nil
		})
		done <- err
	}()
	<-started
	c.markUnknown(topicTools, topicPrompts)
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := c.info(mcp.MethodToolsList, topicTools, "").State; st == Fresh {
		t.Errorf("first answer fetched across a drop is %s, want not fresh", st)
	}
	if g := c.gen(topicPrompts); g != 1 {
		t.Errorf("generation of a covered topic without entries = %d, want 1", g)
	}
}

// TestListSnapshotExpiresWithFirstPage: a list whose walk took long
// expires at the first page's receipt plus its TTL (CACHE-5), not at the
// end of the walk plus the smallest TTL.
func TestListSnapshotExpiresWithFirstPage(t *testing.T) {
	clock := newFakeClock()
	t0 := clock.Now()
	ts, _ := rawServer(t, func(_ int, r rawRequest) (string, string) {
		if _, ok := r.Params["cursor"]; ok {
			clock.Advance(8 * time.Second) // a slow second page
			return `{"tools":[{"name":"b","inputSchema":{"type":"object"}}],"resultType":"complete","ttlMs":10000,"cacheScope":"public"}`, ""
		}
		return `{"tools":[{"name":"a","inputSchema":{"type":"object"}}],"nextCursor":"p2","resultType":"complete","ttlMs":10000,"cacheScope":"public"}`, ""
	})
	c := rawClient(t, ts.URL, withClock(clock.Now))
	tools, err := c.Tools(context.Background())
	must(t, err)
	if !slices.Equal(names(tools), []string{"a", "b"}) {
		t.Fatalf("Tools = %v", names(tools))
	}
	info := c.Freshness(mcp.MethodToolsList, "")
	if want := t0.Add(10 * time.Second); !info.Expires.Equal(want) {
		t.Errorf("snapshot expires at %v, want %v (first page received + its ttl)", info.Expires.Sub(t0), want.Sub(t0))
	}
	clock.Advance(2 * time.Second) // t0+10s
	if st := c.Freshness(mcp.MethodToolsList, "").State; st != Stale {
		t.Errorf("freshness once the first page expired = %s, want stale", st)
	}
}

func decodeNote(t *testing.T, s string) *jsonrpc.Message {
	t.Helper()
	m, err := jsonrpc.Decode([]byte(s), jsonrpc.DefaultMaxDepth)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestUpdateOfSubResource: resources/updated may name a sub-resource of
// a followed URI; the followed URI is invalidated and re-read. Only path,
// fragment and query boundaries count.
func TestUpdateOfSubResource(t *testing.T) {
	c := rawClient(t, "http://127.0.0.1:1/unused")
	followed := []string{"file:///d", "file:///e/", "db://x/t", "exact://u"}
	for _, tc := range []struct {
		uri  string
		want []string // followed URIs re-read
	}{
		{"file:///d/a.txt", []string{"file:///d"}},
		{"file:///d#frag", []string{"file:///d"}},
		{"file:///d?v=2", []string{"file:///d"}},
		{"file:///dx", nil},
		{"file:///e/f/g", []string{"file:///e/"}},
		{"db://x/t/row/1", []string{"db://x/t"}},
		{"db://x/tables", nil},
		{"exact://u", []string{"exact://u"}},
		{"other://z", nil},
	} {
		w := &Watcher{c: c, opts: WatchOptions{URIs: followed}, dirty: map[string]time.Time{}, wake: make(chan struct{}, 1)}
		before := map[string]uint64{}
		for _, u := range followed {
			before[u] = c.cache.gen(topicResource + u)
		}
		w.notification(decodeNote(t, `{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"`+tc.uri+`"}}`), tied)
		var got []string
		for topic := range w.dirty {
			got = append(got, strings.TrimPrefix(topic, topicResource))
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(tc.want))
		if !slices.Equal(got, want) {
			t.Errorf("update of %s re-reads %v, want %v", tc.uri, got, want)
		}
		for _, u := range followed {
			bumped := c.cache.gen(topicResource+u) != before[u]
			if bumped != slices.Contains(tc.want, u) {
				t.Errorf("update of %s: %s invalidated = %v", tc.uri, u, bumped)
			}
		}
	}
}

// TestWatcherRetriesTransientListenError: an error other than "method not
// found" before the acknowledgement is a drop, retried with backoff, not
// a reason to poll forever.
func TestWatcherRetriesTransientListenError(t *testing.T) {
	var listens atomic.Int32
	ts, _ := rawServer(t, func(_ int, r rawRequest) (string, string) {
		switch r.Method {
		case mcp.MethodListen:
			listens.Add(1)
			return "", `{"code":-32603,"message":"Internal error"}`
		case mcp.MethodToolsList:
			return `{"tools":[],"resultType":"complete","ttlMs":0,"cacheScope":"public"}`, ""
		}
		return "", `{"code":-32601,"message":"Method not found"}`
	})
	c := rawClient(t, ts.URL)
	w, _ := watch(t, c, WatchOptions{Tools: true, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	waitUntil(t, "listen retried after an internal error", func() bool { return listens.Load() >= 3 })
	if st := w.State(); st == Polling {
		t.Errorf("state = %s after a transient listen error, want a retrying stream", st)
	}
}
