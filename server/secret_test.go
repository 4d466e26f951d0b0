package server_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"tidings/jsonrpc"
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

// TestTokensAcrossReplicas: a cursor and a requestState issued by one
// replica are accepted by another with the same secret — a client may
// walk a list or finish a multi-round call across a balancer — and
// refused as invalid by a replica with another secret, or with none (a
// random key of its own).
func TestTokensAcrossReplicas(t *testing.T) {
	shared := []byte(strings.Repeat("s", 32))
	replica := func(opts ...server.Option) *harness {
		h, _ := mrtrServer(t, append([]server.Option{server.WithPageSize(1)}, opts...)...)
		return h
	}
	a, b := replica(server.WithSecret(shared)), replica(server.WithSecret(shared))
	others := map[string]*harness{
		"another secret": replica(server.WithSecret([]byte(strings.Repeat("o", 32)))),
		"no secret":      replica(),
	}

	first, cursor, _ := a.page(mcp.MethodToolsList, nil)
	if cursor == nil {
		t.Fatal("no cursor from A")
	}
	second, _, _ := b.page(mcp.MethodToolsList, cursor)
	if len(second) != 1 || second[0] <= first[0] {
		t.Errorf("B's page after A's cursor: %v, after %v", second, first)
	}
	r, _ := a.call(1, mcp.MethodToolsCall, P{"name": "greet", "_meta": withElicitation})
	state := inputRequired(t, r)
	retry := P{"name": "greet", "_meta": withElicitation, "inputResponses": nameAnswer, "requestState": state}
	r, _ = b.call(2, mcp.MethodToolsCall, retry)
	if res := r.ok(t); !strings.Contains(string(r.raw), "hello Ada") {
		t.Errorf("B finishing A's call: %v", res)
	}

	for name, h := range others {
		r, _ := h.call(3, mcp.MethodToolsList, P{"cursor": *cursor})
		r.fails(t, jsonrpc.CodeInvalidParams)
		r, _ = h.call(4, mcp.MethodToolsCall, retry)
		r.fails(t, jsonrpc.CodeInvalidParams)
		t.Logf("%s: refused both", name)
	}
}
