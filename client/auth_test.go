package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/oauth2"

	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// ---- a server whose answers depend on who asks ----

// authFixture is a real server behind a bearer-token gate on loopback.
// Its tools/list is private (each principal sees "common" and its own
// "only-<name>" tool), res://me is private ("secret of <name>") and
// res://pub is public. A request with no token is anonymous; one with a
// token the gate does not know is refused with 401 invalid_token, and the
// refusal echoes the token, as careless servers do.
type authFixture struct {
	srv    *server.Server
	served *recorder // requests the gate let through
	url    string

	mu      sync.Mutex
	tokens  map[string]string // valid token → principal
	refused []string          // the Authorization of every refused request
	listens []context.CancelFunc
	// anonymous, when false, refuses requests without a token too.
	anonymous bool
	reads     atomic.Int32 // res://me handler runs
}

const principalHeader = "X-Test-Principal"

func newAuthFixture(t testing.TB, wrap func(http.Handler) http.Handler) *authFixture {
	t.Helper()
	fx := &authFixture{tokens: map[string]string{"alice-token": "alice", "bob-token": "bob"}, anonymous: true}
	fx.srv = server.New(mcp.Implementation{Name: "per-principal", Version: "1"},
		server.WithLogger(quietLogger()),
		server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: time.Hour, Scope: mcp.ScopePrivate}),
		server.WithVisibility(func(principal string, _ server.List, key string) bool {
			return !strings.HasPrefix(key, "only-") || key == "only-"+principal
		}))
	addTools(t, fx.srv, "common", "only-alice", "only-bob")
	must(t, fx.srv.AddResource(mcp.Resource{URI: "res://me"}, func(_ context.Context, r *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		fx.reads.Add(1)
		r.SetCache(server.CachePolicy{TTL: time.Hour, Scope: mcp.ScopePrivate})
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(r.URI, "", "secret of "+r.Principal)}}, nil
	}))
	pub := &textResource{body: "for everyone"}
	must(t, fx.srv.AddResource(mcp.Resource{URI: "res://pub"}, pub.handler, server.WithResourceCache(server.CachePolicy{TTL: time.Hour})))
	var h http.Handler = streamhttp.New(fx.srv, streamhttp.WithPrincipal(func(r *http.Request) string { return r.Header.Get(principalHeader) }))
	if wrap != nil {
		h = wrap(h)
	}
	fx.served = &recorder{next: h}
	fx.url = newFixtureHandler(t, fx)
	return fx
}

func (fx *authFixture) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	r.Header.Del(principalHeader)
	auth := r.Header.Get("Authorization")
	fx.mu.Lock()
	principal, ok := "", fx.anonymous
	if auth != "" {
		principal, ok = fx.tokens[strings.TrimPrefix(auth, "Bearer ")]
	}
	if !ok {
		fx.refused = append(fx.refused, auth)
	}
	fx.mu.Unlock()
	if !ok {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":"invalid_token","error_description":"%s is not a token of this server"}`, strings.TrimPrefix(auth, "Bearer "))
		return
	}
	r.Header.Set(principalHeader, principal)
	if r.Header.Get(mcp.HeaderMethod) == mcp.MethodListen {
		ctx, cancel := context.WithCancel(r.Context())
		fx.mu.Lock()
		fx.listens = append(fx.listens, cancel)
		fx.mu.Unlock()
		r = r.WithContext(ctx)
	}
	fx.served.ServeHTTP(w, r)
}

// setTokens replaces the valid tokens.
func (fx *authFixture) setTokens(tokens map[string]string) {
	fx.mu.Lock()
	fx.tokens = tokens
	fx.mu.Unlock()
}

// endListens ends every listen so far on the server's side, as a server
// does when the token it was opened with expires.
func (fx *authFixture) endListens() {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	for _, cancel := range fx.listens {
		cancel()
	}
	fx.listens = nil
}

func (fx *authFixture) refusals() []string {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return slices.Clone(fx.refused)
}

