package gateway_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"tidings/auth"
	"tidings/client"
	"tidings/gateway"
	"tidings/internal/testrig/testas"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// audience is the gateway's canonical URL in the caller tests: the
// tokens name it, and the gateway's guard wants it.
const audience = "http://gateway.test/mcp"

// authGateway serves a gateway behind an OAuth resource server that
// trusts as, and returns a function that mints a token for a subject
// with scopes, signed with as's own key.
func authGateway(t *testing.T, as *testas.Server, cfg gateway.Config) (string, func(sub string, scopes ...string) string) {
	t.Helper()
	_, url, mint := authGatewayOf(t, as, cfg)
	return url, mint
}

// authGatewayOf is authGateway that also returns the gateway, for tests
// that reload it.
func authGatewayOf(t *testing.T, as *testas.Server, cfg gateway.Config) (*gateway.Gateway, string, func(sub string, scopes ...string) string) {
	t.Helper()
	g, err := gateway.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	guard, err := auth.New(as.Issuer(), audience)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close) // after the server below is shut down
	url := serveOnLoopback(t, g.Server(), guard.Require(streamhttp.New(g.Server(), streamhttp.WithPrincipal(gateway.Principal), streamhttp.WithParking())))
	kid, key := as.SigningKey()
	mint := func(sub string, scopes ...string) string {
		t.Helper()
		s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithType("at+jwt").WithHeader("kid", kid))
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		tok, err := jwt.Signed(s).Claims(map[string]any{
			"iss": as.Issuer(), "sub": sub, "aud": []string{audience}, "scope": joinScopes(scopes),
			"exp": now.Add(5 * time.Minute).Unix(), "iat": now.Unix(),
		}).Serialize()
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	return g, url, mint
}

func joinScopes(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}

// TestCallerRulesChooseWhatEachSees: callers see the upstreams and items
// their rule gives them — in lists, calls and change notifications — and
// a list filtered per caller is private.
func TestCallerRulesChooseWhatEachSees(t *testing.T) {
	a := startUpstream(t, mcp.ScopePublic, "echo", "secret")
	b := startUpstream(t, mcp.ScopePublic, "echo")
	apart(t, b, "mem://echo")
	as := testas.Start(t, audience)
	url, mint := authGateway(t, as, gateway.Config{
		Upstreams: []gateway.Upstream{{ID: "a", URL: a.url}, {ID: "b", URL: b.url}},
		Callers: []gateway.CallerRule{
			{Scope: "admin"},
			{Upstreams: []string{"a"}, Exclude: []string{"a_secret"}},
		},
	})
	ctx := context.Background()
	alice := client.NewHTTP(url, client.WithAuthorization("Bearer "+mint("alice", "admin")))
	defer alice.Close()
	bob := client.NewHTTP(url, client.WithAuthorization("Bearer "+mint("bob", "read")))
	defer bob.Close()

	if got, want := toolNames(t, alice), []string{"a_echo", "a_secret", "b_echo"}; !slices.Equal(got, want) {
		t.Fatalf("alice sees %v, want %v", got, want)
	}
	if got, want := toolNames(t, bob), []string{"a_echo"}; !slices.Equal(got, want) {
		t.Fatalf("bob sees %v, want %v", got, want)
	}
	if f := bob.Freshness(mcp.MethodToolsList, ""); f.Scope != mcp.ScopePrivate {
		t.Fatalf("a list filtered per caller is told as %q", f.Scope)
	}
	for _, hidden := range []string{"a_secret", "b_echo"} {
		if _, err := bob.CallTool(ctx, hidden, map[string]any{}); err == nil {
			t.Fatalf("bob called %s, which his rule hides", hidden)
		}
	}
	if _, err := alice.CallTool(ctx, "b_echo", map[string]any{}); err != nil {
		t.Fatalf("alice's call of b_echo: %v", err)
	}

	// A change to an item bob may not see is not told to him; one to
	// an item he may see is.
	type listener struct {
		w      *client.Watcher
		events chan client.Event
	}
	listen := func(c *client.Client) listener {
		l := listener{events: make(chan client.Event, 64)}
		l.w = c.Watch(ctx, client.WatchOptions{Tools: true, OnEvent: func(e client.Event) { l.events <- e }})
		waitEvent(t, l.events, client.Connected)
		waitEvent(t, l.events, client.ToolsChanged)
		return l
	}
	la, lb := listen(alice), listen(bob)
	defer la.w.Close()
	defer lb.w.Close()
	heardA, heardB := la.w.Stats().Notifications, lb.w.Stats().Notifications

	addEcho(t, b.srv, "hidden_from_bob", `{"type":"object"}`)
	if e := waitEvent(t, la.events, client.ToolsChanged); !slices.Equal(e.Added, []string{"b_hidden_from_bob"}) {
		t.Fatalf("alice: added %v", e.Added)
	}
	addEcho(t, a.srv, "for_all", `{"type":"object"}`)
	if e := waitEvent(t, lb.events, client.ToolsChanged); !slices.Equal(e.Added, []string{"a_for_all"}) {
		t.Fatalf("bob: added %v", e.Added)
	}
	testkit.WaitFor(t, waitTimeout, "alice to hear both changes", func() bool { return la.w.Stats().Notifications >= heardA+2 })
	if n := lb.w.Stats().Notifications - heardB; n != 1 {
		t.Fatalf("bob heard %d notifications; only the change to a_for_all is his to hear", n)
	}
}

