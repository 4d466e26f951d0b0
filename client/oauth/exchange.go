package oauth

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"golang.org/x/oauth2"
)

// tokenTypeAccessToken is the RFC 8693 token type of an OAuth access
// token.
const tokenTypeAccessToken = "urn:ietf:params:oauth:token-type:access_token"

// TokenExchange is what Exchange asks for: an access token for Audience
// and Resource in place of SubjectToken, another party's access token.
type TokenExchange struct {
	// SubjectToken is the access token to exchange (subject_token, of
	// type access_token). It goes to the token endpoint and nowhere else.
	SubjectToken string
	// Audience and Resource name where the issued token is to be used
	// (RFC 8693 audience, RFC 8707 resource); either may be empty.
	Audience string
	Resource string
	// Scopes are asked for; none leaves them to the authorization server.
	Scopes []string
}

// Exchange obtains an access token by RFC 8693 token exchange at the
// token endpoint of Config.ClientIssuer, found in its metadata and held
// to the same rule as every endpoint the flow sends secrets to (HTTPS,
// or HTTP on loopback). The client authenticates with its pre-registered
// credentials (Config.ClientID and its secret or key), as for the client
// credentials grant. It serves a party acting for callers of its own — a
// gateway presenting, to each server behind it, a token issued for that
// server in the caller's name — so it neither keeps nor reuses what it
// obtains: the caller of Exchange does. A refusal is a *TokenError with
// the server's error code, never the tokens sent.
func (f *Flow) Exchange(ctx context.Context, x TokenExchange) (*oauth2.Token, error) {
	issuer := f.cfg.ClientIssuer
	if issuer == "" || f.cfg.ClientID == "" {
		return nil, errors.New("oauth: token exchange needs Config.ClientID and Config.ClientIssuer")
	}
	if x.SubjectToken == "" {
		return nil, errors.New("oauth: token exchange needs a subject token")
	}
	as, err := f.discoverServer(ctx, issuer)
	if err != nil {
		return nil, err
	}
	if as.TokenEndpoint == "" {
		return nil, fmt.Errorf("oauth: %s names no token endpoint", issuer)
	}
	c, err := f.preregistered(ctx, issuer, as)
	if err != nil {
		return nil, err
	}
	form := url.Values{
		"grant_type":           {grantTokenExchange},
		"subject_token":        {x.SubjectToken},
		"subject_token_type":   {tokenTypeAccessToken},
		"requested_token_type": {tokenTypeAccessToken},
	}
	if x.Audience != "" {
		form.Set("audience", x.Audience)
	}
	if x.Resource != "" {
		form.Set("resource", x.Resource)
	}
	if len(x.Scopes) > 0 {
		form.Set("scope", strings.Join(x.Scopes, " "))
	}
	tok, err := f.postToken(ctx, as.TokenEndpoint, form, c, f.newCall(as, c, nil, nil))
	if err != nil {
		return nil, err
	}
	// issued_token_type is required (RFC 8693 §2.2.1); a server that
	// leaves it out is taken at its word that it issued what was asked.
	if tok.IssuedTokenType != "" && tok.IssuedTokenType != tokenTypeAccessToken {
		return nil, fmt.Errorf("oauth: the token exchange issued a %q, not an access token", clip(tok.IssuedTokenType, 100))
	}
	if tok.TokenType != "" && !strings.EqualFold(tok.TokenType, "Bearer") {
		return nil, fmt.Errorf("oauth: the token exchange issued a token of type %q, not a bearer token", clip(tok.TokenType, 100))
	}
	return &oauth2.Token{AccessToken: tok.AccessToken, TokenType: "Bearer", Expiry: tok.Expiry}, nil
}
