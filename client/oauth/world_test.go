package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// This file is a small OAuth world on loopback for the tests: an
// authorization server (testAS) and an MCP server playing resource
// server (testRS), real HTTP both, recording what the flow sends them.

type tokenReq struct {
	form url.Values
	auth string // Authorization header
	dpop string // DPoP header
}

type regClient struct {
	secret, method, redirect string
}

type codeInfo struct {
	challenge, method, clientID, scope, resource, redirect string
}

type tokInfo struct {
	scopes   []string
	resource string
	clientID string
	typ      string
}

// testAS is an authorization server.
type testAS struct {
	t    *testing.T
	base string // scheme://host of the server

	// Configuration, set before use.
	prefix      string   // the issuer's path, e.g. "/tenant1"
	metaAt      string   // which well-known location serves the metadata (see metaPath)
	issuerOver  string   // the metadata's issuer, when not the real one
	issMode     string   // iss in redirects: "" (correct), "omit", "wrong", "normalized"
	issAdvert   *bool    // authorization_response_iss_parameter_supported (default true)
	noPKCE      bool     // omit code_challenge_methods_supported
	methods     []string // token_endpoint_auth_methods_supported (default none)
	scopes      []string // scopes_supported
	cimd        bool     // client_id_metadata_document_supported
	noDCR       bool
	refresh     bool // issue refresh tokens
	expiresIn   int  // default 3600
	refreshFail bool
	dpopAlgs    []string
	tokenType   string                                            // token_type of the tokens it issues (default Bearer)
	dpopNonce   string                                            // when set, token requests need a DPoP proof with this nonce
	grant       func(w http.ResponseWriter, r *http.Request) bool // handles other grants
	// regGate, when set, holds every registration request until it is
	// closed, before the server's lock; regAttempts counts them.
	regGate     chan struct{}
	regAttempts atomic.Int32

	mu         sync.Mutex
	gets       []string
	authReqs   []url.Values
	tokenReqs  []tokenReq
	regs       []map[string]any
	clients    map[string]regClient
	codes      map[string]codeInfo
	tokens     map[string]tokInfo
	refreshTok map[string]tokInfo
	n          int
	secrets    []string // every token, refresh token, code and client secret it handed out
}

func newAS(t *testing.T, configure func(*testAS)) *testAS {
	a := makeAS(t, configure)
	srv := httptest.NewServer(http.HandlerFunc(a.serve))
	t.Cleanup(srv.Close)
	a.base = srv.URL
	return a
}

// newMemAS is newAS on n, at http://host.
func newMemAS(t *testing.T, n memNet, host string, configure func(*testAS)) *testAS {
	a := makeAS(t, configure)
	a.base = "http://" + host
	n[host] = http.HandlerFunc(a.serve)
	return a
}

func makeAS(t *testing.T, configure func(*testAS)) *testAS {
	a := &testAS{t: t, clients: map[string]regClient{}, codes: map[string]codeInfo{}, tokens: map[string]tokInfo{}, refreshTok: map[string]tokInfo{}}
	if configure != nil {
		configure(a)
	}
	return a
}

func (a *testAS) issuer() string { return a.base + a.prefix }

// metaPath is the path the metadata is served at.
func (a *testAS) metaPath() string {
	switch a.metaAt {
	case "oidc-path":
		return "/.well-known/openid-configuration" + a.prefix
	case "oidc-append":
		return a.prefix + "/.well-known/openid-configuration"
	case "oidc":
		return "/.well-known/openid-configuration"
	default:
		if a.prefix != "" {
			return "/.well-known/oauth-authorization-server" + a.prefix
		}
		return "/.well-known/oauth-authorization-server"
	}
}

