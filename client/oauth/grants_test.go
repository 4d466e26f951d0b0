package oauth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// ccGrant makes the test AS answer the client credentials grant for its
// pre-registered clients; check sees each request first.
func ccGrant(a *testAS, check func(r *http.Request) string) func(http.ResponseWriter, *http.Request) bool {
	return func(w http.ResponseWriter, r *http.Request) bool {
		if r.PostForm.Get("grant_type") != "client_credentials" {
			return false
		}
		if code := check(r); code != "" {
			oauthErr(w, 401, code)
			return true
		}
		a.issue(w, tokInfo{scopes: strings.Fields(r.PostForm.Get("scope")), resource: r.PostForm.Get("resource")})
		return true
	}
}

func TestClientCredentialsSecret(t *testing.T) {
	var as *testAS
	as = newAS(t, func(a *testAS) {
		a.methods = []string{AuthClientSecretBasic}
		a.grant = func(w http.ResponseWriter, r *http.Request) bool {
			return ccGrant(as, func(r *http.Request) string {
				id, secret, ok := r.BasicAuth()
				if !ok || id != "svc" || secret != "svc-secret" {
					return "invalid_client"
				}
				return ""
			})(w, r)
		}
	})
	rs := newRS(t, as, func(r *testRS) { r.scope = "mcp:read" })
	f := mustFlow(t, Config{Grant: ClientCredentials{}, ClientID: "svc", ClientSecret: "svc-secret", ClientIssuer: as.issuer()})
	expectOK(t, f, rs.url())
	form := as.tokenReqs[0].form
	if form.Get("resource") != rs.url() || form.Get("scope") != "mcp:read" || len(as.authReqs) != 0 || len(as.regs) != 0 {
		t.Errorf("token request %v; %d authorizations, %d registrations", form, len(as.authReqs), len(as.regs))
	}
	if _, err := New(Config{Grant: ClientCredentials{}}); err == nil {
		t.Error("client credentials without a client accepted")
	}
}

func TestClientCredentialsPrivateKeyJWT(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	var as *testAS
	as = newAS(t, func(a *testAS) {
		a.methods = []string{AuthPrivateKeyJWT}
		a.grant = func(w http.ResponseWriter, r *http.Request) bool {
			return ccGrant(as, func(r *http.Request) string {
				if r.PostForm.Get("client_assertion_type") != "urn:ietf:params:oauth:client-assertion-type:jwt-bearer" {
					return "invalid_client"
				}
				jws, err := jose.ParseSignedCompact(r.PostForm.Get("client_assertion"), []jose.SignatureAlgorithm{jose.ES256})
				if err != nil {
					return "invalid_client"
				}
				raw, err := jws.Verify(&key.PublicKey)
				if err != nil {
					return "invalid_client"
				}
				var c struct {
					Iss, Sub, Aud, Jti string
					Exp, Iat           int64
				}
				if json.Unmarshal(raw, &c) != nil || c.Iss != "svc" || c.Sub != "svc" || c.Aud != as.issuer() || c.Jti == "" || c.Exp <= time.Now().Unix() {
					return "invalid_client"
				}
				return ""
			})(w, r)
		}
	})
	rs := newRS(t, as, nil)
	f := mustFlow(t, Config{Grant: ClientCredentials{}, ClientID: "svc", PrivateKey: key, ClientIssuer: as.issuer()})
	expectOK(t, f, rs.url())
	if got := as.tokenReqs[0].form.Get("client_id"); got != "svc" {
		t.Errorf("client_id %q", got)
	}
}

