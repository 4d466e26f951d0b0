package testas

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"golang.org/x/oauth2"
)

const (
	testResource = "http://127.0.0.1:1/mcp"
	testRedirect = "http://127.0.0.1/callback"
)

// metadata is the part of the discovery document the tests use.
type metadata struct {
	Issuer                string   `json:"issuer"`
	AuthorizationEndpoint string   `json:"authorization_endpoint"`
	TokenEndpoint         string   `json:"token_endpoint"`
	CodeChallengeMethods  []string `json:"code_challenge_methods_supported"`
	GrantTypes            []string `json:"grant_types_supported"`
}

func discover(t *testing.T, s *Server) metadata {
	t.Helper()
	resp, err := http.Get(s.Issuer() + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m metadata
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

// follow is a user agent: it opens authURL and follows the redirects
// until the one to redirectURI, whose query it returns.
// publicClient registers a public client of s, redirected to testRedirect,
// that asks for mcp:tools and a refresh token.
func publicClient(s *Server, m metadata) oauth2.Config {
	return oauth2.Config{
		ClientID:    s.RegisterClient(testRedirect),
		Endpoint:    oauth2.Endpoint{AuthURL: m.AuthorizationEndpoint, TokenURL: m.TokenEndpoint, AuthStyle: oauth2.AuthStyleInParams},
		RedirectURL: testRedirect,
		Scopes:      []string{"mcp:tools", "offline_access"},
	}
}

func follow(t *testing.T, authURL, redirectURI string) url.Values {
	t.Helper()
	var final *url.URL
	hc := &http.Client{CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if u := req.URL; u.Scheme+"://"+u.Host+u.Path == redirectURI {
			final = u
			return http.ErrUseLastResponse
		}
		if len(via) >= 10 {
			return errors.New("too many redirects")
		}
		return nil
	}}
	resp, err := hc.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if final == nil {
		t.Fatalf("the authorization ended at %s with status %d, not at the redirect URI", resp.Request.URL, resp.StatusCode)
	}
	return final.Query()
}

type accessClaims struct {
	jwt.Claims
	ClientID string `json:"client_id"`
	Scope    string `json:"scope"`
}

// verify checks the access token's signature and returns its claims.
func verify(t *testing.T, s *Server, token string) accessClaims {
	t.Helper()
	tok, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		t.Fatalf("the access token is not a JWT: %v", err)
	}
	_, key := s.SigningKey()
	var c accessClaims
	if err := tok.Claims(&key.PublicKey, &c); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(jwt.Expected{Issuer: s.Issuer(), Time: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestAuthorizationCode walks through the authorization code grant as a
// standard OAuth client does: discovery, the authorization request with
// PKCE and a resource, the login that approves at once, the code
// exchange, and refreshes.
func TestAuthorizationCode(t *testing.T) {
	s := Start(t, "")
	m := discover(t, s)
	if !slices.Contains(m.CodeChallengeMethods, "S256") || !slices.Contains(m.GrantTypes, "refresh_token") {
		t.Fatalf("metadata advertises code challenge methods %v and grant types %v, want S256 and refresh_token", m.CodeChallengeMethods, m.GrantTypes)
	}
	ctx := t.Context()
	cfg := publicClient(s, m)
	resource := oauth2.SetAuthURLParam("resource", testResource)
	verifier := oauth2.GenerateVerifier()

	q := follow(t, cfg.AuthCodeURL("st-1", oauth2.S256ChallengeOption(verifier), resource), testRedirect)
	if q.Get("state") != "st-1" || q.Get("code") == "" {
		t.Fatalf("redirected with %v, want a code and state st-1", q)
	}
	if _, err := cfg.Exchange(ctx, q.Get("code"), oauth2.VerifierOption("not-"+verifier), resource); err == nil {
		t.Error("the code was exchanged with the wrong code_verifier")
	}
	// A failed exchange spends nothing: the code is still good.
	tok, err := cfg.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(verifier), resource)
	if err != nil {
		t.Fatal(err)
	}
	c := verify(t, s, tok.AccessToken)
	if c.Subject != UserID || c.ClientID != cfg.ClientID || !slices.Equal([]string(c.Audience), []string{testResource}) ||
		!slices.Contains(strings.Fields(c.Scope), "mcp:tools") {
		t.Errorf("access token claims sub %q client_id %q aud %v scope %q, want %s, %s, [%s], mcp:tools", c.Subject, c.ClientID, c.Audience, c.Scope, UserID, cfg.ClientID, testResource)
	}
	if _, err := cfg.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(verifier), resource); err == nil {
		t.Error("the code was exchanged twice")
	}

	if tok.RefreshToken == "" {
		t.Fatal("no refresh token for offline_access")
	}
	refreshed, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token()
	if err != nil {
		t.Fatal(err)
	}
	if rc := verify(t, s, refreshed.AccessToken); rc.Subject != UserID || !slices.Equal([]string(rc.Audience), []string{testResource}) {
		t.Errorf("refreshed token sub %q aud %v, want %s [%s]", rc.Subject, rc.Audience, UserID, testResource)
	}
	if refreshed.RefreshToken == "" || refreshed.RefreshToken == tok.RefreshToken {
		t.Errorf("the refresh token was not rotated")
	}
	if _, err := cfg.TokenSource(ctx, &oauth2.Token{RefreshToken: tok.RefreshToken}).Token(); err == nil {
		t.Error("a rotated refresh token was accepted again")
	}

	if got := s.Authorizations(); len(got) != 1 || got[0].ClientID != cfg.ClientID || got[0].CodeChallengeMethod != "S256" ||
		!slices.Equal(got[0].Resources, []string{testResource}) || got[0].RedirectURI != testRedirect {
		t.Errorf("authorizations %+v", got)
	}
	grants := s.Grants()
	if len(grants) != 5 || grants[1].Type != "authorization_code" || !grants[1].CodeVerifier ||
		!slices.Equal(grants[1].Resources, []string{testResource}) || grants[3].Type != "refresh_token" {
		t.Errorf("grants %+v", grants)
	}
}

// TestAuthorizationCodeRefused checks what the authorization endpoint
// refuses: requests without PKCE S256, and, with no audience of its own,
// requests that name no resource.
func TestAuthorizationCodeRefused(t *testing.T) {
	s := Start(t, "")
	m := discover(t, s)
	id := s.RegisterClient(testRedirect)
	cfg := oauth2.Config{
		ClientID:    id,
		Endpoint:    oauth2.Endpoint{AuthURL: m.AuthorizationEndpoint, TokenURL: m.TokenEndpoint},
		RedirectURL: testRedirect,
		Scopes:      []string{"mcp:tools"},
	}
	resource := oauth2.SetAuthURLParam("resource", testResource)
	for _, tc := range []struct {
		name string
		opts []oauth2.AuthCodeOption
		want string
	}{
		{"no PKCE", []oauth2.AuthCodeOption{resource}, "invalid_request"},
		{"plain PKCE", []oauth2.AuthCodeOption{resource,
			oauth2.SetAuthURLParam("code_challenge", oauth2.GenerateVerifier()), oauth2.SetAuthURLParam("code_challenge_method", "plain")}, "invalid_request"},
		{"no resource", []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(oauth2.GenerateVerifier())}, "invalid_target"},
		{"fragment", []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(oauth2.GenerateVerifier()),
			oauth2.SetAuthURLParam("resource", testResource+"#x")}, "invalid_target"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := follow(t, cfg.AuthCodeURL("st", tc.opts...), testRedirect)
			if q.Get("error") != tc.want || q.Get("code") != "" {
				t.Errorf("redirected with %v, want error %s", q, tc.want)
			}
		})
	}
}

