package auth_test

import (
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"tidings/auth"
	"tidings/internal/testrig/testas"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
)

func introspecting() auth.Option {
	return auth.WithIntrospection(testas.RSClientID, testas.RSClientSecret)
}

func TestOpaqueTokenIsIntrospected(t *testing.T) {
	e := newEnv(t, auth.WithScopes("mcp"), introspecting())
	tok := e.as.OpaqueToken(t, "mcp")
	if strings.Count(tok, ".") == 2 {
		t.Fatalf("the issuer gave a JWT-shaped token %q", tok)
	}
	if r := e.list(t, "Bearer "+tok); r.status != http.StatusOK || !strings.Contains(r.body, "whoami") {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	r := e.call(t, "Bearer "+tok, mcp.MethodToolsCall, "whoami")
	if r.status != http.StatusOK || !strings.Contains(r.body, "principal="+e.principal(testas.OpaqueClientID)) {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	// The scopes come from the introspection answer.
	e.wantChallenge(t, e.list(t, "Bearer "+e.as.OpaqueToken(t)), http.StatusForbidden, "insufficient_scope")
	// JWTs are still validated locally, without asking the issuer.
	before := e.as.Introspections()
	if r := e.list(t, "Bearer "+e.as.Token(t, "mcp")); r.status != http.StatusOK {
		t.Fatalf("a JWT beside introspection: status %d: %s", r.status, r.body)
	}
	if n := e.as.Introspections(); n != before {
		t.Errorf("a JWT was introspected (%d introspections, want %d)", n, before)
	}
	// Without the option the same kind of token is refused.
	plain := newEnv(t)
	plain.wantChallenge(t, plain.list(t, "Bearer "+plain.as.OpaqueToken(t)), http.StatusUnauthorized, "invalid_token")
}

func TestRevokedOrUnknownOpaqueTokenIs401(t *testing.T) {
	e := newEnv(t, introspecting())
	revoked := e.as.OpaqueToken(t)
	e.as.Revoke(t, revoked)
	for name, tok := range map[string]string{
		"revoked":  revoked,
		"unknown":  "bm90LWEtdG9rZW4",
		"alg none": none(`eyJzdWIiOiJhZG1pbiJ9`, `eyJhbGciOiJub25lIn0`), // a JWT shape is never introspected
	} {
		t.Run(name, func(t *testing.T) {
			r := e.list(t, "Bearer "+tok)
			e.wantChallenge(t, r, http.StatusUnauthorized, "invalid_token")
			if strings.Contains(r.body, "could not be validated") {
				t.Errorf("a refused token reads as an unreachable issuer: %s", r.body)
			}
		})
	}
	if r := e.list(t, "Bearer "+e.as.OpaqueToken(t)); r.status != http.StatusOK {
		t.Fatalf("a live opaque token after refused ones: status %d: %s", r.status, r.body)
	}
}

func TestIntrospectionIsRememberedUntilExpiry(t *testing.T) {
	e := newEnv(t, introspecting())
	tok := e.as.OpaqueToken(t)
	for range 3 {
		if r := e.list(t, "Bearer "+tok); r.status != http.StatusOK {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
	}
	if n := e.as.Introspections(); n != 1 {
		t.Errorf("%d introspections for one token, want 1", n)
	}
	e.as.Revoke(t, tok)
	if r := e.list(t, "Bearer "+tok); r.status != http.StatusOK {
		t.Fatalf("a remembered token: status %d: %s", r.status, r.body)
	}
	// Past its expiry the token is forgotten, asked about again, and the
	// issuer no longer vouches for it.
	e.clock.advance(6 * time.Minute)
	e.wantChallenge(t, e.list(t, "Bearer "+tok), http.StatusUnauthorized, "invalid_token")
	if n := e.as.Introspections(); n != 2 {
		t.Errorf("%d introspections, want 2", n)
	}
}

func TestIntrospectionFailureIsLogged(t *testing.T) {
	var logs testkit.SyncBuffer
	e := newEnv(t, auth.WithIntrospection(testas.RSClientID, "wrong"),
		auth.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	tok := e.as.OpaqueToken(t)
	r := e.list(t, "Bearer "+tok)
	e.wantChallenge(t, r, http.StatusUnauthorized, "invalid_token")
	if !strings.Contains(r.body, "could not be validated") {
		t.Errorf("body %s does not say the token could not be validated", r.body)
	}
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "status 401") {
		t.Errorf("no warning of the refused introspection in %q", out)
	}
	if strings.Contains(out, tok) || strings.Contains(out, "wrong") {
		t.Errorf("the log shows a secret: %q", out)
	}
	// JWTs do not depend on introspection.
	if r := e.list(t, "Bearer "+e.as.Token(t)); r.status != http.StatusOK {
		t.Fatalf("a JWT: status %d: %s", r.status, r.body)
	}
}

func TestIntrospectionNeedsAClient(t *testing.T) {
	if _, err := auth.New("http://127.0.0.1:9", "http://127.0.0.1/mcp", auth.WithIntrospection("", "x")); err == nil {
		t.Error("introspection without a client identifier was accepted")
	}
}

// postCounter counts the POSTs an http.Client sends.
type postCounter struct {
	mu    sync.Mutex
	posts int
}

func (c *postCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method == http.MethodPost {
		c.mu.Lock()
		c.posts++
		c.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(r)
}

func (c *postCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.posts
}

// TestRefusedTokenAskedOnce: a made-up opaque token sent again and again
// is asked about once while its refusal is remembered, so clients cannot
// turn the resource server into a flood of introspections.
func TestRefusedTokenAskedOnce(t *testing.T) {
	posts := &postCounter{}
	e := newEnv(t, introspecting(), auth.WithHTTPClient(&http.Client{Transport: posts}))
	for range 5 {
		e.wantChallenge(t, e.list(t, "Bearer bWFkZS11cA"), http.StatusUnauthorized, "invalid_token")
	}
	if n := posts.count(); n != 1 {
		t.Errorf("%d introspections for one made-up token sent five times, want 1", n)
	}
	e.clock.advance(time.Minute)
	e.wantChallenge(t, e.list(t, "Bearer bWFkZS11cA"), http.StatusUnauthorized, "invalid_token")
	if n := posts.count(); n != 2 {
		t.Errorf("%d introspections once the refusal was forgotten, want 2", n)
	}
}
