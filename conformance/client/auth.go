package main

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"github.com/go-json-experiment/json"

	"tidings/client"
	"tidings/client/oauth"
)

// cimdURL is the client ID metadata document URL the suite expects a
// client to use where the authorization server accepts them.
const cimdURL = "https://conformance-test.local/client-metadata.json"

// authContext is the union of the suite's authorization scenario
// contexts (src/schemas/context.ts).
type authContext struct {
	ClientID         string `json:"client_id"`
	ClientSecret     string `json:"client_secret"`
	Issuer           string `json:"issuer"` // of the authorization server the client is registered with
	PrivateKeyPEM    string `json:"private_key_pem"`
	SigningAlgorithm string `json:"signing_algorithm"`
	IdPClientID      string `json:"idp_client_id"`
	IdPIDToken       string `json:"idp_id_token"`
	IdPIssuer        string `json:"idp_issuer"`
	IdPTokenEndpoint string `json:"idp_token_endpoint"`
	ValidJWT         string `json:"valid_jwt"`
}

// authScenario connects through an OAuth flow configured for the
// scenario, lists the tools and calls one: enough requests for every
// authorization scenario to see the flow, a step-up on the call, and an
// authorization server migration between the two.
func authScenario(scenario string) scenarioFunc {
	return func(ctx context.Context, log *slog.Logger, serverURL string, raw []byte) error {
		var ac authContext
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &ac); err != nil {
				return fmt.Errorf("scenario context: %w", err)
			}
		}
		cfg := oauth.Config{
			Interaction:       redirectReader{},
			Logger:            log,
			ClientName:        "tidings-conformance-client",
			ClientMetadataURL: cimdURL,
			ClientID:          ac.ClientID,
			ClientSecret:      ac.ClientSecret,
			ClientIssuer:      ac.Issuer,
		}
		// Pre-registered credentials are bound to their authorization
		// server. The pre-registration scenario's context names it; the
		// client credentials, enterprise and workload identity scenarios'
		// do not, and their authorization server is known only from the
		// suite's own MCP server, the one server this process talks to.
		cfg.TrustFirstIssuer = ac.ClientID != "" && ac.Issuer == ""
		switch scenario {
		case "auth/client-credentials-basic":
			cfg.Grant = oauth.ClientCredentials{}
		case "auth/client-credentials-jwt":
			key, err := parseKey(ac.PrivateKeyPEM)
			if err != nil {
				return err
			}
			cfg.Grant = oauth.ClientCredentials{}
			cfg.PrivateKey, cfg.PrivateKeyAlg = key, ac.SigningAlgorithm
			cfg.ClientAuthMethod = oauth.AuthPrivateKeyJWT
		case "auth/enterprise-managed-authorization":
			cfg.Grant = oauth.IdentityAssertion{
				IdPTokenEndpoint: ac.IdPTokenEndpoint,
				IdPClientID:      ac.IdPClientID,
				IDToken:          func(context.Context) (string, error) { return ac.IdPIDToken, nil },
			}
		case "auth/wif-jwt-bearer":
			cfg.Grant = oauth.JWTBearer{
				Assertion: func(context.Context, string) (string, error) { return ac.ValidJWT, nil },
			}
			cfg.ClientAuthMethod = oauth.AuthNone
		case "auth/dpop", "auth/dpop-nonce":
			cfg.DPoP = true
		}
		flow, err := oauth.New(cfg)
		if err != nil {
			return err
		}
		defer flow.Close()
		c := newClient(log, serverURL, client.WithAuthorizer(flow))
		defer c.Close()
		tools, err := c.Tools(ctx)
		if err != nil {
			return err
		}
		name := "test-tool"
		if len(tools) > 0 {
			name = tools[0].Name
		}
		res, err := c.CallTool(ctx, name, map[string]any{})
		if err != nil {
			return err
		}
		log.Info("tools/call", "tool", name, "result", text(res))
		return nil
	}
}

// parseKey reads a PKCS #8 PEM private key.
func parseKey(p string) (crypto.Signer, error) {
	b, _ := pem.Decode([]byte(p))
	if b == nil {
		return nil, errors.New("private_key_pem: no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("private_key_pem: %w", err)
	}
	s, ok := k.(crypto.Signer)
	if !ok {
		return nil, errors.New("private_key_pem: not a signing key")
	}
	return s, nil
}

// redirectReader is the user's part for the suite's authorization
// server, whose authorization endpoint redirects at once: it fetches
// the authorization URL and reads where it redirects, without following.
type redirectReader struct{}

// redirectURI is the redirect URI the suite's scenarios register.
const redirectURI = "http://localhost:3000/callback"

func (redirectReader) RedirectURI() string { return redirectURI }

func (redirectReader) Authorize(ctx context.Context, authURL string) (url.Values, error) {
	hc := &http.Client{
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, authURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	loc := resp.Header.Get("Location")
	if resp.StatusCode/100 != 3 || loc == "" {
		return nil, fmt.Errorf("authorization endpoint answered %s without a redirect", resp.Status)
	}
	u, err := url.Parse(loc)
	if err != nil {
		return nil, fmt.Errorf("authorization redirect: %w", err)
	}
	if !sameEndpoint(u, redirectURI) {
		return nil, errors.New("authorization redirect to another URI")
	}
	return u.Query(), nil
}

// sameEndpoint reports whether u is the redirect URI want, query aside:
// same scheme, host (with port) and path. A string prefix would also
// take a longer path, such as want's path followed by "evil".
func sameEndpoint(u *url.URL, want string) bool {
	w, err := url.Parse(want)
	if err != nil {
		return false
	}
	return u.Scheme == w.Scheme && u.Host == w.Host && u.EscapedPath() == w.EscapedPath() && u.User == nil && u.Fragment == ""
}
