package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/client"
	"tidings/gateway"
	"tidings/internal/testrig/testkit"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// restartable serves a server on one loopback address that a test can
// take down and bring back.
type restartable struct {
	srv  *server.Server
	addr string
	hs   *http.Server
	done chan struct{}
}

func newRestartable(t *testing.T, srv *server.Server) *restartable {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &restartable{srv: srv, addr: ln.Addr().String()}
	r.serve(ln)
	t.Cleanup(func() {
		r.down()
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return r
}

func (r *restartable) url() string { return "http://" + r.addr + "/mcp" }

func (r *restartable) serve(ln net.Listener) {
	r.hs = &http.Server{Handler: streamhttp.New(r.srv)}
	r.done = make(chan struct{})
	go func(hs *http.Server, done chan struct{}) {
		defer close(done)
		_ = hs.Serve(ln)
	}(r.hs, r.done)
}

// down closes the listener and every connection, listens included.
func (r *restartable) down() {
	if r.hs != nil {
		_ = r.hs.Close()
		<-r.done
		r.hs = nil
	}
}

// up serves again on the same address.
func (r *restartable) up(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", r.addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", r.addr, err)
	}
	r.serve(ln)
}

func toolNames(t *testing.T, c *client.Client) []string {
	t.Helper()
	ts, err := c.Tools(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return names(ts)
}

func TestUpstreamDownLeavesTheListsAndComesBack(t *testing.T) {
	a := startUpstream(t, mcp.ScopePublic, "echo")
	bsrv := server.New(mcp.Implementation{Name: "b", Version: "1"})
	addEcho(t, bsrv, "echo", `{"type":"object"}`)
	b := newRestartable(t, bsrv)
	g, url := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "a", URL: a.url}, {ID: "b", URL: b.url()}}})
	c := client.NewHTTP(url)
	defer c.Close()
	_, events := watchTools(t, c)
	if e := waitEvent(t, events, client.ToolsChanged); !slices.Equal(e.Added, []string{"a_echo", "b_echo"}) {
		t.Fatalf("the first read found %v", e.Added)
	}

	b.down()
	if e := waitEvent(t, events, client.ToolsChanged); !slices.Equal(e.Removed, []string{"b_echo"}) {
		t.Fatalf("with b down, removed %v, want [b_echo]", e.Removed)
	}
	if got := toolNames(t, c); !slices.Equal(got, []string{"a_echo"}) {
		t.Fatalf("with b down the tools are %v", got)
	}
	if st := g.Stats(); st[1].Up {
		t.Fatal("the stats say b is up")
	}

	b.up(t)
	if e := waitEvent(t, events, client.ToolsChanged); !slices.Equal(e.Added, []string{"b_echo"}) {
		t.Fatalf("with b back, added %v, want [b_echo]", e.Added)
	}
	testkit.WaitFor(t, waitTimeout, "b up in the stats", func() bool { return g.Stats()[1].Up })
}

func TestNameClashIsAnErrorAtStart(t *testing.T) {
	a := startUpstream(t, mcp.ScopePublic, "echo")
	b := startUpstream(t, mcp.ScopePublic, "echo")
	keep := ""
	_, err := gateway.New(context.Background(), gateway.Config{Upstreams: []gateway.Upstream{
		{ID: "a", URL: a.url, Prefix: &keep}, {ID: "b", URL: b.url, Prefix: &keep}}})
	if err == nil || !strings.Contains(err.Error(), `upstreams a and b both offer a tool named "echo"`) {
		t.Fatalf("err = %v, want the clash named", err)
	}
	// Resource URIs keep their names whatever the prefix: one served by
	// two upstreams is refused too, where it went to the first unseen.
	_, err = gateway.New(context.Background(), gateway.Config{Upstreams: []gateway.Upstream{
		{ID: "a", URL: a.url}, {ID: "b", URL: b.url}}})
	if err == nil || !strings.Contains(err.Error(), `upstreams a and b both serve the resource "mem://echo"`) {
		t.Fatalf("err = %v, want the clash of URIs named", err)
	}
}

