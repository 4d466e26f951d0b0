package interop_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tidings/auth"
	"tidings/internal/testas"
	"tidings/streamhttp"
)

// oauthScope is the scope the server requires of access tokens.
const oauthScope = "mcp:tools"

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
	as := testas.Start(t, resource)

	g, err := auth.New(as.Issuer(), resource, auth.WithScopes(oauthScope))
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
		testas.ClientID, testas.ClientSecret, as.Issuer())
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
		if c.principal != testas.ClientID || !slices.Contains(c.scopes, oauthScope) {
			t.Errorf("the server saw caller %q with scopes %v, want %q with %q", c.principal, c.scopes, testas.ClientID, oauthScope)
		}
	}
	// The SDK found the authorization server by discovery and used its
	// token endpoint, authenticating as the client.
	if got := as.TokenRequests(); len(got) != 1 || got[0] != "client_credentials "+testas.ClientID {
		t.Errorf("token requests %q, want one client_credentials grant by %s", got, testas.ClientID)
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
