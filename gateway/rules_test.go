package gateway_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"

	"tidings/client"
	"tidings/gateway"
	"tidings/internal/testrig/testas"
	"tidings/internal/testrig/testkit"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// lenientFiles is an upstream that serves files by the template
// file:///{+path} and reads a URI as a lenient server does (dot segments,
// escapes, doubled and back slashes, case, query and fragment all
// normalized away), so that many spellings name one file. It lists
// file:///good1.txt alone, and counts what it served by normalized URI.
type lenientFiles struct {
	url    string
	mu     sync.Mutex
	served map[string]int
}

func startLenientFiles(t *testing.T) *lenientFiles {
	t.Helper()
	files := map[string]string{
		"file:///good1.txt": "good", "file:///open.txt": "open",
		"file:///d1/secret.txt": "TOP SECRET d1", "file:///sub/secret2.txt": "TOP SECRET sub",
	}
	lf := &lenientFiles{served: map[string]int{}}
	srv := server.New(mcp.Implementation{Name: "lenient", Version: "1"})
	read := func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		name := gateway.LaxURI(req.URI)
		text, ok := files[name]
		if !ok {
			return nil, server.ErrResourceNotFound
		}
		lf.mu.Lock()
		lf.served[name]++
		lf.mu.Unlock()
		req.SetCache(server.CachePolicy{TTL: 60000 * 1e6, Scope: mcp.ScopePublic})
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{{URI: req.URI, Text: &text}}}, nil
	}
	if err := srv.AddResource(mcp.Resource{URI: "file:///good1.txt", Name: "good1"}, read); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "file:///{+path}", Name: "files"}, read); err != nil {
		t.Fatal(err)
	}
	lf.url = serveOnLoopback(t, srv, streamhttp.New(srv))
	return lf
}

func (lf *lenientFiles) count(uri string) int {
	lf.mu.Lock()
	defer lf.mu.Unlock()
	return lf.served[uri]
}

// spellings are ways to write file:///p that a lenient server reads as it.
func spellings(p string) []string {
	dir, base, _ := strings.Cut(p, "/")
	return []string{
		"file:///" + p, "file:///./" + p, "file:///x/../" + p, "file:////" + p, "file:///" + dir + "//" + base,
		"file:///" + dir + "/./" + base, "file:///" + strings.Replace(p, "e", "%65", 1), "file:///" + dir + "%2F" + base,
		"file:///" + dir + "%2f" + base, "file:///" + dir + "\\" + base, "FILE:///" + p, "file:///" + p + "?v=1",
		"file:///" + p + "#x", "file:///" + p + "/", "file://localhost/" + p, "file://LOCALHOST/" + p,
		"file:///" + strings.Replace(p, "s", "%73", 1), "file:///%2E/" + p,
	}
}

// TestHiddenURIsAreReadUnderNoSpelling: a resource the upstream's own
// exclude hides, or a caller's rule does, is read by nobody it is hidden
// from, under any spelling — although the upstream serves every spelling
// by its template and never lists the resource — while what may be read
// still reads, by the template too.
func TestHiddenURIsAreReadUnderNoSpelling(t *testing.T) {
	lf := startLenientFiles(t)
	up := gateway.Upstream{ID: "fs", URL: lf.url, Exclude: []string{"file:///d1/*"}}
	as := testas.Start(t, audience)
	url, mint := authGateway(t, as, gateway.Config{Upstreams: []gateway.Upstream{up},
		Callers: []gateway.CallerRule{{Scope: "admin"}, {Exclude: []string{"file:///sub/*"}}}})
	_, open := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{up}})
	ctx := context.Background()
	alice := client.NewHTTP(url, client.WithAuthorization("Bearer "+mint("alice", "admin")))
	defer alice.Close()
	bob := client.NewHTTP(url, client.WithAuthorization("Bearer "+mint("bob", "read")))
	defer bob.Close()
	anon := client.NewHTTP(open)
	defer anon.Close()

	for _, c := range []*client.Client{alice, bob, anon} {
		for _, uri := range []string{"file:///good1.txt", "file:///open.txt"} {
			if _, err := c.ReadResource(ctx, uri); err != nil {
				t.Fatalf("a read of %s, which every rule allows: %v", uri, err)
			}
		}
	}
	if _, err := alice.ReadResource(ctx, "file:///sub/secret2.txt"); err != nil {
		t.Fatalf("alice, whose rule hides nothing, reads file:///sub/secret2.txt: %v", err)
	}
	subServed := lf.count("file:///sub/secret2.txt")
	try := func(who string, c *client.Client, p string) {
		for _, uri := range spellings(p) {
			if res, err := c.ReadResource(ctx, uri); err == nil {
				t.Errorf("%s read %s (hidden as file:///%s): %+v", who, uri, p, res.Contents)
			}
		}
	}
	try("alice", alice, "d1/secret.txt")
	try("a caller without a token", anon, "d1/secret.txt")
	try("bob", bob, "d1/secret.txt")
	try("bob", bob, "sub/secret2.txt")
	if n := lf.count("file:///d1/secret.txt"); n != 0 {
		t.Errorf("the upstream served what its exclude hides %d times", n)
	}
	if n := lf.count("file:///sub/secret2.txt"); n != subServed {
		t.Errorf("the upstream served bob's hidden file %d times", n-subServed)
	}
	// What cannot be judged is refused in words that say why.
	_, err := anon.ReadResource(ctx, "file:///x/../open.txt")
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams || !strings.Contains(rpc.Message, `".." segment`) {
		t.Errorf("a read of file:///x/../open.txt: %v, want -32602 naming the '..' segment", err)
	}
}

