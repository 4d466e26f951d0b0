package auth_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"tidings/auth"
	"tidings/internal/testrig/testas"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// benchServer returns testkit's 50-tool server.
func benchServer(b *testing.B, opts ...server.Option) *server.Server {
	b.Helper()
	return testkit.ToolsServer(b, opts...)
}

// runToolsList POSTs the same tools/list b.N times and reads every body.
func runToolsList(b *testing.B, url, authz string) {
	b.Helper()
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Accept", "application/json, text/event-stream")
	hdr.Set(mcp.HeaderProtocolVersion, mcp.Version)
	hdr.Set(mcp.HeaderMethod, mcp.MethodToolsList)
	if authz != "" {
		hdr.Set("Authorization", authz)
	}
	testkit.PostLoop(b, url, []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":`+meta+`}}`), hdr)
}

// BenchmarkToolsListHTTPNoAuth is the baseline: no resource server.
func BenchmarkToolsListHTTPNoAuth(b *testing.B) {
	ts := httptest.NewServer(streamhttp.New(benchServer(b)))
	defer ts.Close()
	runToolsList(b, ts.URL+"/mcp", "")
}

// BenchmarkToolsListHTTPAuth is the same tools/list behind Require with
// an RS256 JWT from the real issuer; its keys are cached after the first
// request, so this measures validation, not fetching.
func BenchmarkToolsListHTTPAuth(b *testing.B) {
	ts := httptest.NewUnstartedServer(nil)
	resource := "http://" + ts.Listener.Addr().String() + "/mcp"
	as := testas.Start(b, resource)
	g, err := auth.New(as.Issuer(), resource)
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	g.Mount(mux, streamhttp.New(benchServer(b), streamhttp.WithPrincipal(auth.Principal)))
	ts.Config.Handler = mux
	ts.Start()
	defer ts.Close()
	runToolsList(b, resource, "Bearer "+as.Token(b))
}
