package gateway_test

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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

// exchangeRig is a gateway in front of one upstream that it reaches with
// each caller's token exchanged at a real authorization server: the
// gateway trusts the server's tokens for itself (audience), the upstream
// its tokens for the upstream, and the upstream serves each subject its
// own tools ("<sub>-notes") besides "whoami", which answers with the
// subject and client it was called by.
type exchangeRig struct {
	as       *testas.Server
	g        *gateway.Gateway
	url      string // the gateway's
	upURL    string
	up       *server.Server
	cfg      gateway.Config
	clientID string // the gateway's at the authorization server
	// skew moves the gateway's clock.
	skew atomic.Int64
	// claimPublic has the upstream mark its tool lists public, which
	// they are not: each subject's differs.
	claimPublic atomic.Bool
	// refuseAll has the upstream refuse every token.
	refuseAll atomic.Bool
	// version is in the text of every resource.
	version atomic.Int64

	mu sync.Mutex
	// seen are the Authorization values the upstream received; refused
	// the tokens it now refuses (as if revoked).
	seen    []string
	refused map[string]bool
}

func startExchangeRig(t *testing.T, tune ...func(*gateway.Config)) *exchangeRig {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &exchangeRig{upURL: "http://" + ln.Addr().String() + "/mcp", refused: map[string]bool{}}
	r.as = testas.Start(t, audience)
	subjectOf := func(principal string) string {
		for _, sub := range []string{"alice", "bob", "carol", "dave"} {
			if (&auth.Info{Issuer: r.as.Issuer(), Subject: sub}).Principal() == principal {
				return sub
			}
		}
		return ""
	}
	r.up = server.New(mcp.Implementation{Name: "per-subject", Version: "1"},
		server.WithVisibility(func(principal string, _ server.List, key string) bool {
			sub := subjectOf(principal)
			return key == "whoami" || sub != "" && strings.HasPrefix(key, sub+"-")
		}))
	for _, name := range []string{"alice-notes", "bob-notes", "carol-notes", "dave-notes"} {
		addEcho(t, r.up, name, `{"type":"object"}`)
	}
	for _, uri := range []string{"alice-doc://note", "bob-doc://note"} {
		err := r.up.AddResource(mcp.Resource{URI: uri, Name: uri}, func(context.Context, *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			text := uri + " v" + strconv.FormatInt(r.version.Load(), 10)
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{{URI: uri, Text: &text}}}, nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	err = r.up.AddTool(mcp.Tool{Name: "whoami", InputSchema: []byte(`{"type":"object"}`)}, func(ctx context.Context, _ *server.ToolRequest) (*mcp.CallToolResult, error) {
		info, _ := auth.FromContext(ctx)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("sub=" + info.Subject + " client=" + info.ClientID)}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	guard, err := auth.New(r.as.Issuer(), r.upURL)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	guard.Mount(mux, streamhttp.New(r.up, streamhttp.WithPrincipal(auth.Principal)))
	hs := &httptest.Server{Listener: ln, Config: &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		v := req.Header.Get("Authorization")
		r.mu.Lock()
		r.seen = append(r.seen, v)
		refused := r.refused[strings.TrimPrefix(v, "Bearer ")] || r.refuseAll.Load()
		r.mu.Unlock()
		if refused {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", resource_metadata="`+guard.MetadataURL()+`"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if !r.claimPublic.Load() || req.Header.Get(mcp.HeaderMethod) != mcp.MethodToolsList {
			mux.ServeHTTP(w, req)
			return
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.Code)
		_, _ = w.Write(bytes.ReplaceAll(rec.Body.Bytes(), []byte(`"cacheScope":"private"`), []byte(`"cacheScope":"public"`)))
	})}}
	hs.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = r.up.Shutdown(ctx)
		hs.Close()
	})

	var secret string
	r.clientID, secret = r.as.RegisterConfidentialClient("http://127.0.0.1/cb")
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := gateway.Config{Upstreams: []gateway.Upstream{{ID: "x", URL: r.upURL, Auth: gateway.Auth{
		TokenExchange: &gateway.TokenExchange{Issuer: r.as.Issuer(), ClientID: r.clientID, SecretFile: secretFile, Scopes: []string{"notes"}}}}}}
	for _, f := range tune {
		f(&cfg)
	}
	r.cfg = cfg
	r.g, err = gateway.New(context.Background(), cfg, gateway.WithClock(func() time.Time { return time.Now().Add(time.Duration(r.skew.Load())) }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.g.Close) // after the server below is shut down
	gguard, err := auth.New(r.as.Issuer(), audience)
	if err != nil {
		t.Fatal(err)
	}
	// Listens are parked, as tidings gateway parks them: a listen's
	// handler returns while the listen goes on.
	r.url = serveOnLoopback(t, r.g.Server(), gguard.Require(streamhttp.New(r.g.Server(), streamhttp.WithPrincipal(auth.Principal), streamhttp.WithParking())))
	return r
}

