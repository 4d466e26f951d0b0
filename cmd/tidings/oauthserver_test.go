package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"tidings/auth"
	"tidings/internal/testrig/testas"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// oauthScope is what the protected server asks of every request.
const oauthScope = "mcp:tools"

// oauthServer is a tidings MCP server behind auth.Guard, taking the
// access tokens of a real authorization server (testas) for the scope
// oauthScope. Its tool "whoami" answers with the caller's principal.
type oauthServer struct {
	as  *testas.Server
	url string

	mu   sync.Mutex
	auth []string // the Authorization header of every request to /mcp
}

// startOAuthServer runs the server and its authorization server until
// the test ends.
func startOAuthServer(t *testing.T, opts ...testas.Option) *oauthServer {
	t.Helper()
	hs := httptest.NewUnstartedServer(nil)
	s := &oauthServer{url: "http://" + hs.Listener.Addr().String() + "/mcp"}
	s.as = testas.Start(t, s.url, opts...)
	g, err := auth.New(s.as.Issuer(), s.url, auth.WithScopes(oauthScope))
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(mcp.Implementation{Name: "protected", Version: "1"})
	if err := srv.AddTool(mcp.Tool{Name: "whoami"}, func(_ context.Context, r *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("you are " + r.Principal)}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	g.Mount(mux, streamhttp.New(srv, streamhttp.WithPrincipal(auth.Principal)))
	hs.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/mcp" {
			s.mu.Lock()
			s.auth = append(s.auth, r.Header.Get("Authorization"))
			s.mu.Unlock()
		}
		mux.ServeHTTP(w, r)
	})
	hs.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		hs.Close()
	})
	return s
}

// authorizations returns the Authorization header of every request the
// MCP endpoint received.
func (s *oauthServer) authorizations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.auth...)
}

// freeLoopback returns a loopback address with a port nothing listens
// on right now, for the browser's redirect.
func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
