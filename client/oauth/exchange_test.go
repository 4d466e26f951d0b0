package oauth_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"tidings/client/oauth"
	"tidings/internal/testrig/testas"
)

// TestExchangeTradesAnAccessToken: Exchange obtains, at the client's own
// authorization server, a token in the subject token's name for the
// audience asked; a refusal is a TokenError with the server's code and
// none of the tokens sent.
func TestExchangeTradesAnAccessToken(t *testing.T) {
	const upstream = "http://127.0.0.1:9/mcp"
	as := testas.Start(t, "http://127.0.0.1:8/mcp")
	id, secret := as.RegisterConfidentialClient("http://127.0.0.1/cb")
	f, err := oauth.New(oauth.Config{Grant: oauth.ClientCredentials{}, ClientID: id, ClientSecret: secret, ClientIssuer: as.Issuer()})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	subject := as.Token(t) // the service user's
	tok, err := f.Exchange(context.Background(), oauth.TokenExchange{SubjectToken: subject, Audience: upstream, Resource: upstream, Scopes: []string{"notes"}})
	if err != nil {
		t.Fatal(err)
	}
	if tok.AccessToken == subject || tok.TokenType != "Bearer" || tok.Expiry.IsZero() {
		t.Fatalf("issued %+v", tok)
	}
	parsed, err := jwt.ParseSigned(tok.AccessToken, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Sub      string       `json:"sub"`
		Aud      jwt.Audience `json:"aud"`
		ClientID string       `json:"client_id"`
	}
	if err := parsed.UnsafeClaimsWithoutVerification(&claims); err != nil {
		t.Fatal(err)
	}
	if claims.Sub != testas.ClientID || !slices.Equal([]string(claims.Aud), []string{upstream}) || claims.ClientID != id {
		t.Fatalf("the issued token says %+v", claims)
	}

	as.DenyExchanges(testas.ClientID)
	_, err = f.Exchange(context.Background(), oauth.TokenExchange{SubjectToken: subject, Audience: upstream})
	var te *oauth.TokenError
	if !errors.As(err, &te) || te.Code != "invalid_grant" || strings.Contains(err.Error(), subject) {
		t.Fatalf("a refused exchange: %v", err)
	}

	bare, err := oauth.New(oauth.Config{Grant: oauth.ClientCredentials{}, ClientID: id, ClientSecret: secret, TrustFirstIssuer: true})
	if err != nil {
		t.Fatal(err)
	}
	defer bare.Close()
	if _, err := bare.Exchange(context.Background(), oauth.TokenExchange{SubjectToken: subject}); err == nil || !strings.Contains(err.Error(), "ClientIssuer") {
		t.Fatalf("an exchange with no issuer to go to: %v", err)
	}
}
