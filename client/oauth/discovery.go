package oauth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/go-json-experiment/json"
)

// resourceMetadata is an OAuth 2.0 Protected Resource Metadata document
// (RFC 9728 §2), as far as a client uses it.
type resourceMetadata struct {
	Resource                      string   `json:"resource"`
	AuthorizationServers          []string `json:"authorization_servers,omitempty"`
	ScopesSupported               []string `json:"scopes_supported,omitempty"`
	BearerMethodsSupported        []string `json:"bearer_methods_supported,omitempty"`
	ResourceName                  string   `json:"resource_name,omitempty"`
	DPoPSigningAlgValuesSupported []string `json:"dpop_signing_alg_values_supported,omitempty"`
	DPoPBoundAccessTokensRequired bool     `json:"dpop_bound_access_tokens_required,omitempty"`
}

// serverMetadata is an authorization server's metadata (RFC 8414 §2, or
// an OpenID Provider configuration), as far as a client uses it.
type serverMetadata struct {
	Issuer                                string   `json:"issuer"`
	AuthorizationEndpoint                 string   `json:"authorization_endpoint,omitempty"`
	TokenEndpoint                         string   `json:"token_endpoint,omitempty"`
	RegistrationEndpoint                  string   `json:"registration_endpoint,omitempty"`
	ScopesSupported                       []string `json:"scopes_supported,omitempty"`
	ResponseTypesSupported                []string `json:"response_types_supported,omitempty"`
	GrantTypesSupported                   []string `json:"grant_types_supported,omitempty"`
	TokenEndpointAuthMethodsSupported     []string `json:"token_endpoint_auth_methods_supported,omitempty"`
	TokenEndpointAuthSigningAlgsSupported []string `json:"token_endpoint_auth_signing_alg_values_supported,omitempty"`
	CodeChallengeMethodsSupported         []string `json:"code_challenge_methods_supported,omitempty"`
	AuthorizationResponseIssParameter     bool     `json:"authorization_response_iss_parameter_supported,omitempty"`
	ClientIDMetadataDocumentSupported     bool     `json:"client_id_metadata_document_supported,omitempty"`
	DPoPSigningAlgValuesSupported         []string `json:"dpop_signing_alg_values_supported,omitempty"`
	RevocationEndpoint                    string   `json:"revocation_endpoint,omitempty"`
	IntrospectionEndpoint                 string   `json:"introspection_endpoint,omitempty"`
	JWKSURI                               string   `json:"jwks_uri,omitempty"`
}

// Errors of discovery.
var (
	// ErrNoResourceMetadata: neither the challenge's resource_metadata
	// nor the well-known locations gave a usable document.
	ErrNoResourceMetadata = errors.New("oauth: no protected resource metadata")
	// ErrResourceMismatch: the metadata names another resource than the
	// server being accessed (RFC 9728 §3.3).
	ErrResourceMismatch = errors.New("oauth: protected resource metadata is for another resource")
	// ErrNoServerMetadata: no well-known location of the authorization
	// server gave a usable document.
	ErrNoServerMetadata = errors.New("oauth: no authorization server metadata")
	// ErrMetadataIssuer: an authorization server metadata document's
	// issuer differs from the issuer it was fetched for (RFC 8414 §3.3),
	// so the document is not used. It is about the metadata;
	// [ErrResponseIssuer] is about the authorization response.
	ErrMetadataIssuer = errors.New("oauth: authorization server metadata issuer mismatch")
	// ErrNoPKCE: the authorization server does not advertise the S256
	// code challenge method, so the authorization code grant is refused.
	ErrNoPKCE = errors.New("oauth: authorization server does not support PKCE with S256")
)

// maxMetadataBytes bounds a metadata or registration document.
const maxMetadataBytes = 1 << 20

// getJSON fetches url and decodes a JSON object into v. It reports the
// HTTP status for the caller's fallback decisions (0 on transport error).
func (f *Flow) getJSON(ctx context.Context, u string, v any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return resp.StatusCode, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	if err := decodeJSON(resp, v); err != nil {
		return resp.StatusCode, fmt.Errorf("GET %s: %w", u, err)
	}
	return resp.StatusCode, nil
}

// decodeJSON reads a bounded JSON body into v.
func decodeJSON(resp *http.Response, v any) error {
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		mt, _, _ := mime.ParseMediaType(ct)
		if mt != "application/json" && !strings.HasSuffix(mt, "+json") {
			return fmt.Errorf("content type %q is not JSON", mt)
		}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxMetadataBytes+1))
	if err != nil {
		return err
	}
	if len(body) > maxMetadataBytes {
		return errors.New("document too large")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return errors.New("not a valid JSON document")
	}
	return nil
}