func TestJWTBearer(t *testing.T) {
	var calls int
	as := newAS(t, func(a *testAS) {
		a.grant = func(w http.ResponseWriter, r *http.Request) bool {
			if r.PostForm.Get("grant_type") != grantJWTBearer {
				return false
			}
			calls++
			if r.PostForm.Get("assertion") != "workload-jwt" {
				oauthErr(w, 400, "invalid_grant")
				return true
			}
			a.issue(w, tokInfo{resource: r.PostForm.Get("resource")})
			return true
		}
	})
	rs := newRS(t, as, nil)
	var aud string
	f := mustFlow(t, Config{ClientID: "wl", ClientIssuer: as.issuer(), Grant: JWTBearer{Assertion: func(_ context.Context, audience string) (string, error) {
		aud = audience
		return "workload-jwt", nil
	}}})
	expectOK(t, f, rs.url())
	if aud != as.issuer() || as.tokenReqs[0].form.Get("client_id") != "wl" || as.tokenReqs[0].form.Get("resource") != rs.url() {
		t.Errorf("audience %q, request %v", aud, as.tokenReqs[0].form)
	}

	// A refused assertion is reported, once, not retried.
	calls = 0
	f2 := mustFlow(t, Config{Grant: JWTBearer{Assertion: func(context.Context, string) (string, error) { return "expired-jwt", nil }}})
	_, err := do(testCtx(t), f2, http.MethodGet, rs.url())
	var te *TokenError
	if !errors.As(err, &te) || te.Code != "invalid_grant" || calls != 1 {
		t.Errorf("err %v after %d requests", err, calls)
	}
}

func TestIdentityAssertion(t *testing.T) {
	var idpForm map[string]string
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		idpForm = map[string]string{}
		for k := range r.PostForm {
			idpForm[k] = r.PostForm.Get(k)
		}
		writeJSON(w, 200, map[string]string{"access_token": "the-id-jag", "issued_token_type": "urn:ietf:params:oauth:token-type:id-jag", "token_type": "N_A"})
	}))
	t.Cleanup(idp.Close)
	as := newAS(t, func(a *testAS) {
		a.methods = []string{AuthClientSecretBasic}
		a.grant = func(w http.ResponseWriter, r *http.Request) bool {
			id, secret, _ := r.BasicAuth()
			if r.PostForm.Get("grant_type") != grantJWTBearer || r.PostForm.Get("assertion") != "the-id-jag" || id != "app" || secret != "app-secret" {
				oauthErr(w, 400, "invalid_grant")
				return true
			}
			a.issue(w, tokInfo{resource: r.PostForm.Get("resource")})
			return true
		}
	})
	rs := newRS(t, as, nil)
	f := mustFlow(t, Config{ClientID: "app", ClientSecret: "app-secret", ClientIssuer: as.issuer(), Grant: IdentityAssertion{
		IdPTokenEndpoint: idp.URL + "/token",
		IdPClientID:      "app-at-idp",
		IDToken:          func(context.Context) (string, error) { return "the-id-token", nil },
	}})
	expectOK(t, f, rs.url())
	want := map[string]string{
		"grant_type":           grantTokenExchange,
		"requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
		"subject_token":        "the-id-token",
		"subject_token_type":   "urn:ietf:params:oauth:token-type:id_token",
		"audience":             as.issuer(),
		"resource":             rs.url(),
		"client_id":            "app-at-idp",
	}
	for k, v := range want {
		if idpForm[k] != v {
			t.Errorf("token exchange %s = %q, want %q", k, idpForm[k], v)
		}
	}
}

// dpopClaims verifies a DPoP proof and returns its claims and key
// thumbprint.
func dpopClaims(t *testing.T, proof string) (map[string]any, string) {
	t.Helper()
	jws, err := jose.ParseSignedCompact(proof, []jose.SignatureAlgorithm{jose.ES256})
	if err != nil {
		t.Fatalf("proof: %v", err)
	}
	h := jws.Signatures[0].Protected
	if h.ExtraHeaders["typ"] != "dpop+jwt" || h.JSONWebKey == nil || !h.JSONWebKey.IsPublic() {
		t.Fatalf("proof header %+v", h)
	}
	raw, err := jws.Verify(h.JSONWebKey)
	if err != nil {
		t.Fatalf("proof signature: %v", err)
	}
	var c map[string]any
	_ = json.Unmarshal(raw, &c)
	tp, _ := h.JSONWebKey.Thumbprint(crypto.SHA256)
	return c, base64.RawURLEncoding.EncodeToString(tp)
}

