package oauth

import (
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"tidings/internal/testkit"
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
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }

	as := newAS(t, func(a *testAS) {
		a.methods = []string{AuthClientSecretBasic}
		a.refresh, a.expiresIn = true, 60
	})
	rs := newRS(t, as, func(r *testRS) { r.scope = "mcp:basic" })
	ui := &consent{}
	f := mustFlow(t, Config{Interaction: ui, Logger: log, Now: clock})
	ctx := testCtx(t)
	note(do(ctx, f, http.MethodGet, rs.url()))
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
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
	var secrets []string
	for _, a := range []*testAS{as, as2} {
		a.mu.Lock()
		secrets = append(secrets, a.secrets...)
		for _, tr := range a.tokenReqs {
			for _, k := range []string{"code_verifier", "code", "refresh_token", "client_secret"} {
				if v := tr.form.Get(k); v != "" {
					secrets = append(secrets, v)
				}
			}
		}
		for _, q := range a.authReqs {
			secrets = append(secrets, q.Get("state"))
		}
		a.mu.Unlock()
	}
	secrets = append(secrets, "pre-registered-secret-value")
	if len(secrets) < 10 {
		t.Fatalf("only %d secrets collected", len(secrets))
	}
	out := logs.String() + strings.Join(errs, "\n")
	if !strings.Contains(out, "oauth: refreshed") || !strings.Contains(out, "invalid_grant") {
		t.Fatalf("the log does not show the flow:\n%s", out)
	}
	for _, s := range secrets {
		if len(s) < 8 {
			continue
		}
		if strings.Contains(out, s) {
			t.Errorf("%q appears in the log or an error", s)
		}
	}
}