// resourceMetadataURLs returns where to look for the protected resource
// metadata of the server at u, in order: the challenge's
// resource_metadata, the path-inserted well-known URI, the root one.
//
// The challenge's URL is taken only over HTTPS, unless the server itself
// is reached over plain HTTP or on loopback: the document names the
// authorization servers the flow trusts with the user's login, so it must
// not travel less protected than the server's own answers.
func resourceMetadataURLs(u *url.URL, fromChallenge string) []string {
	var out []string
	if ru, ok := challengeMetadataURL(u, fromChallenge); ok {
		out = append(out, ru)
	}
	const wk = "/.well-known/oauth-protected-resource"
	base := url.URL{Scheme: u.Scheme, Host: u.Host}
	if p := strings.TrimSuffix(u.EscapedPath(), "/"); p != "" {
		out = append(out, base.String()+wk+p)
	}
	out = append(out, base.String()+wk)
	return dedupe(out)
}

// challengeMetadataURL resolves a challenge's resource_metadata against
// the server's URL u; ok is false when it is absent or not to be fetched
// (see resourceMetadataURLs).
func challengeMetadataURL(u *url.URL, fromChallenge string) (string, bool) {
	if fromChallenge == "" {
		return "", false
	}
	ru, err := u.Parse(fromChallenge)
	if err != nil || ru.Host == "" {
		return "", false
	}
	switch {
	case ru.Scheme == "https":
	case ru.Scheme == "http" && (u.Scheme == "http" || isLoopback(u.Hostname())):
	default:
		return "", false
	}
	return ru.String(), true
}

// discoverResource fetches and validates the protected resource metadata
// of the server at u.
func (f *Flow) discoverResource(ctx context.Context, u *url.URL, fromChallenge string) (*resourceMetadata, error) {
	if _, ok := challengeMetadataURL(u, fromChallenge); fromChallenge != "" && !ok {
		f.log.Warn("oauth: the server's resource_metadata is not an HTTPS URL; not used", "server", u.Redacted(), "resource_metadata", clip(fromChallenge, 200))
	}
	var errs []error
	for _, mu := range resourceMetadataURLs(u, fromChallenge) {
		var md resourceMetadata
		if _, err := f.getJSON(ctx, mu, &md); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			f.log.Debug("oauth: protected resource metadata not at this location", "url", mu, "err", err)
			errs = append(errs, err)
			continue
		}
		if err := checkResource(u, md.Resource); err != nil {
			// A document naming another resource is an attack or a
			// misconfiguration: stop, never try the next location.
			return nil, err
		}
		if len(md.AuthorizationServers) == 0 {
			return nil, fmt.Errorf("%w: %s lists no authorization server", ErrNoResourceMetadata, mu)
		}
		f.log.Debug("oauth: protected resource metadata", "url", mu, "resource", md.Resource, "authorization_servers", md.AuthorizationServers)
		return &md, nil
	}
	return nil, fmt.Errorf("%w for %s: %w", ErrNoResourceMetadata, u.Redacted(), errors.Join(errs...))
}

// checkResource verifies that resource, the identifier a metadata
// document gives, identifies the server at u: same scheme, host and port
// (compared case-insensitively), and a path that is u's path or a parent
// of it on a segment boundary.
func checkResource(u *url.URL, resource string) error {
	if resource == "" {
		return fmt.Errorf("%w: the document names no resource", ErrResourceMismatch)
	}
	r, err := url.Parse(resource)
	if err != nil || r.Scheme == "" || r.Host == "" || r.Fragment != "" || r.User != nil {
		return fmt.Errorf("%w: %q is not an absolute URI without fragment", ErrResourceMismatch, resource)
	}
	if !strings.EqualFold(r.Scheme, u.Scheme) || !strings.EqualFold(hostPort(r), hostPort(u)) {
		return fmt.Errorf("%w: %q is not %s", ErrResourceMismatch, resource, u.Redacted())
	}
	rp := strings.TrimSuffix(r.EscapedPath(), "/")
	up := strings.TrimSuffix(u.EscapedPath(), "/")
	if rp != "" && rp != up && !strings.HasPrefix(up, rp+"/") {
		return fmt.Errorf("%w: %q is not %s", ErrResourceMismatch, resource, u.Redacted())
	}
	return nil
}

// hostPort is u's host with the scheme's default port made explicit.
func hostPort(u *url.URL) string {
	h, p := u.Hostname(), u.Port()
	if p == "" {
		switch strings.ToLower(u.Scheme) {
		case "https":
			p = "443"
		case "http":
			p = "80"
		}
	}
	return strings.ToLower(h) + ":" + p
}

