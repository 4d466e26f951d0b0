package oauth

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"golang.org/x/oauth2"
)

// A Grant is how a [Flow] obtains tokens: [ClientCredentials],
// [JWTBearer], [IdentityAssertion], or (the default, a nil
// Config.Grant) the authorization code grant with PKCE.
type Grant interface {
	// obtain gets a token for r, returning the client it used (never
	// nil on success).
	obtain(ctx context.Context, f *Flow, r *grantRequest) (*tokenResult, *clientInfo, error)
	// refreshable reports whether the grant's tokens may come with
	// refresh tokens worth asking for (offline_access).
	refreshable() bool
	// check validates the configuration for the grant.
	check(cfg *Config) error
}

// grantRequest is one token acquisition.
type grantRequest struct {
	st       *serverState
	prm      *resourceMetadata
	as       *serverMetadata
	issuer   string
	resource string
	scopes   []string
}

// Errors of the authorization response.
var (
	// ErrResponseIssuerMissing: the authorization server advertises the
	// RFC 9207 iss parameter but its authorization response carries
	// none, so the response cannot be tied to the server the request
	// went to.
	ErrResponseIssuerMissing = errors.New("oauth: authorization response lacks the iss parameter its server advertises")
	// ErrResponseIssuer: the authorization response's iss is not the
	// issuer the request was sent to (a mix-up attack, RFC 9207). It is
	// about the redirect; [ErrMetadataIssuer] is about the metadata.
	ErrResponseIssuer = errors.New("oauth: authorization response comes from another issuer")
	// ErrStateMismatch: the authorization response's state is not the
	// request's: the redirect answers another request, or none. It is
	// checked first, so this error says nothing else of the redirect.
	ErrStateMismatch = errors.New("oauth: authorization response state does not match the request")
)

// AuthorizationError is an error response of the authorization endpoint
// (RFC 6749 §4.1.2.1), reported only after its state and iss were
// checked: what it says comes from the server the request went to.
type AuthorizationError struct {
	Code        string
	Description string
	URI         string
}

func (e *AuthorizationError) Error() string {
	s := "oauth: authorization refused: " + clip(e.Code, 64)
	if e.Description != "" {
		s += " (" + clip(e.Description, 200) + ")"
	}
	return s
}

// checkIss applies RFC 9207 §2.4 as MCP tightens it: a present iss must
// equal the issuer exactly, and an advertised one must be present.
func checkIss(params url.Values, as *serverMetadata, issuer string) error {
	iss, present := params["iss"]
	if !present {
		if as.AuthorizationResponseIssParameter {
			return ErrResponseIssuerMissing
		}
		return nil
	}
	if len(iss) != 1 || iss[0] != issuer {
		return fmt.Errorf("%w: got %q, want %q", ErrResponseIssuer, clip(strings.Join(iss, ","), 200), issuer)
	}
	return nil
}

// authorizationCode is the authorization code grant with PKCE (S256),
// state, the resource indicator and the RFC 9207 issuer check.
type authorizationCode struct{}

func (authorizationCode) refreshable() bool { return true }

func (authorizationCode) check(cfg *Config) error {
	if cfg.Interaction == nil {
		return errors.New("oauth: the authorization code grant needs an Interaction")
	}
	return nil
}