func TestReload(t *testing.T) {
	a := startUpstream(t, mcp.ScopePublic, "echo")
	b := startUpstream(t, mcp.ScopePublic, "echo")
	apart(t, b, "mem://echo")
	cfg := gateway.Config{Upstreams: []gateway.Upstream{{ID: "a", URL: a.url}}}
	g, url := startGateway(t, cfg)
	c := client.NewHTTP(url)
	defer c.Close()
	_, events := watchTools(t, c)
	waitEvent(t, events, client.ToolsChanged)

	// An upstream added is told and listed.
	cfg.Upstreams = append(cfg.Upstreams, gateway.Upstream{ID: "b", URL: b.url})
	if err := g.Reload(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if e := waitEvent(t, events, client.ToolsChanged); !slices.Equal(e.Added, []string{"b_echo"}) {
		t.Fatalf("added %v after the reload", e.Added)
	}
	testkit.WaitFor(t, waitTimeout, "one listen on b", func() bool { return b.srv.ListenStats().Listens == 1 })

	// A reload that would offer one name twice is refused, and the
	// running configuration goes on.
	keep := ""
	clash := gateway.Config{Upstreams: []gateway.Upstream{{ID: "a", URL: a.url, Prefix: &keep}, {ID: "b", URL: b.url, Prefix: &keep}}}
	if err := g.Reload(context.Background(), clash); err == nil || !strings.Contains(err.Error(), "both offer") {
		t.Fatalf("a clashing reload: %v", err)
	}
	if got := toolNames(t, c); !slices.Equal(got, []string{"a_echo", "b_echo"}) {
		t.Fatalf("after a refused reload the tools are %v", got)
	}

	// An upstream removed leaves the lists, told, and its listen ends.
	if err := g.Reload(context.Background(), gateway.Config{Upstreams: cfg.Upstreams[:1]}); err != nil {
		t.Fatal(err)
	}
	if e := waitEvent(t, events, client.ToolsChanged); !slices.Equal(e.Removed, []string{"b_echo"}) {
		t.Fatalf("removed %v after the reload", e.Removed)
	}
	testkit.WaitFor(t, waitTimeout, "b's listen closed", func() bool { return b.srv.ListenStats().Listens == 0 })
	if n := a.srv.ListenStats().Listens; n != 1 {
		t.Fatalf("a holds %d listens after reloads that kept it", n)
	}
}

func TestIncludeAndExclude(t *testing.T) {
	a := startUpstream(t, mcp.ScopePublic, "echo", "add", "debug_dump")
	_, url := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{
		{ID: "a", URL: a.url, Exclude: []string{"debug_*"}},
		{ID: "b", URL: a.url, Include: []string{"add"}},
	}})
	c := client.NewHTTP(url)
	defer c.Close()
	if got, want := toolNames(t, c), []string{"a_add", "a_echo", "b_add"}; !slices.Equal(got, want) {
		t.Fatalf("tools %v, want %v", got, want)
	}
	if _, err := c.CallTool(context.Background(), "a_debug_dump", map[string]any{}); err == nil {
		t.Fatal("an excluded tool was called")
	}
}

func TestPagesWalkTheMergedListAndTheirCursorsAreTheCallers(t *testing.T) {
	a := startUpstream(t, mcp.ScopePublic, "t1", "t2", "t3")
	b := startUpstream(t, mcp.ScopePublic, "t1", "t2")
	apart(t, b, "mem://t1")
	_, url := startGateway(t, gateway.Config{PageSize: 2, Upstreams: []gateway.Upstream{{ID: "a", URL: a.url}, {ID: "b", URL: b.url}}})
	alice := client.NewHTTP(url, client.WithHeader("X-User", "alice"))
	defer alice.Close()
	// The client walks every page.
	if got, want := toolNames(t, alice), []string{"a_t1", "a_t2", "a_t3", "b_t1", "b_t2"}; !slices.Equal(got, want) {
		t.Fatalf("tools %v, want %v", got, want)
	}
	first, err := alice.Request(context.Background(), mcp.MethodToolsList, nil)
	if err != nil {
		t.Fatal(err)
	}
	var page struct {
		NextCursor string `json:"nextCursor"`
	}
	if err := jsonrpc.UnmarshalParams(first, &page); err != nil || page.NextCursor == "" {
		t.Fatalf("the first page has no cursor: %s", first)
	}
	bob := client.NewHTTP(url, client.WithHeader("X-User", "bob"))
	defer bob.Close()
	_, err = bob.Request(context.Background(), mcp.MethodToolsList, map[string]any{"cursor": page.NextCursor})
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("bob with alice's cursor: %v, want -32602", err)
	}
	_, err = alice.Request(context.Background(), mcp.MethodToolsList, map[string]any{"cursor": page.NextCursor + "x"})
	if !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("a forged cursor: %v, want -32602", err)
	}
}

