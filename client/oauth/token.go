package oauth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"
)

// Token endpoint client authentication methods (RFC 7591 §2, RFC 7523).
const (
	AuthNone              = "none"
	AuthClientSecretBasic = "client_secret_basic"
	AuthClientSecretPost  = "client_secret_post"
	AuthPrivateKeyJWT     = "private_key_jwt"
)

// Grant types a flow may use.
const (
	grantAuthorizationCode = "authorization_code"
	grantRefreshToken      = "refresh_token"
	grantClientCredentials = "client_credentials"
	grantJWTBearer         = "urn:ietf:params:oauth:grant-type:jwt-bearer"
	grantTokenExchange     = "urn:ietf:params:oauth:grant-type:token-exchange"
)

// TokenError is an error response of a token endpoint (RFC 6749 §5.2).
// It carries the server's error code and description, never the
// request's parameters.
type TokenError struct {
	Status      int    // HTTP status of the response
	Code        string // error, e.g. "invalid_grant"
	Description string // error_description, as the server wrote it
}

func (e *TokenError) Error() string {
	var b strings.Builder
	b.WriteString("oauth: token request refused")
	if e.Code != "" {
		b.WriteString(": " + e.Code)
	} else {
		fmt.Fprintf(&b, ": HTTP %d", e.Status)
	}
	if e.Description != "" {
		b.WriteString(" (" + clip(e.Description, 200) + ")")
	}
	return b.String()
}

// clip makes a server-supplied string fit for a message: control
// characters become spaces and it is cut to at most n runes.
func clip(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	for i := range s {
		if n == 0 {
			return s[:i] + "…"
		}
		n--
	}
	return s
}