func (authorizationCode) obtain(ctx context.Context, f *Flow, r *grantRequest) (*tokenResult, *clientInfo, error) {
	as := r.as
	if as.AuthorizationEndpoint == "" {
		return nil, nil, fmt.Errorf("oauth: %s has no authorization endpoint", r.issuer)
	}
	// MCP: no code_challenge_methods_supported means no PKCE; refuse.
	if !as.supportsPKCE() {
		return nil, nil, fmt.Errorf("%w (%s)", ErrNoPKCE, r.issuer)
	}
	c, err := f.clientFor(ctx, r.issuer, as, true)
	if err != nil {
		return nil, nil, err
	}
	redirect := f.cfg.Interaction.RedirectURI()
	verifier := oauth2.GenerateVerifier()
	state := randomString(24)
	oc := f.oauth2Config(as, c, r.scopes, redirect)
	opts := []oauth2.AuthCodeOption{oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("resource", r.resource)}
	if f.dpop != nil && f.dpop.usableWith(as.DPoPSigningAlgValuesSupported) {
		opts = append(opts, oauth2.SetAuthURLParam("dpop_jkt", f.dpop.jkt))
	}
	authURL := oc.AuthCodeURL(state, opts...)
	f.log.Info("oauth: asking the user to authorize", "server", r.st.key, "issuer", r.issuer, "client_id", c.ClientID, "scopes", r.scopes)
	params, err := f.cfg.Interaction.Authorize(ctx, authURL)
	if err != nil {
		return nil, nil, fmt.Errorf("oauth: authorization: %w", err)
	}
	// The state, then the issuer, before anything else is read: a
	// redirect that does not answer this request (forged, or replayed
	// from another) or that a mixed-up server sent is not acted on, and
	// nothing in it, not even an error description, is shown.
	if got := params["state"]; len(got) != 1 || subtle.ConstantTimeCompare([]byte(got[0]), []byte(state)) != 1 {
		return nil, nil, ErrStateMismatch
	}
	if err := checkIss(params, as, r.issuer); err != nil {
		return nil, nil, err
	}
	if code := params.Get("error"); code != "" {
		return nil, nil, &AuthorizationError{Code: code, Description: params.Get("error_description"), URI: params.Get("error_uri")}
	}
	code := params.Get("code")
	if code == "" {
		return nil, nil, errors.New("oauth: authorization response has no code")
	}
	tok, err := f.exchangeCode(ctx, r.st, as, c, redirect, code, verifier, r.resource)
	if err != nil {
		var te *TokenError
		if errors.As(err, &te) && te.Code == "invalid_client" && c.Kind == "registered" {
			f.forgetClient(ctx, r.issuer)
		}
		return nil, nil, err
	}
	return tok, c, nil
}

// ClientCredentials is the client credentials grant (OAuth 2.1 §4.2,
// the MCP client credentials extension): the client acts on its own
// behalf, authenticating with its pre-registered secret
// (Config.ClientSecret) or key (Config.PrivateKey, private_key_jwt) at
// the authorization server Config.ClientIssuer names.
type ClientCredentials struct{}

func (ClientCredentials) refreshable() bool { return false }

func (ClientCredentials) check(cfg *Config) error {
	if cfg.ClientID == "" {
		return errors.New("oauth: the client credentials grant needs Config.ClientID")
	}
	if cfg.ClientSecret == "" && cfg.PrivateKey == nil {
		return errors.New("oauth: the client credentials grant needs Config.ClientSecret or Config.PrivateKey")
	}
	return nil
}

func (ClientCredentials) obtain(ctx context.Context, f *Flow, r *grantRequest) (*tokenResult, *clientInfo, error) {
	c, err := f.clientFor(ctx, r.issuer, r.as, false)
	if err != nil {
		return nil, nil, err
	}
	tok, err := f.clientCredentialsToken(ctx, r.st, r.as, c, r.scopes, r.resource)
	return tok, c, err
}

// AssertionFunc returns an assertion (a JWT) for the authorization
// server whose issuer identifier is audience.
type AssertionFunc func(ctx context.Context, audience string) (string, error)

// JWTBearer is the JWT bearer grant (RFC 7523 §2.1), as workload
// identity federation uses it: Assertion supplies a JWT the workload's
// identity provider issued. The client identifies itself by
// Config.ClientID, and authenticates if it has a secret or key. A
// refused assertion is reported, not retried.
type JWTBearer struct {
	Assertion AssertionFunc
}

func (JWTBearer) refreshable() bool { return false }

func (g JWTBearer) check(*Config) error {
	if g.Assertion == nil {
		return errors.New("oauth: JWTBearer needs an Assertion")
	}
	return nil
}

func (g JWTBearer) obtain(ctx context.Context, f *Flow, r *grantRequest) (*tokenResult, *clientInfo, error) {
	assertion, err := g.Assertion(ctx, r.issuer)
	if err != nil {
		return nil, nil, fmt.Errorf("oauth: assertion: %w", err)
	}
	return f.jwtBearer(ctx, r, assertion)
}

