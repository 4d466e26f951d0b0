package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"tidings/internal/testrig/testkit"
	"tidings/mcp"
)

// TestServeStreamLimits: the listen and session flags reach the server,
// a refusal names the limit, and /metrics counts it.
func TestServeStreamLimits(t *testing.T) {
	var logs testkit.SyncBuffer
	cmd := newRootCmd()
	cmd.SetArgs([]string{"serve", t.TempDir(), "--addr", "127.0.0.1:0", "--max-listens-per-principal", "1", "--max-sessions", "1"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(&logs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	defer func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve ended with %v", err)
			}
		case <-time.After(wait):
			t.Error("serve did not end")
		}
	}()
	var base string
	eventually(t, "serve listening", func() bool {
		m := listeningOn.FindStringSubmatch(logs.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	})
	post := func(body []byte, modern bool) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/mcp", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if modern {
			req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version)
			req.Header.Set(mcp.HeaderMethod, mcp.MethodListen)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	listen := request(t, 1, mcp.MethodListen, map[string]any{"notifications": map[string]any{"resourcesListChanged": true}})
	if open := post(listen, true); open.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("the first listen answered %d %s, want its stream", open.StatusCode, open.Header.Get("Content-Type"))
	}
	var refused struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(post(listen, true).Body).Decode(&refused); err != nil || refused.Error.Code != -32603 ||
		!strings.Contains(refused.Error.Message, "(limit 1)") {
		t.Fatalf("the second listen: %v, %+v; want -32603 naming the limit of 1", err, refused.Error)
	}
	initialize, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": mcp.MethodInitialize, "params": map[string]any{
		"protocolVersion": mcp.LegacyVersion, "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}}})
	if r := post(initialize, false); r.StatusCode != http.StatusOK {
		t.Fatalf("the first session: %d", r.StatusCode)
	}
	if r := post(initialize, false); r.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a session beyond --max-sessions 1: %d, want 503", r.StatusCode)
	}
	r := &replicaServe{url: base}
	if v := r.series(t, `tidings_listen_refusals_total{limit="listensPerPrincipal"}`); v != 1 {
		t.Errorf("listens refused for listensPerPrincipal = %v, want 1", v)
	}
	if v := r.series(t, `tidings_sessions_refused_total`); v != 1 {
		t.Errorf("sessions refused = %v, want 1", v)
	}
}
