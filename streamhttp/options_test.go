package streamhttp_test

import (
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"tidings/internal/testrig/testkit"
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

// TestRefusedHostLoggedOnce: a request refused for its Host or Origin is
// logged at info once per refused value, not once per request.
func TestRefusedHostLoggedOnce(t *testing.T) {
	var buf testkit.SyncBuffer
	f := newFixture(t, nil, streamhttp.WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	for range 3 {
		req, _ := http.NewRequest(http.MethodPost, f.ts.URL, strings.NewReader(string(request(1, mcp.MethodToolsList, ""))))
		req.Header = headers(mcp.MethodToolsList, "")
		req.Host = "evil.example"
		if r := f.do(t, req); r.status != http.StatusForbidden {
			t.Fatalf("status %d, want 403", r.status)
		}
		h := headers(mcp.MethodToolsList, "")
		h.Set("Origin", "https://evil.example")
		if r := f.post(t, request(2, mcp.MethodToolsList, ""), h); r.status != http.StatusForbidden {
			t.Fatalf("status %d, want 403", r.status)
		}
	}
	out := buf.String()
	if n := strings.Count(out, "level=INFO"); n != 2 {
		t.Errorf("%d log lines for three refusals of each of two values, want 2:\n%s", n, out)
	}
	if !strings.Contains(out, "value=evil.example") || !strings.Contains(out, "value=https://evil.example") {
		t.Errorf("the log does not name the refused values:\n%s", out)
	}
}
