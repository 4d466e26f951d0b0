package oauth

import (
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
)

// Two MCP servers behind one authorization server, both answering 401
// at once: the flow registers once, and both sessions hold the client it
// keeps, so that both can be refreshed.
func TestServersSharingAnAuthorizationServerRegisterOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := memNet{}
		gate := make(chan struct{})
		as := newMemAS(t, n, "as.localhost", func(a *testAS) { a.refresh, a.regGate = true, gate })
		rs1 := newMemRS(n, "mcp1.localhost", as, nil)
		rs2 := newMemRS(n, "mcp2.localhost", as, nil)
		ui := &consent{net: n}
		store := newMemStore()
		hc := &http.Client{Transport: n}
		f := mustFlow(t, Config{Interaction: ui, Store: store, HTTPClient: hc})
		get := func(u string) error {
			st, err := doOn(testCtx(t), hc, f, http.MethodGet, u, nil)
			if err == nil && st != 200 {
				err = &httpStatus{st}
			}
			return err
		}

		done := make(chan error, 2)
		for _, rs := range []*testRS{rs1, rs2} {
			go func() { done <- get(rs.url()) }()
		}
		// Both requests are as far as they go: at the registration, or
		// waiting for it.
		synctest.Wait()
		if got := as.regAttempts.Load(); got != 1 {
			t.Errorf("%d registrations under way at once, want 1", got)
		}
		close(gate)
		for range 2 {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		if n := len(as.registrations()); n != 1 {
			t.Errorf("%d registrations, want 1", n)
		}

		// Both tokens revoked: both are refreshed, no one asked again.
		as.revokeAll()
		for _, rs := range []*testRS{rs1, rs2} {
			if err := get(rs.url()); err != nil {
				t.Fatalf("%s after revocation: %v", rs.url(), err)
			}
		}
		if ui.count() != 2 {
			t.Errorf("%d authorizations, want 2", ui.count())
		}
		if got := countGrants(as, "refresh_token"); got != 2 {
			t.Errorf("%d refreshes, want 2", got)
		}
		for _, rs := range []*testRS{rs1, rs2} {
			raw, _ := store.Load(testCtx(t), keySession+rs.url())
			if !strings.Contains(string(raw), `"refresh_token":"rt-`) {
				t.Errorf("%s: the session lost its refresh token: %s", rs.url(), raw)
			}
		}
	})
}

type httpStatus struct{ code int }

func (e *httpStatus) Error() string { return http.StatusText(e.code) }