func (fx *authFixture) client(t testing.TB, opts ...HTTPOption) *Client {
	t.Helper()
	c := NewHTTP(fx.url, append([]HTTPOption{WithLogger(quietLogger()), WithTimeout(waitTimeout)}, opts...)...)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testAuthorizer holds one token at a time and hands out the next of
// its list when challenged, once it has refused hold challenges.
type testAuthorizer struct {
	bearer
	next []string
	hold int
	err  error // what Challenge fails with, when set
	// slow is how long Challenge takes, like a user at the browser.
	slow time.Duration

	challenges atomic.Int32
}

// bearer is the token an Authorizer of the tests holds: Authorize sends
// it, if any, as a bearer token.
type bearer struct {
	mu    sync.Mutex
	token string
}

func (b *bearer) Authorize(_ context.Context, req *http.Request) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.token != "" {
		req.Header.Set("Authorization", "Bearer "+b.token)
	}
	return nil
}

func (a *testAuthorizer) Challenge(ctx context.Context, _ *http.Request, resp *http.Response) (bool, error) {
	a.challenges.Add(1)
	if a.slow > 0 {
		select {
		case <-time.After(a.slow):
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return false, a.err
	}
	if !strings.Contains(resp.Header.Get("WWW-Authenticate"), "invalid_token") || len(a.next) == 0 {
		return false, nil
	}
	if a.hold > 0 {
		a.hold--
		return false, nil
	}
	a.token, a.next = a.next[0], a.next[1:]
	return true, nil
}

func (a *testAuthorizer) current() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.token
}

// ---- what each context is served ----

// view is a client speaking for a principal ("" for anonymous).
type view struct {
	c  *Client
	as string
}

func toolNames(t testing.TB, c *Client) []string {
	t.Helper()
	tools, err := c.Tools(t.Context())
	must(t, err)
	return names(tools)
}

func readMe(t testing.TB, c *Client) string {
	t.Helper()
	r, err := c.ReadResource(t.Context(), "res://me")
	must(t, err)
	return contentText(t, r)
}

// wantOwn checks that v gets its principal's answers.
func wantOwn(t testing.TB, v view) {
	t.Helper()
	want := []string{"common"}
	if v.as != "" {
		want = append(want, "only-"+v.as)
	}
	if got := toolNames(t, v.c); !slices.Equal(got, want) {
		t.Errorf("tools of %q = %v, want %v", v.as, got, want)
	}
	if got := readMe(t, v.c); got != "secret of "+v.as {
		t.Errorf("%q read %q, want %q", v.as, got, "secret of "+v.as)
	}
}

// checkIsolated checks that owner's private answers are cached for owner
// alone: a second read is served from the cache, and no other view —
// another user's, an anonymous one — is ever served them.
func checkIsolated(t *testing.T, fx *authFixture, owner view, others ...view) {
	t.Helper()
	wantOwn(t, owner)
	lists, reads := fx.served.count(mcp.MethodToolsList), fx.reads.Load()
	wantOwn(t, owner)
	if n, r := fx.served.count(mcp.MethodToolsList)-lists, fx.reads.Load()-reads; n != 0 || r != 0 {
		t.Errorf("%q's second reads reached the server (%d lists, %d reads), want them from the cache", owner.as, n, r)
	}
	for _, o := range others {
		lists, reads := fx.served.count(mcp.MethodToolsList), fx.reads.Load()
		if st := o.c.Freshness(mcp.MethodResourcesRead, "res://me").State; st != Missing {
			t.Errorf("%q sees a cached private answer (%s) before reading", o.as, st)
		}
		wantOwn(t, o)
		if n, r := fx.served.count(mcp.MethodToolsList)-lists, fx.reads.Load()-reads; n != 1 || r != 1 {
			t.Errorf("%q's reads reached the server %d and %d times, want once each", o.as, n, r)
		}
	}
	wantOwn(t, owner) // the others' answers did not replace the owner's
}

// TestPrivateAnswersWithAuthorization: a token given with
// WithAuthorization keys its private answers.
func TestPrivateAnswersWithAuthorization(t *testing.T) {
	fx := newAuthFixture(t, nil)
	base := fx.client(t, WithAuthorization("Bearer alice-token"))
	checkIsolated(t, fx, view{base, "alice"}, view{base.As("Bearer bob-token"), "bob"}, view{base.As(""), ""})
}

