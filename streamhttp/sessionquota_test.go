package streamhttp_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"tidings/mcp"
	"tidings/streamhttp"
)

// TestLegacySessionQuota: a principal that opens sessions in a loop
// takes the place of its own sessions only, never of another's; a full
// table refuses a new session (503, -32603 naming the limit) rather than
// evict anyone's; and the handler counts both.
func TestLegacySessionQuota(t *testing.T) {
	const max, quota = 10, 4
	f := newFixture(t, nil,
		streamhttp.WithPrincipal(func(r *http.Request) string { return r.Header.Get("X-User") }),
		streamhttp.WithSessionLimits(max, time.Hour), streamhttp.WithSessionsPerPrincipal(quota))
	initBody := legacyBody(0, mcp.MethodInitialize, map[string]any{
		"protocolVersion": mcp.LegacyVersion, "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "quota", "version": "1"},
	})
	as := func(user string, h http.Header) http.Header {
		h.Set("X-User", user)
		return h
	}
	open := func(user string) reply {
		t.Helper()
		return f.post(t, initBody, as(user, legacyHeaders("")))
	}
	mustOpen := func(user string) string {
		t.Helper()
		r := open(user)
		sid := r.header.Get(mcp.HeaderSessionID)
		if r.status != http.StatusOK || sid == "" {
			t.Fatalf("%s's initialize: status %d, %s", user, r.status, r.body)
		}
		return sid
	}
	alive := func(user, sid string) bool {
		t.Helper()
		return f.post(t, legacyBody(1, mcp.MethodPing, nil), as(user, legacyHeaders(sid))).status == http.StatusOK
	}

	bob := []string{mustOpen("bob"), mustOpen("bob")}
	anon := mustOpen("") // the unauthenticated callers are a principal too
	first := mustOpen("mallory")
	for range 10 * max {
		mustOpen("mallory")
	}
	for _, sid := range bob {
		if !alive("bob", sid) {
			t.Fatal("another principal's flood of sessions evicted bob's")
		}
	}
	if !alive("", anon) {
		t.Fatal("another principal's flood of sessions evicted an anonymous caller's")
	}
	if alive("mallory", first) {
		t.Error("mallory's least recently used session outlived a flood of her own")
	}
	if n := f.h.SessionCount(); n != 2+1+quota {
		t.Fatalf("SessionCount = %d, want bob's 2, the anonymous 1 and mallory's quota of %d", n, quota)
	}

	// Three more fill the table; then nobody below quota gets one.
	for range max - (2 + 1 + quota) {
		mustOpen("carol")
	}
	r := open("dave")
	e := wantError(t, r, http.StatusServiceUnavailable, -32603)
	if !strings.Contains(e.Error.Message, fmt.Sprintf("limit %d", max)) {
		t.Errorf("the refusal %q does not name the limit and its value", e.Error.Message)
	}
	var data struct {
		Limit string `json:"limit"`
		Value int    `json:"value"`
	}
	if err := json.Unmarshal(e.Error.Data, &data); err != nil || data.Limit != "sessions" || data.Value != max {
		t.Errorf("the refusal's data = %s, want the limit sessions and its value %d", e.Error.Data, max)
	}
	if r.header.Get(mcp.HeaderSessionID) != "" {
		t.Error("a refused initialize named a session")
	}
	wantError(t, open("bob"), http.StatusServiceUnavailable, -32603)
	// At her quota, mallory still replaces her own.
	mustOpen("mallory")
	for _, sid := range bob {
		if !alive("bob", sid) {
			t.Fatal("a full table evicted bob's session for another")
		}
	}
	st := f.h.SessionStats()
	if st.Open != max || st.Refused != 2 || st.Evicted != int64(10*max+1+1-quota) {
		t.Errorf("SessionStats = %+v, want %d open, 2 refused, %d evicted", st, max, 10*max+2-quota)
	}
}
