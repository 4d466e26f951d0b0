// Package testas is a real OAuth authorization server on loopback for
// tests: zitadel/oidc's OpenID Provider over its example in-memory
// storage, issuing access tokens by the client credentials grant and by
// the authorization code grant with PKCE.
//
// Its service user [ClientID] gets JWT access tokens for the audience
// the test names, carrying the scopes it asks for, signed by a key that
// can be rotated. The same service user asking as [OpaqueClientID] gets
// opaque tokens instead, which the resource server's client
// [RSClientID] may introspect (RFC 7662) and revoke (RFC 7009).
//
// Clients a test registers ([Server.RegisterClient],
// [Server.RegisterConfidentialClient]) use the authorization code grant,
// which must carry a PKCE S256 challenge. The login approves every
// request at once for the test user [UserID], so an HTTP client that
// follows redirects from the authorization URL ends at the client's
// redirect URI with code and state, without anyone typing anything.
// Their access tokens are JWTs for the resource the authorization
// request names (RFC 8707), or for the server's audience when it names
// none, carrying the scopes granted; asking for offline_access also
// brings a refresh token, which rotates on every use. Access tokens last
// five minutes, or what [WithTokenLifetime] says.
//
// A client the test registered may also exchange an access token this
// server issued (RFC 8693, subject_token_type access_token) for a JWT
// access token for the audience it names, carrying the subject of the
// token exchanged, the scopes asked for and the client as its
// client_id; [Server.Exchanges] lists what was asked, and
// [Server.DenyExchanges] has the exchanges for one subject refused.
package testas

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// The clients the authorization server knows.
const (
	// ClientID and ClientSecret are the service user of the example
	// storage, allowed the client credentials grant; its tokens are JWTs.
	ClientID     = "sid1"
	ClientSecret = "verysecret"

	// OpaqueClientID is the same service user, with the same secret,
	// getting opaque access tokens.
	OpaqueClientID = "sid1-opaque"

	// RSClientID and RSClientSecret are the resource server's client,
	// allowed to introspect and revoke tokens.
	RSClientID     = "rs"
	RSClientSecret = "rs-secret"
)

// UserID is the subject of the test user, whom the login signs in for
// every authorization request.
const UserID = "id1"

// defaultTokenLifetime is how long access tokens are valid unless
// WithTokenLifetime says otherwise.
const defaultTokenLifetime = 5 * time.Minute

// refreshLifetime is how long refresh tokens are valid.
const refreshLifetime = time.Hour

// An Authorization is an authorization request as it reached the
// authorization endpoint, before any validation.
type Authorization struct {
	ClientID    string
	RedirectURI string
	Scopes      []string
	// Resources are the RFC 8707 resource parameters.
	Resources []string
	// CodeChallengeMethod is the PKCE method, "" when the request had
	// no code_challenge.
	CodeChallengeMethod string
	State               string
}

// A Grant is a request to the token endpoint, as it arrived.
type Grant struct {
	// Type is the grant_type.
	Type string
	// ClientID is the client that authenticated, or named itself.
	ClientID string
	// Resources are the RFC 8707 resource parameters.
	Resources []string
	// CodeVerifier reports whether a PKCE code_verifier came with it.
	CodeVerifier bool
}

// An Exchange is a token exchange request (RFC 8693), as the
// authorization server understood it once the subject token was found
// valid.
type Exchange struct {
	// ClientID is the client that authenticated.
	ClientID string
	// Subject is the sub of the subject token.
	Subject string
	// SubjectTokenType and RequestedTokenType are as asked.
	SubjectTokenType, RequestedTokenType string
	// Audience, Resources and Scopes are as asked.
	Audience, Resources, Scopes []string
}

// Server is a running authorization server.
type Server struct {
	ts     *httptest.Server
	issuer string
	st     *asStorage

	mu             sync.Mutex
	grants         []Grant
	authorizations []Authorization
}