// TestPrivateAnswersWithHeader: a token given as a plain header is the
// client's credentials as much as one given with WithAuthorization.
func TestPrivateAnswersWithHeader(t *testing.T) {
	fx := newAuthFixture(t, nil)
	base := fx.client(t, WithHeader("Authorization", "Bearer alice-token"))
	checkIsolated(t, fx, view{base, "alice"}, view{base.As(""), ""}, view{base.As("Bearer bob-token"), "bob"})
}

// TestPrivateAnswersWithAuthorizer: the token an Authorizer obtains on
// the server's challenge keys the private answers it gets.
func TestPrivateAnswersWithAuthorizer(t *testing.T) {
	fx := newAuthFixture(t, nil)
	a := &testAuthorizer{bearer: bearer{token: "stale-token"}, next: []string{"alice-token"}}
	base := fx.client(t, WithAuthorizer(a))
	checkIsolated(t, fx, view{base, "alice"}, view{base.As(""), ""}, view{base.As("Bearer bob-token"), "bob"})
	if n := a.challenges.Load(); n != 1 {
		t.Errorf("challenges = %d, want 1 (the stale token's refusal)", n)
	}
	if got := fx.refusals(); !slices.Equal(got, []string{"Bearer stale-token"}) {
		t.Errorf("refused requests carried %q, want the stale token once", got)
	}
}

// TestPrivateAnswersWithAs: views speak for the authorization they were
// given, not for the client's Authorizer, and keep their answers apart.
func TestPrivateAnswersWithAs(t *testing.T) {
	fx := newAuthFixture(t, nil)
	base := fx.client(t, WithAuthorizer(&testAuthorizer{bearer: bearer{token: "alice-token"}}))
	bob := base.As("Bearer bob-token")
	checkIsolated(t, fx, view{bob, "bob"}, view{base, "alice"}, view{base.As(""), ""})
	// A view that sends the same credentials as the Authorizer is the same
	// context: it shares the answers given to them.
	lists, reads := fx.served.count(mcp.MethodToolsList), fx.reads.Load()
	wantOwn(t, view{base.As("Bearer alice-token"), "alice"})
	if n, r := fx.served.count(mcp.MethodToolsList)-lists, fx.reads.Load()-reads; n != 0 || r != 0 {
		t.Errorf("a view with the Authorizer's token went to the server (%d lists, %d reads), want the shared answers", n, r)
	}
}

// headerAdder is a RoundTripper that adds a token to requests without
// one, as a credential-injecting proxy client does.
type headerAdder struct {
	base  *http.Transport
	value string
}

func (h *headerAdder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") != "" {
		return h.base.RoundTrip(req)
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", h.value)
	return h.base.RoundTrip(r)
}

// checkUncached checks that the private answers of a client whose HTTP
// client adds its own token are never cached, for it or its views, while
// public ones are.
func checkUncached(t *testing.T, fx *authFixture, c *Client, views ...view) {
	t.Helper()
	for i := range 2 {
		lists, reads := fx.served.count(mcp.MethodToolsList), fx.reads.Load()
		wantOwn(t, view{c, "alice"})
		if n, r := fx.served.count(mcp.MethodToolsList)-lists, fx.reads.Load()-reads; n != 1 || r != 1 {
			t.Errorf("read %d: private answers reached the server %d and %d times, want once each (never from the cache)", i+1, n, r)
		}
		if st := c.Freshness(mcp.MethodResourcesRead, "res://me").State; st != Missing {
			t.Errorf("read %d: a private answer of unknown context is cached (%s)", i+1, st)
		}
		if n := privateEntries(c.cache); n != 0 {
			t.Errorf("read %d: the cache holds %d private answers, want none", i+1, n)
		}
	}
	for _, v := range views {
		reads := fx.reads.Load()
		wantOwn(t, v)
		if r := fx.reads.Load() - reads; r != 1 {
			t.Errorf("%q's read reached the server %d times, want once", v.as, r)
		}
	}
	before := fx.served.count(mcp.MethodResourcesRead)
	for _, v := range append(views, view{c, "alice"}) {
		r, err := v.c.ReadResource(t.Context(), "res://pub")
		must(t, err)
		if got := contentText(t, r); got != "for everyone" {
			t.Errorf("public read = %q", got)
		}
	}
	if n := fx.served.count(mcp.MethodResourcesRead) - before; n != 1 {
		t.Errorf("public reads reached the server %d times, want 1 (cached and shared)", n)
	}
}

