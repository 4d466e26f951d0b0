package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"tidings/mcp"
	"tidings/server"
)

// TestServeAuthMountsTheResourceServer checks the --auth-* wiring: /mcp
// challenges a request without a token, and the metadata the challenge
// names is served, with the audience defaulting to the server's own URL.
func TestServeAuthMountsTheResourceServer(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	srv := server.New(mcp.Implementation{Name: "t", Version: "1"})
	mux := http.NewServeMux()
	cfg := serveConfig{authIssuer: "http://127.0.0.1:1", authScopes: []string{"mcp"}}
	ts := httptest.NewUnstartedServer(mux)
	self := "http://" + ts.Listener.Addr().String() + "/mcp"
	if err := mountMCP(mux, cfg, log, srv, &observability{}, self, nil); err != nil {
		t.Fatal(err)
	}
	ts.Start()
	defer ts.Close()

	resp, err := ts.Client().Post(self, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	ch := resp.Header.Get("WWW-Authenticate")
	want := `resource_metadata="` + ts.URL + `/.well-known/oauth-protected-resource/mcp"`
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(ch, want) || !strings.Contains(ch, `scope="mcp"`) {
		t.Fatalf("status %d, WWW-Authenticate %q", resp.StatusCode, ch)
	}
	for _, p := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
		resp, err := ts.Client().Get(ts.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var md struct {
			Resource string   `json:"resource"`
			AS       []string `json:"authorization_servers"`
		}
		if err := json.Unmarshal(b, &md); err != nil || md.Resource != self || len(md.AS) != 1 || md.AS[0] != cfg.authIssuer {
			t.Errorf("GET %s: status %d: %s", p, resp.StatusCode, b)
		}
	}
}

func TestServeAuthFlagsNeedAnIssuer(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	srv := server.New(mcp.Implementation{Name: "t", Version: "1"})
	err := mountMCP(http.NewServeMux(), serveConfig{authScopes: []string{"mcp"}}, log, srv, &observability{}, "http://127.0.0.1:1/mcp", nil)
	if err == nil {
		t.Fatal("--auth-scope without --auth-issuer was accepted")
	}
}
