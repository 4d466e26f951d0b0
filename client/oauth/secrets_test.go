package oauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"tidings/internal/testrig/testkit"
)

// TestNoSecretsInLogsOrErrors runs flows through authorization,
// refresh, step-up refusal and failures with a debug logger, and checks
// that no token, refresh token, client secret, code, PKCE verifier or
// state shows in the log or in an error.
func TestNoSecretsInLogsOrErrors(t *testing.T) {
	var logs testkit.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var errs []string
	note := func(_ int, err error) {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	clock, advance := testClock()

	as := newAS(t, func(a *testAS) {
		a.methods = []string{AuthClientSecretBasic}
		a.refresh, a.expiresIn = true, 60
	})
	rs := newRS(t, as, func(r *testRS) { r.scope = "mcp:basic" })
	ui := &consent{}
	f := mustFlow(t, Config{Interaction: ui, Logger: log, Now: clock})
	ctx := testCtx(t)
	note(do(ctx, f, http.MethodGet, rs.url()))
	advance(2 * time.Minute)
	note(do(ctx, f, http.MethodGet, rs.url())) // refresh
	as.revokeAll()
	note(do(ctx, f, http.MethodGet, rs.url())) // 401, refresh
	rs.forbid = true
	note(do(ctx, f, http.MethodGet, rs.url()+"?need=mcp:basic")) // ScopeError
	rs.forbid = false
	as.mu.Lock()
	as.refreshFail = true
	as.mu.Unlock()
	as.revokeAll()
	note(do(ctx, f, http.MethodGet, rs.url())) // refresh refused, new authorization

	// A refused code exchange, and an iss mismatch, with a pre-registered secret.
	as2 := newAS(t, func(a *testAS) { a.methods = []string{AuthClientSecretPost}; a.noDCR = true })
	as2.clients["pre"] = regClient{secret: "pre-registered-secret-value", method: AuthClientSecretPost}
	rs2 := newRS(t, as2, nil)
	f2 := mustFlow(t, Config{Interaction: &consent{tamper: func(v url.Values) { v.Set("code", "code-forged-"+v.Get("code")) }},
		Logger: log, ClientID: "pre", ClientSecret: "pre-registered-secret-value", ClientIssuer: as2.issuer()})
	note(do(ctx, f2, http.MethodGet, rs2.url()))
	as2.mu.Lock()
	as2.issMode = "wrong"
	as2.mu.Unlock()
	note(do(ctx, f2, http.MethodGet, rs2.url()))

	t.Log(strings.Join(errs, "\n"))
	if len(errs) < 3 {
		t.Fatalf("only %d errors: %v", len(errs), errs)
	}
	secrets := append(issuedSecrets(as, as2), "pre-registered-secret-value")
	if len(secrets) < 10 {
		t.Fatalf("only %d secrets collected", len(secrets))
	}
	out := logs.String() + strings.Join(errs, "\n")
	if !strings.Contains(out, "oauth: refreshed") || !strings.Contains(out, "invalid_grant") {
		t.Fatalf("the log does not show the flow:\n%s", out)
	}
	checkNoSecrets(t, out, secrets)
}

// issuedSecrets returns what the servers handed out and what the flow
// sent them that no log should show: tokens, refresh tokens, codes,
// client secrets, PKCE verifiers, states, client assertions, JWT bearer
// assertions, subject tokens, Authorization header values and DPoP
// proofs.
func issuedSecrets(servers ...*testAS) []string {
	var secrets []string
	for _, a := range servers {
		a.mu.Lock()
		secrets = append(secrets, a.secrets...)
		for _, tr := range a.tokenReqs {
			for _, k := range []string{"code_verifier", "code", "refresh_token", "client_secret", "client_assertion", "assertion", "subject_token"} {
				if v := tr.form.Get(k); v != "" {
					secrets = append(secrets, v)
				}
			}
			if _, cred, ok := strings.Cut(tr.auth, " "); ok {
				secrets = append(secrets, cred)
			}
			secrets = append(secrets, proofParts(tr.dpop)...)
		}
		for _, q := range a.authReqs {
			secrets = append(secrets, q.Get("state"))
		}
		a.mu.Unlock()
	}
	return secrets
}

// proofParts splits a DPoP proof (a JWS) into what is secret in it: the
// whole, and its signature. Its header is the public key, which may
// well be logged.
func proofParts(p string) []string {
	if p == "" {
		return nil
	}
	parts := strings.Split(p, ".")
	return []string{p, parts[len(parts)-1]}
}

// checkNoSecrets fails the test for each secret of 8 characters or more
// that appears in out.
func checkNoSecrets(t *testing.T, out string, secrets []string) {
	t.Helper()
	for _, s := range secrets {
		if len(s) < 8 {
			continue
		}
		if strings.Contains(out, s) {
			t.Errorf("%q appears in the log or an error", s)
		}
	}
}

// secretLog is a debug logger into a buffer, and a list of the errors
// the test met.
type secretLog struct {
	buf  testkit.SyncBuffer
	log  *slog.Logger
	errs []string
}

func newSecretLog() *secretLog {
	l := &secretLog{}
	l.log = slog.New(slog.NewTextHandler(&l.buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return l
}

func (l *secretLog) note(_ int, err error) {
	if err != nil {
		l.errs = append(l.errs, err.Error())
	}
}

func (l *secretLog) out() string { return l.buf.String() + strings.Join(l.errs, "\n") }

// The DPoP paths: proofs at the token endpoint, the nonce retry, proofs
// with each request, and the refreshes, logged at debug level.
func TestNoSecretsInLogsOrErrorsDPoP(t *testing.T) {
	l := newSecretLog()
	clock, advance := testClock()
	as := newAS(t, func(a *testAS) {
		a.dpopAlgs, a.tokenType, a.dpopNonce = []string{"ES256"}, "DPoP", "as-nonce-value"
		a.refresh, a.expiresIn = true, 60
	})
	rs := newRS(t, as, nil)
	f := mustFlow(t, Config{Interaction: &consent{}, Logger: l.log, Now: clock, DPoP: true})
	ctx := testCtx(t)
	l.note(do(ctx, f, http.MethodGet, rs.url()))
	advance(2 * time.Minute)
	l.note(do(ctx, f, http.MethodGet, rs.url())) // refresh
	as.revokeAll()
	as.mu.Lock()
	as.refreshFail = true
	as.mu.Unlock()
	l.note(do(ctx, f, http.MethodGet, rs.url())) // refresh refused, new authorization

	secrets := issuedSecrets(as)
	rs.mu.Lock()
	for _, p := range rs.proofs {
		secrets = append(secrets, proofParts(p)...)
	}
	n := len(rs.proofs)
	rs.mu.Unlock()
	if n < 2 || countGrants(as, "refresh_token") < 2 {
		t.Fatalf("%d proofs at the server, %d refreshes", n, countGrants(as, "refresh_token"))
	}
	out := l.out()
	if !strings.Contains(out, "oauth: refreshed") || !strings.Contains(out, "invalid_grant") || !strings.Contains(out, "token_type=DPoP") {
		t.Fatalf("the log does not show the flow:\n%s", out)
	}
	checkNoSecrets(t, out, secrets)
}

// The grants without a user: client credentials with a secret and with a
// key, the JWT bearer grant, each accepted and refused.
func TestNoSecretsInLogsOrErrorsOtherGrants(t *testing.T) {
	l := newSecretLog()
	ctx := testCtx(t)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	var as *testAS
	as = newAS(t, func(a *testAS) {
		a.methods = []string{AuthClientSecretBasic, AuthPrivateKeyJWT}
		a.grant = func(w http.ResponseWriter, r *http.Request) bool {
			ok := false
			switch r.PostForm.Get("grant_type") {
			case "client_credentials":
				if id, secret, basic := r.BasicAuth(); basic {
					ok = id == "svc" && secret == "client-credentials-secret"
				} else {
					ok = r.PostForm.Get("client_assertion") != ""
				}
			case grantJWTBearer:
				ok = r.PostForm.Get("assertion") == "workload-assertion-accepted"
			}
			if !ok {
				oauthErr(w, 400, "invalid_grant")
				return true
			}
			as.issue(w, tokInfo{resource: r.PostForm.Get("resource")})
			return true
		}
	})
	rs := newRS(t, as, nil)
	for _, cfg := range []Config{
		{Grant: ClientCredentials{}, ClientID: "svc", ClientSecret: "client-credentials-secret"},
		{Grant: ClientCredentials{}, ClientID: "svc", ClientSecret: "client-credentials-wrong-secret"},
		{Grant: ClientCredentials{}, ClientID: "svc", PrivateKey: key, ClientAuthMethod: AuthPrivateKeyJWT},
		{Grant: JWTBearer{Assertion: func(context.Context, string) (string, error) { return "workload-assertion-accepted", nil }}, ClientID: "wl"},
		{Grant: JWTBearer{Assertion: func(context.Context, string) (string, error) { return "workload-assertion-refused", nil }}, ClientID: "wl"},
	} {
		cfg.Logger, cfg.ClientIssuer = l.log, as.issuer()
		l.note(do(ctx, mustFlow(t, cfg), http.MethodGet, rs.url()))
	}
	if len(l.errs) != 2 {
		t.Fatalf("%d errors, want the 2 refusals: %v", len(l.errs), l.errs)
	}
	secrets := append(issuedSecrets(as), "client-credentials-secret", "client-credentials-wrong-secret", "workload-assertion-accepted", "workload-assertion-refused")
	checkNoSecrets(t, l.out(), secrets)
}