func (a *testAS) metadata() map[string]any {
	base := a.base + a.prefix
	md := map[string]any{
		"issuer":                                         a.issuer(),
		"authorization_endpoint":                         base + "/authorize",
		"token_endpoint":                                 base + "/token",
		"response_types_supported":                       []string{"code"},
		"grant_types_supported":                          []string{"authorization_code", "refresh_token"},
		"token_endpoint_auth_methods_supported":          []string{"none"},
		"code_challenge_methods_supported":               []string{"S256"},
		"authorization_response_iss_parameter_supported": true,
	}
	if a.issuerOver != "" {
		md["issuer"] = a.issuerOver
	}
	if !a.noDCR {
		md["registration_endpoint"] = base + "/register"
	}
	if a.noPKCE {
		delete(md, "code_challenge_methods_supported")
	}
	if a.issAdvert != nil {
		md["authorization_response_iss_parameter_supported"] = *a.issAdvert
	}
	if a.methods != nil {
		md["token_endpoint_auth_methods_supported"] = a.methods
	}
	if a.scopes != nil {
		md["scopes_supported"] = a.scopes
	}
	if a.cimd {
		md["client_id_metadata_document_supported"] = true
	}
	if a.dpopAlgs != nil {
		md["dpop_signing_alg_values_supported"] = a.dpopAlgs
	}
	return md
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func oauthErr(w http.ResponseWriter, status int, code string) {
	writeJSON(w, status, map[string]string{"error": code, "error_description": "test server says " + code})
}

func (a *testAS) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == a.prefix+"/register" {
		a.regAttempts.Add(1)
		if a.regGate != nil {
			<-a.regGate
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	p := r.URL.Path
	switch {
	case r.Method == http.MethodGet && strings.Contains(p, "/.well-known/"):
		a.gets = append(a.gets, p)
		if p != a.metaPath() {
			http.NotFound(w, r)
			return
		}
		writeJSON(w, 200, a.metadata())
	case p == a.prefix+"/authorize":
		a.authorize(w, r)
	case p == a.prefix+"/token" && r.Method == http.MethodPost:
		a.token(w, r)
	case p == a.prefix+"/register" && r.Method == http.MethodPost && !a.noDCR:
		a.register(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (a *testAS) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	a.authReqs = append(a.authReqs, q)
	cid := q.Get("client_id")
	c, known := a.clients[cid]
	if !known && !(a.cimd && strings.HasPrefix(cid, "https://")) {
		http.Error(w, "unknown client", 400)
		return
	}
	redirect := q.Get("redirect_uri")
	if known && c.redirect != "" && c.redirect != redirect {
		http.Error(w, "redirect_uri not registered", 400)
		return
	}
	a.n++
	code := fmt.Sprintf("code-%d-%s", a.n, randomString(8))
	a.secrets = append(a.secrets, code)
	a.codes[code] = codeInfo{challenge: q.Get("code_challenge"), method: q.Get("code_challenge_method"), clientID: cid, scope: q.Get("scope"), resource: q.Get("resource"), redirect: redirect}
	u, _ := url.Parse(redirect)
	v := u.Query()
	v.Set("code", code)
	v.Set("state", q.Get("state"))
	switch a.issMode {
	case "":
		v.Set("iss", a.issuer())
	case "wrong":
		v.Set("iss", "https://evil.example")
	case "normalized":
		v.Set("iss", a.issuer()+"/")
	}
	u.RawQuery = v.Encode()
	http.Redirect(w, r, u.String(), http.StatusFound)
}

// authClient authenticates the token request's client; "" if it fails.
func (a *testAS) authClient(r *http.Request) (string, bool) {
	if id, secret, ok := r.BasicAuth(); ok {
		id, _ = url.QueryUnescape(id)
		secret, _ = url.QueryUnescape(secret)
		c, known := a.clients[id]
		return id, known && c.method == AuthClientSecretBasic && c.secret == secret
	}
	id := r.PostForm.Get("client_id")
	c, known := a.clients[id]
	if !known {
		return id, a.cimd && strings.HasPrefix(id, "https://")
	}
	switch c.method {
	case AuthClientSecretPost:
		return id, r.PostForm.Get("client_secret") == c.secret
	case AuthNone, "":
		return id, r.PostForm.Get("client_secret") == ""
	}
	return id, false
}

func (a *testAS) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		oauthErr(w, 400, "invalid_request")
		return
	}
	a.tokenReqs = append(a.tokenReqs, tokenReq{form: r.PostForm, auth: r.Header.Get("Authorization"), dpop: r.Header.Get("DPoP")})
	if a.dpopNonce != "" && proofNonce(r.Header.Get("DPoP")) != a.dpopNonce {
		w.Header().Set("DPoP-Nonce", a.dpopNonce)
		oauthErr(w, 400, "use_dpop_nonce")
		return
	}
	if a.grant != nil && a.grant(w, r) {
		return
	}
	cid, ok := a.authClient(r)
	if !ok {
		oauthErr(w, 401, "invalid_client")
		return
	}
	var info tokInfo
	switch r.PostForm.Get("grant_type") {
	case "authorization_code":
		code := r.PostForm.Get("code")
		ci, known := a.codes[code]
		delete(a.codes, code)
		if !known || ci.clientID != cid || ci.redirect != r.PostForm.Get("redirect_uri") {
			oauthErr(w, 400, "invalid_grant")
			return
		}
		sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
		if ci.method != "S256" || base64.RawURLEncoding.EncodeToString(sum[:]) != ci.challenge {
			oauthErr(w, 400, "invalid_grant")
			return
		}
		if r.PostForm.Get("resource") != ci.resource {
			oauthErr(w, 400, "invalid_target")
			return
		}
		info = tokInfo{scopes: strings.Fields(ci.scope), resource: ci.resource, clientID: cid}
	case "refresh_token":
		rt := r.PostForm.Get("refresh_token")
		ti, known := a.refreshTok[rt]
		if !known || a.refreshFail || ti.clientID != cid {
			oauthErr(w, 400, "invalid_grant")
			return
		}
		delete(a.refreshTok, rt)
		info = ti
	default:
		oauthErr(w, 400, "unsupported_grant_type")
		return
	}
	a.issue(w, info)
}

// issue answers a token request with a new token for info.
func (a *testAS) issue(w http.ResponseWriter, info tokInfo) {
	a.n++
	at := fmt.Sprintf("at-%d-%s", a.n, randomString(12))
	if info.typ == "" {
		info.typ = "Bearer"
		if a.tokenType != "" {
			info.typ = a.tokenType
		}
	}
	a.tokens[at] = info
	a.secrets = append(a.secrets, at)
	exp := a.expiresIn
	if exp == 0 {
		exp = 3600
	}
	resp := map[string]any{"access_token": at, "token_type": info.typ, "expires_in": exp}
	if len(info.scopes) > 0 {
		resp["scope"] = strings.Join(info.scopes, " ")
	}
	if a.refresh {
		rt := fmt.Sprintf("rt-%d-%s", a.n, randomString(12))
		a.refreshTok[rt] = info
		a.secrets = append(a.secrets, rt)
		resp["refresh_token"] = rt
	}
	writeJSON(w, 200, resp)
}

func (a *testAS) register(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&body); err != nil {
		oauthErr(w, 400, "invalid_client_metadata")
		return
	}
	a.regs = append(a.regs, body)
	a.n++
	id := fmt.Sprintf("client-%d-%s", a.n, randomString(4))
	method, _ := body["token_endpoint_auth_method"].(string)
	redirect := ""
	if rs, ok := body["redirect_uris"].([]any); ok && len(rs) > 0 {
		redirect, _ = rs[0].(string)
	}
	c := regClient{method: method, redirect: redirect}
	resp := map[string]any{"client_id": id, "token_endpoint_auth_method": method, "redirect_uris": body["redirect_uris"]}
	if method != AuthNone {
		c.secret = "secret-" + randomString(12)
		a.secrets = append(a.secrets, c.secret)
		resp["client_secret"] = c.secret
	}
	a.clients[id] = c
	writeJSON(w, 201, resp)
}

// valid returns what the AS knows of an access token.
func (a *testAS) valid(tok string) (tokInfo, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ti, ok := a.tokens[tok]
	return ti, ok
}

func (a *testAS) revokeAll() {
	a.mu.Lock()
	a.tokens = map[string]tokInfo{}
	a.mu.Unlock()
}

// registrations, authRequests and tokenRequests copy what the server
// recorded, under its lock: a test reads them while the flows it runs
// may still be talking to the server.
func (a *testAS) registrations() []map[string]any {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.regs)
}

