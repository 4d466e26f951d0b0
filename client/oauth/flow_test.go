package oauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestDefaultFlow(t *testing.T) {
	as := newAS(t, nil)
	rs := newRS(t, as, nil)
	ui := &consent{}
	f := mustFlow(t, Config{Interaction: ui, ClientName: "test client"})
	expectOK(t, f, rs.url())
	expectOK(t, f, rs.url()) // the token is reused
	if ui.count() != 1 {
		t.Errorf("%d authorizations, want 1", ui.count())
	}
	if len(as.regs) != 1 {
		t.Fatalf("%d registrations", len(as.regs))
	}
	reg := as.regs[0]
	if reg["client_name"] != "test client" || reg["application_type"] != "native" || reg["token_endpoint_auth_method"] != "none" {
		t.Errorf("registration %v", reg)
	}
	if got := reg["redirect_uris"]; !reflect.DeepEqual(got, []any{ui.RedirectURI()}) {
		t.Errorf("redirect_uris %v", got)
	}
	if gt := reg["grant_types"]; !reflect.DeepEqual(gt, []any{"authorization_code", "refresh_token"}) {
		t.Errorf("grant_types %v", gt)
	}
	q := as.authReqs[0]
	if q.Get("resource") != rs.url() || q.Get("response_type") != "code" || q.Get("state") == "" || q.Has("scope") {
		t.Errorf("authorization request %v", q)
	}
	tr := as.tokenReqs[0].form
	if tr.Get("resource") != rs.url() || tr.Get("redirect_uri") != ui.RedirectURI() {
		t.Errorf("token request %v", tr)
	}
	if got := rs.prms; !reflect.DeepEqual(got, []string{"/.well-known/oauth-protected-resource/mcp"}) {
		t.Errorf("PRM requests %v", got)
	}
}

// The PKCE pair: the challenge is BASE64URL(SHA256(verifier)) of a
// verifier of 43 to 128 unreserved characters, method S256, a fresh
// pair each time (the test AS refuses a mismatch).
func TestPKCE(t *testing.T) {
	as := newAS(t, nil)
	rs := newRS(t, as, nil)
	f := mustFlow(t, Config{Interaction: &consent{}})
	expectOK(t, f, rs.url())
	f2 := mustFlow(t, Config{Interaction: &consent{}})
	expectOK(t, f2, rs.url())
	for i, tr := range as.tokenReqs {
		v := tr.form.Get("code_verifier")
		if len(v) < 43 || len(v) > 128 || strings.Trim(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~") != "" {
			t.Errorf("verifier %d is not RFC 7636 shaped", i)
		}
		sum := sha256.Sum256([]byte(v))
		q := as.authReqs[i]
		if q.Get("code_challenge_method") != "S256" || q.Get("code_challenge") != base64.RawURLEncoding.EncodeToString(sum[:]) {
			t.Errorf("request %d: challenge does not match the verifier", i)
		}
	}
	if as.authReqs[0].Get("code_challenge") == as.authReqs[1].Get("code_challenge") {
		t.Error("the same PKCE pair twice")
	}
}

func TestNoPKCERefused(t *testing.T) {
	as := newAS(t, func(a *testAS) { a.noPKCE = true })
	rs := newRS(t, as, nil)
	ui := &consent{}
	f := mustFlow(t, Config{Interaction: ui})
	_, err := do(testCtx(t), f, http.MethodGet, rs.url())
	if !errors.Is(err, ErrNoPKCE) {
		t.Fatalf("err = %v, want ErrNoPKCE", err)
	}
	if ui.count() != 0 || len(as.regs) != 0 {
		t.Errorf("went on to authorize (%d) or register (%d)", ui.count(), len(as.regs))
	}
}

