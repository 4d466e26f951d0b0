package oauth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"

	"github.com/go-json-experiment/json"
)

// ErrNoClient means the flow has no way to identify itself to an
// authorization server: no pre-registered client for it, no client ID
// metadata document it accepts, and no dynamic registration.
var ErrNoClient = errors.New("oauth: no client identity for this authorization server")

// ErrClientIssuer means an MCP server names an authorization server
// other than the one the pre-registered client belongs to
// (Config.ClientIssuer, or the one TrustFirstIssuer bound it to). The
// flow neither sends the credentials there nor identifies itself another
// way: the MCP specification has a client surface the mismatch.
var ErrClientIssuer = errors.New("oauth: the pre-registered client belongs to another authorization server")

// RegistrationError is a refused dynamic client registration (RFC 7591
// §3.2.2).
type RegistrationError struct {
	Status      int
	Code        string
	Description string
}

func (e *RegistrationError) Error() string {
	s := fmt.Sprintf("oauth: client registration refused: HTTP %d", e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	if e.Description != "" {
		s += " (" + clip(e.Description, 200) + ")"
	}
	return s
}

// clientFor returns the client identity to use with the authorization
// server issuer, in the MCP order: pre-registered credentials, a client
// ID metadata document when the server accepts them, a client this flow
// registered before, a new dynamic registration.
func (f *Flow) clientFor(ctx context.Context, issuer string, as *serverMetadata, interactive bool) (*clientInfo, error) {
	if c, err := f.preregistered(ctx, issuer, as); c != nil || err != nil {
		return c, err
	}
	if !interactive {
		return nil, fmt.Errorf("%w %s: this grant needs pre-registered credentials", ErrNoClient, issuer)
	}
	redirect := f.cfg.Interaction.RedirectURI()
	if f.cfg.ClientMetadataURL != "" && as.ClientIDMetadataDocumentSupported {
		method := AuthNone
		if f.cfg.PrivateKey != nil && slices.Contains(as.TokenEndpointAuthMethodsSupported, AuthPrivateKeyJWT) {
			method = AuthPrivateKeyJWT
		}
		return &clientInfo{ClientID: f.cfg.ClientMetadataURL, AuthMethod: method, Kind: "metadata-document"}, nil
	}
	// One registration per authorization server at a time: MCP servers
	// that share it and answer 401 together would otherwise each
	// register, and the client saved last would leave the others'
	// tokens with a client the flow no longer has, whose refresh tokens
	// are then lost. Held for the Store and the registration request
	// only, never while the user is asked.
	unlock, err := f.lockIssuer(ctx, issuer)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if c := f.storedClient(ctx, issuer); c != nil && c.RedirectURI == redirect &&
		(c.SecretExpiresAt == 0 || f.now().Unix() < c.SecretExpiresAt) {
		return c, nil
	}
	if as.RegistrationEndpoint == "" {
		return nil, fmt.Errorf("%w %s: no pre-registered client, no client ID metadata document support, no registration endpoint", ErrNoClient, issuer)
	}
	c, err := f.register(ctx, as, redirect)
	if err != nil {
		return nil, err
	}
	f.saveClient(ctx, issuer, c)
	return c, nil
}

// preregistered returns the configured client, nil when there is none,
// or an error wrapping ErrClientIssuer when it belongs to another
// authorization server than issuer (a client ID is unique to the server
// that issued it, and its secret is for no one else).
func (f *Flow) preregistered(ctx context.Context, issuer string, as *serverMetadata) (*clientInfo, error) {
	if f.cfg.ClientID == "" {
		return nil, nil
	}
	if bound := f.boundIssuer(ctx, issuer); bound != issuer {
		f.log.Warn("oauth: the pre-registered client belongs to another authorization server; not used", "issuer", issuer, "registered_with", bound)
		return nil, fmt.Errorf("%w: the MCP server names %s, the client is registered with %s", ErrClientIssuer, issuer, bound)
	}
	return &clientInfo{
		ClientID:     f.cfg.ClientID,
		ClientSecret: f.cfg.ClientSecret,
		AuthMethod:   f.preregisteredMethod(as),
		Kind:         "preregistered",
	}, nil
}

// boundIssuer returns the issuer the pre-registered client belongs to:
// Config.ClientIssuer, else (TrustFirstIssuer) the one it was bound to
// before, in this run or, through the Store, an earlier one. When it is
// bound to none yet, a non-empty first binds it to first, and "" only
// looks. The Store is read and written without f.mu held; when two
// callers bind at once, the first to take f.mu wins and the other sees
// its binding.
func (f *Flow) boundIssuer(ctx context.Context, first string) string {
	if f.cfg.ClientIssuer != "" {
		return f.cfg.ClientIssuer
	}
	f.mu.Lock()
	bound := f.preIssuer
	f.mu.Unlock()
	if bound != "" {
		return bound
	}
	key := keyPreregistered + f.cfg.ClientID
	stored := ""
	raw, err := f.store.Load(ctx, key)
	switch {
	case err == nil:
		stored = string(raw)
	case !errors.Is(err, ErrNotStored):
		f.log.Warn("oauth: could not load the pre-registered client's issuer", "err", err)
	}
	bind := false
	f.mu.Lock()
	switch {
	case f.preIssuer != "":
	case stored != "":
		f.preIssuer = stored
	case first != "":
		f.preIssuer, bind = first, true
	}
	bound = f.preIssuer
	f.mu.Unlock()
	if bind {
		f.log.Warn("oauth: the pre-registered client is bound to the first authorization server named (TrustFirstIssuer)", "issuer", bound)
		if err := f.store.Save(ctx, key, []byte(bound)); err != nil {
			f.log.Warn("oauth: could not save the pre-registered client's issuer", "err", err)
		}
	}
	return bound
}

// preregisteredMethod chooses how the pre-registered client
// authenticates: as configured, else by what it has and the server
// supports. A server that lists no methods supports client_secret_basic
// (RFC 8414 §2); a client that has a key and no secret could not use
// that, and the key was configured to be used, so it signs assertions.
func (f *Flow) preregisteredMethod(as *serverMetadata) string {
	if f.cfg.ClientAuthMethod != "" {
		return f.cfg.ClientAuthMethod
	}
	supported := as.TokenEndpointAuthMethodsSupported
	if len(supported) == 0 {
		if f.cfg.PrivateKey != nil && f.cfg.ClientSecret == "" {
			return AuthPrivateKeyJWT
		}
		supported = []string{AuthClientSecretBasic}
	}
	switch {
	case f.cfg.PrivateKey != nil && slices.Contains(supported, AuthPrivateKeyJWT):
		return AuthPrivateKeyJWT
	case f.cfg.ClientSecret == "":
		return AuthNone
	case slices.Contains(supported, AuthClientSecretBasic):
		return AuthClientSecretBasic
	case slices.Contains(supported, AuthClientSecretPost):
		return AuthClientSecretPost
	}
	return AuthClientSecretBasic
}

// registrationMethod chooses the token_endpoint_auth_method to register
// with: none (a native client has no secret to keep) when the server
// takes it, else a client secret by whichever means it supports.
func registrationMethod(as *serverMetadata) string {
	supported := as.TokenEndpointAuthMethodsSupported
	if len(supported) == 0 {
		supported = []string{AuthClientSecretBasic}
	}
	for _, m := range []string{AuthNone, AuthClientSecretBasic, AuthClientSecretPost} {
		if slices.Contains(supported, m) {
			return m
		}
	}
	return ""
}

// applicationType is native for redirect URIs on loopback or a private
// scheme, web otherwise (OpenID Connect Registration §2).
func applicationType(redirect string) string {
	u, err := url.Parse(redirect)
	if err != nil {
		return "native"
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "native"
	}
	if isLoopback(u.Hostname()) {
		return "native"
	}
	return "web"
}

// register performs dynamic client registration (RFC 7591).
func (f *Flow) register(ctx context.Context, as *serverMetadata, redirect string) (*clientInfo, error) {
	method := registrationMethod(as)
	appType := f.cfg.ApplicationType
	if appType == "" {
		appType = applicationType(redirect)
	}
	name := f.cfg.ClientName
	if name == "" {
		name = "tidings"
	}
	md := map[string]any{
		"client_name":      name,
		"redirect_uris":    []string{redirect},
		"grant_types":      []string{grantAuthorizationCode, grantRefreshToken},
		"response_types":   []string{"code"},
		"application_type": appType,
	}
	if method != "" {
		md["token_endpoint_auth_method"] = method
	}
	if f.cfg.ClientURI != "" {
		md["client_uri"] = f.cfg.ClientURI
	}
	body, err := json.Marshal(md)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, as.RegistrationEndpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := f.tokenHC.Do(req)
	if err != nil {
		return nil, fmt.Errorf("oauth: client registration: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var e struct {
			Error            string `json:"error"`
			ErrorDescription string `json:"error_description"`
		}
		_ = json.Unmarshal(raw, &e)
		return nil, &RegistrationError{Status: resp.StatusCode, Code: e.Error, Description: e.ErrorDescription}
	}
	var got struct {
		ClientID              string `json:"client_id"`
		ClientSecret          string `json:"client_secret"`
		ClientSecretExpiresAt int64  `json:"client_secret_expires_at"`
		AuthMethod            string `json:"token_endpoint_auth_method"`
	}
	if err := decodeJSON(resp, &got); err != nil {
		return nil, fmt.Errorf("oauth: client registration response: %w", err)
	}
	if got.ClientID == "" {
		return nil, errors.New("oauth: client registration response has no client_id")
	}
	c := &clientInfo{
		ClientID:        got.ClientID,
		ClientSecret:    got.ClientSecret,
		AuthMethod:      got.AuthMethod,
		SecretExpiresAt: got.ClientSecretExpiresAt,
		RedirectURI:     redirect,
		Kind:            "registered",
	}
	if c.AuthMethod == "" {
		c.AuthMethod = method
	}
	if c.AuthMethod == "" {
		c.AuthMethod = AuthNone
		if c.ClientSecret != "" {
			c.AuthMethod = AuthClientSecretBasic
		}
	}
	if (c.AuthMethod == AuthClientSecretBasic || c.AuthMethod == AuthClientSecretPost) && c.ClientSecret == "" {
		return nil, fmt.Errorf("oauth: client registration gave method %s but no client_secret", c.AuthMethod)
	}
	f.log.Info("oauth: registered client", "issuer", as.Issuer, "client_id", c.ClientID, "token_endpoint_auth_method", c.AuthMethod)
	return c, nil
}

// lockIssuer takes the lock that serialises obtaining a client identity
// at issuer, waiting no longer than ctx; unlock gives it back.
func (f *Flow) lockIssuer(ctx context.Context, issuer string) (unlock func(), err error) {
	f.mu.Lock()
	l, ok := f.issuerLocks[issuer]
	if !ok {
		l = make(chan struct{}, 1)
		f.issuerLocks[issuer] = l
	}
	f.mu.Unlock()
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *Flow) storedClient(ctx context.Context, issuer string) *clientInfo {
	f.mu.Lock()
	if c, ok := f.clients[issuer]; ok {
		f.mu.Unlock()
		return c
	}
	f.mu.Unlock()
	raw, err := f.store.Load(ctx, keyClient+issuer)
	if err != nil {
		return nil
	}
	var c clientInfo
	if json.Unmarshal(raw, &c) != nil || c.ClientID == "" {
		return nil
	}
	f.mu.Lock()
	f.clients[issuer] = &c
	f.mu.Unlock()
	return &c
}

func (f *Flow) saveClient(ctx context.Context, issuer string, c *clientInfo) {
	f.mu.Lock()
	f.clients[issuer] = c
	f.mu.Unlock()
	raw, err := json.Marshal(c)
	if err == nil {
		err = f.store.Save(ctx, keyClient+issuer, raw)
	}
	if err != nil {
		f.log.Warn("oauth: could not save the registered client", "issuer", issuer, "err", err)
	}
}

// forgetClient drops a registration the server no longer accepts.
func (f *Flow) forgetClient(ctx context.Context, issuer string) {
	f.mu.Lock()
	delete(f.clients, issuer)
	f.mu.Unlock()
	_ = f.store.Delete(ctx, keyClient+issuer)
}
