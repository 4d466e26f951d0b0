// Package testas is a real OAuth authorization server on loopback for
// tests: zitadel/oidc's OpenID Provider over its example in-memory
// storage, issuing access tokens by the client credentials grant.
//
// Its service user [ClientID] gets JWT access tokens for the audience
// the test names, carrying the scopes it asks for, signed by a key that
// can be rotated. The same service user asking as [OpaqueClientID] gets
// opaque tokens instead, which the resource server's client
// [RSClientID] may introspect (RFC 7662) and revoke (RFC 7009).
package testas

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
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

// Server is a running authorization server.
type Server struct {
	ts     *httptest.Server
	issuer string
	st     *asStorage

	mu     sync.Mutex
	tokens []string
}

// Start runs an authorization server whose JWT access tokens are for
// audience, and closes it when the test ends.
func Start(t testing.TB, audience string) *Server {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	issuer := "http://" + ts.Listener.Addr().String()
	clients := map[string]*storage.Client{RSClientID: storage.WebClient(RSClientID, RSClientSecret, issuer+"/cb")}
	st := &asStorage{
		Storage:  storage.NewStorageWithClients(storage.NewUserStore(issuer), clients),
		issuer:   issuer,
		audience: audience,
		opaque:   map[string]*opaqueToken{},
	}
	s := &Server{ts: ts, issuer: issuer, st: st}
	s.Rotate(t)
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		t.Fatal(err)
	}
	provider, err := op.NewProvider(&op.Config{CryptoKey: key, AuthMethodPost: true}, st,
		op.StaticIssuer(issuer), op.WithAllowInsecure())
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/oauth/token" {
			id, _, _ := r.BasicAuth()
			if err := r.ParseForm(); err == nil {
				if id == "" {
					id = r.PostForm.Get("client_id")
				}
				s.mu.Lock()
				s.tokens = append(s.tokens, r.PostForm.Get("grant_type")+" "+id)
				s.mu.Unlock()
			}
		}
		provider.ServeHTTP(w, r)
	})
	ts.Start()
	t.Cleanup(ts.Close)
	return s
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
	return slices.Clone(s.tokens)
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
// service user, bound to the audience, carrying the granted scopes,
// signed by a rotatable key; and opaque ones, whose claims it keeps for
// introspection.
type asStorage struct {
	*storage.Storage
	issuer   string
	audience string

	mu             sync.Mutex
	keys           []*asKey // the newest signs; all are published
	opaque         map[string]*opaqueToken
	introspections int
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
	id, exp, err := s.Storage.CreateAccessToken(ctx, req)
	if err != nil {
		return "", time.Time{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.opaque[id] = &opaqueToken{
		subject: req.GetSubject(), audience: req.GetAudience(), scopes: req.GetScopes(),
		issued: time.Now(), expiry: exp,
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

func (s *asStorage) RevokeToken(_ context.Context, tokenID, _, _ string) *oidc.Error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.opaque, tokenID)
	return nil
}

func (s *asStorage) ClientCredentialsTokenRequest(_ context.Context, id string, scopes []string) (op.TokenRequest, error) {
	return &oidc.JWTTokenRequest{Subject: id, Audience: []string{s.audience}, Scopes: scopes}, nil
}

func (s *asStorage) GetPrivateClaimsFromScopes(_ context.Context, _, _ string, scopes []string) (map[string]any, error) {
	if len(scopes) == 0 {
		return nil, nil
	}
	return map[string]any{"scope": strings.Join(scopes, " ")}, nil
}