// An Option tunes the server Start runs.
type Option func(*asStorage)

// WithTokenLifetime makes access tokens valid for d (default 5
// minutes), so that a test can see a client's token expire and be
// refreshed. Refresh tokens stay valid for an hour.
func WithTokenLifetime(d time.Duration) Option {
	return func(s *asStorage) { s.lifetime = d }
}

// Start runs an authorization server whose JWT access tokens are for
// audience unless the request names a resource, and closes it when the
// test ends. With audience "", every request must name its resource.
func Start(t testing.TB, audience string, opts ...Option) *Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	issuer := "http://" + ts.Listener.Addr().String()
	clients := map[string]*storage.Client{RSClientID: storage.WebClient(RSClientID, RSClientSecret, issuer+"/cb")}
	users := storage.NewUserStore(issuer)
	st := &asStorage{
		Storage:   storage.NewStorageWithClients(users, clients),
		issuer:    issuer,
		audience:  audience,
		opaque:    map[string]*opaqueToken{},
		clients:   map[string]*codeClient{},
		resources: map[string]string{},
		refresh:   map[string]*refreshGrant{},
		denied:    map[string]bool{},
		lifetime:  defaultTokenLifetime,
	}
	for _, o := range opts {
		o(st)
	}
	s := &Server{ts: ts, issuer: issuer, st: st}
	s.Rotate(t)
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		t.Fatal(err)
	}
	provider, err := op.NewProvider(&op.Config{
		CryptoKey: key, AuthMethodPost: true, CodeMethodS256: true, GrantTypeRefreshToken: true,
	}, st, op.StaticIssuer(issuer), op.WithAllowInsecure())
	if err != nil {
		t.Fatal(err)
	}
	user := users.GetUserByID(UserID)
	callback := op.AuthCallbackURL(provider)
	authorize := provider.AuthorizationEndpoint().Relative()
	mux := http.NewServeMux()
	// The login signs the test user in without asking, and hands the
	// request back to the provider, which redirects to the client.
	mux.HandleFunc("GET "+loginPath, func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("authRequestID")
		if err := st.CheckUsernamePassword(user.Username, user.Password, id); err != nil {
			http.Error(w, fmt.Sprintf("login: %v", err), http.StatusBadRequest)
			return
		}
		http.Redirect(w, r, callback(op.ContextWithIssuer(r.Context(), issuer), id), http.StatusFound)
	})
	mux.Handle("/", provider)
	ts.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == authorize:
			if err := r.ParseForm(); err == nil {
				s.mu.Lock()
				s.authorizations = append(s.authorizations, authorizationOf(r))
				s.mu.Unlock()
				r = r.WithContext(context.WithValue(r.Context(), resourceKey{}, r.Form["resource"]))
			}
		case r.Method == http.MethodPost && r.URL.Path == "/oauth/token":
			id, _, _ := r.BasicAuth()
			if err := r.ParseForm(); err == nil {
				if id == "" {
					id = r.PostForm.Get("client_id")
				}
				s.mu.Lock()
				s.grants = append(s.grants, Grant{
					Type: r.PostForm.Get("grant_type"), ClientID: id,
					Resources: r.PostForm["resource"], CodeVerifier: r.PostForm.Has("code_verifier"),
				})
				s.mu.Unlock()
				r = r.WithContext(context.WithValue(r.Context(), resourceKey{}, r.PostForm["resource"]))
			}
		}
		mux.ServeHTTP(w, r)
	})
	ts.Start()
	t.Cleanup(ts.Close)
	return s
}

// loginPath is where the provider sends the user agent to sign in.
const loginPath = "/login"

// resourceKey carries a request's RFC 8707 resource parameters to the
// storage, which decides the audience of the token.
type resourceKey struct{}

