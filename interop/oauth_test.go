package interop_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tidings/auth"
	"tidings/client"
	"tidings/client/oauth"
	"tidings/internal/testrig/testas"
	"tidings/mcp"
	"tidings/streamhttp"
)

// oauthScope is the scope the server requires of access tokens.
const oauthScope = "mcp:tools"

// TestTSClientOAuthWithGoServer has a client built on the TypeScript SDK
// authorize itself with the SDK's own OAuth support against a tidings
// server that requires access tokens: its first request is refused with a
// challenge, it finds the authorization server through the Protected
// Resource Metadata, gets a token for the scope the challenge names by the
// client credentials grant from a real authorization server, and lists
// tools with it.
func TestTSClientOAuthWithGoServer(t *testing.T) {
	node, dir := nodeSetup(t)

	hs := httptest.NewUnstartedServer(nil)
	resource := "http://" + hs.Listener.Addr().String() + "/mcp"
	as := testas.Start(t, resource)

	g, err := auth.New(as.Issuer(), resource, auth.WithScopes(oauthScope))
	if err != nil {
		t.Fatal(err)
	}
	srv := newGoServer(t)
	var callers callerLog
	mux := http.NewServeMux()
	g.Mount(mux, callers.wrap(streamhttp.New(srv, streamhttp.WithPrincipal(auth.Principal))))
	var arrivals requestLog
	hs.Config.Handler = arrivals.wrap(mux)
	hs.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		hs.Close()
	})

	steps, order := runSteps(t, node, dir, "ts-oauth-client.mjs", resource, func(string) {},
		testas.ClientID, testas.ClientSecret, as.Issuer())
	if want := []string{"connected", "tools", "token"}; !slices.Equal(order, want) {
		t.Fatalf("steps %v, want %v", order, want)
	}
	get := func(step string, v any) {
		t.Helper()
		if err := json.Unmarshal(steps[step], v); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	var connected struct {
		ServerInfo      struct{ Name string } `json:"serverInfo"`
		ProtocolVersion string                `json:"protocolVersion"`
	}
	get("connected", &connected)
	if connected.ServerInfo.Name != "tidings-interop" || connected.ProtocolVersion != "2026-07-28" {
		t.Errorf("connected to %q at %q", connected.ServerInfo.Name, connected.ProtocolVersion)
	}
	var tools struct{ Names []string }
	get("tools", &tools)
	if want := []string{"confirm", "greet", "regional", "t_a", "t_b"}; !slices.Equal(tools.Names, want) {
		t.Errorf("tools %v, want %v", tools.Names, want)
	}
	var token struct {
		Present bool
		Type    string
	}
	get("token", &token)
	if !token.Present || !strings.EqualFold(token.Type, "bearer") {
		t.Errorf("the SDK holds token %+v, want a bearer token", token)
	}

	// The SDK began without a token and, refused, read the Protected
	// Resource Metadata before it came back with one.
	got := arrivals.values()
	prm := slices.Index(got, "GET /.well-known/oauth-protected-resource/mcp")
	withToken := slices.IndexFunc(got, func(s string) bool { return strings.HasSuffix(s, " /mcp bearer") })
	if len(got) == 0 || !strings.HasSuffix(got[0], " /mcp") || prm < 0 || withToken < prm {
		t.Errorf("requests %q: want one to /mcp without a token, the metadata, then /mcp with one", got)
	}

	// Every request that reached the server carried a valid token of the
	// client, with the scope the challenge asked for.
	seen := callers.values()
	if len(seen) == 0 {
		t.Fatal("no request reached the server")
	}
	for _, c := range seen {
		if want := (&auth.Info{Issuer: as.Issuer(), Subject: testas.ClientID}).Principal(); c.principal != want || !slices.Contains(c.scopes, oauthScope) {
			t.Errorf("the server saw caller %q with scopes %v, want %q with %q", c.principal, c.scopes, want, oauthScope)
		}
	}
	// The SDK found the authorization server by discovery and used its
	// token endpoint, authenticating as the client.
	if got := as.TokenRequests(); len(got) != 1 || got[0] != "client_credentials "+testas.ClientID {
		t.Errorf("token requests %q, want one client_credentials grant by %s", got, testas.ClientID)
	}
}