// readUpstream serves one resource, mem://doc, whose reads are cached
// as scope says; the content is what text holds.
func readUpstream(t *testing.T, scope mcp.CacheScope) (*upstreamServer, *atomic.Pointer[string]) {
	t.Helper()
	u := startUpstream(t, mcp.ScopePublic, "doc")
	_ = u.srv.RemoveResources("mem://doc")
	var text atomic.Pointer[string]
	v1 := "v1"
	text.Store(&v1)
	err := u.srv.AddResource(mcp.Resource{URI: "mem://doc", Name: "doc"}, func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		req.SetCache(server.CachePolicy{TTL: time.Minute, Scope: scope})
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{{URI: "mem://doc", Text: text.Load()}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return u, &text
}

func TestPublicReadIsSharedAndPrivateNever(t *testing.T) {
	for _, scope := range []mcp.CacheScope{mcp.ScopePublic, mcp.ScopePrivate} {
		t.Run(string(scope), func(t *testing.T) {
			u, _ := readUpstream(t, scope)
			_, url := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "a", URL: u.url}}})
			for _, who := range []string{"alice", "bob"} {
				c := client.NewHTTP(url, client.WithHeader("X-User", who))
				if _, err := c.ReadResource(context.Background(), "mem://doc"); err != nil {
					t.Fatal(err)
				}
				if f := c.Freshness(mcp.MethodResourcesRead, "mem://doc"); f.Scope != scope {
					t.Errorf("%s's read is told as %q", who, f.Scope)
				}
				c.Close()
			}
			reads := u.count(mcp.MethodResourcesRead)
			if scope == mcp.ScopePublic && reads != 1 {
				t.Fatalf("two callers' public reads cost %d upstream reads, want 1", reads)
			}
			if scope == mcp.ScopePrivate && reads != 2 {
				t.Fatalf("two callers' private reads cost %d upstream reads, want 2: one was served the other's", reads)
			}
		})
	}
}

func TestDiscoverIsTheGatewaysOwn(t *testing.T) {
	a := startUpstream(t, mcp.ScopePrivate, "echo")
	_, url := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "a", URL: a.url}}})
	settled(t, a)
	before := a.count(mcp.MethodToolsList)
	for _, who := range []string{"alice", "bob"} {
		c := client.NewHTTP(url, client.WithHeader("X-User", who))
		d, err := c.Discover(context.Background())
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if d.ServerInfo == nil || d.ServerInfo.Name != "tidings-gateway" {
			t.Fatalf("discover names %+v, not the gateway", d.ServerInfo)
		}
		if d.Capabilities.Tools == nil || !d.Capabilities.Tools.ListChanged {
			t.Fatalf("discover offers %+v", d.Capabilities)
		}
	}
	if after := a.count(mcp.MethodToolsList); after != before {
		t.Fatalf("discover cost %d upstream lists", after-before)
	}
}

func TestResourceUpdatesFollowTheOneUpstreamListen(t *testing.T) {
	u, text := readUpstream(t, mcp.ScopePublic)
	_, url := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "a", URL: u.url}}})
	var watchers []*client.Watcher
	events := make(chan client.Event, 64)
	for range 3 {
		c := client.NewHTTP(url)
		defer c.Close()
		w := c.Watch(context.Background(), client.WatchOptions{URIs: []string{"mem://doc"}, OnEvent: func(e client.Event) { events <- e }})
		defer w.Close()
		watchers = append(watchers, w)
	}
	// Each watcher's first read of the resource is its baseline, reported
	// as an update; the change must come after it to be one.
	for range watchers {
		waitEvent(t, events, client.ResourceUpdated)
	}
	testkit.WaitFor(t, waitTimeout, "the upstream listen to follow the URI", func() bool {
		st := u.srv.ListenStats()
		return st.Listens == 1 && st.URIs == 1
	})
	// The gateway's listen re-reads the resource and tells only a real
	// change: the content must differ.
	v2 := "v2"
	text.Store(&v2)
	u.srv.ResourceUpdated("mem://doc")
	for range watchers {
		if e := waitEvent(t, events, client.ResourceUpdated); e.URI != "mem://doc" {
			t.Fatalf("updated %q", e.URI)
		}
	}
}