func authorizationOf(r *http.Request) Authorization {
	a := Authorization{
		ClientID:    r.Form.Get("client_id"),
		RedirectURI: r.Form.Get("redirect_uri"),
		Scopes:      strings.Fields(r.Form.Get("scope")),
		Resources:   r.Form["resource"],
		State:       r.Form.Get("state"),
	}
	if r.Form.Get("code_challenge") != "" {
		a.CodeChallengeMethod = r.Form.Get("code_challenge_method")
		if a.CodeChallengeMethod == "" {
			a.CodeChallengeMethod = "plain"
		}
	}
	return a
}

// Issuer is the server's issuer URL.
func (s *Server) Issuer() string { return s.issuer }

// Token obtains a JWT access token for scopes by the client credentials
// grant.
func (s *Server) Token(t testing.TB, scopes ...string) string {
	t.Helper()
	return s.tokenFor(t, ClientID, scopes...)
}

// OpaqueToken obtains an opaque access token for scopes.
func (s *Server) OpaqueToken(t testing.TB, scopes ...string) string {
	t.Helper()
	return s.tokenFor(t, OpaqueClientID, scopes...)
}

// Revoke revokes a token at the revocation endpoint (RFC 7009), as the
// resource server's client.
func (s *Server) Revoke(t testing.TB, tok string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.issuer+"/revoke",
		strings.NewReader(url.Values{"token": {tok}, "token_type_hint": {"access_token"}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(RSClientID, RSClientSecret)
	resp, err := s.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("revocation: status %d", resp.StatusCode)
	}
}

// Rotate adds a new signing key, which signs from now on; the older
// keys stay published.
func (s *Server) Rotate(t testing.TB) {
	t.Helper()
	pk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.st.keys = append(s.st.keys, &asKey{id: "k" + strconv.Itoa(len(s.st.keys)), key: pk})
}

// SigningKey is the key that signs now, and its key ID.
func (s *Server) SigningKey() (kid string, key *rsa.PrivateKey) {
	k := s.st.current()
	return k.id, k.key
}

// Introspections counts the introspection requests so far.
func (s *Server) Introspections() int {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	return s.st.introspections
}

// TokenRequests lists the token requests so far, each as its grant type
// and client ID separated by a space.
func (s *Server) TokenRequests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.grants))
	for i, g := range s.grants {
		out[i] = g.Type + " " + g.ClientID
	}
	return out
}

// Grants lists the token requests so far.
func (s *Server) Grants() []Grant {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.grants)
}

// Exchanges lists the token exchange requests so far whose subject
// token was valid, refused or not.
func (s *Server) Exchanges() []Exchange {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	return slices.Clone(s.st.exchanges)
}

// DenyExchanges has every later token exchange for subject refused, with
// invalid_grant.
func (s *Server) DenyExchanges(subject string) {
	s.st.mu.Lock()
	defer s.st.mu.Unlock()
	s.st.denied[subject] = true
}

// Authorizations lists the authorization requests so far.
func (s *Server) Authorizations() []Authorization {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.authorizations)
}

// RegisterClient registers a public client (it has no secret, so PKCE
// is all that binds the code to it) allowed the authorization code and
// refresh token grants, redirecting to redirectURI, and returns its
// client ID. A loopback redirect URI matches on any port (RFC 8252).
func (s *Server) RegisterClient(redirectURI string) (clientID string) {
	return s.st.register(func(id string) *storage.Client { return storage.NativeClient(id, redirectURI) }, "")
}

// RegisterConfidentialClient registers a client authenticating with its
// secret (client_secret_basic or client_secret_post) allowed the
// authorization code and refresh token grants, redirecting to
// redirectURI, and returns its client ID and secret.
func (s *Server) RegisterConfidentialClient(redirectURI string) (clientID, secret string) {
	secret = rand.Text()
	return s.st.register(func(id string) *storage.Client { return storage.WebClient(id, secret, redirectURI) }, secret), secret
}

