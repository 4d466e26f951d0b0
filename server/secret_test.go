package server_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"tidings/mcp"
	"tidings/server"
)

// TestShortSecretWarns: New warns about a secret shorter than 32 bytes,
// without ever writing the key itself, and stays silent for a long one.
func TestShortSecretWarns(t *testing.T) {
	for _, tc := range []struct {
		key  string
		warn bool
	}{
		{"hunter2-short-key", true},
		{strings.Repeat("k", 32), false},
	} {
		var buf bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, nil))
		server.New(mcp.Implementation{Name: "t", Version: "1"}, server.WithLogger(logger), server.WithSecret([]byte(tc.key)))
		got := strings.Contains(buf.String(), "level=WARN")
		if got != tc.warn {
			t.Errorf("key of %d bytes: warned %v, want %v; log: %s", len(tc.key), got, tc.warn, buf.String())
		}
		if strings.Contains(buf.String(), tc.key) {
			t.Errorf("the log contains the key: %s", buf.String())
		}
	}
}