func TestDPoP(t *testing.T) {
	var (
		mu   sync.Mutex
		jkts = map[string]string{} // token → bound key
		jtis = map[string]bool{}
	)
	var as *testAS
	as = newAS(t, func(a *testAS) {
		a.dpopAlgs = []string{"ES256"}
		a.grant = func(w http.ResponseWriter, r *http.Request) bool {
			proof := r.Header.Get("DPoP")
			if proof == "" {
				oauthErr(w, 400, "invalid_dpop_proof")
				return true
			}
			c, jkt := dpopClaims(t, proof)
			if c["htm"] != "POST" || c["htu"] != as.issuer()+"/token" {
				oauthErr(w, 400, "invalid_dpop_proof")
				return true
			}
			if c["nonce"] != "as-nonce" {
				w.Header().Set("DPoP-Nonce", "as-nonce")
				oauthErr(w, 400, "use_dpop_nonce")
				return true
			}
			if r.PostForm.Get("grant_type") != "authorization_code" {
				return false
			}
			// Let the ordinary code check run, then bind the token.
			rec := httptest.NewRecorder()
			g := a.grant
			a.grant = nil
			a.token(rec, r)
			a.grant = g
			a.tokenReqs = a.tokenReqs[:len(a.tokenReqs)-1] // recorded once already
			var body map[string]any
			_ = json.Unmarshal(rec.Body.Bytes(), &body)
			at, _ := body["access_token"].(string)
			info := a.tokens[at]
			info.typ = "DPoP"
			a.tokens[at] = info
			body["token_type"] = "DPoP"
			mu.Lock()
			jkts[at] = jkt
			mu.Unlock()
			writeJSON(w, rec.Code, body)
			return true
		}
	})
	rs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/mcp" {
			writeJSON(w, 200, map[string]any{"resource": "http://" + r.Host + "/mcp", "authorization_servers": []string{as.issuer()}})
			return
		}
		scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if scheme != "DPoP" {
			w.Header().Set("WWW-Authenticate", `DPoP algs="ES256", resource_metadata="http://`+r.Host+`/.well-known/oauth-protected-resource/mcp"`)
			w.WriteHeader(401)
			return
		}
		c, jkt := dpopClaims(t, r.Header.Get("DPoP"))
		sum := sha256.Sum256([]byte(tok))
		mu.Lock()
		bound, replay := jkts[tok], jtis[c["jti"].(string)]
		jtis[c["jti"].(string)] = true
		mu.Unlock()
		if replay || bound != jkt || c["ath"] != base64.RawURLEncoding.EncodeToString(sum[:]) || c["htm"] != r.Method || c["htu"] != "http://"+r.Host+"/mcp" {
			t.Errorf("bad proof: replay=%v bound=%v claims=%v", replay, bound == jkt, c)
			w.WriteHeader(401)
			return
		}
		if c["nonce"] != "rs-nonce" {
			w.Header().Set("DPoP-Nonce", "rs-nonce")
			w.Header().Set("WWW-Authenticate", `DPoP error="use_dpop_nonce"`)
			w.WriteHeader(401)
			return
		}
		w.WriteHeader(200)
	}))
	t.Cleanup(rs.Close)

	ui := &consent{}
	f := mustFlow(t, Config{Interaction: ui, DPoP: true})
	expectOK(t, f, rs.URL+"/mcp?x=1")
	expectOK(t, f, rs.URL+"/mcp")
	if ui.count() != 1 {
		t.Errorf("%d authorizations", ui.count())
	}
	if jkt := as.authReqs[0].Get("dpop_jkt"); jkt == "" || jkt != f.dpop.jkt {
		t.Errorf("dpop_jkt %q", jkt)
	}
	if n := countGrants(as, "authorization_code"); n != 2 {
		t.Errorf("%d code requests, want 2 (one challenged for a nonce)", n)
	}
}

// A non-DPoP flow never sends proofs, even to a DPoP-capable server.
func TestNoDPoPUnlessAsked(t *testing.T) {
	as := newAS(t, func(a *testAS) { a.dpopAlgs = []string{"ES256"} })
	rs := newRS(t, as, nil)
	f := mustFlow(t, Config{Interaction: &consent{}})
	expectOK(t, f, rs.url())
	if as.tokenReqs[0].dpop != "" {
		t.Error("a DPoP proof was sent")
	}
}

