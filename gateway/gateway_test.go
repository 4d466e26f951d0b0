package gateway_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/client"
	"tidings/gateway"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

const waitTimeout = 10 * time.Second

// upstreamServer is a tidings server behind the gateway, with a count of
// the requests it served by method.
type upstreamServer struct {
	srv    *server.Server
	url    string
	counts map[string]*atomic.Int64
}

func (u *upstreamServer) count(method string) int64 { return u.counts[method].Load() }

// startUpstream serves a server with the tools named over HTTP on loopback.
func startUpstream(t *testing.T, scope mcp.CacheScope, tools ...string) *upstreamServer {
	t.Helper()
	u := &upstreamServer{counts: map[string]*atomic.Int64{}}
	for _, m := range []string{mcp.MethodToolsList, mcp.MethodToolsCall, mcp.MethodPromptsList, mcp.MethodResourcesList,
		mcp.MethodResourcesTemplates, mcp.MethodResourcesRead, mcp.MethodListen} {
		u.counts[m] = &atomic.Int64{}
	}
	counter := func(next server.MethodHandler) server.MethodHandler {
		return func(ctx context.Context, req *server.Request) error {
			if c, ok := u.counts[req.Method]; ok {
				c.Add(1)
			}
			return next(ctx, req)
		}
	}
	opts := []server.Option{server.WithMiddleware(counter),
		server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: time.Minute, Scope: scope})}
	u.srv = server.New(mcp.Implementation{Name: "upstream", Version: "1"}, opts...)
	for _, name := range tools {
		addEcho(t, u.srv, name, `{"type":"object"}`)
	}
	u.srv.AddResource(mcp.Resource{URI: "mem://" + tools[0], Name: tools[0]}, func(context.Context, *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		text := "hello"
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{{URI: "mem://" + tools[0], Text: &text}}}, nil
	})
	u.url = serveOnLoopback(t, u.srv, streamhttp.New(u.srv))
	return u
}

// addEcho registers a tool that answers with its own name.
func addEcho(t *testing.T, srv *server.Server, name, schema string) {
	t.Helper()
	err := srv.AddTool(mcp.Tool{Name: name, InputSchema: jsontext.Value(schema)}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("from " + name)}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// startGateway serves a gateway over HTTP on loopback; the principal is
// the X-User header, for tests of who sees what.
func startGateway(t *testing.T, cfg gateway.Config, opts ...gateway.Option) (*gateway.Gateway, string) {
	t.Helper()
	g, err := gateway.New(context.Background(), cfg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close) // after the server below is shut down
	// Listens are parked, as tidings gateway parks them.
	url := serveOnLoopback(t, g.Server(), streamhttp.New(g.Server(), streamhttp.WithParking(),
		streamhttp.WithPrincipal(func(r *http.Request) string { return r.Header.Get("X-User") })))
	return g, url
}

// serveOnLoopback serves h, the transport of srv, over HTTP on loopback
// until the test ends, and then shuts srv down (its listens end with
// their complete result) before the HTTP server closes.
func serveOnLoopback(tb testing.TB, srv *server.Server, h http.Handler) string {
	tb.Helper()
	hs := httptest.NewServer(h)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
		hs.Close()
	})
	return hs.URL
}

func names(ts []mcp.Tool) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

func twoUpstreams(t *testing.T, scope mcp.CacheScope) (*upstreamServer, *upstreamServer, gateway.Config) {
	a := startUpstream(t, scope, "echo", "add")
	b := startUpstream(t, scope, "echo")
	apart(t, b, "mem://echo")
	return a, b, gateway.Config{Upstreams: []gateway.Upstream{{ID: "a", URL: a.url}, {ID: "b", URL: b.url}}}
}