// TestListenJudgedByItsOwnToken: a caller holding two tokens of
// different scope is judged, for what its listens are told, by the token
// each listen was opened with — not by the one it used last. A listen
// opened with a token whose rule hides upstream b hears nothing of b
// after its owner lists tools with a token that sees everything.
func TestListenJudgedByItsOwnToken(t *testing.T) {
	a := startUpstream(t, mcp.ScopePublic, "echo")
	b := startUpstream(t, mcp.ScopePublic, "echo")
	apart(t, b, "mem://echo")
	as := testas.Start(t, audience)
	url, mint := authGateway(t, as, gateway.Config{
		Upstreams: []gateway.Upstream{{ID: "a", URL: a.url}, {ID: "b", URL: b.url}},
		Callers: []gateway.CallerRule{
			{Scope: "admin"},
			{Upstreams: []string{"a"}},
		},
	})
	ctx := context.Background()
	narrow := client.NewHTTP(url, client.WithAuthorization("Bearer "+mint("alice", "read")))
	defer narrow.Close()
	wide := client.NewHTTP(url, client.WithAuthorization("Bearer "+mint("alice", "admin", "read")))
	defer wide.Close()

	listen := func(c *client.Client) (*client.Watcher, chan client.Event) {
		events := make(chan client.Event, 64)
		w := c.Watch(ctx, client.WatchOptions{Tools: true, OnEvent: func(e client.Event) { events <- e }})
		t.Cleanup(w.Close)
		waitEvent(t, events, client.Connected)
		waitEvent(t, events, client.ToolsChanged)
		return w, events
	}
	w, events := listen(narrow)
	heard := w.Stats().Notifications
	_, wideEvents := listen(wide) // the wide token is alice's last
	if got, want := toolNames(t, wide), []string{"a_echo", "b_echo"}; !slices.Equal(got, want) {
		t.Fatalf("the wide token sees %v, want %v", got, want)
	}

	addEcho(t, b.srv, "hidden", `{"type":"object"}`)
	// Once the wide listen has heard of it, so would the narrow one
	// have, were it told: the next change is not folded into it.
	if e := waitEvent(t, wideEvents, client.ToolsChanged); !slices.Equal(e.Added, []string{"b_hidden"}) {
		t.Fatalf("the wide listen was told of %v added, want b_hidden", e.Added)
	}
	addEcho(t, a.srv, "for_all", `{"type":"object"}`)
	if e := waitEvent(t, events, client.ToolsChanged); !slices.Equal(e.Added, []string{"a_for_all"}) {
		t.Fatalf("the narrow listen was told of %v added; only a_for_all is its to hear", e.Added)
	}
	if n := w.Stats().Notifications - heard; n != 1 {
		t.Fatalf("the narrow listen heard %d notifications; only the change to a_for_all is its to hear", n)
	}
}

// TestClientCredentialsUpstream: an upstream behind OAuth gets the
// gateway's own token, obtained by the client credentials grant at the
// authorization server the configuration names — never a caller's.
func TestClientCredentialsUpstream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upURL := "http://" + ln.Addr().String() + "/mcp"
	as := testas.Start(t, upURL)
	guard, err := auth.New(as.Issuer(), upURL)
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Value
	srv := server.New(mcp.Implementation{Name: "guarded", Version: "1"})
	addEcho(t, srv, "echo", `{"type":"object"}`)
	mux := http.NewServeMux()
	guard.Mount(mux, streamhttp.New(srv, streamhttp.WithPrincipal(func(r *http.Request) string {
		p := auth.Principal(r)
		seen.Store(p)
		return p
	})))
	hs := &httptest.Server{Listener: ln, Config: &http.Server{Handler: mux}}
	hs.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = srv.Shutdown(ctx)
		hs.Close()
	})
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte(testas.ClientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, url := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "g", URL: upURL, Auth: gateway.Auth{
		ClientCredentials: &gateway.ClientCredentials{Issuer: as.Issuer(), ClientID: testas.ClientID, SecretFile: secret}}}}})
	c := client.NewHTTP(url)
	defer c.Close()
	if got := toolNames(t, c); !slices.Equal(got, []string{"g_echo"}) {
		t.Fatalf("tools %v", got)
	}
	if p, _ := seen.Load().(string); !strings.Contains(p, testas.ClientID) {
		t.Fatalf("the upstream saw the principal %q, not the gateway's client", p)
	}
	if !slices.Contains(as.TokenRequests(), "client_credentials "+testas.ClientID) {
		t.Fatalf("token requests: %v", as.TokenRequests())
	}
}