// session is what a flow holds for one MCP server: the token, and what
// it was obtained with. It is saved to the Store as JSON.
type session struct {
	Issuer       string    `json:"issuer"`
	ClientID     string    `json:"client_id,omitempty"` // the client it was issued to
	Resource     string    `json:"resource"`
	Requested    []string  `json:"requested,omitempty"` // scopes asked for
	Granted      []string  `json:"granted,omitempty"`   // scopes the server said it granted
	AccessToken  string    `json:"access_token"`
	TokenType    string    `json:"token_type,omitempty"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	Expiry       time.Time `json:"expiry,omitzero"`
	JKT          string    `json:"jkt,omitempty"` // DPoP key the token is bound to

	fresh     bool // obtained by an authorization in this process
	presented int  // requests it was put on
}

// expired reports whether the token is past, or within skew of, its
// expiry.
func (s *session) expired(now time.Time) bool {
	return !s.Expiry.IsZero() && now.Add(10*time.Second).After(s.Expiry)
}

func (s *session) dpop() bool { return strings.EqualFold(s.TokenType, "DPoP") }

// tokenResult is a token endpoint's success response.
type tokenResult struct {
	AccessToken     string
	TokenType       string
	RefreshToken    string
	Expiry          time.Time
	Scope           string
	IssuedTokenType string
}

// fromOAuth2 converts an x/oauth2 token, its expiry reckoned by the
// flow's clock from expires_in.
func (f *Flow) fromOAuth2(t *oauth2.Token) *tokenResult {
	r := &tokenResult{AccessToken: t.AccessToken, TokenType: t.TokenType, RefreshToken: t.RefreshToken, Expiry: t.Expiry}
	if t.ExpiresIn > 0 {
		r.Expiry = f.now().Add(time.Duration(t.ExpiresIn) * time.Second)
	}
	if s, ok := t.Extra("scope").(string); ok {
		r.Scope = s
	}
	return r
}

// tokenError converts an x/oauth2 error so that no response body (which
// a broken server could fill with anything) reaches the caller.
func tokenError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		te := &TokenError{Code: re.ErrorCode, Description: re.ErrorDescription}
		if re.Response != nil {
			te.Status = re.Response.StatusCode
		}
		return te
	}
	return err
}

// tokenCall is what the token transport adds to one token request: the
// parameters x/oauth2 has no option for (resource on a refresh, a client
// assertion), and a DPoP proof.
type tokenCall struct {
	extra     url.Values
	assertion func() (string, error) // client_assertion, minted per attempt
	dpop      *dpopKey
	nonces    *nonceBox
}

type tokenCallKey struct{}

// nonceBox keeps the latest DPoP nonce a server sent.
type nonceBox struct {
	mu sync.Mutex
	v  string
}

func (b *nonceBox) get() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.v
}

func (b *nonceBox) set(v string) {
	b.mu.Lock()
	b.v = v
	b.mu.Unlock()
}

// tokenTransport is the hook every token request goes through, whether
// x/oauth2 or this package built it: it adds the call's parameters and a
// DPoP proof, retries once on a use_dpop_nonce challenge (RFC 9449 §8),
// and refuses redirects (a token request carries secrets).
type tokenTransport struct{ base http.RoundTripper }

func (t tokenTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	call, _ := req.Context().Value(tokenCallKey{}).(*tokenCall)
	if call == nil {
		return t.base.RoundTrip(req)
	}
	var form url.Values
	if req.Body != nil {
		raw, err := io.ReadAll(io.LimitReader(req.Body, 1<<20))
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		form, err = url.ParseQuery(string(raw))
		if err != nil {
			return nil, errors.New("oauth: unparsable token request")
		}
	} else {
		form = url.Values{}
	}
	for k, vs := range call.extra {
		if _, ok := form[k]; !ok {
			form[k] = vs
		}
	}
	for attempt := 0; ; attempt++ {
		if call.assertion != nil {
			a, err := call.assertion()
			if err != nil {
				return nil, err
			}
			form.Set("client_assertion_type", "urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
			form.Set("client_assertion", a)
		}
		body := form.Encode()
		r := req.Clone(req.Context())
		r.Body = io.NopCloser(strings.NewReader(body))
		r.ContentLength = int64(len(body))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(body)), nil }
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if call.dpop != nil {
			p, err := call.dpop.proof(http.MethodPost, req.URL.String(), "", call.nonces.get())
			if err != nil {
				return nil, fmt.Errorf("oauth: DPoP proof: %w", err)
			}
			r.Header.Set("DPoP", p)
		}
		resp, err := t.base.RoundTrip(r)
		if err != nil {
			return nil, err
		}
		if call.dpop == nil {
			return resp, nil
		}
		n := resp.Header.Get("DPoP-Nonce")
		if n != "" {
			call.nonces.set(n)
		}
		if attempt > 0 || n == "" || resp.StatusCode != http.StatusBadRequest {
			return resp, nil
		}
		// A 400 naming use_dpop_nonce: once more, with the nonce.
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(raw, &e) != nil || e.Error != "use_dpop_nonce" {
			resp.Body = io.NopCloser(bytes.NewReader(raw))
			return resp, nil
		}
	}
}

// tokenContext returns ctx carrying the HTTP client x/oauth2 uses and
// this call's additions.
func (f *Flow) tokenContext(ctx context.Context, call *tokenCall) context.Context {
	ctx = context.WithValue(ctx, oauth2.HTTPClient, f.tokenHC)
	return context.WithValue(ctx, tokenCallKey{}, call)
}

// clientInfo is the flow's identity at one authorization server.
type clientInfo struct {
	ClientID     string `json:"client_id"`
	ClientSecret string `json:"client_secret,omitempty"`
	AuthMethod   string `json:"token_endpoint_auth_method,omitempty"`
	// SecretExpiresAt is client_secret_expires_at (0: never).
	SecretExpiresAt int64 `json:"client_secret_expires_at,omitempty"`
	// RedirectURI is the redirect URI it was registered with.
	RedirectURI string `json:"redirect_uri,omitempty"`
	// Kind says where it came from: "registered", "preregistered" or
	// "metadata-document".
	Kind string `json:"kind,omitempty"`
}

// oauth2Config is an x/oauth2 configuration for client at as.
func (f *Flow) oauth2Config(as *serverMetadata, c *clientInfo, scopes []string, redirect string) *oauth2.Config {
	oc := &oauth2.Config{
		ClientID:    c.ClientID,
		RedirectURL: redirect,
		Scopes:      scopes,
		Endpoint: oauth2.Endpoint{
			AuthURL:  as.AuthorizationEndpoint,
			TokenURL: as.TokenEndpoint,
		},
	}
	switch c.AuthMethod {
	case AuthClientSecretBasic:
		oc.ClientSecret = c.ClientSecret
		oc.Endpoint.AuthStyle = oauth2.AuthStyleInHeader
	case AuthClientSecretPost:
		oc.ClientSecret = c.ClientSecret
		oc.Endpoint.AuthStyle = oauth2.AuthStyleInParams
	default: // none, private_key_jwt: client_id in the body, no secret
		oc.Endpoint.AuthStyle = oauth2.AuthStyleInParams
	}
	return oc
}

// newCall prepares the token transport's additions for a request to as
// by client c.
func (f *Flow) newCall(as *serverMetadata, c *clientInfo, extra url.Values, st *serverState) *tokenCall {
	call := &tokenCall{extra: extra}
	if c != nil && c.AuthMethod == AuthPrivateKeyJWT {
		call.assertion = func() (string, error) { return f.clientAssertion(c.ClientID, as.Issuer) }
	}
	if f.dpop != nil && f.dpop.usableWith(as.DPoPSigningAlgValuesSupported) {
		call.dpop = f.dpop
		call.nonces = f.asNonce(as.Issuer)
	}
	return call
}

// clientAssertion signs a private_key_jwt client assertion (RFC 7523
// §3): issued by and about the client, for the authorization server's
// issuer identifier.
func (f *Flow) clientAssertion(clientID, issuer string) (string, error) {
	if f.cfg.PrivateKey == nil {
		return "", errors.New("oauth: private_key_jwt needs Config.PrivateKey")
	}
	alg := jose.SignatureAlgorithm(f.cfg.PrivateKeyAlg)
	if alg == "" {
		var err error
		if alg, err = signingAlg(f.cfg.PrivateKey); err != nil {
			return "", fmt.Errorf("oauth: client assertion key: %w", err)
		}
		if alg == jose.PS256 {
			alg = jose.RS256
		}
	}
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if f.cfg.PrivateKeyID != "" {
		opts = opts.WithHeader(jose.HeaderKey("kid"), f.cfg.PrivateKeyID)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: f.cfg.PrivateKey}, opts)
	if err != nil {
		return "", fmt.Errorf("oauth: client assertion key: %w", err)
	}
	now := f.now()
	payload, err := json.Marshal(map[string]any{
		"iss": clientID,
		"sub": clientID,
		"aud": issuer,
		"jti": randomString(16),
		"iat": now.Unix(),
		"exp": now.Add(2 * time.Minute).Unix(),
	})
	if err != nil {
		return "", err
	}
	jws, err := s.Sign(payload)
	if err != nil {
		return "", fmt.Errorf("oauth: client assertion: %w", err)
	}
	return jws.CompactSerialize()
}

// exchangeCode redeems an authorization code (x/oauth2 with the PKCE
// verifier and the resource indicator).
func (f *Flow) exchangeCode(ctx context.Context, st *serverState, as *serverMetadata, c *clientInfo, redirect, code, verifier, resource string) (*tokenResult, error) {
	oc := f.oauth2Config(as, c, nil, redirect)
	call := f.newCall(as, c, url.Values{"resource": {resource}}, st)
	tok, err := oc.Exchange(f.tokenContext(ctx, call), code, oauth2.VerifierOption(verifier))
	if err != nil {
		return nil, tokenError(err)
	}
	return f.fromOAuth2(tok), nil
}

// refreshToken uses the refresh_token grant (x/oauth2; the resource
// indicator is added by the token transport).
func (f *Flow) refreshToken(ctx context.Context, st *serverState, as *serverMetadata, c *clientInfo, s *session) (*tokenResult, error) {
	oc := f.oauth2Config(as, c, nil, "")
	call := f.newCall(as, c, url.Values{"resource": {s.Resource}}, st)
	ts := oc.TokenSource(f.tokenContext(ctx, call), &oauth2.Token{RefreshToken: s.RefreshToken})
	tok, err := ts.Token()
	if err != nil {
		return nil, tokenError(err)
	}
	return f.fromOAuth2(tok), nil
}

// clientCredentialsToken uses the client_credentials grant (x/oauth2).
func (f *Flow) clientCredentialsToken(ctx context.Context, st *serverState, as *serverMetadata, c *clientInfo, scopes []string, resource string) (*tokenResult, error) {
	cc := &clientcredentials.Config{
		ClientID:       c.ClientID,
		TokenURL:       as.TokenEndpoint,
		Scopes:         scopes,
		EndpointParams: url.Values{"resource": {resource}},
		AuthStyle:      oauth2.AuthStyleInParams,
	}
	switch c.AuthMethod {
	case AuthClientSecretBasic:
		cc.ClientSecret, cc.AuthStyle = c.ClientSecret, oauth2.AuthStyleInHeader
	case AuthClientSecretPost:
		cc.ClientSecret = c.ClientSecret
	}
	call := f.newCall(as, c, nil, st)
	tok, err := cc.Token(f.tokenContext(ctx, call))
	if err != nil {
		return nil, tokenError(err)
	}
	return f.fromOAuth2(tok), nil
}

// postToken sends a token request x/oauth2 has no API for (the JWT
// bearer grant, token exchange) and parses the answer. c, when not nil,
// authenticates the request.
func (f *Flow) postToken(ctx context.Context, endpoint string, form url.Values, c *clientInfo, call *tokenCall) (*tokenResult, error) {
	if c != nil {
		switch c.AuthMethod {
		case AuthClientSecretPost:
			form.Set("client_id", c.ClientID)
			form.Set("client_secret", c.ClientSecret)
		case AuthClientSecretBasic:
		default:
			form.Set("client_id", c.ClientID)
		}
	}
	req, err := http.NewRequestWithContext(f.tokenContext(ctx, call), http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if c != nil && c.AuthMethod == AuthClientSecretBasic {
		req.SetBasicAuth(url.QueryEscape(c.ClientID), url.QueryEscape(c.ClientSecret))
	}
	resp, err := f.tokenHC.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadataBytes+1))
	if err != nil {
		return nil, err
	}
	var body struct {
		AccessToken      string         `json:"access_token"`
		TokenType        string         `json:"token_type"`
		RefreshToken     string         `json:"refresh_token"`
		ExpiresIn        jsontext.Value `json:"expires_in"`
		Scope            string         `json:"scope"`
		IssuedTokenType  string         `json:"issued_token_type"`
		Error            string         `json:"error"`
		ErrorDescription string         `json:"error_description"`
	}
	jerr := json.Unmarshal(raw, &body)
	if resp.StatusCode != http.StatusOK || body.Error != "" {
		return nil, &TokenError{Status: resp.StatusCode, Code: body.Error, Description: body.ErrorDescription}
	}
	if jerr != nil {
		return nil, errors.New("oauth: token response is not valid JSON")
	}
	if body.AccessToken == "" {
		return nil, errors.New("oauth: token response has no access_token")
	}
	r := &tokenResult{AccessToken: body.AccessToken, TokenType: body.TokenType, RefreshToken: body.RefreshToken, Scope: body.Scope, IssuedTokenType: body.IssuedTokenType}
	if secs, err := strconv.ParseInt(strings.Trim(string(body.ExpiresIn), `"`), 10, 64); err == nil && secs > 0 {
		r.Expiry = f.now().Add(time.Duration(secs) * time.Second)
	}
	return r, nil
}