func TestResourceMetadataDiscovery(t *testing.T) {
	tests := []struct {
		name  string
		rs    func(*testRS)
		paths []string
	}{
		{"from the challenge", func(r *testRS) { r.prmAt = "custom" }, []string{"/meta/prm.json"}},
		{"path-inserted", func(r *testRS) { r.noHeader = true }, []string{"/.well-known/oauth-protected-resource/mcp"}},
		{"root after path-inserted", func(r *testRS) { r.noHeader, r.prmAt = true, "root" },
			[]string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"}},
		{"well-known after a dead challenge URL", func(r *testRS) { r.prmAt = "root"; r.noHeader = false },
			[]string{"/.well-known/oauth-protected-resource"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			as := newAS(t, nil)
			rs := newRS(t, as, tt.rs)
			f := mustFlow(t, Config{Interaction: &consent{}})
			expectOK(t, f, rs.url())
			if !reflect.DeepEqual(rs.prms, tt.paths) {
				t.Errorf("PRM requests %v, want %v", rs.prms, tt.paths)
			}
			want := rs.url()
			if rs.prmAt == "root" {
				want = rs.base // the resource exactly as the metadata gives it
			}
			if got := as.authReqs[0].Get("resource"); got != want {
				t.Errorf("resource %q, want %q", got, want)
			}
		})
	}
}

func TestResourceMismatch(t *testing.T) {
	for _, res := range []string{"https://evil.example/mcp", "", "SERVER/other", "SERVER/mcpx"} {
		as := newAS(t, nil)
		rs := newRS(t, as, nil)
		rs.resource = strings.Replace(res, "SERVER", rs.base, 1)
		if res == "" {
			rs.resource = "relative"
		}
		ui := &consent{}
		f := mustFlow(t, Config{Interaction: ui})
		_, err := do(testCtx(t), f, http.MethodGet, rs.url())
		if !errors.Is(err, ErrResourceMismatch) {
			t.Errorf("resource %q: err = %v, want ErrResourceMismatch", rs.resource, err)
		}
		if g, _, _, _ := as.counts(); g != 0 || ui.count() != 0 {
			t.Errorf("resource %q: went on to the authorization server", rs.resource)
		}
	}
	u, _ := url.Parse("https://MCP.example.com:443/a/mcp")
	for _, ok := range []string{"https://mcp.example.com/a/mcp", "https://mcp.example.com", "HTTPS://mcp.example.com:443/a", "https://mcp.example.com/a/mcp/"} {
		if err := checkResource(u, ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
}

func TestServerMetadataDiscoveryOrder(t *testing.T) {
	tests := []struct {
		prefix, at string
		gets       []string
	}{
		{"", "", []string{"/.well-known/oauth-authorization-server"}},
		{"", "oidc", []string{"/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"}},
		{"/tenant1", "", []string{"/.well-known/oauth-authorization-server/tenant1"}},
		{"/tenant1", "oidc-path", []string{"/.well-known/oauth-authorization-server/tenant1", "/.well-known/openid-configuration/tenant1"}},
		{"/tenant1", "oidc-append", []string{"/.well-known/oauth-authorization-server/tenant1", "/.well-known/openid-configuration/tenant1", "/tenant1/.well-known/openid-configuration"}},
	}
	for _, tt := range tests {
		t.Run(tt.prefix+"/"+tt.at, func(t *testing.T) {
			as := newAS(t, func(a *testAS) { a.prefix, a.metaAt = tt.prefix, tt.at })
			rs := newRS(t, as, nil)
			f := mustFlow(t, Config{Interaction: &consent{}})
			expectOK(t, f, rs.url())
			if !reflect.DeepEqual(as.gets, tt.gets) {
				t.Errorf("metadata requests %v, want %v", as.gets, tt.gets)
			}
		})
	}
}

func TestServerMetadataIssuerMismatch(t *testing.T) {
	as := newAS(t, func(a *testAS) { a.issuerOver = "https://honest.example" })
	rs := newRS(t, as, nil)
	ui := &consent{}
	f := mustFlow(t, Config{Interaction: ui})
	_, err := do(testCtx(t), f, http.MethodGet, rs.url())
	if !errors.Is(err, ErrMetadataIssuer) {
		t.Fatalf("err = %v, want ErrMetadataIssuer", err)
	}
	// Both root locations were tried, neither document used.
	if len(as.gets) != 2 || ui.count() != 0 || len(as.regs) != 0 {
		t.Errorf("gets %v, authorizations %d, registrations %d", as.gets, ui.count(), len(as.regs))
	}
}

func TestIssuerIdentification(t *testing.T) {
	no := false
	tests := []struct {
		name    string
		as      func(*testAS)
		tamper  func(url.Values)
		wantErr error
	}{
		{"advertised and right", nil, nil, nil},
		{"not advertised, absent", func(a *testAS) { a.issAdvert, a.issMode = &no, "omit" }, nil, nil},
		{"not advertised, right", func(a *testAS) { a.issAdvert = &no }, nil, nil},
		{"advertised, absent", func(a *testAS) { a.issMode = "omit" }, nil, ErrResponseIssuerMissing},
		{"advertised, wrong", func(a *testAS) { a.issMode = "wrong" }, nil, ErrResponseIssuer},
		{"not advertised, wrong", func(a *testAS) { a.issAdvert, a.issMode = &no, "wrong" }, nil, ErrResponseIssuer},
		{"trailing slash is another issuer", func(a *testAS) { a.issMode = "normalized" }, nil, ErrResponseIssuer},
		{"two iss", nil, func(v url.Values) { v.Add("iss", v.Get("iss")) }, ErrResponseIssuer},
		{"error response from a mixed-up server is not shown", func(a *testAS) { a.issMode = "wrong" },
			func(v url.Values) { v.Del("code"); v.Set("error", "access_denied") }, ErrResponseIssuer},
		{"error response", nil, func(v url.Values) { v.Del("code"); v.Set("error", "access_denied") }, &AuthorizationError{}},
		{"state mismatch", nil, func(v url.Values) { v.Set("state", "forged") }, ErrStateMismatch},
		{"two states", nil, func(v url.Values) { v.Add("state", "forged") }, ErrStateMismatch},
		{"error response with a wrong state is not shown", nil, func(v url.Values) {
			v.Del("code")
			v.Set("state", "forged")
			v.Set("error", "access_denied")
			v.Set("error_description", "forged-description")
		}, ErrStateMismatch},
		{"wrong state before wrong iss", func(a *testAS) { a.issMode = "wrong" }, func(v url.Values) { v.Set("state", "forged") }, ErrStateMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			as := newAS(t, tt.as)
			rs := newRS(t, as, nil)
			f := mustFlow(t, Config{Interaction: &consent{tamper: tt.tamper}})
			st, err := do(testCtx(t), f, http.MethodGet, rs.url())
			if tt.wantErr == nil {
				if err != nil || st != 200 {
					t.Fatalf("status %d, err %v", st, err)
				}
				return
			}
			var ae *AuthorizationError
			if _, isAE := tt.wantErr.(*AuthorizationError); isAE {
				if !errors.As(err, &ae) || ae.Code != "access_denied" {
					t.Fatalf("err = %v, want an AuthorizationError", err)
				}
			} else if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if errors.As(err, &ae) && (errors.Is(tt.wantErr, ErrResponseIssuer) || errors.Is(tt.wantErr, ErrStateMismatch)) {
				t.Error("acted on an error response that failed a check")
			}
			if errors.Is(tt.wantErr, ErrStateMismatch) {
				for _, s := range []string{"forged", "access_denied", "evil"} {
					if strings.Contains(err.Error(), s) {
						t.Errorf("the error %q shows %q from the refused redirect", err, s)
					}
				}
			}
			if len(as.tokenReqs) != 0 {
				t.Error("the code went to the token endpoint")
			}
		})
	}
}

func TestScopeSelection(t *testing.T) {
	tests := []struct {
		name  string
		as    func(*testAS)
		rs    func(*testRS)
		extra []string
		want  string // "" means no scope parameter
	}{
		{"challenge first", nil, func(r *testRS) { r.scope, r.supported = "mcp:basic", []string{"mcp:a", "mcp:b"} }, nil, "mcp:basic"},
		{"then scopes_supported", nil, func(r *testRS) { r.supported = []string{"mcp:a", "mcp:b"} }, nil, "mcp:a mcp:b"},
		{"else none", nil, nil, nil, ""},
		{"configured extra", nil, func(r *testRS) { r.scope = "mcp:basic" }, []string{"profile"}, "mcp:basic profile"},
		{"offline_access when the server lists it", func(a *testAS) { a.scopes = []string{"mcp:basic", "offline_access"} },
			func(r *testRS) { r.supported = []string{"mcp:basic"} }, nil, "mcp:basic offline_access"},
		{"no offline_access when it does not", func(a *testAS) { a.scopes = []string{"mcp:basic"} },
			func(r *testRS) { r.supported = []string{"mcp:basic"} }, nil, "mcp:basic"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			as := newAS(t, tt.as)
			rs := newRS(t, as, tt.rs)
			f := mustFlow(t, Config{Interaction: &consent{}, Scopes: tt.extra})
			expectOK(t, f, rs.url())
			q := as.authReqs[0]
			if tt.want == "" && q.Has("scope") {
				t.Errorf("scope %q sent", q.Get("scope"))
			}
			if got := q.Get("scope"); got != tt.want {
				t.Errorf("scope %q, want %q", got, tt.want)
			}
		})
	}
}

func TestStepUp(t *testing.T) {
	as := newAS(t, nil)
	rs := newRS(t, as, func(r *testRS) { r.scope = "mcp:basic" })
	ui := &consent{}
	f := mustFlow(t, Config{Interaction: ui})
	expectOK(t, f, rs.url()+"?need=mcp:basic")
	expectOK(t, f, rs.url()+"?need=mcp:write")
	expectOK(t, f, rs.url()+"?need=mcp:basic") // the union kept mcp:basic
	if ui.count() != 2 {
		t.Fatalf("%d authorizations, want 2", ui.count())
	}
	if got := as.authReqs[1].Get("scope"); got != "mcp:basic mcp:write" {
		t.Errorf("step-up scope %q, want the union", got)
	}
}

func TestStepUpLimits(t *testing.T) {
	t.Run("already asked for", func(t *testing.T) {
		as := newAS(t, nil)
		rs := newRS(t, as, func(r *testRS) { r.scope, r.forbid = "mcp:admin", true })
		ui := &consent{}
		f := mustFlow(t, Config{Interaction: ui})
		for range 3 {
			st, err := do(testCtx(t), f, http.MethodGet, rs.url()+"?need=mcp:admin")
			var se *ScopeError
			if st != 403 || !errors.As(err, &se) {
				t.Fatalf("status %d, err %v, want 403 and a ScopeError", st, err)
			}
		}
		if ui.count() != 1 {
			t.Errorf("%d authorizations, want 1", ui.count())
		}
	})
	t.Run("per scope set and per server", func(t *testing.T) {
		as := newAS(t, nil)
		rs := newRS(t, as, func(r *testRS) { r.forbid = true })
		ui := &consent{}
		f := mustFlow(t, Config{Interaction: ui, MaxStepUps: 2})
		for _, need := range []string{"a", "a", "b", "c", "d"} {
			_, _ = do(testCtx(t), f, http.MethodGet, rs.url()+"?need="+need)
		}
		// The initial authorization, then one step-up for {a} and one for
		// {a b}; {a b c} is over the limit.
		if ui.count() != 3 {
			t.Errorf("%d authorizations, want 3", ui.count())
		}
	})
}

// A 401 naming insufficient_scope is a step-up, held to the same
// limits as a 403's.
func TestStepUpOn401(t *testing.T) {
	as := newAS(t, nil)
	rs := newRS(t, as, func(r *testRS) { r.forbid, r.scope401 = true, true })
	ui := &consent{}
	f := mustFlow(t, Config{Interaction: ui, MaxStepUps: 1})
	for _, need := range []string{"a", "b", "c", "d"} {
		_, _ = do(testCtx(t), f, http.MethodGet, rs.url()+"?need="+need)
	}
	// The first authorization (the 401 without a token), then the one
	// step-up the limit allows.
	if ui.count() != 2 {
		t.Errorf("%d authorizations, want 2", ui.count())
	}
	st, err := do(testCtx(t), f, http.MethodGet, rs.url()+"?need=e")
	var se *ScopeError
	if st != 401 || !errors.As(err, &se) {
		t.Errorf("status %d, err %v; want 401 and a ScopeError", st, err)
	}
}

// The step-up budget is per operation, as the MCP specification counts
// it: a step-up that got one tool its scope does not spend another's.
func TestStepUpBudgetPerOperation(t *testing.T) {
	as := newAS(t, nil)
	rs := newRS(t, as, nil)
	ui := &consent{}
	f := mustFlow(t, Config{Interaction: ui, MaxStepUps: 1})
	call := func(tool, need string) (int, error) {
		h := http.Header{"Mcp-Method": {"tools/call"}, "Mcp-Name": {tool}}
		return doWith(testCtx(t), f, http.MethodPost, rs.url()+"?need="+need, h)
	}
	for _, c := range []struct{ tool, need string }{{"read", ""}, {"read", "files:read"}, {"write", "files:write"}, {"read", "files:read"}, {"write", "files:write"}} {
		if st, err := call(c.tool, c.need); st != 200 || err != nil {
			t.Fatalf("%s needing %q: status %d, err %v", c.tool, c.need, st, err)
		}
	}
	if ui.count() != 3 {
		t.Errorf("%d authorizations, want 3", ui.count())
	}
	// An operation's own budget still holds.
	st, err := call("write", "files:admin")
	var se *ScopeError
	if st != 403 || !errors.As(err, &se) {
		t.Errorf("a second step-up for one operation: status %d, err %v; want 403 and a ScopeError", st, err)
	}
}

// testClock is a clock for Config.Now that stands still until advanced.
func testClock() (clock func() time.Time, advance func(time.Duration)) {
	now := time.Now()
	var mu sync.Mutex
	clock = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance = func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	return clock, advance
}

func TestRefresh(t *testing.T) {
	clock, advance := testClock()

	as := newAS(t, func(a *testAS) { a.refresh, a.expiresIn = true, 60 })
	rs := newRS(t, as, nil)
	ui := &consent{}
	f := mustFlow(t, Config{Interaction: ui, Now: clock, Logger: testLogger(t)})
	expectOK(t, f, rs.url())

	// Expired: refreshed before the request goes.
	advance(2 * time.Minute)
	expectOK(t, f, rs.url())
	last := as.tokenReqs[len(as.tokenReqs)-1].form
	if last.Get("grant_type") != "refresh_token" || last.Get("resource") != rs.url() {
		t.Errorf("refresh request %v", last)
	}

	// Revoked: the 401 invalid_token is answered by a refresh.
	as.revokeAll()
	expectOK(t, f, rs.url())
	if ui.count() != 1 {
		t.Errorf("%d authorizations, want 1", ui.count())
	}
	if n := countGrants(as, "refresh_token"); n != 2 {
		t.Errorf("%d refreshes, want 2", n)
	}

	// The refresh refused: a new authorization.
	as.revokeAll()
	as.mu.Lock()
	as.refreshFail = true
	as.mu.Unlock()
	expectOK(t, f, rs.url())
	if ui.count() != 2 {
		t.Errorf("%d authorizations, want 2", ui.count())
	}
}

// flaky is a RoundTripper that fails the requests to one path while
// down is set.
type flaky struct {
	path string
	mu   sync.Mutex
	down bool
}

func (f *flaky) set(down bool) { f.mu.Lock(); f.down = down; f.mu.Unlock() }

func (f *flaky) RoundTrip(req *http.Request) (*http.Response, error) {
	f.mu.Lock()
	down := f.down
	f.mu.Unlock()
	if down && req.URL.Path == f.path {
		return nil, errors.New("connection refused (test)")
	}
	return http.DefaultTransport.RoundTrip(req)
}

// A refresh that fails for want of the network, or by a server error,
// keeps the session: the error is the caller's, and once the server is
// back the token is refreshed, without the user.
func TestTransientRefreshFailureKeepsTheSession(t *testing.T) {
	clock, advance := testClock()

	as := newAS(t, func(a *testAS) { a.refresh, a.expiresIn = true, 60 })
	rs := newRS(t, as, nil)
	net := &flaky{path: "/token"}
	ui := &consent{}
	store := newMemStore()
	f := mustFlow(t, Config{Interaction: ui, Now: clock, Store: store, HTTPClient: &http.Client{Transport: net}})
	expectOK(t, f, rs.url())

	refreshable := func(when string) {
		t.Helper()
		raw, err := store.Load(testCtx(t), keySession+rs.url())
		if err != nil || !strings.Contains(string(raw), `"refresh_token":"rt-`) {
			t.Fatalf("%s: the saved session lost its refresh token: %s %v", when, raw, err)
		}
	}

	// Expired, the token endpoint unreachable: Authorize fails, and Token.
	advance(2 * time.Minute)
	net.set(true)
	if _, err := do(testCtx(t), f, http.MethodGet, rs.url()); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("err = %v, want the network error", err)
	}
	if _, ok, err := f.Token(testCtx(t), rs.url()); ok || err == nil {
		t.Errorf("Token: ok %v, err %v; want the network error", ok, err)
	}
	refreshable("expired")

	// Revoked, the 401 answered by a refresh that cannot get through.
	net.set(false)
	expectOK(t, f, rs.url())
	as.revokeAll()
	net.set(true)
	if _, err := do(testCtx(t), f, http.MethodGet, rs.url()); err == nil {
		t.Fatal("no error with the token endpoint unreachable")
	}
	refreshable("revoked")

	// A server error is no refusal either.
	net.set(false)
	as.mu.Lock()
	as.grant = func(w http.ResponseWriter, r *http.Request) bool {
		if r.PostForm.Get("grant_type") != "refresh_token" {
			return false
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	}
	as.mu.Unlock()
	if _, err := do(testCtx(t), f, http.MethodGet, rs.url()); err == nil {
		t.Fatal("no error from a failing token endpoint")
	}
	refreshable("server error")
	as.mu.Lock()
	as.grant = nil
	as.mu.Unlock()

	expectOK(t, f, rs.url())
	if ui.count() != 1 {
		t.Errorf("%d authorizations, want 1", ui.count())
	}
	if n := countGrants(as, "refresh_token"); n < 2 {
		t.Errorf("%d refreshes reached the server", n)
	}
}

func countGrants(as *testAS, grant string) int {
	as.mu.Lock()
	defer as.mu.Unlock()
	n := 0
	for _, tr := range as.tokenReqs {
		if tr.form.Get("grant_type") == grant {
			n++
		}
	}
	return n
}

func TestRefusedTokensAreNotChasedForever(t *testing.T) {
	as := newAS(t, nil)
	rs := newRS(t, as, func(r *testRS) { r.rejectAll = true })
	ui := &consent{}
	f := mustFlow(t, Config{Interaction: ui})
	st, err := do(testCtx(t), f, http.MethodGet, rs.url())
	if st != 401 || err == nil {
		t.Fatalf("status %d, err %v", st, err)
	}
	if ui.count() != 2 {
		t.Errorf("%d authorizations, want 2", ui.count())
	}
}

// One flow, two MCP servers behind two authorization servers; then one
// of them moves to a third.
func TestPerIssuerAndMigration(t *testing.T) {
	as1 := newAS(t, nil)
	as2 := newAS(t, nil)
	rs1 := newRS(t, as1, nil)
	rs2 := newRS(t, as2, nil)
	store := newMemStore()
	ui := &consent{}
	f := mustFlow(t, Config{Interaction: ui, Store: store})
	expectOK(t, f, rs1.url())
	expectOK(t, f, rs2.url())
	expectOK(t, f, rs1.url())
	if n1, n2 := len(as1.registrations()), len(as2.registrations()); n1 != 1 || n2 != 1 || ui.count() != 2 {
		t.Fatalf("registrations %d/%d, authorizations %d", n1, n2, ui.count())
	}
	for _, k := range []string{keyClient + as1.issuer(), keyClient + as2.issuer(), keySession + rs1.url(), keySession + rs2.url()} {
		if !slices.Contains(store.keys(), k) {
			t.Errorf("store lacks %q (has %v)", k, store.keys())
		}
	}

	// rs1 moves to as3: the old token is refused, the flow finds as3,
	// registers there, and never shows as1's client to it.
	as3 := newAS(t, nil)
	rs1.setAS(as3)
	expectOK(t, f, rs1.url())
	if n := len(as3.registrations()); n != 1 {
		t.Errorf("%d registrations at the new server", n)
	}
	as1ID := as1.authRequests()[0].Get("client_id")
	for _, q := range as3.authRequests() {
		if q.Get("client_id") == as1ID {
			t.Error("the old server's client_id went to the new one")
		}
	}
	for _, tr := range as3.tokenRequests() {
		if tr.form.Get("client_id") == as1ID {
			t.Error("the old server's client_id went to the new token endpoint")
		}
	}

	// A new flow over the same store needs no browser for either server.
	f2 := mustFlow(t, Config{Interaction: ui, Store: store})
	n := ui.count()
	expectOK(t, f2, rs1.url())
	expectOK(t, f2, rs2.url())
	if ui.count() != n {
		t.Errorf("a restored flow asked the user again")
	}
}

func TestPreRegisteredClient(t *testing.T) {
	as := newAS(t, func(a *testAS) { a.noDCR, a.methods = true, []string{AuthClientSecretBasic} })
	as.clients["pre"] = regClient{secret: "pre-secret", method: AuthClientSecretBasic}
	rs := newRS(t, as, nil)
	f := mustFlow(t, Config{Interaction: &consent{}, ClientID: "pre", ClientSecret: "pre-secret", ClientIssuer: as.issuer()})
	expectOK(t, f, rs.url())
	if got := as.tokenReqs[0].auth; got == "" || !strings.HasPrefix(got, "Basic ") {
		t.Errorf("token request authorization %q", got)
	}

	// Another authorization server gets neither the credentials nor a
	// registration: the mismatch is an error.
	other := newAS(t, nil)
	rs2 := newRS(t, other, nil)
	if _, err := do(testCtx(t), f, http.MethodGet, rs2.url()); !errors.Is(err, ErrClientIssuer) {
		t.Fatalf("err = %v, want ErrClientIssuer", err)
	}
	if _, auths, tokens, regs := other.counts(); auths+tokens+regs != 0 {
		t.Errorf("the other server got %d authorization, %d token and %d registration requests", auths, tokens, regs)
	}
}

// Pre-registered credentials name their authorization server, or the
// config says, in so many words, that the first one named gets them.
func TestPreRegisteredNeedsIssuer(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for _, tt := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"secret", Config{ClientID: "pre", ClientSecret: "s"}, false},
		{"key", Config{ClientID: "pre", PrivateKey: key}, false},
		{"public", Config{ClientID: "pre"}, false},
		{"client credentials", Config{ClientID: "pre", ClientSecret: "s", Grant: ClientCredentials{}}, false},
		{"secret and issuer", Config{ClientID: "pre", ClientSecret: "s", ClientIssuer: "https://as.example"}, true},
		{"plain HTTP issuer", Config{ClientID: "pre", ClientSecret: "s", ClientIssuer: "http://as.example"}, false},
		{"secret, trusting the first", Config{ClientID: "pre", ClientSecret: "s", TrustFirstIssuer: true}, true},
		{"no client", Config{}, true},
	} {
		if tt.cfg.Grant == nil {
			tt.cfg.Interaction = &consent{}
		}
		_, err := New(tt.cfg)
		if (err == nil) != tt.ok {
			t.Errorf("%s: err %v", tt.name, err)
		}
		if err != nil && strings.Contains(err.Error(), "s\"") {
			t.Errorf("%s: the error shows the secret: %v", tt.name, err)
		}
	}
}

