package auth_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// testAS is a real OpenID Provider (zitadel/oidc's op package over its
// example in-memory storage) on a loopback port. Its service user
// "sid1" gets JWT access tokens by the client credentials grant, with
// the audience and scopes the test asks for; its signing key can be
// rotated. The same service user asking as "sid1-opaque" gets opaque
// tokens instead, which the client "rs" (the resource server) may
// introspect and revoke.
type testAS struct {
	*httptest.Server
	issuer string
	st     *asStorage
}

const (
	asClientID     = "sid1"
	asClientSecret = "verysecret"

	asOpaqueClientID = "sid1-opaque"
	asRSClientID     = "rs"
	asRSClientSecret = "rs-secret"
)

func startAS(t testing.TB, audience string) *testAS {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	issuer := "http://" + ts.Listener.Addr().String()
	clients := map[string]*storage.Client{asRSClientID: storage.WebClient(asRSClientID, asRSClientSecret, issuer+"/cb")}
	st := &asStorage{
		Storage:  storage.NewStorageWithClients(storage.NewUserStore(issuer), clients),
		issuer:   issuer,
		audience: audience,
		opaque:   map[string]*opaqueToken{},
	}
	st.rotate(t)
	var key [32]byte
	if _, err := rand.Read(key[:]); err != nil {
		t.Fatal(err)
	}
	provider, err := op.NewProvider(&op.Config{CryptoKey: key, AuthMethodPost: true}, st,
		op.StaticIssuer(issuer), op.WithAllowInsecure())
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = provider
	ts.Start()
	t.Cleanup(ts.Close)
	return &testAS{Server: ts, issuer: issuer, st: st}
}

// token obtains a JWT access token by the client credentials grant.
func (a *testAS) token(t testing.TB, scopes ...string) string {
	t.Helper()
	return a.tokenFor(t, asClientID, scopes...)
}

// opaqueToken obtains an opaque access token.
func (a *testAS) opaqueToken(t testing.TB, scopes ...string) string {
	t.Helper()
	return a.tokenFor(t, asOpaqueClientID, scopes...)
}

// revoke revokes a token at the revocation endpoint (RFC 7009), as the
// resource server's client.
func (a *testAS) revoke(t testing.TB, tok string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, a.issuer+"/revoke",
		strings.NewReader(url.Values{"token": {tok}, "token_type_hint": {"access_token"}}.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(asRSClientID, asRSClientSecret)
	resp, err := a.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("revocation: status %d", resp.StatusCode)
	}
}

func (a *testAS) tokenFor(t testing.TB, clientID string, scopes ...string) string {
	t.Helper()
	form := url.Values{
		"grant_type":    {"client_credentials"},
		"client_id":     {clientID},
		"client_secret": {asClientSecret},
		"scope":         {strings.Join(scopes, " ")},
	}
	resp, err := a.Client().PostForm(a.issuer+"/oauth/token", form)
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
// service user, bound to the resource under test, carrying the granted
// scopes, signed by a rotatable key; and opaque ones, whose claims it
// keeps for introspection.
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

// rotate adds a new signing key, which signs from now on.
func (s *asStorage) rotate(t testing.TB) *asKey {
	t.Helper()
	pk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := &asKey{id: "k" + string(rune('0'+len(s.keys))), key: pk}
	s.keys = append(s.keys, k)
	return k
}

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
	if id == asOpaqueClientID {
		return s.Storage.ClientCredentials(ctx, asClientID, secret) // the example's client issues opaque tokens
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
	if !ok || clientID != asRSClientID || !time.Now().Before(tok.expiry) {
		return errors.New("token is not active")
	}
	r.Issuer, r.Subject, r.ClientID = s.issuer, tok.subject, tok.subject
	r.Audience, r.Scope = tok.audience, tok.scopes
	r.IssuedAt, r.NotBefore, r.Expiration = oidc.FromTime(tok.issued), oidc.FromTime(tok.issued), oidc.FromTime(tok.expiry)
	r.TokenType = oidc.BearerToken
	return nil
}

func (s *asStorage) introspected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.introspections
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