// serverMetadataURLs returns the well-known locations of the metadata
// of issuer, in the order the MCP specification gives.
func serverMetadataURLs(issuer string) ([]string, error) {
	u, err := url.Parse(issuer)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("oauth: %q is not a valid issuer identifier", issuer)
	}
	base := u.Scheme + "://" + u.Host
	p := strings.TrimSuffix(u.EscapedPath(), "/")
	if p == "" {
		return []string{
			base + "/.well-known/oauth-authorization-server",
			base + "/.well-known/openid-configuration",
		}, nil
	}
	return []string{
		base + "/.well-known/oauth-authorization-server" + p,
		base + "/.well-known/openid-configuration" + p,
		base + p + "/.well-known/openid-configuration",
	}, nil
}

// discoverServer fetches the metadata of issuer from the first
// well-known location that has it, and checks its issuer. A document
// whose issuer differs is never used; the next location is tried (an
// honest server may publish it at another one).
func (f *Flow) discoverServer(ctx context.Context, issuer string) (*serverMetadata, error) {
	if md, ok := f.cachedServer(issuer); ok {
		return md, nil
	}
	urls, err := serverMetadataURLs(issuer)
	if err != nil {
		return nil, err
	}
	// Before any request: a plain HTTP issuer would be refused once its
	// metadata came back, and fetching it would already tell a network
	// attacker whom the client is about to trust.
	if err := checkSecureURL(issuer, f.cfg.AllowHTTP); err != nil {
		return nil, err
	}
	var errs []error
	for _, mu := range urls {
		var md serverMetadata
		if _, err := f.getJSON(ctx, mu, &md); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			f.log.Debug("oauth: authorization server metadata not at this location", "url", mu, "err", err)
			errs = append(errs, err)
			continue
		}
		if md.Issuer != issuer {
			f.log.Warn("oauth: authorization server metadata names another issuer; not used", "url", mu, "issuer", issuer, "metadata_issuer", md.Issuer)
			errs = append(errs, fmt.Errorf("%w: %s has issuer %q, want %q", ErrMetadataIssuer, mu, md.Issuer, issuer))
			continue
		}
		if err := f.checkEndpoints(&md); err != nil {
			return nil, err
		}
		f.log.Debug("oauth: authorization server metadata", "url", mu, "issuer", md.Issuer)
		f.cacheServer(issuer, &md)
		return &md, nil
	}
	if e := firstIs(errs, ErrMetadataIssuer); e != nil {
		return nil, e
	}
	return nil, fmt.Errorf("%w for %s: %w", ErrNoServerMetadata, issuer, errors.Join(errs...))
}

// ErrInsecureEndpoint: an authorization server endpoint is neither
// HTTPS nor on a loopback address (see Config.AllowHTTP).
var ErrInsecureEndpoint = errors.New("oauth: authorization server endpoint is not HTTPS")

// checkEndpoints refuses endpoints that are not absolute HTTPS URLs
// (HTTP only on loopback, unless Config.AllowHTTP).
func (f *Flow) checkEndpoints(md *serverMetadata) error {
	for _, e := range []string{md.Issuer, md.AuthorizationEndpoint, md.TokenEndpoint, md.RegistrationEndpoint} {
		if e == "" {
			continue
		}
		if err := checkSecureURL(e, f.cfg.AllowHTTP); err != nil {
			return err
		}
	}
	return nil
}

// checkSecureURL is the rule for every URL the flow sends credentials,
// codes or the user to (OAuth 2.1 §1.5): an absolute HTTPS URL, or HTTP
// on a loopback address, or HTTP anywhere when allowHTTP
// (Config.AllowHTTP).
func checkSecureURL(raw string, allowHTTP bool) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return fmt.Errorf("oauth: authorization server endpoint %q is not an absolute URL", clip(raw, 200))
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && (allowHTTP || isLoopback(u.Hostname())):
	default:
		return fmt.Errorf("%w: %s", ErrInsecureEndpoint, u.Redacted())
	}
	return nil
}

// CheckIssuer reports whether secrets may be sent to issuer: it must be
// an HTTPS URL, or HTTP on a loopback address — the rule New and every
// flow hold authorization server endpoints to (without Config.AllowHTTP).
// It lets a configuration that names an issuer be refused when it is
// read, before any flow is made.
func CheckIssuer(issuer string) error { return checkSecureURL(issuer, false) }

// isLoopback reports whether host is localhost or a loopback address.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func firstIs(errs []error, target error) error {
	for _, e := range errs {
		if errors.Is(e, target) {
			return e
		}
	}
	return nil
}

// supportsPKCE reports whether the metadata advertises S256.
func (m *serverMetadata) supportsPKCE() bool {
	return slices.Contains(m.CodeChallengeMethodsSupported, "S256")
}

func dedupe(ss []string) []string {
	var out []string
	for _, s := range ss {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