func (s *Server) tokenFor(t testing.TB, clientID string, scopes ...string) string {
	t.Helper()
	form := url.Values{
		"grant_type":    {"client_credentials"},
		"client_id":     {clientID},
		"client_secret": {ClientSecret},
		"scope":         {strings.Join(scopes, " ")},
	}
	resp, err := s.ts.Client().PostForm(s.issuer+"/oauth/token", form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		AccessToken string `json:"access_token"`
		Error       string `json:"error"`
		Desc        string `json:"error_description"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || body.AccessToken == "" {
		t.Fatalf("token request: status %d: %s %s", resp.StatusCode, body.Error, body.Desc)
	}
	return body.AccessToken
}

// asStorage adapts the example storage: JWT access tokens for the
// service user and for the clients the test registers, bound to the
// audience, carrying the granted scopes, signed by a rotatable key;
// opaque ones, whose claims it keeps for introspection; and refresh
// tokens of its own, which remember the audience they were granted for.
type asStorage struct {
	*storage.Storage
	issuer   string
	audience string
	lifetime time.Duration // of access tokens

	mu             sync.Mutex
	keys           []*asKey // the newest signs; all are published
	opaque         map[string]*opaqueToken
	introspections int
	clients        map[string]*codeClient   // registered by the test
	resources      map[string]string        // auth request ID → its audience
	refresh        map[string]*refreshGrant // refresh token → what it grants
	exchanges      []Exchange
	denied         map[string]bool // subjects whose tokens are not exchanged
}

type opaqueToken struct {
	subject  string
	audience []string
	scopes   []string
	issued   time.Time
	expiry   time.Time
}

type asKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k *asKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k *asKey) Key() any                                    { return k.key }
func (k *asKey) ID() string                                  { return k.id }

type asPublicKey struct{ *asKey }

func (k asPublicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k asPublicKey) Use() string                        { return "sig" }
func (k asPublicKey) Key() any                           { return &k.key.PublicKey }

func (s *asStorage) current() *asKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[len(s.keys)-1]
}

func (s *asStorage) SigningKey(context.Context) (op.SigningKey, error) { return s.current(), nil }

func (s *asStorage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *asStorage) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]op.Key, len(s.keys))
	for i, k := range s.keys {
		out[i] = asPublicKey{k}
	}
	return out, nil
}

type jwtClient struct{ op.Client }

func (jwtClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }

func (s *asStorage) ClientCredentials(ctx context.Context, id, secret string) (op.Client, error) {
	if id == OpaqueClientID {
		return s.Storage.ClientCredentials(ctx, ClientID, secret) // the example's client issues opaque tokens
	}
	c, err := s.Storage.ClientCredentials(ctx, id, secret)
	if err != nil {
		return nil, err
	}
	return jwtClient{c}, nil
}

func (s *asStorage) CreateAccessToken(ctx context.Context, req op.TokenRequest) (string, time.Time, error) {
	inner := req
	if a, ok := req.(*authRequest); ok {
		inner = a.AuthRequest // the example storage knows its own type only
	}
	id, _, err := s.Storage.CreateAccessToken(ctx, inner)
	if err != nil {
		return "", time.Time{}, err
	}
	now := time.Now()
	exp := now.Add(s.lifetime)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opaque[id] = &opaqueToken{
		subject: req.GetSubject(), audience: req.GetAudience(), scopes: req.GetScopes(),
		issued: now, expiry: exp,
	}
	return id, exp, nil
}

// SetIntrospectionFromToken answers for a token that exists and has not
// expired, and only to the resource server's client.
func (s *asStorage) SetIntrospectionFromToken(_ context.Context, r *oidc.IntrospectionResponse, tokenID, _, clientID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.introspections++
	tok, ok := s.opaque[tokenID]
	if !ok || clientID != RSClientID || !time.Now().Before(tok.expiry) {
		return errors.New("token is not active")
	}
	r.Issuer, r.Subject, r.ClientID = s.issuer, tok.subject, tok.subject
	r.Audience, r.Scope = tok.audience, tok.scopes
	r.IssuedAt, r.NotBefore, r.Expiration = oidc.FromTime(tok.issued), oidc.FromTime(tok.issued), oidc.FromTime(tok.expiry)
	r.TokenType = oidc.BearerToken
	return nil
}

func (s *asStorage) RevokeToken(_ context.Context, tokenID, _, clientID string) *oidc.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g, ok := s.refresh[tokenID]; ok {
		if g.clientID != clientID {
			return oidc.ErrInvalidClient().WithDescription("the token was not issued to this client")
		}
		delete(s.refresh, tokenID)
	}
	delete(s.opaque, tokenID)
	return nil
}

func (s *asStorage) ClientCredentialsTokenRequest(ctx context.Context, id string, scopes []string) (op.TokenRequest, error) {
	aud, err := s.audienceFor(ctx)
	if err != nil {
		return nil, err
	}
	return &oidc.JWTTokenRequest{Subject: id, Audience: []string{aud}, Scopes: scopes}, nil
}

// audienceFor is the audience of a token for the request in ctx: the
// resource it names (RFC 8707), or the server's audience.
func (s *asStorage) audienceFor(ctx context.Context) (string, error) {
	rs, _ := ctx.Value(resourceKey{}).([]string)
	switch {
	case len(rs) > 1:
		return "", oidc.ErrInvalidTarget().WithDescription("tokens are issued for one resource at a time")
	case len(rs) == 1:
		if u, err := url.Parse(rs[0]); err != nil || !u.IsAbs() || strings.Contains(rs[0], "#") {
			return "", oidc.ErrInvalidTarget().WithDescription("the resource must be an absolute URI without a fragment")
		}
		return rs[0], nil
	case s.audience == "":
		return "", oidc.ErrInvalidTarget().WithDescription("the request must name its resource")
	}
	return s.audience, nil
}

// codeClient is a client the test registered, for the authorization
// code grant: its login is the server's own, its access tokens are
// JWTs, and it may ask for any scope.
type codeClient struct {
	op.Client
	secret string // "" for a public client
}

func (codeClient) LoginURL(id string) string {
	return loginPath + "?authRequestID=" + url.QueryEscape(id)
}
func (codeClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }
func (codeClient) IsScopeAllowed(string) bool          { return true }

func (s *asStorage) register(newClient func(id string) *storage.Client, secret string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := "app" + strconv.Itoa(len(s.clients)+1)
	s.clients[id] = &codeClient{Client: storage.RedirectGlobsClient(newClient(id)), secret: secret}
	return id
}

func (s *asStorage) codeClient(id string) (*codeClient, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.clients[id]
	return c, ok
}

func (s *asStorage) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	if c, ok := s.codeClient(id); ok {
		return c, nil
	}
	return s.Storage.GetClientByClientID(ctx, id)
}

func (s *asStorage) AuthorizeClientIDSecret(ctx context.Context, id, secret string) error {
	c, ok := s.codeClient(id)
	if !ok {
		return s.Storage.AuthorizeClientIDSecret(ctx, id, secret)
	}
	if c.secret == "" || subtle.ConstantTimeCompare([]byte(c.secret), []byte(secret)) != 1 {
		return errors.New("wrong client secret")
	}
	return nil
}

// authRequest is an authorization request of the example storage, for
// the audience it was granted for.
type authRequest struct {
	*storage.AuthRequest
	audience string
}

func (a *authRequest) GetAudience() []string { return []string{a.audience} }

// CreateAuthRequest requires PKCE with S256, and settles the audience of
// the tokens the request may lead to.
func (s *asStorage) CreateAuthRequest(ctx context.Context, req *oidc.AuthRequest, userID string) (op.AuthRequest, error) {
	if req.CodeChallenge == "" || req.CodeChallengeMethod != oidc.CodeChallengeMethodS256 {
		return nil, oidc.ErrInvalidRequest().WithDescription("a PKCE code_challenge with the S256 method is required")
	}
	aud, err := s.audienceFor(ctx)
	if err != nil {
		return nil, err
	}
	r, err := s.Storage.CreateAuthRequest(ctx, req, userID)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.resources[r.GetID()] = aud
	s.mu.Unlock()
	return s.withAudience(r, nil)
}

func (s *asStorage) AuthRequestByID(ctx context.Context, id string) (op.AuthRequest, error) {
	return s.withAudience(s.Storage.AuthRequestByID(ctx, id))
}

func (s *asStorage) AuthRequestByCode(ctx context.Context, code string) (op.AuthRequest, error) {
	return s.withAudience(s.Storage.AuthRequestByCode(ctx, code))
}

func (s *asStorage) DeleteAuthRequest(ctx context.Context, id string) error {
	s.mu.Lock()
	delete(s.resources, id)
	s.mu.Unlock()
	return s.Storage.DeleteAuthRequest(ctx, id)
}

func (s *asStorage) withAudience(r op.AuthRequest, err error) (op.AuthRequest, error) {
	if err != nil {
		return nil, err
	}
	ar, ok := r.(*storage.AuthRequest)
	if !ok {
		return nil, fmt.Errorf("auth request of type %T", r)
	}
	s.mu.Lock()
	aud, ok := s.resources[ar.ID]
	s.mu.Unlock()
	if !ok {
		return nil, errors.New("auth request not found")
	}
	return &authRequest{AuthRequest: ar, audience: aud}, nil
}

// refreshGrant is what a refresh token grants; it does not change once
// made.
type refreshGrant struct {
	clientID string
	subject  string
	audience []string
	scopes   []string
	authTime time.Time
	amr      []string
	expiry   time.Time
}

// refreshRequest is a refresh token grant in progress, for scopes.
type refreshRequest struct {
	grant  *refreshGrant
	scopes []string
}

func (r *refreshRequest) GetAMR() []string             { return r.grant.amr }
func (r *refreshRequest) GetAudience() []string        { return r.grant.audience }
func (r *refreshRequest) GetAuthTime() time.Time       { return r.grant.authTime }
func (r *refreshRequest) GetClientID() string          { return r.grant.clientID }
func (r *refreshRequest) GetScopes() []string          { return r.scopes }
func (r *refreshRequest) GetSubject() string           { return r.grant.subject }
func (r *refreshRequest) SetCurrentScopes(sc []string) { r.scopes = sc }

// CreateAccessAndRefreshTokens issues an access token and a refresh
// token for an authorization code asked with offline_access, and
// rotates the refresh token on a refresh token grant.
func (s *asStorage) CreateAccessAndRefreshTokens(ctx context.Context, req op.TokenRequest, current string) (string, string, time.Time, error) {
	switch r := req.(type) {
	case *authRequest:
		return s.issue(&refreshGrant{
			clientID: r.ApplicationID, subject: r.UserID, audience: r.GetAudience(),
			scopes: r.Scopes, authTime: r.GetAuthTime(), amr: r.GetAMR(),
		}, r.Scopes)
	case *refreshRequest:
		s.mu.Lock()
		g, ok := s.refresh[current]
		delete(s.refresh, current)
		s.mu.Unlock()
		if !ok || g != r.grant {
			return "", "", time.Time{}, op.ErrInvalidRefreshToken
		}
		return s.issue(g, r.scopes)
	}
	return s.Storage.CreateAccessAndRefreshTokens(ctx, req, current)
}

func (s *asStorage) issue(g *refreshGrant, scopes []string) (access, refresh string, exp time.Time, _ error) {
	now := time.Now()
	access, refresh, exp = rand.Text(), rand.Text(), now.Add(s.lifetime)
	next := *g
	next.expiry = now.Add(refreshLifetime)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opaque[access] = &opaqueToken{subject: g.subject, audience: g.audience, scopes: scopes, issued: now, expiry: exp}
	s.refresh[refresh] = &next
	return access, refresh, exp, nil
}

func (s *asStorage) TokenRequestByRefreshToken(ctx context.Context, token string) (op.RefreshTokenRequest, error) {
	s.mu.Lock()
	g, ok := s.refresh[token]
	s.mu.Unlock()
	if !ok {
		return s.Storage.TokenRequestByRefreshToken(ctx, token)
	}
	if !time.Now().Before(g.expiry) {
		return nil, op.ErrInvalidRefreshToken
	}
	return &refreshRequest{grant: g, scopes: slices.Clone(g.scopes)}, nil
}

func (s *asStorage) GetRefreshTokenInfo(ctx context.Context, clientID, token string) (userID, tokenID string, err error) {
	s.mu.Lock()
	g, ok := s.refresh[token]
	s.mu.Unlock()
	if !ok {
		return s.Storage.GetRefreshTokenInfo(ctx, clientID, token)
	}
	return g.subject, token, nil
}

func (s *asStorage) GetPrivateClaimsFromScopes(_ context.Context, _, _ string, scopes []string) (map[string]any, error) {
	if len(scopes) == 0 {
		return nil, nil
	}
	return map[string]any{"scope": strings.Join(scopes, " ")}, nil
}

// ValidateTokenExchangeRequest records the exchange and allows it when
// it trades an access token for an access token for a named audience,
// and the subject is not denied. The example storage's rules (an admin
// user, impersonation scopes) do not apply.
func (s *asStorage) ValidateTokenExchangeRequest(_ context.Context, r op.TokenExchangeRequest) error {
	s.mu.Lock()
	s.exchanges = append(s.exchanges, Exchange{
		ClientID: r.GetClientID(), Subject: r.GetExchangeSubject(),
		SubjectTokenType: string(r.GetExchangeSubjectTokenType()), RequestedTokenType: string(r.GetRequestedTokenType()),
		Audience: slices.Clone(r.GetAudience()), Resources: slices.Clone(r.GetResourses()), Scopes: slices.Clone(r.GetScopes()),
	})
	denied := s.denied[r.GetExchangeSubject()]
	s.mu.Unlock()
	switch {
	case r.GetExchangeSubjectTokenType() != oidc.AccessTokenType:
		return oidc.ErrInvalidRequest().WithDescription("only access tokens are exchanged here")
	case r.GetRequestedTokenType() == "":
		r.SetRequestedTokenType(oidc.AccessTokenType)
	case r.GetRequestedTokenType() != oidc.AccessTokenType:
		return oidc.ErrInvalidRequest().WithDescription("only access tokens are issued by exchange here")
	}
	if len(r.GetAudience()) == 0 {
		return oidc.ErrInvalidTarget().WithDescription("an exchange must name the audience of the token")
	}
	if denied {
		return oidc.ErrInvalidGrant().WithDescription("tokens of this subject are not exchanged")
	}
	r.SetCurrentScopes(r.GetScopes())
	return nil
}

// CreateTokenExchangeRequest keeps nothing: the exchange was recorded
// when it was validated.
func (s *asStorage) CreateTokenExchangeRequest(context.Context, op.TokenExchangeRequest) error {
	return nil
}

// GetPrivateClaimsFromTokenExchangeRequest gives an exchanged token its
// scopes; its client_id names the client that exchanged it.
func (s *asStorage) GetPrivateClaimsFromTokenExchangeRequest(_ context.Context, r op.TokenExchangeRequest) (map[string]any, error) {
	if sc := r.GetScopes(); len(sc) > 0 {
		return map[string]any{"scope": strings.Join(sc, " ")}, nil
	}
	return nil, nil
}

// SetUserinfoFromTokenExchangeRequest adds nothing: ID tokens are not
// issued by exchange here.
func (s *asStorage) SetUserinfoFromTokenExchangeRequest(context.Context, *oidc.UserInfo, op.TokenExchangeRequest) error {
	return nil
}