// requestLog records the method and path of each request, and "bearer"
// after those that carry an access token.
type requestLog struct {
	mu   sync.Mutex
	seen []string
}

func (l *requestLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := r.Method + " " + r.URL.Path
		if scheme, _, _ := strings.Cut(r.Header.Get("Authorization"), " "); strings.EqualFold(scheme, "bearer") {
			s += " bearer"
		}
		l.mu.Lock()
		l.seen = append(l.seen, s)
		l.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (l *requestLog) values() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen)
}

// callerLog records who each request that passed the guard came from.
type callerLog struct {
	mu   sync.Mutex
	seen []caller
}

type caller struct {
	principal string
	scopes    []string
}

func (c *callerLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var who caller
		if info, ok := auth.FromContext(r.Context()); ok {
			who = caller{info.Principal(), info.Scopes}
		}
		c.mu.Lock()
		c.seen = append(c.seen, who)
		c.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (c *callerLog) values() []caller {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen)
}

// oauthRedirect is the redirect URI of the client registered for the
// authorization code grant. Nothing listens there: the headless user
// agent stops at the redirect and hands its query to the flow.
const oauthRedirect = "http://127.0.0.1/callback"

// TestGoClientOAuthWithTSServer has the tidings client authorize itself
// against a server built on the TypeScript SDK that requires access
// tokens (the SDK's requireBearerAuth): refused at first, the client's
// OAuth flow reads the Protected Resource Metadata the challenge points
// to, discovers the authorization server, runs the authorization code
// grant with PKCE S256 for the resource through a headless user agent,
// and comes back with a token the server accepts, for the test user. A
// second client sharing the first one's store uses the token it saved,
// without authorizing again.
func TestGoClientOAuthWithTSServer(t *testing.T) {
	node, dir := nodeSetup(t)
	// With no audience of its own, the authorization server issues
	// tokens only for a resource the client names (RFC 8707).
	as := testas.Start(t, "")
	clientID := as.RegisterClient(oauthRedirect)
	p := startNode(t, node, dir, "ts-oauth-server.mjs", as.Issuer(), "0")
	resource := listening(t, p, "ts-oauth-server.mjs")
	u, err := url.Parse(resource)
	if err != nil {
		t.Fatal(err)
	}
	prmURL := u.Scheme + "://" + u.Host + "/.well-known/oauth-protected-resource" + u.Path

	transport := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(transport.CloseIdleConnections)
	traffic := &trafficLog{next: transport}
	hc := &http.Client{Transport: traffic}
	store := &memStore{}
	agent := &headlessAgent{redirectURI: oauthRedirect, hc: hc}
	ctx := t.Context()
	connect := func() *client.Client {
		t.Helper()
		flow, err := oauth.New(oauth.Config{
			HTTPClient:   hc,
			Interaction:  agent,
			Store:        store,
			ClientID:     clientID,
			ClientIssuer: as.Issuer(),
			ClientName:   "tidings-interop",
			Logger:       quietLogger(t),
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = flow.Close() })
		c := client.NewHTTP(resource,
			client.WithClientInfo(mcp.Implementation{Name: "tidings-interop", Version: "1.0.0"}),
			client.WithLogger(quietLogger(t)),
			client.WithTimeout(20*time.Second),
			client.WithHTTPClient(hc),
			client.WithAuthorizer(flow),
		)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	whoami := func(c *client.Client) identity {
		t.Helper()
		r, err := c.CallTool(ctx, "whoami", map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		var who identity
		if err := json.Unmarshal(r.StructuredContent, &who); err != nil || r.IsError {
			t.Fatalf("whoami = %s (isError %v): %v", r.StructuredContent, r.IsError, err)
		}
		return who
	}

	c := connect()
	tools, err := c.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := toolNames(tools), []string{"echo", "whoami"}; !slices.Equal(got, want) {
		t.Errorf("tools = %v, want %v", got, want)
	}
	if who := whoami(c); who.Sub != testas.UserID || who.ClientID != clientID || !slices.Contains(who.Scopes, oauthScope) {
		t.Errorf("the server saw the token of %+v, want sub %s, client %s, scope %s", who, testas.UserID, clientID, oauthScope)
	}

	// The client began without a token and was refused with a challenge
	// naming the metadata; it read that, then the authorization server's
	// metadata, sent the user agent to authorize, redeemed the code, and
	// came back with the token.
	got := traffic.values()
	t.Logf("requests:\n%s", strings.Join(strs(got), "\n"))
	mcpReq := func(e exchange) bool { return e.url == resource }
	first := slices.IndexFunc(got, mcpReq)
	if first < 0 || got[first].bearer || got[first].status != http.StatusUnauthorized {
		t.Fatalf("the first request to the server was %v, want one without a token, refused with 401", at(got, first))
	}
	if ch := got[first].challenge; !strings.Contains(ch, `resource_metadata="`+prmURL+`"`) || !strings.Contains(ch, `scope="`+oauthScope+`"`) {
		t.Errorf("challenge %q, want resource_metadata %s and scope %s", ch, prmURL, oauthScope)
	}
	step := first
	next := func(what string, match func(exchange) bool) {
		t.Helper()
		i := slices.IndexFunc(got[step+1:], match)
		if i < 0 {
			t.Fatalf("after %v: no %s", got[step], what)
		}
		step += 1 + i
	}
	next("Protected Resource Metadata", func(e exchange) bool {
		return e.method == http.MethodGet && e.url == prmURL && e.status == http.StatusOK
	})
	next("authorization server metadata", func(e exchange) bool {
		return e.method == http.MethodGet && e.status == http.StatusOK && (e.url == as.Issuer()+"/.well-known/oauth-authorization-server" ||
			e.url == as.Issuer()+"/.well-known/openid-configuration")
	})
	next("authorization request", func(e exchange) bool {
		return e.method == http.MethodGet && e.url == as.Issuer()+"/authorize"
	})
	next("token request", func(e exchange) bool {
		return e.method == http.MethodPost && e.url == as.Issuer()+"/oauth/token" && e.status == http.StatusOK
	})
	next("request with the token", func(e exchange) bool { return mcpReq(e) && e.bearer })
	for _, e := range got[step:] {
		if mcpReq(e) && (!e.bearer || e.status >= 300) {
			t.Errorf("after the token: %v", e)
		}
	}

	// The authorization server saw PKCE S256, the resource and the scope
	// of the challenge, and one code redeemed with its verifier.
	auths := as.Authorizations()
	if len(auths) != 1 {
		t.Fatalf("authorization requests %+v, want one", auths)
	}
	if a := auths[0]; a.ClientID != clientID || a.RedirectURI != oauthRedirect || a.CodeChallengeMethod != "S256" ||
		!slices.Equal(a.Resources, []string{resource}) || !slices.Contains(a.Scopes, oauthScope) {
		t.Errorf("authorization request %+v, want client %s, redirect %s, S256, resource %s, scope %s", a, clientID, oauthRedirect, resource, oauthScope)
	}
	grants := as.Grants()
	if len(grants) != 1 || grants[0].Type != "authorization_code" || grants[0].ClientID != clientID ||
		!grants[0].CodeVerifier || !slices.Equal(grants[0].Resources, []string{resource}) {
		t.Errorf("token requests %+v, want one authorization_code grant by %s with a code_verifier and resource %s", grants, clientID, resource)
	}
	if n := agent.count(); n != 1 {
		t.Errorf("the user was sent to authorize %d times, want once", n)
	}
	if len(store.keys()) == 0 {
		t.Error("the flow saved nothing in its store")
	}

	// A second client, sharing the store, is let in with the saved token.
	c2 := connect()
	if who := whoami(c2); who.Sub != testas.UserID || who.ClientID != clientID {
		t.Errorf("second client: the server saw the token of %+v, want sub %s, client %s", who, testas.UserID, clientID)
	}
	if n := agent.count(); n != 1 || len(as.Authorizations()) != 1 || len(as.Grants()) != 1 {
		t.Errorf("second client: %d authorizations by the user, %d authorization requests and %d token requests in all, want 1, 1, 1",
			n, len(as.Authorizations()), len(as.Grants()))
	}
}

// identity is the whoami tool's answer.
type identity struct {
	Sub      string   `json:"sub"`
	ClientID string   `json:"clientId"`
	Scopes   []string `json:"scopes"`
}

// listening waits for a server script's {"url": ...} line.
func listening(t *testing.T, p *nodeProc, script string) string {
	t.Helper()
	line, ok := p.next(t, 30*time.Second)
	if !ok {
		t.Fatalf("%s exited before listening; stderr:\n%s", script, p.stderr.String())
	}
	var hello struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(line), &hello); err != nil || hello.URL == "" {
		t.Fatalf("%s printed %q, want {\"url\":...}", script, line)
	}
	return hello.URL
}

// headlessAgent is the user's part of the authorization code grant
// without a user: it opens the authorization URL and follows the
// redirects, through the authorization server's login that approves at
// once, until the one to the redirect URI, whose query it returns.
type headlessAgent struct {
	redirectURI string
	hc          *http.Client

	mu    sync.Mutex
	calls int
}

func (a *headlessAgent) RedirectURI() string { return a.redirectURI }

func (a *headlessAgent) Authorize(ctx context.Context, authURL string) (url.Values, error) {
	a.mu.Lock()
	a.calls++
	a.mu.Unlock()
	var final *url.URL
	hc := *a.hc
	hc.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if u := req.URL; u.Scheme+"://"+u.Host+u.Path == a.redirectURI {
			final = u
			return http.ErrUseLastResponse
		}
		if len(via) >= 10 {
			return errors.New("too many redirects")
		}
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
	if err != nil {
		return nil, fmt.Errorf("authorization URL: %w", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("authorization: %w", err)
	}
	resp.Body.Close()
	if final == nil {
		return nil, fmt.Errorf("the authorization ended at %s with status %d, not at %s", resp.Request.URL, resp.StatusCode, a.redirectURI)
	}
	return final.Query(), nil
}

func (a *headlessAgent) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls
}

// memStore keeps an OAuth flow's state in memory.
type memStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (s *memStore) Load(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	if !ok {
		return nil, fmt.Errorf("load %q: %w", key, oauth.ErrNotStored)
	}
	return slices.Clone(v), nil
}

func (s *memStore) Save(_ context.Context, key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string][]byte{}
	}
	s.m[key] = slices.Clone(value)
	return nil
}

