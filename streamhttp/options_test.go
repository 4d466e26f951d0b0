package streamhttp_test

import (
	"net/http"
	"sync/atomic"
	"testing"

	"tidings/mcp"
	"tidings/streamhttp"
)

// TestNonPositiveLimitsIgnored: limits ≤ 0 keep the defaults instead of
// refusing every body.
func TestNonPositiveLimitsIgnored(t *testing.T) {
	f := newFixture(t, nil, streamhttp.WithMaxBodyBytes(0), streamhttp.WithMaxDepth(-1))
	wantResult(t, f.post(t, request(1, mcp.MethodToolsList, ""), headers(mcp.MethodToolsList, "")))
	f = newFixture(t, nil, streamhttp.WithMaxBodyBytes(-5))
	wantResult(t, f.post(t, request(2, mcp.MethodToolsList, ""), headers(mcp.MethodToolsList, "")))
}

// TestPrincipalRunsOncePerRequest: the principal function (which may
// validate a token) runs exactly once per POST, also for a tools/call
// whose Mcp-Param-* headers depend on what the principal may see.
func TestPrincipalRunsOncePerRequest(t *testing.T) {
	var calls atomic.Int32
	f := newFixture(t, nil, streamhttp.WithPrincipal(func(*http.Request) string {
		calls.Add(1)
		return "alice"
	}))
	h := headers(mcp.MethodToolsCall, "echo")
	h.Set("Mcp-Param-Region", "eu")
	wantResult(t, f.post(t, request(1, mcp.MethodToolsCall, `"name":"echo","arguments":{"region":"eu"}`), h))
	if n := calls.Load(); n != 1 {
		t.Errorf("the principal function ran %d times for one tools/call, want 1", n)
	}
	calls.Store(0)
	wantResult(t, f.post(t, request(2, mcp.MethodToolsList, ""), headers(mcp.MethodToolsList, "")))
	if n := calls.Load(); n != 1 {
		t.Errorf("the principal function ran %d times for one tools/list, want 1", n)
	}
}
