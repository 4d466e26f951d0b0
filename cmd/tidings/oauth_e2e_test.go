//go:build unix

package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"tidings/internal/testrig/testas"
)

// flowSkew is how long before its expiry the OAuth flow takes an access
// token for expired, and refreshes it first.
const flowSkew = 10 * time.Second

// signInPrompt starts the line on which tidings prints the URL to open.
const signInPrompt = "Open this address in a browser to authorize: "

// browse plays the user's browser: it opens authURL and follows the
// redirects (the authorization server signs its test user in at once)
// to redirectURI, where tidings takes the code.
func browse(t *testing.T, authURL, redirectURI string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get(authURL)
	if err != nil {
		t.Fatalf("opening the authorization URL: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	u := resp.Request.URL
	if u.Scheme+"://"+u.Host+u.Path != redirectURI || resp.StatusCode != http.StatusOK {
		t.Fatalf("the sign-in ended at %s with status %d, not at %s: %s", u, resp.StatusCode, redirectURI, body)
	}
}

// signIn reads p's stderr up to the sign-in URL, and browses it.
func signIn(t *testing.T, p *proc, redirectURI string) {
	t.Helper()
	line := p.expect("the sign-in URL", func(l string) bool { return strings.HasPrefix(l, signInPrompt) })
	browse(t, strings.TrimPrefix(line, signInPrompt), redirectURI)
}

// storedSecrets returns the tokens and expiries the store file at path
// holds, wherever they are in it.
func storedSecrets(t *testing.T, path string) (tokens []string, expiries []time.Time) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				s, isString := x.(string)
				switch {
				case isString && (k == "access_token" || k == "refresh_token") && s != "":
					tokens = append(tokens, s)
				case isString && k == "expiry":
					if tm, err := time.Parse(time.RFC3339Nano, s); err == nil {
						expiries = append(expiries, tm)
					}
				default:
					walk(x)
				}
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("the store is not JSON: %v", err)
	}
	walk(doc)
	if len(tokens) == 0 || len(expiries) != 1 {
		t.Fatalf("the store holds %d tokens and %d expiries, want some tokens and one expiry", len(tokens), len(expiries))
	}
	return tokens, expiries
}

// grantTypes lists the grant types of the token requests so far.
func grantTypes(as *testas.Server) []string {
	var out []string
	for _, g := range as.Grants() {
		out = append(out, g.Type)
	}
	return out
}

