package streamhttp_test

import (
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
