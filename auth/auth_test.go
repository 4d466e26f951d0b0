package auth_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/go-json-experiment/json/jsontext"
	"go.uber.org/goleak"

	"tidings/auth"
	"tidings/internal/testrig/testas"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a movable time source for the Guard.
type clock struct{ offset atomic.Int64 }

func (c *clock) now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// env is an MCP endpoint at /mcp behind a Guard, and the real
// authorization server that issues its tokens.
type env struct {
	as       *testas.Server
	mcp      *httptest.Server
	resource string
	guard    *auth.Guard
	clock    *clock
}

func newEnv(t testing.TB, opts ...auth.Option) *env {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	resource := "http://" + ts.Listener.Addr().String() + "/mcp"
	as := testas.Start(t, resource)
	clk := &clock{}
	var srv *server.Server
	// The scopes declared where tools are registered (RequireScopes)
	// reach the HTTP layer through the server.
	declared := auth.WithItemScopes(func(p, method, name string) []string { return srv.RequiredScopes(p, method, name) })
	g, err := auth.New(as.Issuer(), resource, append([]auth.Option{auth.WithClock(clk.now), declared}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	srv = server.New(mcp.Implementation{Name: "t", Version: "1"}, server.WithMiddleware(g.Middleware()))
	for _, name := range []string{"whoami", "admin_reset", "vault"} {
		var opts []server.ItemOption
		if name == "vault" {
			opts = append(opts, server.RequireScopes("vault"))
		}
		err := srv.AddTool(mcp.Tool{Name: name, InputSchema: jsontext.Value(`{"type":"object"}`)},
			func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("principal=" + req.Principal)}}, nil
			}, opts...)
		if err != nil {
			t.Fatal(err)
		}
	}
	mux := http.NewServeMux()
	g.Mount(mux, streamhttp.New(srv, streamhttp.WithPrincipal(auth.Principal)))
	ts.Config.Handler = mux
	ts.Start()
	t.Cleanup(ts.Close)
	return &env{as: as, mcp: ts, resource: resource, guard: g, clock: clk}
}

const meta = `{"io.modelcontextprotocol/protocolVersion":"` + mcp.Version + `","io.modelcontextprotocol/clientCapabilities":{}}`

type reply struct {
	status int
	header http.Header
	body   string
}