// Proofs are dated by the flow's clock, like everything else it dates.
func TestDPoPProofClock(t *testing.T) {
	at := time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)
	f := mustFlow(t, Config{Interaction: &consent{}, DPoP: true, Now: func() time.Time { return at }})
	p, err := f.dpop.proof(http.MethodPost, "https://as.example/token", "", "")
	if err != nil {
		t.Fatal(err)
	}
	c, _ := dpopClaims(t, p)
	if iat, _ := c["iat"].(float64); int64(iat) != at.Unix() {
		t.Errorf("iat %v, want %d", c["iat"], at.Unix())
	}
}

// The identity provider's token endpoint gets the user's ID token and
// the client's secret: New holds it to the rule of the authorization
// server's endpoints.
func TestIdentityAssertionEndpointScheme(t *testing.T) {
	for _, tt := range []struct {
		endpoint  string
		allowHTTP bool
		ok        bool
	}{
		{"https://idp.example/token", false, true},
		{"http://127.0.0.1:8080/token", false, true},
		{"http://localhost:8080/token", false, true},
		{"http://idp.example/token", false, false},
		{"http://idp.example/token", true, true},
		{"/token", false, false},
		{"javascript:alert(1)", false, false},
	} {
		_, err := New(Config{ClientID: "app", ClientIssuer: "https://as.example", Grant: IdentityAssertion{
			IdPTokenEndpoint: tt.endpoint,
			IDToken:          func(context.Context) (string, error) { return "id-token", nil },
		}, AllowHTTP: tt.allowHTTP})
		if (err == nil) != tt.ok {
			t.Errorf("%s (AllowHTTP %v): err %v", tt.endpoint, tt.allowHTTP, err)
		}
	}
}

// The pre-registered client's token endpoint authentication, when the
// config does not say: a configured key is used where the server lists
// private_key_jwt, or lists nothing and there is no secret.
func TestPreregisteredMethod(t *testing.T) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for _, tt := range []struct {
		name      string
		key       bool
		secret    string
		supported []string
		want      string
	}{
		{"key, no list", true, "", nil, AuthPrivateKeyJWT},
		{"key, listed", true, "", []string{AuthClientSecretBasic, AuthPrivateKeyJWT}, AuthPrivateKeyJWT},
		{"key and secret, no list", true, "s", nil, AuthClientSecretBasic},
		{"key, not listed", true, "", []string{AuthNone}, AuthNone},
		{"secret, no list", false, "s", nil, AuthClientSecretBasic},
		{"secret, post only", false, "s", []string{AuthClientSecretPost}, AuthClientSecretPost},
		{"public", false, "", nil, AuthNone},
	} {
		cfg := Config{Interaction: &consent{}, ClientID: "pre", ClientSecret: tt.secret, ClientIssuer: "https://as.example"}
		if tt.key {
			cfg.PrivateKey = key
		}
		f := mustFlow(t, cfg)
		if got := f.preregisteredMethod(&serverMetadata{TokenEndpointAuthMethodsSupported: tt.supported}); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}

// A token exchange response that does not say it issued an ID-JAG is
// not taken for one (RFC 8693 makes issued_token_type required).
func TestIdentityAssertionNeedsIssuedTokenType(t *testing.T) {
	for _, typ := range []string{"", "urn:ietf:params:oauth:token-type:access_token"} {
		idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body := map[string]string{"access_token": "idp-access-token", "token_type": "Bearer"}
			if typ != "" {
				body["issued_token_type"] = typ
			}
			writeJSON(w, 200, body)
		}))
		as := newAS(t, func(a *testAS) {
			a.grant = func(w http.ResponseWriter, r *http.Request) bool {
				a.issue(w, tokInfo{resource: r.PostForm.Get("resource")})
				return true
			}
		})
		rs := newRS(t, as, nil)
		f := mustFlow(t, Config{ClientID: "app", ClientIssuer: as.issuer(), Grant: IdentityAssertion{
			IdPTokenEndpoint: idp.URL + "/token",
			IDToken:          func(context.Context) (string, error) { return "the-id-token", nil },
		}})
		_, err := do(testCtx(t), f, http.MethodGet, rs.url())
		idp.Close()
		if err == nil || !strings.Contains(err.Error(), "not an ID-JAG") {
			t.Errorf("issued_token_type %q: err %v", typ, err)
		}
		if _, _, tokens, _ := as.counts(); tokens != 0 {
			t.Errorf("issued_token_type %q: the token went on to the authorization server", typ)
		}
	}
}