// With TrustFirstIssuer the first authorization server named gets the
// credentials, and keeps them: the binding is saved per client ID, and
// another server is refused.
func TestTrustFirstIssuer(t *testing.T) {
	as := newAS(t, func(a *testAS) { a.noDCR, a.methods = true, []string{AuthClientSecretPost} })
	as.clients["pre"] = regClient{secret: "pre-secret", method: AuthClientSecretPost}
	other := newAS(t, func(a *testAS) { a.noDCR, a.methods = true, []string{AuthClientSecretPost} })
	other.clients["other-pre"] = regClient{secret: "other-secret", method: AuthClientSecretPost}
	rs := newRS(t, as, nil)
	rs2 := newRS(t, other, nil)
	store := newMemStore()
	f := mustFlow(t, Config{Interaction: &consent{}, Store: store, ClientID: "pre", ClientSecret: "pre-secret", TrustFirstIssuer: true})
	expectOK(t, f, rs.url())
	if _, err := do(testCtx(t), f, http.MethodGet, rs2.url()); !errors.Is(err, ErrClientIssuer) {
		t.Fatalf("second server: err = %v, want ErrClientIssuer", err)
	}
	if _, _, tokens, _ := other.counts(); tokens != 0 {
		t.Errorf("the other server got %d token requests", tokens)
	}
	raw, err := store.Load(testCtx(t), keyPreregistered+"pre")
	if err != nil || string(raw) != as.issuer() {
		t.Fatalf("binding %q, %v; want %q", raw, err, as.issuer())
	}
	// A restarted flow keeps the binding.
	f2 := mustFlow(t, Config{Interaction: &consent{}, Store: store, ClientID: "pre", ClientSecret: "pre-secret", TrustFirstIssuer: true})
	if _, err := do(testCtx(t), f2, http.MethodGet, rs2.url()); !errors.Is(err, ErrClientIssuer) {
		t.Fatalf("restarted flow, second server: err = %v, want ErrClientIssuer", err)
	}
	// Another client ID over the same Store has a binding of its own.
	f3 := mustFlow(t, Config{Interaction: &consent{}, Store: store, ClientID: "other-pre", ClientSecret: "other-secret", TrustFirstIssuer: true})
	expectOK(t, f3, rs2.url())
}

