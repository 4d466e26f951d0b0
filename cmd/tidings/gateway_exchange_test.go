package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGatewayTokenExchangeNeedsCallerTokens: a gateway whose upstream is
// reached with each caller's token exchanged, but whose callers bring no
// token (no --auth-issuer), does not start, and says why.
func TestGatewayTokenExchangeNeedsCallerTokens(t *testing.T) {
	file := filepath.Join(t.TempDir(), "gateway.yaml")
	err := os.WriteFile(file, []byte(`upstreams:
  - id: mail
    url: http://127.0.0.1:1/mcp
    auth:
      token_exchange: {issuer: http://127.0.0.1:2, client_id: gw, client_secret_file: /nonexistent}
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	err = runGateway(context.Background(), serveConfig{addr: "127.0.0.1:0"}, file, slog.New(slog.DiscardHandler), strings.NewReader(""), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "token_exchange") || !strings.Contains(err.Error(), "--auth-issuer") {
		t.Fatalf("the gateway started, or said %v", err)
	}
}