// call POSTs one MCP request; name is the tool for tools/call.
func (e *env) call(t testing.TB, authz, method, name string) reply {
	t.Helper()
	params := `"_meta":` + meta
	if name != "" {
		params += fmt.Sprintf(`,"name":%q,"arguments":{}`, name)
	}
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":%q,"params":{%s}}`, method, params)
	req, err := http.NewRequest(http.MethodPost, e.resource, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version)
	req.Header.Set(mcp.HeaderMethod, method)
	if name != "" {
		req.Header.Set(mcp.HeaderName, name)
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := e.mcp.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// principal is what the server calls the caller of sub at e's issuer.
func (e *env) principal(sub string) string {
	return (&auth.Info{Issuer: e.as.Issuer(), Subject: sub}).Principal()
}

func (e *env) list(t testing.TB, authz string) reply {
	return e.call(t, authz, mcp.MethodToolsList, "")
}

func (e *env) wantChallenge(t *testing.T, r reply, status int, errCode string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	ch := r.header.Get("WWW-Authenticate")
	if !strings.HasPrefix(ch, "Bearer ") {
		t.Fatalf("WWW-Authenticate %q: not a Bearer challenge", ch)
	}
	if want := `resource_metadata="` + e.guard.MetadataURL() + `"`; !strings.Contains(ch, want) {
		t.Errorf("WWW-Authenticate %q lacks %s", ch, want)
	}
	if errCode == "" {
		if strings.Contains(ch, "error=") {
			t.Errorf("WWW-Authenticate %q has an error for a request without a token", ch)
		}
	} else if !strings.Contains(ch, `error="`+errCode+`"`) {
		t.Errorf("WWW-Authenticate %q lacks error=%q", ch, errCode)
	}
}

func TestValidTokenIsServed(t *testing.T) {
	e := newEnv(t, auth.WithScopes("mcp"))
	tok := e.as.Token(t, "mcp")
	if r := e.list(t, "Bearer "+tok); r.status != http.StatusOK || !strings.Contains(r.body, "whoami") {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	// The scheme name is case-insensitive (RFC 6750 §2.1, RFC 9110 §11.1).
	r := e.call(t, "bEaReR "+tok, mcp.MethodToolsCall, "whoami")
	if r.status != http.StatusOK || !strings.Contains(r.body, "principal="+e.principal(testas.ClientID)) {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
}

func TestMissingTokenIsChallenged(t *testing.T) {
	e := newEnv(t, auth.WithScopes("mcp", "files:read"))
	r := e.list(t, "")
	e.wantChallenge(t, r, http.StatusUnauthorized, "")
	if ch := r.header.Get("WWW-Authenticate"); !strings.Contains(ch, `scope="files:read mcp"`) {
		t.Errorf("WWW-Authenticate %q lacks the needed scopes", ch)
	}
	// Another scheme is no bearer token: the same plain challenge.
	e.wantChallenge(t, e.list(t, "Basic dXNlcjpwYXNz"), http.StatusUnauthorized, "")
}

func TestMalformedAuthorizationIs400(t *testing.T) {
	e := newEnv(t)
	for _, h := range []string{"Bearer", "Bearer ", "Bearer a b", "Bearer a\"b", "Bearer =", "Bearer\ttok"} {
		if r := e.list(t, h); r.status != http.StatusBadRequest {
			t.Errorf("Authorization %q: status %d, want 400", h, r.status)
		}
	}
	if r := e.list(t, "Bearer "+e.as.Token(t)); r.status != http.StatusOK {
		t.Fatalf("a valid request after malformed ones: status %d: %s", r.status, r.body)
	}
}

// mint signs claims with key under kid and alg, as a forger or a
// misbehaving issuer would.
func mint(t testing.TB, alg jose.SignatureAlgorithm, key any, kid string, claims any) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("at+jwt")
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestInvalidTokensAre401(t *testing.T) {
	e := newEnv(t)
	kid, key := e.as.SigningKey()
	now := time.Now()
	good := func() map[string]any {
		return map[string]any{
			"iss": e.as.Issuer(), "sub": "alice", "aud": []string{e.resource},
			"exp": now.Add(5 * time.Minute).Unix(), "iat": now.Unix(), "nbf": now.Unix(),
		}
	}
	with := func(k string, v any) map[string]any {
		c := good()
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pubDER, err := json.Marshal(jose.JSONWebKey{Key: &key.PublicKey})
	if err != nil {
		t.Fatal(err)
	}
	valid := mint(t, jose.RS256, key, kid, good())
	parts := strings.Split(valid, ".")
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(
		[]byte(fmt.Sprintf(`{"iss":%q,"sub":"admin","aud":[%q],"exp":%d}`, e.as.Issuer(), e.resource, now.Add(time.Hour).Unix()))) + "." + parts[2]
	noneHeader := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"` + kid + `"}`))
	alg := none(parts[1], noneHeader)

	cases := map[string]string{
		"expired":         mint(t, jose.RS256, key, kid, with("exp", now.Add(-time.Hour).Unix())),
		"not yet valid":   mint(t, jose.RS256, key, kid, with("nbf", now.Add(time.Hour).Unix())),
		"no exp":          mint(t, jose.RS256, key, kid, with("exp", nil)),
		"wrong audience":  mint(t, jose.RS256, key, kid, with("aud", []string{"http://127.0.0.1:1/mcp"})),
		"no audience":     mint(t, jose.RS256, key, kid, with("aud", nil)),
		"wrong issuer":    mint(t, jose.RS256, key, kid, with("iss", e.as.Issuer()+"/other")),
		"bad signature":   mint(t, jose.RS256, other, kid, good()),
		"tampered":        tampered,
		"alg none":        alg,
		"HS256 with pub":  mint(t, jose.HS256, pubDER, kid, good()),
		"unknown kid":     mint(t, jose.RS256, other, "nope", good()),
		"not a JWT":       "abc.def.ghi",
		"no subject":      mint(t, jose.RS256, key, kid, with("sub", nil)),
		"iat in future":   mint(t, jose.RS256, key, kid, with("iat", now.Add(time.Hour).Unix())),
		"opaque-looking":  "c2VjcmV0",
		"scope is number": mint(t, jose.RS256, key, kid, with("scope", 7)),
	}
	if r := e.list(t, "Bearer "+valid); r.status != http.StatusOK {
		t.Fatalf("the well-formed minted token: status %d: %s", r.status, r.body)
	}
	for name, tok := range cases {
		t.Run(name, func(t *testing.T) {
			e.wantChallenge(t, e.list(t, "Bearer "+tok), http.StatusUnauthorized, "invalid_token")
			if r := e.list(t, "Bearer "+valid); r.status != http.StatusOK {
				t.Fatalf("the next valid request: status %d: %s", r.status, r.body)
			}
		})
	}
}

func none(payload, header string) string { return header + "." + payload + "." }

func TestExpiryFollowsTheClock(t *testing.T) {
	e := newEnv(t)
	tok := e.as.Token(t)
	if r := e.list(t, "Bearer "+tok); r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	// The issuer's tokens live five minutes; within the skew they pass.
	e.clock.advance(5*time.Minute + 20*time.Second)
	if r := e.list(t, "Bearer "+tok); r.status != http.StatusOK {
		t.Fatalf("within the clock skew: status %d: %s", r.status, r.body)
	}
	e.clock.advance(time.Minute)
	e.wantChallenge(t, e.list(t, "Bearer "+tok), http.StatusUnauthorized, "invalid_token")
	e.clock.advance(-20 * time.Minute)
	e.wantChallenge(t, e.list(t, "Bearer "+tok), http.StatusUnauthorized, "invalid_token")
}

func TestKeyRotationIsPickedUp(t *testing.T) {
	e := newEnv(t)
	if r := e.list(t, "Bearer "+e.as.Token(t)); r.status != http.StatusOK {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	old := e.as.Token(t)
	e.as.Rotate(t)
	tok := e.as.Token(t)
	// A new kid right after the last fetch waits out the refetch limit.
	e.wantChallenge(t, e.list(t, "Bearer "+tok), http.StatusUnauthorized, "invalid_token")
	e.clock.advance(31 * time.Second)
	if r := e.list(t, "Bearer "+tok); r.status != http.StatusOK {
		t.Fatalf("after rotation: status %d: %s", r.status, r.body)
	}
	if r := e.list(t, "Bearer "+old); r.status != http.StatusOK {
		t.Fatalf("a token of the still-published old key: status %d: %s", r.status, r.body)
	}
}

func TestInsufficientScopeIs403(t *testing.T) {
	e := newEnv(t, auth.WithScopes("mcp"), auth.WithMethodScopes(mcp.MethodToolsCall, "tools:call"),
		auth.WithItemScopes(func(_, method, tool string) []string {
			if strings.HasPrefix(tool, "admin_") {
				return []string{"admin"}
			}
			return nil
		}))
	base := e.as.Token(t, "mcp")
	if r := e.list(t, "Bearer "+base); r.status != http.StatusOK {
		t.Fatalf("tools/list with mcp: status %d: %s", r.status, r.body)
	}
	r := e.call(t, "Bearer "+base, mcp.MethodToolsCall, "whoami")
	e.wantChallenge(t, r, http.StatusForbidden, "insufficient_scope")
	if ch := r.header.Get("WWW-Authenticate"); !strings.Contains(ch, `scope="mcp tools:call"`) {
		t.Errorf("WWW-Authenticate %q does not name every needed scope", ch)
	}
	caller := e.as.Token(t, "mcp", "tools:call")
	if r := e.call(t, "Bearer "+caller, mcp.MethodToolsCall, "whoami"); r.status != http.StatusOK {
		t.Fatalf("with tools:call: status %d: %s", r.status, r.body)
	}
	r = e.call(t, "Bearer "+caller, mcp.MethodToolsCall, "admin_reset")
	e.wantChallenge(t, r, http.StatusForbidden, "insufficient_scope")
	if ch := r.header.Get("WWW-Authenticate"); !strings.Contains(ch, `scope="admin mcp tools:call"`) {
		t.Errorf("WWW-Authenticate %q does not name every needed scope", ch)
	}
	// A broader scope grants the narrower ones under it.
	broad := e.as.Token(t, "mcp", "tools", "admin")
	if r := e.call(t, "Bearer "+broad, mcp.MethodToolsCall, "admin_reset"); r.status != http.StatusOK {
		t.Fatalf("with tools and admin: status %d: %s", r.status, r.body)
	}
}

func TestMetadata(t *testing.T) {
	e := newEnv(t, auth.WithScopes("mcp"))
	ch := e.list(t, "").header.Get("WWW-Authenticate")
	_, after, ok := strings.Cut(ch, `resource_metadata="`)
	if !ok {
		t.Fatalf("no resource_metadata in %q", ch)
	}
	named, _, _ := strings.Cut(after, `"`)
	root := strings.TrimSuffix(e.resource, "/mcp") + "/.well-known/oauth-protected-resource"
	if named != root+"/mcp" {
		t.Errorf("challenge names %s, want the path-suffixed %s/mcp", named, root)
	}
	for _, u := range []string{named, root} {
		resp, err := e.mcp.Client().Get(u)
		if err != nil {
			t.Fatal(err)
		}
		var md struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
			ScopesSupported      []string `json:"scopes_supported"`
			BearerMethods        []string `json:"bearer_methods_supported"`
		}
		err = json.NewDecoder(resp.Body).Decode(&md)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: status %d, %v", u, resp.StatusCode, err)
		}
		if md.Resource != e.resource || len(md.AuthorizationServers) != 1 || md.AuthorizationServers[0] != e.as.Issuer() ||
			len(md.ScopesSupported) != 1 || md.ScopesSupported[0] != "mcp" || len(md.BearerMethods) != 1 || md.BearerMethods[0] != "header" {
			t.Errorf("GET %s: %+v", u, md)
		}
	}
}

func TestTokenIsNotForwarded(t *testing.T) {
	e := newEnv(t)
	g, err := auth.New(e.as.Issuer(), e.resource)
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Value
	h := g.Require(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("Authorization") + "|" + auth.Principal(r))
	}))
	req := httptest.NewRequest(http.MethodPost, e.resource, bytes.NewReader(nil))
	req.Header.Set("Authorization", "Bearer "+e.as.Token(t))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || seen.Load() != "|"+e.principal(testas.ClientID) {
		t.Fatalf("status %d; the wrapped handler saw %q", rec.Code, seen.Load())
	}
	if req.Header.Get("Authorization") == "" {
		t.Error("the caller's request was modified")
	}
}