func (a *testAS) authRequests() []url.Values {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.authReqs)
}

func (a *testAS) tokenRequests() []tokenReq {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.tokenReqs)
}

func (a *testAS) counts() (gets, auths, tokens, regs int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.gets), len(a.authReqs), len(a.tokenReqs), len(a.regs)
}

// testRS is an MCP server protected by the current testAS.
type testRS struct {
	base string // scheme://host of the server

	prmAt     string // "" (path-inserted), "root", "custom"
	noHeader  bool   // no resource_metadata in the challenge
	scope     string // scope in the 401 challenge
	supported []string
	resource  string // PRM resource override
	forbid    bool   // 403 insufficient_scope to every token
	rejectAll bool   // 401 invalid_token to every token
	scope401  bool   // insufficient_scope with a 401, not a 403

	mu     sync.Mutex
	as     *testAS
	prms   []string
	seen   []string // Authorization headers of /mcp requests
	proofs []string // DPoP headers of /mcp requests
}

func newRS(t *testing.T, as *testAS, configure func(*testRS)) *testRS {
	s := &testRS{as: as}
	if configure != nil {
		configure(s)
	}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.base = srv.URL
	return s
}

// newMemRS is newRS on n, at http://host.
func newMemRS(n memNet, host string, as *testAS, configure func(*testRS)) *testRS {
	s := &testRS{as: as, base: "http://" + host}
	if configure != nil {
		configure(s)
	}
	n[host] = http.HandlerFunc(s.serve)
	return s
}

