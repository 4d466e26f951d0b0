package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"tidings/internal/testrig/testkit"
	"tidings/jsonrpc"
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
		wantServeEnded(t, done)
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
			Code    jsonrpc.Code `json:"code"`
			Message string       `json:"message"`
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

// wantServeEnded waits for serve, told to stop, to end without an error.
func wantServeEnded(t *testing.T, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve ended with %v", err)
		}
	case <-time.After(wait):
		t.Error("serve did not end")
	}
}

// TestServeStdioListenLimit: over stdio, --max-listens-per-connection is
// the bound on one connection's listens, above the transport's own
// default of 1000 as below it.
func TestServeStdioListenLimit(t *testing.T) {
	const limit = 1001
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	cmd := newRootCmd()
	cmd.SetArgs([]string{"serve", t.TempDir(), "--stdio", "--max-listens-per-connection", strconv.Itoa(limit),
		"--max-listens-per-principal", strconv.Itoa(2 * limit)})
	cmd.SetIn(inR)
	cmd.SetOut(outW)
	cmd.SetErr(io.Discard)
	done := make(chan error, 1)
	go func() {
		done <- cmd.ExecuteContext(context.Background())
		outW.Close()
	}()
	// Room for every answer, the listens' complete results at the end
	// among them, so that serve never waits on the test.
	answers := make(chan map[string]any, 2*limit+2)
	go func() {
		defer close(answers)
		dec := json.NewDecoder(outR)
		for {
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				return
			}
			if m["id"] != nil { // acknowledgements and the like are notifications
				answers <- m
			}
		}
	}()
	defer func() {
		inW.Close()
		wantServeEnded(t, done)
	}()
	listen := func(id int) {
		t.Helper()
		line := request(t, id, mcp.MethodListen, map[string]any{"notifications": map[string]any{"toolsListChanged": true}})
		if _, err := inW.Write(append(line, '\n')); err != nil {
			t.Fatal(err)
		}
	}
	for id := 1; id <= limit+1; id++ {
		listen(id)
	}
	// Only the listen over the limit is answered while the others last.
	select {
	case m := <-answers:
		msg, _ := m["error"].(map[string]any)["message"].(string)
		if m["id"] != float64(limit+1) || !strings.Contains(msg, "(limit "+strconv.Itoa(limit)+")") {
			t.Fatalf("the first answer is %v, want listen %d refused naming the limit of %d", m, limit+1, limit)
		}
	case <-time.After(wait):
		t.Fatal("no listen was refused")
	}
}

// TestServeRefusesLimitsOfTheOtherTransport: a flag that bounds what one
// transport alone has is refused with the other, naming it, where it
// would be accepted and do nothing.
func TestServeRefusesLimitsOfTheOtherTransport(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--max-listens-per-connection", "5"}, "--max-listens-per-connection bounds the one connection of --stdio"},
		{[]string{"--max-followed-uris-per-connection", "5"}, "--max-followed-uris-per-connection bounds the one connection of --stdio"},
		{[]string{"--stdio", "--max-sessions", "5"}, "max-sessions"},
		{[]string{"--stdio", "--max-sessions-per-principal", "5"}, "max-sessions-per-principal"},
	} {
		cmd := newRootCmd()
		cmd.SetArgs(append([]string{"serve", t.TempDir()}, c.args...))
		cmd.SetIn(strings.NewReader(""))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("serve %q: %v, want an error naming %q", c.args, err, c.want)
		}
	}
}