// TestCallOAuth runs tidings call --oauth against a tidings server
// behind a real authorization server, with a client registered
// beforehand, the test playing the browser. The first run signs in;
// the second uses the token it kept; the third, once that token has
// expired, refreshes it. A confidential client signs in with the
// secret from its file. None prints a token or the secret.
func TestCallOAuth(t *testing.T) {
	bin := buildBinary(t)
	// Tokens live 20 s longer than the flow's skew: time enough for the
	// second run to find the token fresh on a slow machine, and not so
	// long that the third waits long to find it expired.
	s := startOAuthServer(t, testas.WithTokenLifetime(flowSkew+20*time.Second))
	addr := freeLoopback(t)
	redirect := "http://" + addr + "/callback"
	clientID := s.as.RegisterClient(redirect)
	dir := filepath.Join(t.TempDir(), "tidings")
	store := filepath.Join(dir, "oauth.json")
	args := []string{"call", "--oauth", "--oauth-redirect", addr, "--oauth-store", store,
		"--oauth-client-id", clientID, "--oauth-client-issuer", s.as.Issuer(), s.url, "call", "whoami"}
	var outputs []string
	var secrets []string
	checkResult := func(t *testing.T, stdout string) {
		t.Helper()
		var res struct {
			Content []struct{ Text string }
		}
		if err := json.Unmarshal([]byte(stdout), &res); err != nil || len(res.Content) != 1 || !strings.Contains(res.Content[0].Text, testas.UserID) {
			t.Errorf("stdout %q, want the tool's answer naming %s", stdout, testas.UserID)
		}
	}

	// The first run prints the URL, and once the browser has been
	// through the sign-in, makes the call.
	p := start(t, "call --oauth (sign-in)", bin, true, args...)
	signIn(t, p, redirect)
	if code := p.wait(); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	signedIn := time.Now()
	stdout := p.stderr.String() // stderr is followed: stdout is the other output
	checkResult(t, stdout)
	outputs = append(outputs, stdout, strings.Join(p.seen, "\n"))
	if got := grantTypes(s.as); !slices.Equal(got, []string{"authorization_code"}) {
		t.Errorf("token requests %v, want one authorization_code", got)
	}
	if fi, err := os.Stat(store); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the store: %v, mode %v; want 0600", err, fi.Mode())
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the store's directory: %v, mode %v; want 0700", err, fi.Mode())
	}
	tokens, expiries := storedSecrets(t, store)
	secrets = append(secrets, tokens...)
	expiry := expiries[0]
	if expiry.After(signedIn.Add(flowSkew + 20*time.Second)) {
		t.Fatalf("the token expires at %s, later than its lifetime allows", expiry)
	}

	// The second run uses the kept token: no URL, no token request.
	stdout, stderr, code := run(t, bin, args...)
	if code != 0 {
		t.Fatalf("second run: exit status %d: %s", code, stderr)
	}
	checkResult(t, stdout)
	outputs = append(outputs, stdout, stderr)
	if strings.Contains(stderr, signInPrompt) {
		t.Errorf("the second run asked for a sign-in: %s", stderr)
	}
	if !time.Now().Add(flowSkew).Before(expiry) {
		t.Fatal("the second run took so long that the token had expired: the test proves nothing")
	}
	if got := grantTypes(s.as); !slices.Equal(got, []string{"authorization_code"}) {
		t.Errorf("token requests after the second run %v, want none new", got)
	}

	// Once the token has expired, the third run refreshes it: no URL.
	// Waiting for the clock is the point here; the deadline is the
	// token's own expiry, so this poll cannot end early or hang.
	if d := time.Until(expiry.Add(-flowSkew)); d > 0 {
		<-time.After(d + 10*time.Millisecond)
	}
	stdout, stderr, code = run(t, bin, args...)
	if code != 0 {
		t.Fatalf("third run: exit status %d: %s", code, stderr)
	}
	checkResult(t, stdout)
	outputs = append(outputs, stdout, stderr)
	if strings.Contains(stderr, signInPrompt) {
		t.Errorf("the third run asked for a sign-in: %s", stderr)
	}
	if got := grantTypes(s.as); !slices.Equal(got, []string{"authorization_code", "refresh_token"}) {
		t.Errorf("token requests after the third run %v, want a refresh", got)
	}
	tokens, _ = storedSecrets(t, store)
	secrets = append(secrets, tokens...)

	// No token, kept or sent, reached the output.
	for _, a := range s.authorizations() {
		if tok, ok := strings.CutPrefix(a, "Bearer "); ok {
			secrets = append(secrets, tok)
		}
	}

	// A confidential client signs in with the secret from its file.
	id, clientSecret := s.as.RegisterConfidentialClient(redirect)
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(clientSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p = start(t, "call --oauth (confidential client)", bin, true, "call", "--oauth", "--oauth-redirect", addr,
		"--oauth-store", filepath.Join(t.TempDir(), "oauth.json"), "--oauth-client-id", id, "--oauth-client-issuer", s.as.Issuer(),
		"--oauth-client-secret-file", secretFile, s.url, "call", "whoami")
	signIn(t, p, redirect)
	if code := p.wait(); code != 0 {
		t.Fatalf("confidential client: exit status %d", code)
	}
	checkResult(t, p.stderr.String())
	outputs = append(outputs, p.stderr.String(), strings.Join(p.seen, "\n"))
	if g := s.as.Grants(); g[len(g)-1].Type != "authorization_code" || g[len(g)-1].ClientID != id {
		t.Errorf("the last token request %+v, want the confidential client's code exchange", g[len(g)-1])
	}
	secrets = append(secrets, clientSecret)

	for _, secret := range secrets {
		for _, out := range outputs {
			if strings.Contains(out, secret) {
				t.Errorf("a token or secret is in the output: %q", out)
			}
		}
	}
}

// TestWatchOAuth: tidings watch --oauth, its output a pipe, signs in
// before it reports anything, then follows the server; a second watch
// with the same store needs no sign-in.
func TestWatchOAuth(t *testing.T) {
	bin := buildBinary(t)
	s := startOAuthServer(t)
	addr := freeLoopback(t)
	redirect := "http://" + addr + "/callback"
	clientID := s.as.RegisterClient(redirect)
	store := filepath.Join(t.TempDir(), "oauth.json")
	args := []string{"watch", "--oauth", "--oauth-redirect", addr, "--oauth-store", store,
		"--oauth-client-id", clientID, "--oauth-client-issuer", s.as.Issuer(), s.url}

	p := start(t, "watch --oauth", bin, true, args...)
	line := p.expect("the sign-in URL", func(l string) bool { return strings.HasPrefix(l, signInPrompt) })
	if out := p.stderr.String(); out != "" {
		t.Errorf("watch reported %q before the sign-in", out)
	}
	browse(t, strings.TrimPrefix(line, signInPrompt), redirect)
	connected := func() bool {
		for _, l := range strings.Split(p.stderr.String(), "\n") {
			if isPlain("connected")(l) {
				return true
			}
		}
		return false
	}
	p.drain()
	eventually(t, "a connected line", connected)
	if code := p.stop(os.Interrupt); code != 0 {
		t.Errorf("watch exit status %d after SIGINT", code)
	}

	p = start(t, "watch --oauth (signed in)", bin, true, args...)
	p.drain()
	eventually(t, "a connected line", connected)
	if code := p.stop(os.Interrupt); code != 0 {
		t.Errorf("second watch exit status %d after SIGINT", code)
	}
	if strings.Contains(p.stderr.String(), signInPrompt) {
		t.Errorf("the second watch asked for a sign-in:\n%s", p.stderr.String())
	}
	if n := len(s.as.Authorizations()); n != 1 {
		t.Errorf("%d authorization requests, want 1", n)
	}
}
