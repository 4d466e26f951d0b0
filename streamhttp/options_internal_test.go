package streamhttp

import (
	"context"
	"testing"
	"time"

	"tidings/mcp"
	"tidings/server"
)

// TestOptionsKeepDefaultsForZero: every size, count and duration option
// keeps its default for zero or less, as the package doc says, so a zero
// left unset never turns a bound off.
func TestOptionsKeepDefaultsForZero(t *testing.T) {
	srv := server.New(mcp.Implementation{Name: "t", Version: "1"})
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	want := New(srv, WithoutLegacy()).cfg
	for _, n := range []int{0, -1} {
		got := New(srv, WithoutLegacy(), WithMaxBodyBytes(int64(n)), WithMaxDepth(n), WithWriteTimeout(time.Duration(n)),
			WithSessionLimits(n, time.Duration(n)), WithSessionsPerPrincipal(n)).cfg
		if got.maxBody != want.maxBody || got.maxDepth != want.maxDepth || got.writeTimeout != want.writeTimeout ||
			got.maxSessions != want.maxSessions || got.sessionIdle != want.sessionIdle || got.maxPrincipal != want.maxPrincipal {
			t.Errorf("options of %d: %+v, want the defaults %+v", n, got, want)
		}
	}
}