// TestPrivateAnswersWithTokenAddingTransport: a hand-written RoundTripper
// adds alice's token to requests that have none. The client cannot know
// whose answers it gets, so caches none of the private ones; bob's view,
// whose header it leaves alone, still gets only bob's.
func TestPrivateAnswersWithTokenAddingTransport(t *testing.T) {
	fx := newAuthFixture(t, nil)
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	c := fx.client(t, WithHTTPClient(&http.Client{Transport: &headerAdder{base: base, value: "Bearer alice-token"}}))
	checkUncached(t, fx, c, view{c.As("Bearer bob-token"), "bob"}, view{c.As(""), "alice"})
}

// TestPrivateAnswersWithOAuth2Transport: golang.org/x/oauth2's Transport
// puts its token on a copy of every request; the client learns from
// net/http that what it sent is not what it set, and caches no private
// answer.
func TestPrivateAnswersWithOAuth2Transport(t *testing.T) {
	fx := newAuthFixture(t, nil)
	base := &http.Transport{}
	t.Cleanup(base.CloseIdleConnections)
	src := oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "alice-token", TokenType: "Bearer"})
	c := fx.client(t, WithHTTPClient(&http.Client{Transport: &oauth2.Transport{Source: src, Base: base}}))
	checkUncached(t, fx, c, view{c.As(""), "alice"})
}

// hider is a RoundTripper that sends a copy of each request with alice's
// token and hands back a response naming the caller's request, so that
// nothing shows what went out.
type hider struct{ base *http.Transport }

func (h hider) RoundTrip(req *http.Request) (*http.Response, error) {
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer alice-token")
	resp, err := h.base.RoundTrip(r)
	if resp != nil {
		resp.Request = req
	}
	return resp, err
}

// TestPrivateAnswersThroughHidingTransports: a RoundTripper other than
// net/http's that hands back the client's own request tells nothing of
// what it sent — it may have sent another token, as hider does — so the
// client, configured as bob, caches none of the private answers.
func TestPrivateAnswersThroughHidingTransports(t *testing.T) {
	for _, tc := range []struct {
		name string
		rt   func(*http.Transport) http.RoundTripper
		as   string // whose answers the server gives
	}{
		{"hider", func(tr *http.Transport) http.RoundTripper { return hider{tr} }, "alice"},
		{"passOn", func(tr *http.Transport) http.RoundTripper { return passOn{tr} }, "bob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newAuthFixture(t, nil)
			tr := &http.Transport{}
			t.Cleanup(tr.CloseIdleConnections)
			c := fx.client(t, WithAuthorization("Bearer bob-token"), WithHTTPClient(&http.Client{Transport: tc.rt(tr)}))
			for i := range 2 {
				reads := fx.reads.Load()
				wantOwn(t, view{c, tc.as})
				if r := fx.reads.Load() - reads; r != 1 {
					t.Errorf("read %d reached the server %d times, want once (never from the cache)", i+1, r)
				}
				if n := privateEntries(c.cache); n != 0 {
					t.Errorf("read %d: the cache holds %d private answers, want none", i+1, n)
				}
			}
		})
	}
}