// TestConfidentialClient has a client with a secret exchange its code,
// authenticating with HTTP Basic; a wrong secret is refused.
func TestConfidentialClient(t *testing.T) {
	s := Start(t, testResource)
	m := discover(t, s)
	id, secret := s.RegisterConfidentialClient(testRedirect)
	ctx := t.Context()
	for _, sec := range []string{"wrong", secret} {
		cfg := oauth2.Config{
			ClientID: id, ClientSecret: sec,
			Endpoint:    oauth2.Endpoint{AuthURL: m.AuthorizationEndpoint, TokenURL: m.TokenEndpoint, AuthStyle: oauth2.AuthStyleInHeader},
			RedirectURL: testRedirect,
			Scopes:      []string{"mcp:tools"},
		}
		verifier := oauth2.GenerateVerifier()
		q := follow(t, cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(verifier)), testRedirect)
		tok, err := cfg.Exchange(ctx, q.Get("code"), oauth2.VerifierOption(verifier))
		if sec != secret {
			if err == nil {
				t.Error("the code was exchanged with a wrong secret")
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		// Named no resource: the token is for the server's audience.
		if c := verify(t, s, tok.AccessToken); c.ClientID != id || !slices.Equal([]string(c.Audience), []string{testResource}) {
			t.Errorf("access token client_id %q aud %v, want %s [%s]", c.ClientID, c.Audience, id, testResource)
		}
		if tok.RefreshToken != "" {
			t.Error("a refresh token without offline_access")
		}
	}
}

// TestClientCredentialsResource checks that a client credentials token
// is for the resource the request names, and for the server's audience
// otherwise.
func TestClientCredentialsResource(t *testing.T) {
	s := Start(t, testResource)
	if c := verify(t, s, s.Token(t, "a")); !slices.Equal([]string(c.Audience), []string{testResource}) || c.Subject != ClientID {
		t.Errorf("token aud %v sub %q", c.Audience, c.Subject)
	}
	resp, err := http.PostForm(s.Issuer()+"/oauth/token", url.Values{
		"grant_type": {"client_credentials"}, "client_id": {ClientID}, "client_secret": {ClientSecret},
		"scope": {"a"}, "resource": {"http://127.0.0.1:2/other"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.AccessToken == "" {
		t.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	if c := verify(t, s, body.AccessToken); !slices.Equal([]string(c.Audience), []string{"http://127.0.0.1:2/other"}) {
		t.Errorf("token aud %v, want the named resource", c.Audience)
	}
}

// TestTokenLifetime: WithTokenLifetime sets how long access tokens of
// the authorization code grant, and of its refreshes, are valid, in the
// token response and in the JWT's exp alike.
func TestTokenLifetime(t *testing.T) {
	const lifetime = 42 * time.Second
	s := Start(t, "", WithTokenLifetime(lifetime))
	m := discover(t, s)
	cfg := publicClient(s, m)
	resource := oauth2.SetAuthURLParam("resource", testResource)
	verifier := oauth2.GenerateVerifier()
	q := follow(t, cfg.AuthCodeURL("st", oauth2.S256ChallengeOption(verifier), resource), testRedirect)
	before := time.Now()
	tok, err := cfg.Exchange(t.Context(), q.Get("code"), oauth2.VerifierOption(verifier), resource)
	if err != nil {
		t.Fatal(err)
	}
	refreshed, err := cfg.TokenSource(t.Context(), &oauth2.Token{RefreshToken: tok.RefreshToken}).Token()
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	for name, tk := range map[string]*oauth2.Token{"issued": tok, "refreshed": refreshed} {
		if in := time.Duration(tk.ExpiresIn) * time.Second; in > lifetime || in < lifetime-2*time.Second {
			t.Errorf("%s token: expires_in %s, want %s", name, in, lifetime)
		}
		exp := verify(t, s, tk.AccessToken).Expiry.Time()
		if exp.Before(before.Add(lifetime-time.Second)) || exp.After(after.Add(lifetime+time.Second)) {
			t.Errorf("%s token: exp %s, want %s after it was issued (between %s and %s)", name, exp, lifetime, before, after)
		}
	}
}