func (s *testRS) url() string { return s.base + "/mcp" }

func (s *testRS) setAS(a *testAS) {
	s.mu.Lock()
	s.as = a
	s.mu.Unlock()
}

func (s *testRS) prmPath() string {
	switch s.prmAt {
	case "root":
		return "/.well-known/oauth-protected-resource"
	case "custom":
		return "/meta/prm.json"
	}
	return "/.well-known/oauth-protected-resource/mcp"
}

func (s *testRS) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	as := s.as
	s.mu.Unlock()
	if r.Method == http.MethodGet && r.URL.Path != "/mcp" {
		s.mu.Lock()
		s.prms = append(s.prms, r.URL.Path)
		s.mu.Unlock()
		if r.URL.Path != s.prmPath() {
			http.NotFound(w, r)
			return
		}
		res := s.url()
		if s.prmAt == "root" {
			res = s.base
		}
		if s.resource != "" {
			res = s.resource
		}
		md := map[string]any{"resource": res, "authorization_servers": []string{as.issuer()}}
		if s.supported != nil {
			md["scopes_supported"] = s.supported
		}
		writeJSON(w, 200, md)
		return
	}
	if r.URL.Path != "/mcp" {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	s.seen = append(s.seen, r.Header.Get("Authorization"))
	s.mu.Unlock()
	challenge := func(status int, params ...string) {
		if !s.noHeader {
			params = append(params, fmt.Sprintf("resource_metadata=%q", s.base+s.prmPath()))
		}
		w.Header().Set("WWW-Authenticate", "Bearer "+strings.Join(params, ", "))
		w.WriteHeader(status)
	}
	scheme, tok, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if p := r.Header.Get("DPoP"); p != "" {
		s.mu.Lock()
		s.proofs = append(s.proofs, p)
		s.mu.Unlock()
	}
	if tok == "" || (scheme != "Bearer" && scheme != "DPoP") {
		if s.scope != "" {
			challenge(401, fmt.Sprintf("scope=%q", s.scope))
		} else {
			challenge(401)
		}
		return
	}
	ti, ok := as.valid(tok)
	if !ok || s.rejectAll {
		challenge(401, `error="invalid_token"`)
		return
	}
	need := strings.Fields(r.URL.Query().Get("need"))
	if s.forbid || !subset(need, ti.scopes) {
		status := 403
		if s.scope401 {
			status = 401
		}
		challenge(status, `error="insufficient_scope"`, fmt.Sprintf("scope=%q", strings.Join(need, " ")))
		return
	}
	w.WriteHeader(200)
	_, _ = io.WriteString(w, "ok")
}