func TestQueryTokenIsRefused(t *testing.T) {
	e := newEnv(t)
	resp, err := e.mcp.Client().Post(e.resource+"?access_token="+e.as.Token(t), "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for _, c := range [][2]string{
		{"issuer.example", "http://127.0.0.1/mcp"},
		{"http://127.0.0.1:9", "http://127.0.0.1/mcp#frag"},
		{"http://127.0.0.1:9", "/mcp"},
	} {
		if _, err := auth.New(c[0], c[1]); err == nil {
			t.Errorf("New(%q, %q) succeeded", c[0], c[1])
		}
	}
	if _, err := auth.New("http://127.0.0.1:9", "http://127.0.0.1/mcp", auth.WithScopes(`a"b`)); err == nil {
		t.Error("a scope with a quote was accepted")
	}
}

// TestScopesDeclaredAtRegistration: a tool registered with
// server.RequireScopes("vault") answers a 2026-07-28 call whose token
// lacks vault with the 403 step-up challenge naming it, and serves one
// that has it; a 2025-11-25 session, whose requests carry no Mcp-Method
// header for the HTTP layer to read, is refused by the server-side
// middleware instead.
func TestScopesDeclaredAtRegistration(t *testing.T) {
	e := newEnv(t)
	plain := e.as.Token(t, "mcp")
	r := e.call(t, "Bearer "+plain, mcp.MethodToolsCall, "vault")
	e.wantChallenge(t, r, http.StatusForbidden, "insufficient_scope")
	if ch := r.header.Get("WWW-Authenticate"); !strings.Contains(ch, "vault") {
		t.Errorf("WWW-Authenticate %q does not name the declared scope", ch)
	}
	if r := e.call(t, "Bearer "+e.as.Token(t, "mcp", "vault"), mcp.MethodToolsCall, "vault"); r.status != http.StatusOK {
		t.Fatalf("with vault: status %d: %s", r.status, r.body)
	}

	// The same tool through a 2025-11-25 session with the plain token.
	post := func(sid, body string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, e.resource, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+plain)
		if sid != "" {
			req.Header.Set(mcp.HeaderSessionID, sid)
			req.Header.Set(mcp.HeaderProtocolVersion, mcp.LegacyVersion)
		}
		resp, err := e.mcp.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := post("", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"`+mcp.LegacyVersion+`","capabilities":{},"clientInfo":{"name":"old","version":"1"}}}`)
	sid := resp.Header.Get(mcp.HeaderSessionID)
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d %s", resp.StatusCode, body)
	}
	_, body = post(sid, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"vault","arguments":{}}}`)
	if !strings.Contains(body, `"error"`) || !strings.Contains(body, "vault") || strings.Contains(body, "principal=") {
		t.Errorf("a session's call of the vault tool without the scope answered %s, want an error naming vault", body)
	}
	_, body = post(sid, `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"whoami","arguments":{}}}`)
	if !strings.Contains(body, "principal="+e.principal(testas.ClientID)) {
		t.Errorf("a session's call of an unscoped tool answered %s", body)
	}
}