// TestTransportThatStartsAddingToken: a RoundTripper that leaves requests
// alone until it has a token and then adds it. The anonymous answers it
// let through are cached as anonymous; once it is seen adding a token,
// the client can no longer tell whose answer its next request gets, and
// never serves it the anonymous ones.
func TestTransportThatStartsAddingToken(t *testing.T) {
	fx := newAuthFixture(t, nil)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	var adding atomic.Bool
	rt := roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if !adding.Load() {
			return tr.RoundTrip(req.Clone(req.Context()))
		}
		return (&headerAdder{base: tr, value: "Bearer alice-token"}).RoundTrip(req)
	})
	c := fx.client(t, WithHTTPClient(&http.Client{Transport: rt}))
	wantOwn(t, view{c, ""})
	reads := fx.reads.Load()
	wantOwn(t, view{c, ""})
	if r := fx.reads.Load() - reads; r != 0 {
		t.Errorf("a verified anonymous answer was not cached (%d reads)", r)
	}
	adding.Store(true)
	if _, err := c.Request(t.Context(), mcp.MethodDiscover, nil); err != nil {
		t.Fatal(err)
	}
	wantOwn(t, view{c, "alice"})
}

// privateEntries counts the private answers in c.
func privateEntries(c *cache) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, e := range c.entries {
		if e.scope == mcp.ScopePrivate {
			n++
		}
	}
	return n
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// passOn is a RoundTripper that only passes requests on.
type passOn struct{ base http.RoundTripper }

func (p passOn) RoundTrip(req *http.Request) (*http.Response, error) { return p.base.RoundTrip(req) }

// TestWhatNetHTTPTellsOfTheSentRequest pins the net/http behaviour the
// client's context rests on: resp.Request is the request the innermost
// Transport was given, so a RoundTripper that sends a changed copy shows
// it, while one that passes the client's own request on hands that very
// request back (a shallow copy sharing its header when Client.Timeout is
// set), which says nothing of what a RoundTripper might have sent.
func TestWhatNetHTTPTellsOfTheSentRequest(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Got", r.Header.Get("Authorization"))
	}))
	t.Cleanup(ts.Close)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	send := func(hc *http.Client) (*http.Request, *http.Response) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader("{}"))
		must(t, err)
		req.Header.Set("Authorization", "Bearer mine")
		resp, err := hc.Do(req)
		must(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return req, resp
	}
	src := oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "theirs", TokenType: "Bearer"})
	for _, tc := range []struct {
		name      string
		hc        *http.Client
		same, hdr bool   // resp.Request is req; it shares req's header
		sent      string // what the server got
	}{
		{"net/http's Transport", &http.Client{Transport: tr}, true, true, "Bearer mine"},
		{"a RoundTripper passing it on", &http.Client{Transport: passOn{tr}}, true, true, "Bearer mine"},
		{"passing on, with Client.Timeout", &http.Client{Transport: passOn{tr}, Timeout: time.Minute}, false, true, "Bearer mine"},
		{"oauth2.Transport", &http.Client{Transport: &oauth2.Transport{Source: src, Base: tr}}, false, false, "Bearer theirs"},
	} {
		req, resp := send(tc.hc)
		if got := resp.Header.Get("X-Got"); got != tc.sent {
			t.Errorf("%s: the server got %q, want %q", tc.name, got, tc.sent)
		}
		if resp.Request == nil {
			t.Fatalf("%s: resp.Request is nil", tc.name)
		}
		if same := resp.Request == req; same != tc.same {
			t.Errorf("%s: resp.Request is the request sent = %v, want %v", tc.name, same, tc.same)
		}
		if hdr := sameHeader(resp.Request.Header, req.Header); hdr != tc.hdr {
			t.Errorf("%s: resp.Request shares the header = %v, want %v", tc.name, hdr, tc.hdr)
		}
		if got := resp.Request.Header.Get("Authorization"); got != tc.sent {
			t.Errorf("%s: resp.Request carries %q, want what was sent, %q", tc.name, got, tc.sent)
		}
	}
}