// TestLegacySubscribeFollowsTheUpstream: a 2025-11-25 client subscribes
// to a resource on its session; the gateway follows it upstream on its
// one listen, tells the session of the change, and lets go when the
// session does.
func TestLegacySubscribeFollowsTheUpstream(t *testing.T) {
	u, text := readUpstream(t, mcp.ScopePublic)
	_, url := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "a", URL: u.url}}})
	c := client.NewHTTP(url, client.WithProtocolVersion("2025-11-25"))
	events := make(chan client.Event, 64)
	w := c.Watch(context.Background(), client.WatchOptions{URIs: []string{"mem://doc"}, OnEvent: func(e client.Event) { events <- e }})
	waitEvent(t, events, client.ResourceUpdated) // the first read, the baseline
	testkit.WaitFor(t, waitTimeout, "the upstream listen to follow the URI", func() bool {
		st := u.srv.ListenStats()
		return st.Listens == 1 && st.URIs == 1
	})
	v2 := "v2"
	text.Store(&v2)
	u.srv.ResourceUpdated("mem://doc")
	if e := waitEvent(t, events, client.ResourceUpdated); e.URI != "mem://doc" {
		t.Fatalf("updated %q", e.URI)
	}
	w.Close()
	c.Close()
	testkit.WaitFor(t, waitTimeout, "the upstream listen to let the URI go", func() bool {
		return u.srv.ListenStats().URIs == 0
	})
}

// TestMaxItemsCutsAList: an upstream that offers more than max_items has
// the rest left out, and the cut is counted.
func TestMaxItemsCutsAList(t *testing.T) {
	a := startUpstream(t, mcp.ScopePublic, "t1", "t2", "t3", "t4", "t5")
	g, url := startGateway(t, gateway.Config{MaxItems: 3, Upstreams: []gateway.Upstream{{ID: "a", URL: a.url}}})
	c := client.NewHTTP(url)
	defer c.Close()
	if got, want := toolNames(t, c), []string{"a_t1", "a_t2", "a_t3"}; !slices.Equal(got, want) {
		t.Fatalf("tools %v, want %v", got, want)
	}
	if g.Stats()[0].Cut == 0 {
		t.Fatal("the cut is not counted")
	}
}