// token mints sub's access token for the gateway, signed by the
// authorization server's key.
func (r *exchangeRig) token(t *testing.T, sub string) string {
	t.Helper()
	kid, key := r.as.SigningKey()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: key}, (&jose.SignerOptions{}).WithType("at+jwt").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tok, err := jwt.Signed(s).Claims(map[string]any{
		"iss": r.as.Issuer(), "sub": sub, "aud": []string{audience}, "scope": "mcp",
		"exp": now.Add(5 * time.Minute).Unix(), "iat": now.Unix(), "jti": sub + now.String(),
	}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// caller is a client of the gateway presenting tok.
func (r *exchangeRig) caller(t *testing.T, tok string) *client.Client {
	t.Helper()
	c := client.NewHTTP(r.url, client.WithAuthorization("Bearer "+tok))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func (r *exchangeRig) upstreamSaw() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

// refuseSeen has the upstream refuse every token it has seen so far.
func (r *exchangeRig) refuseSeen() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, v := range r.seen {
		r.refused[strings.TrimPrefix(v, "Bearer ")] = true
	}
}

func (r *exchangeRig) exchangesOf(sub string) int {
	n := 0
	for _, x := range r.as.Exchanges() {
		if x.Subject == sub {
			n++
		}
	}
	return n
}

func callText(t *testing.T, c *client.Client, name string) string {
	t.Helper()
	res, err := c.CallTool(context.Background(), name, map[string]any{})
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	if len(res.Content) != 1 || res.Content[0].Text == nil {
		t.Fatalf("calling %s: %+v", name, res)
	}
	return *res.Content[0].Text
}

// TestTokenExchangeReachesTheUpstreamAsTheCaller: a call through the
// gateway reaches the upstream with a token the authorization server
// issued by exchange — the caller's subject, the upstream's audience, the
// gateway's client — and never with the caller's own token.
func TestTokenExchangeReachesTheUpstreamAsTheCaller(t *testing.T) {
	r := startExchangeRig(t)
	alice := r.token(t, "alice")
	c := r.caller(t, alice)
	if got := callText(t, c, "x_whoami"); got != "sub=alice client="+r.clientID {
		t.Fatalf("the upstream was called by %q", got)
	}
	seen := r.upstreamSaw()
	if len(seen) == 0 {
		t.Fatal("the upstream saw no request")
	}
	for _, v := range seen {
		if strings.Contains(v, alice) {
			t.Fatal("the upstream received the caller's own token")
		}
		tok, err := jwt.ParseSigned(strings.TrimPrefix(v, "Bearer "), []jose.SignatureAlgorithm{jose.RS256})
		if err != nil {
			t.Fatalf("the upstream got %q, not a JWT: %v", v, err)
		}
		var claims struct {
			Sub      string       `json:"sub"`
			Aud      jwt.Audience `json:"aud"`
			ClientID string       `json:"client_id"`
		}
		if err := tok.UnsafeClaimsWithoutVerification(&claims); err != nil {
			t.Fatal(err)
		}
		if claims.Sub != "alice" || !slices.Contains(claims.Aud, r.upURL) || claims.ClientID != r.clientID {
			t.Fatalf("the upstream's token says %+v", claims)
		}
	}
	xs := r.as.Exchanges()
	if len(xs) != 1 {
		t.Fatalf("%d exchanges, want 1: %+v", len(xs), xs)
	}
	x := xs[0]
	const accessToken = "urn:ietf:params:oauth:token-type:access_token"
	if x.ClientID != r.clientID || x.Subject != "alice" || x.SubjectTokenType != accessToken || x.RequestedTokenType != accessToken ||
		!slices.Equal(x.Audience, []string{r.upURL}) || !slices.Equal(x.Resources, []string{r.upURL}) || !slices.Equal(x.Scopes, []string{"notes"}) {
		t.Fatalf("the exchange asked %+v", x)
	}
}

// TestTokenExchangeListsArePrivatePerCaller: each caller gets the
// upstream's list as the upstream gives it to them, never another's, and
// told as private — even when the upstream marks it public, since it was
// asked in the caller's name — and kept per caller and credential; an
// item of another's is unknown to them.
func TestTokenExchangeListsArePrivatePerCaller(t *testing.T) {
	r := startExchangeRig(t)
	r.claimPublic.Store(true)
	alice, bob := r.caller(t, r.token(t, "alice")), r.caller(t, r.token(t, "bob"))
	for range 2 {
		if got := toolNames(t, alice); !slices.Equal(got, []string{"x_alice-notes", "x_whoami"}) {
			t.Fatalf("alice sees %v", got)
		}
		if got := toolNames(t, bob); !slices.Equal(got, []string{"x_bob-notes", "x_whoami"}) {
			t.Fatalf("bob sees %v", got)
		}
	}
	// A list is kept per credential too: alice with another token is
	// asked for anew, not served what her first token was answered.
	before := len(r.upstreamSaw())
	if got := toolNames(t, r.caller(t, r.token(t, "alice"))); !slices.Equal(got, []string{"x_alice-notes", "x_whoami"}) {
		t.Fatalf("alice with another token sees %v", got)
	}
	if len(r.upstreamSaw()) == before {
		t.Fatal("alice's list under another token was served from what her first token was answered")
	}
	if f := alice.Freshness(mcp.MethodToolsList, ""); f.Scope != mcp.ScopePrivate {
		t.Fatalf("alice's list is told as %q", f.Scope)
	}
	if _, err := alice.CallTool(context.Background(), "x_bob-notes", map[string]any{}); err == nil || !strings.Contains(err.Error(), "Unknown tool") {
		t.Fatalf("alice calling bob's tool: %v", err)
	}
	if got := callText(t, bob, "x_bob-notes"); got != "from bob-notes" {
		t.Fatalf("bob's tool answered %q", got)
	}
}

// TestTokenExchangeTokensAreKeptAndRenewed: one exchange serves a
// caller's requests until the upstream refuses its token (then one more)
// or it nears its expiry (then one more); concurrent first requests of a
// caller share one exchange.
func TestTokenExchangeTokensAreKeptAndRenewed(t *testing.T) {
	r := startExchangeRig(t)
	c := r.caller(t, r.token(t, "alice"))
	for range 3 {
		callText(t, c, "x_whoami")
	}
	if n := r.exchangesOf("alice"); n != 1 {
		t.Fatalf("%d exchanges for three calls, want 1", n)
	}

	r.refuseSeen()
	if got := callText(t, c, "x_whoami"); got != "sub=alice client="+r.clientID {
		t.Fatalf("after the refusal: %q", got)
	}
	if n := r.exchangesOf("alice"); n != 2 {
		t.Fatalf("%d exchanges after the upstream refused the token, want 2", n)
	}

	r.skew.Store(int64(10 * time.Minute)) // the token's five minutes are up
	callText(t, c, "x_whoami")
	if n := r.exchangesOf("alice"); n != 3 {
		t.Fatalf("%d exchanges after the token expired, want 3", n)
	}
	if st := r.g.Stats()[0]; st.Exchanges != 3 || st.ExchangeFailures != 0 || st.ExchangedTokens != 1 {
		t.Fatalf("stats %+v", st)
	}

	// A token obtained because the one before was refused is not
	// replaced again when it is refused too: the caller is told.
	r.refuseAll.Store(true)
	_, err := c.CallTool(context.Background(), "x_whoami", map[string]any{})
	if err == nil || !strings.Contains(err.Error(), "upstream x") || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("a call the upstream refuses whatever the token: %v", err)
	}
	if n := r.exchangesOf("alice"); n != 4 {
		t.Fatalf("%d exchanges after the upstream refused a token and its replacement, want 4", n)
	}
	r.refuseAll.Store(false)

	// Each of carol's clients asks on its own, past any cache of theirs.
	carol := r.token(t, "carol")
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		c := r.caller(t, carol)
		wg.Go(func() {
			<-start
			if _, err := c.Request(context.Background(), mcp.MethodToolsList, map[string]any{}); err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if n := r.exchangesOf("carol"); n != 1 {
		t.Fatalf("%d exchanges for carol's concurrent calls, want 1", n)
	}
}

// TestTokenExchangeRefusedIsToldToTheCaller: an exchange the
// authorization server refuses fails the caller's request with an error
// naming the upstream and the server's error, and no token; the same
// token is not sent to be refused again for a while; other callers go
// on.
func TestTokenExchangeRefusedIsToldToTheCaller(t *testing.T) {
	r := startExchangeRig(t)
	r.as.DenyExchanges("dave")
	dave := r.token(t, "dave")
	c := r.caller(t, dave)
	_, err := c.CallTool(context.Background(), "x_whoami", map[string]any{})
	if err == nil {
		t.Fatal("dave's call went through")
	}
	msg := err.Error()
	if !strings.Contains(msg, "upstream x") || !strings.Contains(msg, "invalid_grant") || strings.Contains(msg, dave) {
		t.Fatalf("dave was told %q", msg)
	}
	if st := r.g.Stats()[0]; st.ExchangeFailures == 0 || !st.Up {
		t.Fatalf("stats %+v", st)
	}
	// The same token is not sent to be refused again at once.
	n := r.exchangesOf("dave")
	if _, err := c.CallTool(context.Background(), "x_whoami", map[string]any{}); err == nil || !strings.Contains(err.Error(), "invalid_grant") {
		t.Fatalf("dave's second call: %v", err)
	}
	if r.exchangesOf("dave") != n {
		t.Fatal("a refused exchange was asked again at once")
	}
	r.skew.Store(int64(time.Minute))
	_, _ = c.CallTool(context.Background(), "x_whoami", map[string]any{}) // refused again, but asked anew
	if r.exchangesOf("dave") == n {
		t.Fatal("a refused exchange was not asked again later")
	}
	if got := toolNames(t, r.caller(t, r.token(t, "alice"))); !slices.Equal(got, []string{"x_alice-notes", "x_whoami"}) {
		t.Fatalf("alice sees %v after dave's refusal", got)
	}
}

// TestTokenExchangeListensAreEachCallers: the gateway holds one listen on
// the upstream per caller listening here, in that caller's name, and a
// change heard on it is told to that caller alone; the listen ends with
// the caller's last.
func TestTokenExchangeListensAreEachCallers(t *testing.T) {
	r := startExchangeRig(t)
	alice, bob := r.caller(t, r.token(t, "alice")), r.caller(t, r.token(t, "bob"))
	toolNames(t, alice)
	toolNames(t, bob)
	_, aliceEvents := watchTools(t, alice)
	waitEvent(t, aliceEvents, client.ToolsChanged) // the first read
	bw, bobEvents := watchTools(t, bob)
	waitEvent(t, bobEvents, client.ToolsChanged)
	eachHearsOwnChange(t, r, aliceEvents, bobEvents, bw)
	bw.Close()
	testkit.WaitFor(t, waitTimeout, "bob's listen on the upstream gone with his", func() bool { return r.g.Stats()[0].Listens == 1 })
}

// TestTokenExchangeForEarlierSessions: a 2025-11-25 session's requests go
// upstream with its caller's token exchanged too, and its stream hears
// the changes of its caller's list, and not another's.
func TestTokenExchangeForEarlierSessions(t *testing.T) {
	r := startExchangeRig(t)
	legacy := func(sub string) *client.Client {
		c := client.NewHTTP(r.url, client.WithAuthorization("Bearer "+r.token(t, sub)), client.WithProtocolVersion(mcp.LegacyVersion))
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	alice, bob := legacy("alice"), legacy("bob")
	if got := callText(t, alice, "x_whoami"); got != "sub=alice client="+r.clientID {
		t.Fatalf("the upstream was called by %q", got)
	}
	if got := toolNames(t, bob); !slices.Equal(got, []string{"x_bob-notes", "x_whoami"}) {
		t.Fatalf("bob sees %v", got)
	}
	_, aliceEvents := watchTools(t, alice)
	waitEvent(t, aliceEvents, client.ToolsChanged)
	bw, bobEvents := watchTools(t, bob)
	waitEvent(t, bobEvents, client.ToolsChanged)
	eachHearsOwnChange(t, r, aliceEvents, bobEvents, bw)
}

// TestTokenExchangeResourceUpdatesAreEachCallers: a resource a caller
// follows is followed on that caller's own listen upstream, and its
// update is told to that caller.
func TestTokenExchangeResourceUpdatesAreEachCallers(t *testing.T) {
	r := startExchangeRig(t)
	events := map[string]chan client.Event{}
	for _, sub := range []string{"alice", "bob"} {
		ch := make(chan client.Event, 64)
		events[sub] = ch
		w := r.caller(t, r.token(t, sub)).Watch(context.Background(), client.WatchOptions{URIs: []string{sub + "-doc://note"},
			OnEvent: func(e client.Event) { ch <- e }})
		t.Cleanup(w.Close)
		waitEvent(t, ch, client.ResourceUpdated) // the first read
	}
	testkit.WaitFor(t, waitTimeout, "each caller's listen upstream to follow its resource", func() bool {
		st := r.up.ListenStats()
		return st.Listens == 2 && st.URIs == 2
	})
	r.version.Add(1)
	r.up.ResourceUpdated("alice-doc://note")
	if e := waitEvent(t, events["alice"], client.ResourceUpdated); e.URI != "alice-doc://note" {
		t.Fatalf("alice heard of %q", e.URI)
	}
	r.up.ResourceUpdated("bob-doc://note")
	if e := waitEvent(t, events["bob"], client.ResourceUpdated); e.URI != "bob-doc://note" {
		t.Fatalf("bob heard of %q", e.URI)
	}
}

// TestTokenExchangeListensSurviveAReload: a reload that changes how an
// upstream's tokens are exchanged hands the callers' listens on it over to
// the new one, which hears their changes and lets go with their last.
func TestTokenExchangeListensSurviveAReload(t *testing.T) {
	r := startExchangeRig(t)
	alice := r.caller(t, r.token(t, "alice"))
	toolNames(t, alice)
	aw, events := watchTools(t, alice)
	waitEvent(t, events, client.ToolsChanged)
	testkit.WaitFor(t, waitTimeout, "alice's listen upstream", func() bool { return r.g.Stats()[0].Listens == 1 })

	cfg := r.cfg
	cfg.Upstreams = slices.Clone(cfg.Upstreams)
	te := *cfg.Upstreams[0].Auth.TokenExchange
	te.Scopes = []string{"notes", "more"}
	cfg.Upstreams[0].Auth.TokenExchange = &te
	if err := r.g.Reload(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, waitTimeout, "alice's listen upstream, held by the new upstream", func() bool { return r.g.Stats()[0].Listens == 1 })
	addEcho(t, r.up, "alice-new", `{"type":"object"}`)
	for {
		// The reload itself is told as a change of every list.
		if e := waitEvent(t, events, client.ToolsChanged); slices.Contains(e.Added, "x_alice-new") {
			break
		}
	}
	if x := r.as.Exchanges(); !slices.Equal(x[len(x)-1].Scopes, []string{"notes", "more"}) {
		t.Fatalf("the latest exchange asked %+v", x[len(x)-1])
	}
	aw.Close()
	testkit.WaitFor(t, waitTimeout, "alice's listen upstream gone with hers", func() bool { return r.g.Stats()[0].Listens == 0 })
}

// TestTokenExchangeKeepsAtMostMaxExchangedTokens: past
// max_exchanged_tokens the least recently used token goes, counted.
func TestTokenExchangeKeepsAtMostMaxExchangedTokens(t *testing.T) {
	r := startExchangeRig(t, func(c *gateway.Config) { c.MaxExchangedTokens = 2 })
	alice := r.caller(t, r.token(t, "alice"))
	callText(t, alice, "x_whoami")
	callText(t, r.caller(t, r.token(t, "bob")), "x_whoami")
	callText(t, alice, "x_whoami") // alice's is now the latest used
	callText(t, r.caller(t, r.token(t, "carol")), "x_whoami")
	if st := r.g.Stats()[0]; st.ExchangedTokens != 2 || st.ExchangedEvicted != 1 {
		t.Fatalf("stats %+v", st)
	}
	callText(t, alice, "x_whoami")
	if n := r.exchangesOf("alice"); n != 1 {
		t.Fatalf("alice's token was exchanged %d times; bob's, used less lately, was the one to go", n)
	}
}

// TestTokenExchangeReloadChangesMaxExchangedTokens: a reload that lowers
// max_exchanged_tokens, and changes nothing else, bounds the tokens the
// kept upstream keeps from then on.
func TestTokenExchangeReloadChangesMaxExchangedTokens(t *testing.T) {
	r := startExchangeRig(t)
	cfg := r.cfg
	cfg.MaxExchangedTokens = 2
	if err := r.g.Reload(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"alice", "bob", "carol"} {
		callText(t, r.caller(t, r.token(t, sub)), "x_whoami")
	}
	if st := r.g.Stats()[0]; st.ExchangedTokens != 2 || st.ExchangedEvicted != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// eachHearsOwnChange waits for one upstream listen per caller, then
// changes alice's list and bob's in turn: each hears the change to its
// own list, and bob's watcher (bw) is told of nothing else.
func eachHearsOwnChange(t *testing.T, r *exchangeRig, aliceEvents, bobEvents <-chan client.Event, bw *client.Watcher) {
	t.Helper()
	testkit.WaitFor(t, waitTimeout, "a listen on the upstream for each caller", func() bool { return r.g.Stats()[0].Listens == 2 })
	bobBefore := bw.Stats().Notifications

	addEcho(t, r.up, "alice-new", `{"type":"object"}`)
	if e := waitEvent(t, aliceEvents, client.ToolsChanged); !slices.Equal(e.Added, []string{"x_alice-new"}) {
		t.Fatalf("alice heard %+v", e)
	}
	addEcho(t, r.up, "bob-new", `{"type":"object"}`)
	if e := waitEvent(t, bobEvents, client.ToolsChanged); !slices.Equal(e.Added, []string{"x_bob-new"}) {
		t.Fatalf("bob heard %+v", e)
	}
	if n := bw.Stats().Notifications - bobBefore; n != 1 {
		t.Fatalf("bob was told of %d changes, his own alone is 1", n)
	}
}

// TestTokenExchangeTasksPassThrough: an upstream reached with each
// caller's token exchanged runs tasks through the gateway as any other
// does. What it offers is learnt in the first caller's name (the gateway
// has no token of its own for it); a call goes on as a task, which
// tasks/get finds for its caller alone; and a listen following it is
// told when it completes, the gateway polling it upstream in its
// caller's name. The upstream never sees a caller's own token.
func TestTokenExchangeTasksPassThrough(t *testing.T) {
	r := startExchangeRig(t)
	release := make(chan struct{})
	err := r.up.AddTool(mcp.Tool{Name: "alice-job", InputSchema: []byte(`{"type":"object"}`)}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return req.RunAsTask(ctx, func(ctx context.Context, _ *server.ToolRequest) (*mcp.CallToolResult, error) {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("done")}}, nil
		})
	}, server.RequireTasks())
	if err != nil {
		t.Fatal(err)
	}
	callerOf := func(sub string) (*caller, string) {
		tok := r.token(t, sub)
		return &caller{t: t, c: r.caller(t, tok), url: r.url, user: sub, authz: "Bearer " + tok}, tok
	}
	alice, aliceTok := callerOf("alice")
	bob, _ := callerOf("bob")

	tk := alice.start("x_alice-job")
	if got, err := alice.task(mcp.MethodTasksGet, tk.TaskID, nil); err != nil || got.Status != mcp.TaskWorking {
		t.Fatalf("alice's tasks/get: %+v, %v", got, err)
	}
	_, err = bob.task(mcp.MethodTasksGet, tk.TaskID, nil)
	notFound(t, "bob's tasks/get of alice's task", err)

	msgs := alice.listenTasks(tk.TaskID)
	followsWorking(t, msgs, tk.TaskID)
	close(release)
	if st := nextStatus(t, msgs); st.TaskID != tk.TaskID || st.Status != mcp.TaskCompleted {
		t.Fatalf("then told %s %s, want %s completed", st.TaskID, st.Status, tk.TaskID)
	}
	for _, v := range r.upstreamSaw() {
		if strings.Contains(v, aliceTok) {
			t.Fatal("the upstream received the caller's own token")
		}
	}
}