// jwtBearer redeems an assertion at r's token endpoint.
func (f *Flow) jwtBearer(ctx context.Context, r *grantRequest, assertion string) (*tokenResult, *clientInfo, error) {
	var c *clientInfo
	if f.cfg.ClientID != "" {
		var err error
		if c, err = f.clientFor(ctx, r.issuer, r.as, false); err != nil {
			return nil, nil, err
		}
	}
	form := url.Values{
		"grant_type": {grantJWTBearer},
		"assertion":  {assertion},
		"resource":   {r.resource},
	}
	if len(r.scopes) > 0 {
		form.Set("scope", strings.Join(r.scopes, " "))
	}
	tok, err := f.postToken(ctx, r.as.TokenEndpoint, form, c, f.newCall(r.as, c, nil, r.st))
	if c == nil {
		c = &clientInfo{AuthMethod: AuthNone}
	}
	return tok, c, err
}

// tokenTypeIDJAG is the token type of an Identity Assertion JWT
// Authorization Grant.
const tokenTypeIDJAG = "urn:ietf:params:oauth:token-type:id-jag"

// IdentityAssertion is enterprise-managed authorization (the MCP
// extension on the Identity Assertion JWT Authorization Grant): the
// user's ID token from the enterprise identity provider is exchanged
// there (RFC 8693) for an ID-JAG naming the MCP server's authorization
// server and resource, which is then redeemed by the JWT bearer grant,
// the client authenticating with its pre-registered credentials.
type IdentityAssertion struct {
	// IdPTokenEndpoint is the identity provider's token endpoint: HTTPS,
	// or HTTP on loopback or with Config.AllowHTTP, as for authorization
	// servers (New refuses it otherwise).
	IdPTokenEndpoint string
	// IdPClientID and IdPClientSecret are the client's credentials at
	// the identity provider (the secret may be empty).
	IdPClientID     string
	IdPClientSecret string
	// IDToken returns the user's ID token (from single sign-on).
	IDToken func(ctx context.Context) (string, error)
}

func (IdentityAssertion) refreshable() bool { return false }

func (g IdentityAssertion) check(cfg *Config) error {
	if g.IdPTokenEndpoint == "" || g.IDToken == nil {
		return errors.New("oauth: IdentityAssertion needs IdPTokenEndpoint and IDToken")
	}
	// The user's ID token and the client's secret go there: the same
	// rule as for the authorization server's endpoints.
	if err := checkSecureURL(g.IdPTokenEndpoint, cfg.AllowHTTP); err != nil {
		return fmt.Errorf("oauth: IdentityAssertion.IdPTokenEndpoint: %w", err)
	}
	if cfg.ClientID == "" {
		return errors.New("oauth: IdentityAssertion needs Config.ClientID")
	}
	return nil
}

func (g IdentityAssertion) obtain(ctx context.Context, f *Flow, r *grantRequest) (*tokenResult, *clientInfo, error) {
	idToken, err := g.IDToken(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("oauth: ID token: %w", err)
	}
	form := url.Values{
		"grant_type":           {grantTokenExchange},
		"requested_token_type": {tokenTypeIDJAG},
		"subject_token":        {idToken},
		"subject_token_type":   {"urn:ietf:params:oauth:token-type:id_token"},
		"audience":             {r.issuer},
		"resource":             {r.resource},
	}
	if len(r.scopes) > 0 {
		form.Set("scope", strings.Join(r.scopes, " "))
	}
	idp := &clientInfo{ClientID: g.IdPClientID, ClientSecret: g.IdPClientSecret, AuthMethod: AuthNone}
	if g.IdPClientSecret != "" {
		idp.AuthMethod = AuthClientSecretPost
	}
	if g.IdPClientID == "" {
		idp = nil
	}
	jag, err := f.postToken(ctx, g.IdPTokenEndpoint, form, idp, &tokenCall{})
	if err != nil {
		return nil, nil, fmt.Errorf("oauth: token exchange at the identity provider: %w", err)
	}
	// RFC 8693 §2.2.1 makes issued_token_type required: without it
	// nothing says the token is an ID-JAG rather than, say, an access
	// token for the identity provider, which must not go on to the
	// authorization server.
	if jag.IssuedTokenType != tokenTypeIDJAG {
		return nil, nil, fmt.Errorf("oauth: the identity provider issued a %q, not an ID-JAG", clip(jag.IssuedTokenType, 100))
	}
	return f.jwtBearer(ctx, r, jag.AccessToken)
}