// TestBrokenUpstreamStallsNobody: beside two healthy upstreams, one that
// answers tools/list with a line that is not JSON holds up no caller:
// 100 callers at once each get the healthy upstreams' tools within a
// second, told which upstream is missing.
func TestBrokenUpstreamStallsNobody(t *testing.T) {
	a := startUpstream(t, mcp.ScopePublic, "echo")
	b := startUpstream(t, mcp.ScopePublic, "echo")
	apart(t, b, "mem://echo")
	_, url := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{
		{ID: "a", URL: a.url}, {ID: "bad", Command: stdioUpstream("garble-tools")}, {ID: "b", URL: b.url}}})
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Go(func() {
			c := client.NewHTTP(url, client.WithHeader("X-User", "caller"+strconv.Itoa(i)))
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			raw, err := c.Request(ctx, mcp.MethodToolsList, nil)
			if err != nil {
				errs <- fmt.Errorf("caller %d: %w", i, err)
				return
			}
			var page struct {
				Tools []mcp.Tool                `json:"tools"`
				Meta  map[string]jsontext.Value `json:"_meta"`
			}
			if err := jsonrpc.UnmarshalParams(raw, &page); err != nil {
				errs <- err
				return
			}
			if got := names(page.Tools); !slices.Equal(got, []string{"a_echo", "b_echo"}) || string(page.Meta[gateway.MissingMetaKey]) != `["bad"]` {
				errs <- fmt.Errorf("caller %d: tools %v, missing %s", i, got, page.Meta[gateway.MissingMetaKey])
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestSpawnedUpstreamIsHeard: what a spawned upstream writes to its
// stderr is in the gateway's log under its id, a line at a time, and a
// process that dies is started again, logged with how it ended and
// counted.
func TestSpawnedUpstreamIsHeard(t *testing.T) {
	var logs testkit.SyncBuffer
	g, url := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "noisy", Command: stdioUpstream("noisy")}}},
		gateway.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	testkit.WaitFor(t, waitTimeout, "the upstream's stderr in the log", func() bool {
		return strings.Contains(logs.String(), `msg="upstream stderr" upstream=noisy line="hello from stderr"`) &&
			strings.Contains(logs.String(), `line="second line"`)
	})
	c := client.NewHTTP(url)
	defer c.Close()
	if _, err := c.CallTool(context.Background(), "noisy_crash", map[string]any{}); err == nil {
		t.Fatal("a call that ended the upstream's process succeeded")
	}
	testkit.WaitFor(t, waitTimeout, "the upstream started again", func() bool {
		_, err := c.CallTool(context.Background(), "noisy_ok", map[string]any{})
		return err == nil
	})
	if st := g.Stats()[0]; st.Restarts != 1 {
		t.Errorf("restarts %d, want 1", st.Restarts)
	}
	if !strings.Contains(logs.String(), `msg="upstream process ended; started again" upstream=noisy ended="exit status 3"`) {
		t.Errorf("the restart is not in the log:\n%s", logs.String())
	}
}

// TestKeptReadsAreBoundedInBytes: the public reads the gateway keeps stay
// within max_kept_bytes, older ones making room (counted), and one over
// an eighth of the bound is not kept at all.
func TestKeptReadsAreBoundedInBytes(t *testing.T) {
	u := startUpstream(t, mcp.ScopePublic, "doc")
	err := u.srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "big://{size}/{n}", Name: "big"},
		func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			var size, n int
			if _, err := fmt.Sscanf(req.URI, "big://%d/%d", &size, &n); err != nil {
				return nil, server.ErrResourceNotFound
			}
			text := strings.Repeat("x", size)
			req.SetCache(server.CachePolicy{TTL: time.Minute, Scope: mcp.ScopePublic})
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{{URI: req.URI, Text: &text}}}, nil
		})
	if err != nil {
		t.Fatal(err)
	}
	const bound = 4 << 20
	g, url := startGateway(t, gateway.Config{MaxKeptBytes: bound, Upstreams: []gateway.Upstream{{ID: "a", URL: u.url}}})
	c := client.NewHTTP(url)
	defer c.Close()
	for n := range 40 {
		if _, err := c.ReadResource(context.Background(), fmt.Sprintf("big://%d/%d", 256<<10, n)); err != nil {
			t.Fatal(err)
		}
		if st := g.Stats()[0]; st.KeptReadBytes > bound {
			t.Fatalf("after %d reads of 256 KiB the gateway keeps %d bytes, over its bound of %d", n+1, st.KeptReadBytes, bound)
		}
	}
	st := g.Stats()[0]
	if st.KeptReadsEvicted < 20 || st.KeptReadBytes < bound/2 {
		t.Fatalf("kept %d bytes, evicted %d: the bound should keep about 15 reads and evict the rest", st.KeptReadBytes, st.KeptReadsEvicted)
	}
	before := st.KeptReadBytes
	reads := u.count(mcp.MethodResourcesRead)
	for range 2 {
		// A request of its own, past the client's cache.
		if _, err := c.Request(context.Background(), mcp.MethodResourcesRead, map[string]any{"uri": fmt.Sprintf("big://%d/0", 1<<20)}); err != nil {
			t.Fatal(err)
		}
	}
	if got := u.count(mcp.MethodResourcesRead) - reads; got != 2 || g.Stats()[0].KeptReadBytes != before {
		t.Fatalf("a read over an eighth of the bound was kept (%d upstream reads for two)", got)
	}
}