// TestFlightAnsweredUnderOtherCredentials: an anonymous view joins the
// fetch of a client whose Authorizer has no token yet (both would send
// no credentials), and that fetch gets a token on the server's challenge
// and a private answer for it. The view must not be handed that answer:
// it fetches its own.
func TestFlightAnsweredUnderOtherCredentials(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCache(0, time.Now, false)
		alice := contextOf([]string{"Bearer alice-token"})
		get := func(out chan<- any, res fetched, release <-chan struct{}) {
			v, err := c.get(t.Context(), "k", topicResource+"r", anonymousAuth, func(context.Context) (fetched, error) {
				<-release
				return res, nil
			})
			if err != nil {
				t.Error(err)
			}
			out <- v
		}
		release := make(chan struct{})
		first, second := make(chan any, 1), make(chan any, 1)
		go get(first, fetched{value: "alice's", ttl: time.Hour, scope: mcp.ScopePrivate, as: alice}, release)
		synctest.Wait() // the first fetch is under way
		open := make(chan struct{})
		close(open)
		go get(second, fetched{value: "anonymous", ttl: time.Hour, scope: mcp.ScopePrivate, as: anonymousAuth}, open)
		synctest.Wait() // the second caller waits on the first fetch
		close(release)
		if v := <-first; v != "alice's" {
			t.Errorf("the fetching caller got %v", v)
		}
		if v := <-second; v != "anonymous" {
			t.Errorf("the caller that joined got %v, want its own anonymous answer", v)
		}
		if st := c.info("k", topicResource+"r", alice).State; st != Fresh {
			t.Errorf("alice's answer is %s, want kept for her", st)
		}
		if st := c.info("k", topicResource+"r", anonymousAuth).State; st != Fresh {
			t.Errorf("the anonymous answer is %s, want kept too", st)
		}
	})
}

// ---- the Authorizer's part in every request ----

// TestAuthorizerOnEveryRequest: against a 2025-11-25 server that refuses
// every request without a token, the Authorizer's token is on all of
// them — the era probe, initialize, the initialized notification, calls,
// the session's GET stream and the DELETE that ends it — after one
// challenge.
func TestAuthorizerOnEveryRequest(t *testing.T) {
	var modern atomic.Int32
	var mu sync.Mutex
	var seen []string // HTTP method and Authorization of every request past the gate
	fx := newAuthFixture(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen = append(seen, r.Method+" "+r.Header.Get("Authorization"))
			mu.Unlock()
			legacyOnly(h, refuseJSON, &modern).ServeHTTP(w, r)
		})
	})
	fx.mu.Lock()
	fx.anonymous = false
	fx.mu.Unlock()
	a := &testAuthorizer{next: []string{"alice-token"}}
	c := NewHTTP(fx.url, WithLogger(quietLogger()), WithTimeout(waitTimeout), WithAuthorizer(a))
	if got := toolNames(t, c); !slices.Equal(got, []string{"common", "only-alice"}) {
		t.Errorf("tools = %v", got)
	}
	if era, err := c.Era(t.Context()); err != nil || era != EraLegacy {
		t.Fatalf("era = %s, %v; want the 2025-11-25 fallback", era, err)
	}
	w, log := watch(t, c, WatchOptions{Tools: true, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	log.waitFor(t, "the session stream", kindIs(Connected))
	w.Close()
	must(t, c.Close())
	mu.Lock()
	defer mu.Unlock()
	methods := map[string]bool{}
	for _, s := range seen {
		method, auth, _ := strings.Cut(s, " ")
		methods[method] = true
		if auth != "Bearer alice-token" {
			t.Errorf("a %s reached the server with Authorization %q", method, auth)
		}
	}
	for _, m := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
		if !methods[m] {
			t.Errorf("no %s reached the server; saw %v", m, seen)
		}
	}
	if got := fx.refusals(); !slices.Equal(got, []string{""}) {
		t.Errorf("refused requests = %q, want the first one, without a token", got)
	}
	if modern.Load() == 0 {
		t.Error("the era probe did not reach the server")
	}
}