// TestRulesHoldAcrossReloads: with the caller rules reordered and
// reloaded as fast as the gateway takes them, a caller limited to two
// upstreams never lists, calls or reads anything of the third: each
// request judges its caller by one configuration from start to end.
func TestRulesHoldAcrossReloads(t *testing.T) {
	a := startUpstream(t, mcp.ScopePublic, "pa")
	b := startUpstream(t, mcp.ScopePublic, "pb")
	c := startUpstream(t, mcp.ScopePublic, "pc")
	ups := []gateway.Upstream{{ID: "a", URL: a.url}, {ID: "b", URL: b.url}, {ID: "c", URL: c.url}}
	admin := gateway.CallerRule{Scope: "admin"}
	user := gateway.CallerRule{Scope: "user", Upstreams: []string{"a", "b"}}
	cfgs := []gateway.Config{
		{Upstreams: ups, Callers: []gateway.CallerRule{admin, user}},
		{Upstreams: ups, Callers: []gateway.CallerRule{user, admin}},
	}
	as := testas.Start(t, audience)
	g, url, mint := authGatewayOf(t, as, cfgs[0])
	bob := client.NewHTTP(url, client.WithAuthorization("Bearer "+mint("bob", "user")))
	defer bob.Close()
	ctx := context.Background()
	if _, err := bob.CallTool(ctx, "a_pa", map[string]any{}); err != nil {
		t.Fatalf("bob's call of a tool his rule shows: %v", err)
	}

	stop := make(chan struct{})
	reloaded := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				reloaded <- n
				return
			default:
			}
			if err := g.Reload(ctx, cfgs[n%2]); err != nil {
				t.Error(err)
			}
			n++
		}
	}()
	leaks := 0
	for range 1500 {
		if res, err := bob.CallTool(ctx, "c_pc", map[string]any{}); err == nil {
			leaks++
			t.Errorf("bob called c_pc, which his rule hides: %+v", res.Content)
		}
		raw, err := bob.Request(ctx, mcp.MethodToolsList, nil)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), "c_pc") {
			leaks++
			t.Errorf("bob's tools/list shows c_pc: %s", raw)
		}
		if _, err := bob.ReadResource(ctx, "mem://pc"); err == nil {
			leaks++
			t.Error("bob read mem://pc, which his rule hides")
		}
		if leaks > 5 {
			break
		}
	}
	close(stop)
	if n := <-reloaded; n < 100 {
		t.Logf("only %d reloads ran beside the requests", n)
	}
}

// TestKeptReadUnderRulesIsPrivate: under caller rules a read the gateway
// serves from what it kept is told private, as the first read was: a
// cache in front of the gateway must not hand it to another caller.
func TestKeptReadUnderRulesIsPrivate(t *testing.T) {
	u, _ := readUpstream(t, mcp.ScopePublic)
	as := testas.Start(t, audience)
	url, mint := authGateway(t, as, gateway.Config{Upstreams: []gateway.Upstream{{ID: "a", URL: u.url}},
		Callers: []gateway.CallerRule{{Scope: "admin"}}})
	for i := range 2 {
		c := client.NewHTTP(url, client.WithAuthorization("Bearer "+mint("alice", "admin")))
		if _, err := c.ReadResource(context.Background(), "mem://doc"); err != nil {
			t.Fatal(err)
		}
		if f := c.Freshness(mcp.MethodResourcesRead, "mem://doc"); f.Scope != mcp.ScopePrivate {
			t.Errorf("read %d is told %q under caller rules", i+1, f.Scope)
		}
		c.Close()
	}
	if n := u.count(mcp.MethodResourcesRead); n != 1 {
		t.Errorf("two reads cost %d upstream reads; the second should be served from what was kept", n)
	}
}

// TestListenFollowsAllowedURIsFromTheStart: on a gateway that has listed
// no resources yet, a caller limited to some upstreams listens to one of
// their resources and hears its update; another upstream's resource is
// not granted to it.
func TestListenFollowsAllowedURIsFromTheStart(t *testing.T) {
	a := startUpstream(t, mcp.ScopePublic, "doca")
	b := startUpstream(t, mcp.ScopePublic, "docb")
	as := testas.Start(t, audience)
	url, mint := authGateway(t, as, gateway.Config{Upstreams: []gateway.Upstream{{ID: "a", URL: a.url}, {ID: "b", URL: b.url}},
		Callers: []gateway.CallerRule{{Upstreams: []string{"a"}}}})
	bob := client.NewHTTP(url, client.WithAuthorization("Bearer "+mint("bob")))
	defer bob.Close()
	events, announced := make(chan client.Event, 16), make(chan client.Event, 16)
	w := bob.Watch(context.Background(), client.WatchOptions{URIs: []string{"mem://doca", "mem://docb"},
		OnEvent: func(e client.Event) { events <- e }, OnAnnounce: func(e client.Event) { announced <- e }})
	defer w.Close()
	waitEvent(t, events, client.Connected)
	if got := w.Granted().ResourceSubscriptions; !slices.Equal(got, []string{"mem://doca"}) {
		t.Fatalf("granted %v, want [mem://doca]", got)
	}
	testkit.WaitFor(t, waitTimeout, "a's listen to follow mem://doca", func() bool { return a.srv.ListenStats().URIs == 1 })
	if n := b.srv.ListenStats().URIs; n != 0 {
		t.Fatalf("b follows %d URIs for a caller who may not see it", n)
	}
	a.srv.ResourceUpdated("mem://doca")
	if e := waitEvent(t, announced, client.ResourceUpdated); e.URI != "mem://doca" {
		t.Fatalf("updated %q", e.URI)
	}
}