// blockingStore is a memStore whose Loads of one key wait for release.
type blockingStore struct {
	*memStore
	key     string
	once    sync.Once
	entered chan struct{} // closed at the first such Load
	release chan struct{}
}

func (s *blockingStore) Load(ctx context.Context, key string) ([]byte, error) {
	if key == s.key {
		s.once.Do(func() { close(s.entered) })
		<-s.release
	}
	return s.memStore.Load(ctx, key)
}

// The flow's own lock is not held while the Store works: a slow Store
// delays the request that waits for it, not the flow's other servers.
func TestStoreLoadOutsideTheFlowLock(t *testing.T) {
	as := newAS(t, func(a *testAS) { a.noDCR = true })
	as.clients["pre"] = regClient{method: AuthNone}
	rs := newRS(t, as, nil)
	store := &blockingStore{memStore: newMemStore(), key: keyPreregistered + "pre", entered: make(chan struct{}), release: make(chan struct{})}
	f := mustFlow(t, Config{Interaction: &consent{}, Store: store, ClientID: "pre", TrustFirstIssuer: true})
	first := make(chan error, 1)
	go func() {
		_, err := do(testCtx(t), f, http.MethodGet, rs.url())
		first <- err
	}()
	<-store.entered
	other := make(chan struct{})
	go func() {
		_, _, _ = f.Token(testCtx(t), "https://other.example/mcp")
		close(other)
	}()
	select {
	case <-other:
	case <-time.After(10 * time.Second):
		t.Error("the flow's lock is held while the Store loads")
	}
	close(store.release)
	<-other
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

func TestClientMetadataDocument(t *testing.T) {
	as := newAS(t, func(a *testAS) { a.cimd = true })
	rs := newRS(t, as, nil)
	const doc = "https://client.example/oauth/metadata.json"
	f := mustFlow(t, Config{Interaction: &consent{}, ClientMetadataURL: doc})
	expectOK(t, f, rs.url())
	if len(as.regs) != 0 || as.authReqs[0].Get("client_id") != doc || as.tokenReqs[0].form.Get("client_id") != doc {
		t.Errorf("registrations %d, client_id %q", len(as.regs), as.authReqs[0].Get("client_id"))
	}
	// Without support, it registers.
	as2 := newAS(t, nil)
	rs2 := newRS(t, as2, nil)
	expectOK(t, f, rs2.url())
	if len(as2.regs) != 1 {
		t.Errorf("no registration without client ID metadata document support")
	}
	if _, err := New(Config{Interaction: &consent{}, ClientMetadataURL: "http://client.example/x"}); err == nil {
		t.Error("accepted a non-https client metadata URL")
	}
}

func TestTokenEndpointAuthMethods(t *testing.T) {
	for _, m := range []string{AuthClientSecretBasic, AuthClientSecretPost, AuthNone} {
		t.Run(m, func(t *testing.T) {
			as := newAS(t, func(a *testAS) { a.methods = []string{m} })
			rs := newRS(t, as, nil)
			f := mustFlow(t, Config{Interaction: &consent{}})
			expectOK(t, f, rs.url())
			if got := as.regs[0]["token_endpoint_auth_method"]; got != m {
				t.Errorf("registered %v", got)
			}
			tr := as.tokenReqs[0]
			basic := strings.HasPrefix(tr.auth, "Basic ")
			post := tr.form.Get("client_secret") != ""
			if basic != (m == AuthClientSecretBasic) || post != (m == AuthClientSecretPost) {
				t.Errorf("basic=%v post=%v for %s", basic, post, m)
			}
		})
	}
}

func TestRedirectURIChangeReregisters(t *testing.T) {
	as := newAS(t, nil)
	rs := newRS(t, as, nil)
	store := newMemStore()
	expectOK(t, mustFlow(t, Config{Interaction: &consent{}, Store: store}), rs.url())
	_ = store.Delete(testCtx(t), keySession+rs.url())
	expectOK(t, mustFlow(t, Config{Interaction: &consent{redirect: "http://127.0.0.1:9999/other"}, Store: store}), rs.url())
	if len(as.regs) != 2 {
		t.Errorf("%d registrations, want 2", len(as.regs))
	}
}

func TestConcurrentRequestsAuthorizeOnce(t *testing.T) {
	as := newAS(t, nil)
	rs := newRS(t, as, nil)
	ui := &consent{}
	f := mustFlow(t, Config{Interaction: ui})
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			st, err := do(testCtx(t), f, http.MethodGet, rs.url())
			if err == nil && st != 200 {
				err = errors.New(http.StatusText(st))
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if ui.count() != 1 {
		t.Errorf("%d authorizations, want 1", ui.count())
	}
}

func TestForgetAndToken(t *testing.T) {
	as := newAS(t, nil)
	rs := newRS(t, as, nil)
	ui := &consent{}
	f := mustFlow(t, Config{Interaction: ui})
	ctx := testCtx(t)
	if _, ok, err := f.Token(ctx, rs.url()); ok || err != nil {
		t.Fatalf("a token before any request: %v %v", ok, err)
	}
	expectOK(t, f, rs.url())
	tok, ok, err := f.Token(ctx, rs.url())
	if !ok || err != nil || tok.AccessToken == "" {
		t.Fatalf("no token after authorization: %v", err)
	}
	if err := f.Forget(ctx, rs.url()); err != nil {
		t.Fatal(err)
	}
	expectOK(t, f, rs.url())
	if ui.count() != 2 {
		t.Errorf("%d authorizations after Forget, want 2", ui.count())
	}
}

func TestInsecureEndpointsRefused(t *testing.T) {
	f := mustFlow(t, Config{Interaction: &consent{}})
	for _, tt := range []struct {
		md serverMetadata
		ok bool
	}{
		{serverMetadata{Issuer: "https://as.example", TokenEndpoint: "https://as.example/token"}, true},
		{serverMetadata{Issuer: "http://127.0.0.1:8080", TokenEndpoint: "http://localhost:8080/token"}, true},
		{serverMetadata{Issuer: "https://as.example", TokenEndpoint: "http://as.example/token"}, false},
		{serverMetadata{Issuer: "https://as.example", AuthorizationEndpoint: "javascript:alert(1)"}, false},
		{serverMetadata{Issuer: "https://as.example", RegistrationEndpoint: "/register"}, false},
	} {
		if err := f.checkEndpoints(&tt.md); (err == nil) != tt.ok {
			t.Errorf("%+v: err %v", tt.md, err)
		}
	}
	lax := mustFlow(t, Config{Interaction: &consent{}, AllowHTTP: true})
	if err := lax.checkEndpoints(&serverMetadata{Issuer: "http://as.example"}); err != nil {
		t.Errorf("AllowHTTP: %v", err)
	}
}