func (s *memStore) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
	return nil
}

func (s *memStore) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Keys(s.m))
}

// exchange is one HTTP request and the status it got.
type exchange struct {
	method    string
	url       string // without the query
	bearer    bool   // it carried an access token
	status    int    // 0 when it failed
	challenge string // WWW-Authenticate
}

func (e exchange) String() string {
	s := fmt.Sprintf("%s %s → %d", e.method, e.url, e.status)
	if e.bearer {
		s += " (with a token)"
	}
	return s
}

func at(es []exchange, i int) any {
	if i < 0 || i >= len(es) {
		return "nothing"
	}
	return es[i]
}

func strs(es []exchange) []string {
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.String()
	}
	return out
}

// trafficLog records every request sent through it, in order.
type trafficLog struct {
	next http.RoundTripper

	mu   sync.Mutex
	seen []exchange
}

func (l *trafficLog) RoundTrip(req *http.Request) (*http.Response, error) {
	scheme, _, _ := strings.Cut(req.Header.Get("Authorization"), " ")
	e := exchange{method: req.Method, url: req.URL.Scheme + "://" + req.URL.Host + req.URL.Path, bearer: strings.EqualFold(scheme, "bearer")}
	resp, err := l.next.RoundTrip(req)
	if err == nil {
		e.status, e.challenge = resp.StatusCode, resp.Header.Get("WWW-Authenticate")
	}
	l.mu.Lock()
	l.seen = append(l.seen, e)
	l.mu.Unlock()
	return resp, err
}

func (l *trafficLog) values() []exchange {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen)
}