// consent is an Interaction that plays a user who always consents: it
// fetches the authorization URL and reads the redirect. tamper, when
// set, changes the response before the flow sees it.
type consent struct {
	redirect string
	tamper   func(url.Values)
	net      http.RoundTripper // default: the real network
	mu       sync.Mutex
	urls     []string
}

func (c *consent) RedirectURI() string {
	if c.redirect == "" {
		return "http://127.0.0.1:8976/callback"
	}
	return c.redirect
}

func (c *consent) Authorize(ctx context.Context, authURL string) (url.Values, error) {
	c.mu.Lock()
	c.urls = append(c.urls, authURL)
	c.mu.Unlock()
	hc := &http.Client{Transport: c.net, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	loc, err := resp.Location()
	if err != nil {
		return nil, fmt.Errorf("no redirect: %s", resp.Status)
	}
	v := loc.Query()
	if c.tamper != nil {
		c.tamper(v)
	}
	return v, nil
}

func (c *consent) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.urls)
}

// memNet is an HTTP network in memory: a request goes straight to the
// handler of its host, in the caller's goroutine. A flow on it can run
// in a synctest bubble, where a goroutine waiting for a channel counts as
// blocked and a test can wait until every goroutine is.
type memNet map[string]http.Handler

func (n memNet) RoundTrip(req *http.Request) (*http.Response, error) {
	h, ok := n[req.URL.Host]
	if !ok {
		return nil, fmt.Errorf("no host %s on this network", req.URL.Host)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}

// memStore is an in-memory Store that counts what it holds.
type memStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

func newMemStore() *memStore { return &memStore{m: map[string][]byte{}} }

func (s *memStore) Load(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	if !ok {
		return nil, ErrNotStored
	}
	return slices.Clone(v), nil
}

func (s *memStore) Save(_ context.Context, key string, v []byte) error {
	s.mu.Lock()
	s.m[key] = slices.Clone(v)
	s.mu.Unlock()
	return nil
}

func (s *memStore) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
	return nil
}

func (s *memStore) keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ks []string
	for k := range s.m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// do sends a request through the flow the way package client does:
// Authorize, send, on 401/403 Challenge and resend, at most 3 retries.
// It returns the final status.
func do(ctx context.Context, f *Flow, method, target string) (int, error) {
	return doWith(ctx, f, method, target, nil)
}

// doWith is do with header fields on every try.
func doWith(ctx context.Context, f *Flow, method, target string, hdr http.Header) (int, error) {
	return doOn(ctx, http.DefaultClient, f, method, target, hdr)
}

// doOn is doWith sending through hc.
func doOn(ctx context.Context, hc *http.Client, f *Flow, method, target string, hdr http.Header) (int, error) {
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, target, nil)
		if err != nil {
			return 0, err
		}
		for k, v := range hdr {
			req.Header[k] = v
		}
		if err := f.Authorize(ctx, req); err != nil {
			return 0, err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if (resp.StatusCode != 401 && resp.StatusCode != 403) || attempt == 3 {
			return resp.StatusCode, nil
		}
		retry, err := f.Challenge(ctx, req, resp)
		if err != nil {
			return resp.StatusCode, err
		}
		if !retry {
			return resp.StatusCode, nil
		}
	}
}

func mustFlow(t *testing.T, cfg Config) *Flow {
	t.Helper()
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// expectOK runs a GET of u through f and fails the test unless it
// ends in 200.
func expectOK(t *testing.T, f *Flow, u string) {
	t.Helper()
	st, err := do(testCtx(t), f, http.MethodGet, u)
	if err != nil || st != 200 {
		t.Fatalf("GET %s: status %d, err %v", u, st, err)
	}
}

// testLogger logs to the test's log at debug level.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