// TestChallengeBounds: a request is sent again at most three times on an
// Authorizer's word; then, and when the Authorizer gives up or fails, the
// refusal is an *HTTPError or the Authorizer's error, with context.
func TestChallengeBounds(t *testing.T) {
	var hits atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="more"`)
		http.Error(w, "forbidden", http.StatusForbidden)
	}))
	t.Cleanup(func() { closeServer(ts) })
	always := &alwaysAgain{}
	c := rawClient(t, ts.URL, WithAuthorizer(always))
	_, err := c.Tools(t.Context())
	he, ok := errors.AsType[*HTTPError](err)
	if !ok || he.Status != http.StatusForbidden {
		t.Fatalf("err = %v, want an HTTP 403 error", err)
	}
	if n, ch := hits.Load(), always.n.Load(); n != 4 || ch != 3 {
		t.Errorf("requests = %d and challenges = %d, want 4 and 3 (three retries)", n, ch)
	}

	failing := &testAuthorizer{err: errors.New("the user declined")}
	hits.Store(0)
	_, err = rawClient(t, ts.URL, WithAuthorizer(failing)).Tools(t.Context())
	if err == nil || !errors.Is(err, failing.err) || !strings.Contains(err.Error(), "403") {
		t.Errorf("err = %v, want the Authorizer's error, wrapped with the refusal", err)
	}
	if n := hits.Load(); n != 1 {
		t.Errorf("requests = %d after the Authorizer failed, want 1", n)
	}
}

// alwaysAgain asks for another try whatever the server says.
type alwaysAgain struct{ n atomic.Int32 }

func (*alwaysAgain) Authorize(context.Context, *http.Request) error { return nil }

func (a *alwaysAgain) Challenge(context.Context, *http.Request, *http.Response) (bool, error) {
	a.n.Add(1)
	return true, nil
}

// TestWatcherReauthorizesAfterListenEnds: the server ends the listen
// when its token expires and refuses the old token from then on. The
// Watcher re-listens through the same path as every request: each 401
// goes to the Authorizer, refusals it cannot overcome yet are retried
// with backoff like any other failure, and once it has a new token the
// Watcher resumes and keeps reporting changes.
func TestWatcherReauthorizesAfterListenEnds(t *testing.T) {
	fx := newAuthFixture(t, nil)
	fx.setTokens(map[string]string{"old-token": "alice"})
	a := &testAuthorizer{bearer: bearer{token: "old-token"}, next: []string{"new-token"}, hold: 2}
	c := fx.client(t, WithAuthorizer(a))
	w, log := watch(t, c, WatchOptions{Tools: true, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	log.waitFor(t, "connected", kindIs(Connected))
	log.waitFor(t, "the first read", kindIs(ToolsChanged))

	fx.setTokens(map[string]string{"new-token": "alice"})
	fx.endListens()
	log.waitFor(t, "the end of the listen", kindIs(Disconnected))
	_, between := log.waitFor(t, "connected again", kindIs(Connected))
	// Each refusal the Authorizer could not answer yet ended a listen
	// attempt, retried with backoff; the one it answered was sent again
	// at once, within the same attempt.
	var refused []error
	for _, e := range between {
		if he, ok := errors.AsType[*HTTPError](e.Err); ok && e.Kind == Disconnected && he.Status == http.StatusUnauthorized {
			refused = append(refused, e.Err)
			if strings.Contains(e.Err.Error(), "old-token") {
				t.Errorf("the refusal names the token: %v", e.Err)
			}
		}
	}
	if len(refused) != 2 {
		t.Errorf("listens refused = %d (%v), want 2; events: %s", len(refused), refused, describe(between))
	}
	if got := a.current(); got != "new-token" {
		t.Errorf("token = %q, want the new one", got)
	}
	if n := a.challenges.Load(); n != 3 {
		t.Errorf("challenges = %d, want 3 (two refused while no token was ready, one that brought it)", n)
	}
	addTools(t, fx.srv, "later")
	e, _ := log.waitFor(t, "the change after re-authorizing", func(e Event) bool {
		return e.Kind == ToolsChanged && slices.Contains(e.Added, "later")
	})
	if len(e.Removed) != 0 {
		t.Errorf("change = %+v, want only the added tool", e)
	}
	if st := w.State(); st != Live {
		t.Errorf("state = %s, want live", st)
	}
	if got := toolNames(t, c); !slices.Equal(got, []string{"common", "later", "only-alice"}) {
		t.Errorf("tools = %v", got)
	}
}

// TestSlowChallengeDoesNotCutListen: a listen's idle clock counts the
// server's silence, not the time the Authorizer takes to answer a
// refusal: a listen open whose challenge outlasts the idle timeout still
// opens.
func TestSlowChallengeDoesNotCutListen(t *testing.T) {
	fx := newAuthFixture(t, nil)
	a := &testAuthorizer{bearer: bearer{token: "alice-token"}, next: []string{"new-token"}, slow: 300 * time.Millisecond}
	c := fx.client(t, WithAuthorizer(a), WithListenIdleTimeout(100*time.Millisecond))
	wantOwn(t, view{c, "alice"})
	fx.setTokens(map[string]string{"new-token": "alice"})
	_, log := watch(t, c, WatchOptions{Tools: true, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	_, before := log.waitFor(t, "connected", kindIs(Connected))
	if len(before) != 0 {
		t.Errorf("events before the listen opened: %s", describe(before))
	}
	if n := a.challenges.Load(); n != 1 {
		t.Errorf("challenges = %d, want 1", n)
	}
}

// TestCredentialsStayOutOfLogsAndErrors: with the client logging at
// debug level, refusals retried, refusals that stand and a server that
// echoes the token it refused leave no token in the logs or the errors.
func TestCredentialsStayOutOfLogsAndErrors(t *testing.T) {
	fx := newAuthFixture(t, nil)
	fx.setTokens(map[string]string{"good-secret-1": "alice"})
	var logs testkit.SyncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	secrets := []string{"stale-secret-0", "good-secret-1", "bad-secret-2", "bad-secret-3", "bad-secret-4", "fixed-secret-5", "header-secret-6"}
	var errs []error

	a := &testAuthorizer{bearer: bearer{token: "stale-secret-0"}, next: []string{"good-secret-1"}}
	c := fx.client(t, WithLogger(logger), WithAuthorizer(a))
	wantOwn(t, view{c, "alice"})

	// The token expires; the Authorizer's replacements are refused too.
	fx.setTokens(map[string]string{})
	a.mu.Lock()
	a.next = []string{"bad-secret-2", "bad-secret-3", "bad-secret-4", "bad-secret-2"}
	a.mu.Unlock()
	refused := len(fx.refusals())
	_, err := c.CallTool(t.Context(), "common", nil)
	if he, ok := errors.AsType[*HTTPError](err); !ok || he.Status != http.StatusUnauthorized {
		t.Fatalf("err = %v, want HTTP 401", err)
	}
	if n := len(fx.refusals()) - refused; n != 4 {
		t.Errorf("the refused call was sent %d times, want 4", n)
	}
	errs = append(errs, err)

	for _, opt := range []HTTPOption{WithAuthorization("Bearer fixed-secret-5"), WithHeader("Authorization", "Bearer header-secret-6")} {
		_, err := fx.client(t, WithLogger(logger), opt).Tools(t.Context())
		if err == nil {
			t.Fatal("a refused token was accepted")
		}
		errs = append(errs, err)
	}
	a.mu.Lock()
	a.err = errors.New("no refresh token")
	a.mu.Unlock()
	_, err = c.GetPrompt(t.Context(), "none", nil)
	if err == nil || !strings.Contains(err.Error(), "no refresh token") {
		t.Errorf("err = %v, want the Authorizer's", err)
	}
	errs = append(errs, err)

	out := logs.String()
	if !strings.Contains(out, "sending it again with new credentials") {
		t.Errorf("the retries were not logged at debug level:\n%s", out)
	}
	for _, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("the log holds the token %q:\n%s", s, out)
		}
		for _, err := range errs {
			if strings.Contains(err.Error(), s) {
				t.Errorf("an error holds the token %q: %v", s, err)
			}
		}
	}
	if !strings.Contains(errs[1].Error(), "[redacted] is not a token") {
		t.Errorf("err = %v, want the server's words with the token cut out", errs[1])
	}
}