// apart gives u's resource uri another URI, uri+"-2", so that two
// upstreams that would serve one URI (which the gateway refuses) do not.
func apart(t *testing.T, u *upstreamServer, uri string) {
	t.Helper()
	if u.srv.RemoveResources(uri) != 1 {
		t.Fatalf("no resource %s to move", uri)
	}
	text := "hello"
	err := u.srv.AddResource(mcp.Resource{URI: uri + "-2", Name: "moved"}, func(context.Context, *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{{URI: uri + "-2", Text: &text}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestMergedToolsArePrefixedAndCalled(t *testing.T) {
	_, _, cfg := twoUpstreams(t, mcp.ScopePublic)
	_, url := startGateway(t, cfg)
	c := client.NewHTTP(url)
	defer c.Close()
	ctx := context.Background()
	ts, err := c.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(ts), []string{"a_add", "a_echo", "b_echo"}; !slices.Equal(got, want) {
		t.Fatalf("tools = %v, want %v", got, want)
	}
	res, err := c.CallTool(ctx, "b_echo", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if txt := res.Content[0].Text; txt == nil || *txt != "from echo" {
		t.Fatalf("b_echo said %v", res.Content)
	}
	if _, err := c.CallTool(ctx, "c_echo", map[string]any{}); err == nil {
		t.Fatal("a tool no upstream has was called")
	}
}

func TestPublicListServesEveryCallerFromOneFetch(t *testing.T) {
	a, b, cfg := twoUpstreams(t, mcp.ScopePublic)
	_, url := startGateway(t, cfg)
	settled(t, a, b)
	ctx := context.Background()
	alice := client.NewHTTP(url, client.WithHeader("X-User", "alice"))
	defer alice.Close()
	if _, err := alice.Tools(ctx); err != nil {
		t.Fatal(err)
	}
	before := a.count(mcp.MethodToolsList) + b.count(mcp.MethodToolsList)
	bob := client.NewHTTP(url, client.WithHeader("X-User", "bob"))
	defer bob.Close()
	ts, err := bob.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 3 {
		t.Fatalf("bob got %v", names(ts))
	}
	if after := a.count(mcp.MethodToolsList) + b.count(mcp.MethodToolsList); after != before {
		t.Fatalf("bob's list cost %d upstream requests; a public list is fetched once", after-before)
	}
	if f := bob.Freshness(mcp.MethodToolsList, ""); f.Scope != mcp.ScopePublic {
		t.Fatalf("the merged public list is told as %q", f.Scope)
	}
}

func TestPrivateListIsFetchedForEachCaller(t *testing.T) {
	a, b, cfg := twoUpstreams(t, mcp.ScopePrivate)
	_, url := startGateway(t, cfg)
	ctx := context.Background()
	alice := client.NewHTTP(url, client.WithHeader("X-User", "alice"))
	defer alice.Close()
	if _, err := alice.Tools(ctx); err != nil {
		t.Fatal(err)
	}
	if f := alice.Freshness(mcp.MethodToolsList, ""); f.Scope != mcp.ScopePrivate {
		t.Fatalf("a list made of private answers is told as %q", f.Scope)
	}
	before := a.count(mcp.MethodToolsList) + b.count(mcp.MethodToolsList)
	bob := client.NewHTTP(url, client.WithHeader("X-User", "bob"))
	defer bob.Close()
	if _, err := bob.Tools(ctx); err != nil {
		t.Fatal(err)
	}
	if after := a.count(mcp.MethodToolsList) + b.count(mcp.MethodToolsList); after < before+2 {
		t.Fatalf("bob's list cost %d upstream requests: he was served alice's private answer", after-before)
	}
}

func TestChangeIsToldThroughOneUpstreamListen(t *testing.T) {
	a, b, cfg := twoUpstreams(t, mcp.ScopePublic)
	g, url := startGateway(t, cfg)
	testkit.WaitFor(t, waitTimeout, "one listen on each upstream", func() bool {
		return a.srv.ListenStats().Listens == 1 && b.srv.ListenStats().Listens == 1
	})
	c := client.NewHTTP(url)
	defer c.Close()
	_, events := watchTools(t, c)
	if e := waitEvent(t, events, client.ToolsChanged); len(e.Added) != 3 {
		t.Fatalf("the first read found %v", e.Added)
	}
	addEcho(t, a.srv, "mul", `{"type":"object"}`)
	e := waitEvent(t, events, client.ToolsChanged)
	if !slices.Equal(e.Added, []string{"a_mul"}) {
		t.Fatalf("added %v, want [a_mul]", e.Added)
	}
	if e.Since.IsZero() || e.Since.After(e.At) {
		t.Fatalf("the change was learnt of at %v and reported at %v", e.Since, e.At)
	}
	if lag := g.Stats()[0].Lag; lag <= 0 || lag > waitTimeout {
		t.Fatalf("the gateway's lag for a is %v", lag)
	}
	// The same name with another schema is a change too.
	addEcho(t, a.srv, "mul", `{"type":"object","properties":{"x":{"type":"number"}}}`)
	e = waitEvent(t, events, client.ToolsChanged)
	if !slices.Equal(e.Changed, []string{"a_mul"}) {
		t.Fatalf("changed %v, want [a_mul]", e.Changed)
	}
	if n := a.srv.ListenStats().Listens; n != 1 {
		t.Fatalf("upstream a holds %d listens", n)
	}
}

func waitEvent(t *testing.T, events <-chan client.Event, kind client.EventKind) client.Event {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case e := <-events:
			if e.Kind == kind {
				return e
			}
		case <-deadline:
			t.Fatalf("no %v event", kind)
		}
	}
}

// settled waits until the gateway has read each upstream's tools twice:
// once at its start, and once when its listen was acknowledged (the read
// that makes sure nothing changed before the listen began).
func settled(t *testing.T, ups ...*upstreamServer) {
	t.Helper()
	testkit.WaitFor(t, waitTimeout, "the first reads of every upstream", func() bool {
		for _, u := range ups {
			if u.count(mcp.MethodToolsList) < 2 {
				return false
			}
		}
		return true
	})
}

// TestAnnouncementIsPassedOnAtOnce: an upstream's notification is told
// downstream as it arrives, once, even when the re-read that follows
// finds nothing changed (a server may know a list changed without the
// gateway seeing how: the items it shows this caller, say).
func TestAnnouncementIsPassedOnAtOnce(t *testing.T) {
	a, _, cfg := twoUpstreams(t, mcp.ScopePublic)
	g, url := startGateway(t, cfg)
	c := client.NewHTTP(url)
	defer c.Close()
	w, events := watchTools(t, c)
	waitEvent(t, events, client.ToolsChanged)
	// The announcement is sent to the listens open at the time: the
	// gateway's must be one of them.
	testkit.WaitFor(t, waitTimeout, "the gateway's listen on a, acknowledged", func() bool { return g.Stats()[0].Listens == 1 })
	before := w.Stats().Notifications
	a.srv.ListChanged(server.ListTools) // nothing changed
	testkit.WaitFor(t, waitTimeout, "the announcement downstream", func() bool { return w.Stats().Notifications > before })
	// A real change afterwards is told once more.
	addEcho(t, a.srv, "late", `{"type":"object"}`)
	if e := waitEvent(t, events, client.ToolsChanged); !slices.Equal(e.Added, []string{"a_late"}) {
		t.Fatalf("added %v", e.Added)
	}
}

// watchTools follows c's tool list until the test ends, and returns once
// its listen is acknowledged; the first read's report is the next event.
func watchTools(t *testing.T, c *client.Client) (*client.Watcher, <-chan client.Event) {
	t.Helper()
	events := make(chan client.Event, 64)
	w := c.Watch(context.Background(), client.WatchOptions{Tools: true, OnEvent: func(e client.Event) { events <- e }})
	t.Cleanup(w.Close)
	waitEvent(t, events, client.Connected)
	return w, events
}

// TestOwnCredentialAnswersAreShared: with the gateway's own credential,
// a 2025-11-25 upstream's lists (which carry no scope) are the same for
// every caller: 100 callers' lists cost each upstream no read past the
// first, and the merged list is public.
func TestOwnCredentialAnswersAreShared(t *testing.T) {
	modern := startUpstream(t, mcp.ScopePublic, "echo")
	old := startUpstream(t, mcp.ScopePublic, "echo")
	_, url := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{
		{ID: "modern", URL: modern.url}, {ID: "old", URL: old.url, Protocol: "2025-11-25"}}})
	settled(t, modern, old)
	first := client.NewHTTP(url, client.WithHeader("X-User", "first"))
	defer first.Close()
	if got := toolNames(t, first); !slices.Equal(got, []string{"modern_echo", "old_echo"}) {
		t.Fatalf("tools %v", got)
	}
	before := map[*upstreamServer]int64{modern: modern.count(mcp.MethodToolsList), old: old.count(mcp.MethodToolsList)}
	for i := range 100 {
		c := client.NewHTTP(url, client.WithHeader("X-User", "caller"+strconv.Itoa(i)))
		if got := toolNames(t, c); len(got) != 2 {
			t.Fatalf("caller %d: tools %v", i, got)
		}
		if f := c.Freshness(mcp.MethodToolsList, ""); f.Scope != mcp.ScopePublic {
			t.Fatalf("caller %d: the merged list is told %q", i, f.Scope)
		}
		c.Close()
	}
	for u, name := range map[*upstreamServer]string{modern: "modern", old: "old (2025-11-25)"} {
		if n := u.count(mcp.MethodToolsList) - before[u]; n != 0 {
			t.Errorf("100 callers' lists cost %s %d reads", name, n)
		}
	}
}
