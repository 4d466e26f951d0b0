package interop_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"

	"tidings/auth"
	"tidings/streamhttp"
)

// The OAuth client the authorization server knows: a service user of the
// example storage, allowed the client credentials grant.
const (
	oauthClientID     = "sid1"
	oauthClientSecret = "verysecret"
	oauthScope        = "mcp:tools"
)

// TestTSClientOAuthWithGoServer has a client built on the TypeScript SDK
// authorize itself with the SDK's own OAuth support against a tidings
// server that requires access tokens: its first request is refused with a
// challenge, it finds the authorization server through the Protected
// Resource Metadata, gets a token for the scope the challenge names by the
// client credentials grant from a real authorization server, and lists
// tools with it.
func TestTSClientOAuthWithGoServer(t *testing.T) {
	node, dir := nodeSetup(t)

	hs := httptest.NewUnstartedServer(nil)
	resource := "http://" + hs.Listener.Addr().String() + "/mcp"
	as := startOAuthAS(t, resource)

	g, err := auth.New(as.issuer, resource, auth.WithScopes(oauthScope))
	if err != nil {
		t.Fatal(err)
	}
	srv := newGoServer(t)
	var callers callerLog
	mux := http.NewServeMux()
	g.Mount(mux, callers.wrap(streamhttp.New(srv, streamhttp.WithPrincipal(auth.Principal))))
	var arrivals requestLog
	hs.Config.Handler = arrivals.wrap(mux)
	hs.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		hs.Close()
	})

	steps, order := runSteps(t, node, dir, "ts-oauth-client.mjs", resource, func(string) {},
		oauthClientID, oauthClientSecret, as.issuer)
	if want := []string{"connected", "tools", "token"}; !slices.Equal(order, want) {
		t.Fatalf("steps %v, want %v", order, want)
	}
	get := func(step string, v any) {
		t.Helper()
		if err := json.Unmarshal(steps[step], v); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	var connected struct {
		ServerInfo      struct{ Name string } `json:"serverInfo"`
		ProtocolVersion string                `json:"protocolVersion"`
	}
	get("connected", &connected)
	if connected.ServerInfo.Name != "tidings-interop" || connected.ProtocolVersion != "2026-07-28" {
		t.Errorf("connected to %q at %q", connected.ServerInfo.Name, connected.ProtocolVersion)
	}
	var tools struct{ Names []string }
	get("tools", &tools)
	if want := []string{"confirm", "greet", "regional", "t_a", "t_b"}; !slices.Equal(tools.Names, want) {
		t.Errorf("tools %v, want %v", tools.Names, want)
	}
	var token struct {
		Present bool
		Type    string
	}
	get("token", &token)
	if !token.Present || !strings.EqualFold(token.Type, "bearer") {
		t.Errorf("the SDK holds token %+v, want a bearer token", token)
	}

	// The SDK began without a token and, refused, read the Protected
	// Resource Metadata before it came back with one.
	got := arrivals.values()
	prm := slices.Index(got, "GET /.well-known/oauth-protected-resource/mcp")
	withToken := slices.IndexFunc(got, func(s string) bool { return strings.HasSuffix(s, " /mcp bearer") })
	if len(got) == 0 || !strings.HasSuffix(got[0], " /mcp") || prm < 0 || withToken < prm {
		t.Errorf("requests %q: want one to /mcp without a token, the metadata, then /mcp with one", got)
	}

	// Every request that reached the server carried a valid token of the
	// client, with the scope the challenge asked for.
	seen := callers.values()
	if len(seen) == 0 {
		t.Fatal("no request reached the server")
	}
	for _, c := range seen {
		if c.principal != oauthClientID || !slices.Contains(c.scopes, oauthScope) {
			t.Errorf("the server saw caller %q with scopes %v, want %q with %q", c.principal, c.scopes, oauthClientID, oauthScope)
		}
	}
	// The SDK found the authorization server by discovery and used its
	// token endpoint, authenticating as the client.
	if got := as.tokenRequests(); len(got) != 1 || got[0] != "client_credentials "+oauthClientID {
		t.Errorf("token requests %q, want one client_credentials grant by %s", got, oauthClientID)
	}
}

// requestLog records the method and path of each request, and "bearer"
// after those that carry an access token.
type requestLog struct {
	mu   sync.Mutex
	seen []string
}

func (l *requestLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := r.Method + " " + r.URL.Path
		if scheme, _, _ := strings.Cut(r.Header.Get("Authorization"), " "); strings.EqualFold(scheme, "bearer") {
			s += " bearer"
		}
		l.mu.Lock()
		l.seen = append(l.seen, s)
		l.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (l *requestLog) values() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen)
}

// callerLog records who each request that passed the guard came from.
type callerLog struct {
	mu   sync.Mutex
	seen []caller
}

type caller struct {
	principal string
	scopes    []string
}

func (c *callerLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var who caller
		if info, ok := auth.FromContext(r.Context()); ok {
			who = caller{info.Principal(), info.Scopes}
		}
		c.mu.Lock()
		c.seen = append(c.seen, who)
		c.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

func (c *callerLog) values() []caller {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.seen)
}

// oauthAS is a real OpenID Provider (zitadel/oidc's op package over its
// example in-memory storage) on a loopback port. Its service user gets
// JWT access tokens for the resource by the client credentials grant; it
// notes the grant and client of each token request.
type oauthAS struct {
	issuer string
	mu     sync.Mutex
	tokens []string
}

func startOAuthAS(t *testing.T, resource string) *oauthAS {
	t.Helper()
	ts := httptest.NewUnstartedServer(nil)
	as := &oauthAS{issuer: "http://" + ts.Listener.Addr().String()}
	pk, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	st := &asStorage{
		Storage:  storage.NewStorage(storage.NewUserStore(as.issuer)),
		audience: resource,
		key:      &asKey{id: "k0", key: pk},
	}
	var cookieKey [32]byte
	if _, err := rand.Read(cookieKey[:]); err != nil {
		t.Fatal(err)
	}
	provider, err := op.NewProvider(&op.Config{CryptoKey: cookieKey, AuthMethodPost: true}, st,
		op.StaticIssuer(as.issuer), op.WithAllowInsecure())
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
				as.mu.Lock()
				as.tokens = append(as.tokens, r.PostForm.Get("grant_type")+" "+id)
				as.mu.Unlock()
			}
		}
		provider.ServeHTTP(w, r)
	})
	ts.Start()
	t.Cleanup(ts.Close)
	return as
}

func (a *oauthAS) tokenRequests() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.tokens)
}

// asStorage adapts the example storage: JWT access tokens for the
// service user, bound to the resource, carrying the granted scopes.
type asStorage struct {
	*storage.Storage
	audience string
	key      *asKey
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

func (s *asStorage) SigningKey(context.Context) (op.SigningKey, error) { return s.key, nil }

func (s *asStorage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *asStorage) KeySet(context.Context) ([]op.Key, error) {
	return []op.Key{asPublicKey{s.key}}, nil
}

type jwtClient struct{ op.Client }

func (jwtClient) AccessTokenType() op.AccessTokenType { return op.AccessTokenTypeJWT }

func (s *asStorage) ClientCredentials(ctx context.Context, id, secret string) (op.Client, error) {
	c, err := s.Storage.ClientCredentials(ctx, id, secret)
	if err != nil {
		return nil, err
	}
	return jwtClient{c}, nil
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
