package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/client"
	"tidings/gateway"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/server"
)

// eras are the protocol revisions a caller of the gateway may speak.
var eras = []string{mcp.Version, mcp.LegacyVersion}

// callerOf is a client of the gateway at url, as user, speaking version.
func callerOf(t *testing.T, url, user, version string) *client.Client {
	t.Helper()
	c := client.NewHTTP(url, client.WithHeader("X-User", user), client.WithProtocolVersion(version))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestProgressPassesThrough: the progress an upstream tool reports goes
// down to the caller who asked for it, in order, in either revision the
// caller speaks.
func TestProgressPassesThrough(t *testing.T) {
	u := startUpstream(t, mcp.ScopePrivate, "echo")
	err := u.srv.AddTool(mcp.Tool{Name: "steps", InputSchema: jsontext.Value(`{"type":"object"}`)}, func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		total := 3.0
		for i, msg := range []string{"one", "two", "three"} {
			if err := req.Progress(float64(i+1), &total, msg); err != nil {
				return nil, err
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("done")}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	_, gw := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "up", URL: u.url}}})
	for _, version := range eras {
		t.Run(version, func(t *testing.T) {
			var mu sync.Mutex
			var got []string
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			res, err := callerOf(t, gw, "alice", version).CallTool(ctx, "up_steps", nil, client.WithProgress(func(p float64, total *float64, msg string) {
				mu.Lock()
				defer mu.Unlock()
				if total != nil && *total == 3 && p == float64(len(got)+1) {
					got = append(got, msg)
				} else {
					got = append(got, "unexpected")
				}
			}))
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Content) != 1 || res.Content[0].Text == nil || *res.Content[0].Text != "done" {
				t.Fatalf("result %+v", res)
			}
			mu.Lock()
			defer mu.Unlock()
			if want := []string{"one", "two", "three"}; !slices.Equal(got, want) {
				t.Fatalf("the caller was told progress %q, want %q", got, want)
			}
		})
	}
}

// TestCallerLeavingCancelsUpstream: a caller that gives up on a call
// ends the upstream's work on it, in either revision the caller speaks:
// nothing goes on upstream for a caller who is gone.
func TestCallerLeavingCancelsUpstream(t *testing.T) {
	u := startUpstream(t, mcp.ScopePrivate, "echo")
	started, ended := make(chan struct{}, 1), make(chan struct{}, 1)
	testOver := make(chan struct{})
	err := u.srv.AddTool(mcp.Tool{Name: "hang", InputSchema: jsontext.Value(`{"type":"object"}`)}, func(ctx context.Context, _ *server.ToolRequest) (*mcp.CallToolResult, error) {
		started <- struct{}{}
		select {
		case <-ctx.Done():
			ended <- struct{}{}
			return nil, ctx.Err()
		case <-testOver: // the test failed: the servers are to close
			return nil, errors.New("the test is over")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	_, gw := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "up", URL: u.url}}})
	t.Cleanup(func() { close(testOver) }) // before the servers' own
	for _, version := range eras {
		t.Run(version, func(t *testing.T) {
			c := callerOf(t, gw, "alice", version)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			called := make(chan error, 1)
			go func() {
				_, err := c.CallTool(ctx, "up_hang", nil)
				called <- err
			}()
			select {
			case <-started:
			case <-time.After(waitTimeout):
				t.Fatal("the call never reached the upstream")
			}
			cancel()
			if err := <-called; !errors.Is(err, context.Canceled) {
				t.Fatalf("the caller's call ended with %v, want it cancelled", err)
			}
			select {
			case <-ended:
			case <-time.After(waitTimeout):
				t.Fatal("the upstream's work went on after its caller left")
			}
		})
	}
}

// TestUpstreamListenEndIsNotPassedDown: an upstream that ends its listen
// on purpose (with its complete result, as a server shutting down in a
// rolling restart does) is listened to again, on the server that took
// its place; the callers' listens here go on, unended, and hear the
// next change there.
func TestUpstreamListenEndIsNotPassedDown(t *testing.T) {
	first, second := startUpstream(t, mcp.ScopePublic, "echo"), startUpstream(t, mcp.ScopePublic, "echo")
	var to atomic.Pointer[neturl.URL]
	for _, u := range []*upstreamServer{second, first} {
		target, err := neturl.Parse(u.url)
		if err != nil {
			t.Fatal(err)
		}
		to.Store(target)
	}
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(to.Load()) }, FlushInterval: -1}
	hs := httptest.NewServer(proxy)
	t.Cleanup(hs.Close)
	_, gw := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "up", URL: hs.URL}}})
	msgs := newCaller(t, gw, "alice").listen(`{"toolsListChanged":true}`)
	next(t, msgs, mcp.NotifyAcknowledged)
	testkit.WaitFor(t, waitTimeout, "the gateway's listen on the first server", func() bool { return first.count(mcp.MethodListen) >= 1 })

	moved, err := neturl.Parse(second.url)
	if err != nil {
		t.Fatal(err)
	}
	to.Store(moved)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := first.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, waitTimeout, "the gateway's listen on the second server", func() bool { return second.count(mcp.MethodListen) >= 1 })
	addEcho(t, second.srv, "more", `{"type":"object"}`)
	next(t, msgs, mcp.NotifyToolsListChanged)
}

// TestCallHeadersAreCheckedAtTheGateway: a tool whose schema mirrors an
// argument into an Mcp-Param-* header is held to it at the gateway, from
// the tool list the gateway keeps: a call whose header says other than
// its arguments is refused there with -32020 and never reaches the
// upstream; one whose header agrees is called.
func TestCallHeadersAreCheckedAtTheGateway(t *testing.T) {
	up := startUpstream(t, mcp.ScopePublic, "echo")
	addEcho(t, up.srv, "grep", `{"type":"object","properties":{"path":{"type":"string","x-mcp-header":"Path"}},"required":["path"]}`)
	_, url := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "files", URL: up.url}}})
	c := client.NewHTTP(url)
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Tools(ctx); err != nil { // the gateway keeps the list
		t.Fatal(err)
	}
	call := func(header string) map[string]any {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"files_grep","arguments":{"path":"src"},` +
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"` + mcp.Version + `","io.modelcontextprotocol/clientCapabilities":{}}}}`
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = toolsCallHeaders("files_grep")
		req.Header.Set("Mcp-Param-Path", header)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			t.Fatalf("status %d: %v", resp.StatusCode, err)
		}
		return m
	}
	m := call("elsewhere")
	if e, _ := m["error"].(map[string]any); e == nil || e["code"] != float64(mcp.CodeHeaderMismatch) {
		t.Fatalf("a call whose Mcp-Param-Path differs from its path was answered %v, want error %d", m, mcp.CodeHeaderMismatch)
	}
	if n := up.count(mcp.MethodToolsCall); n != 0 {
		t.Fatalf("the refused call reached the upstream (%d calls)", n)
	}
	if m := call("src"); m["result"] == nil {
		t.Fatalf("a call whose header agrees was answered %v", m)
	}
	if n := up.count(mcp.MethodToolsCall); n != 1 {
		t.Fatalf("the upstream served %d calls, want 1", n)
	}
}
