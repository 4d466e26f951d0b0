package oauth

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
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

// gateUI is an Interaction whose user consents when told to: Authorize
// reports on started, then waits for proceed (or its context) before
// reading the authorization server's redirect.
type gateUI struct {
	consent
	started chan struct{} // one value per Authorize; buffered
	proceed chan struct{} // closed to let the user consent
	gaveUp  chan struct{} // one value per Authorize its context ended; buffered

	mu       sync.Mutex
	ended    error     // the context error an Authorize ended with
	deadline time.Time // the last Authorize's context deadline
}

func newGateUI(net http.RoundTripper) *gateUI {
	return &gateUI{consent: consent{net: net}, started: make(chan struct{}, 8), proceed: make(chan struct{}), gaveUp: make(chan struct{}, 8)}
}

func (g *gateUI) Authorize(ctx context.Context, authURL string) (url.Values, error) {
	g.mu.Lock()
	g.deadline, _ = ctx.Deadline()
	g.mu.Unlock()
	g.started <- struct{}{}
	select {
	case <-g.proceed:
	case <-ctx.Done():
		g.mu.Lock()
		g.ended = ctx.Err()
		g.mu.Unlock()
		g.gaveUp <- struct{}{}
		return nil, ctx.Err()
	}
	return g.consent.Authorize(ctx, authURL)
}

func (g *gateUI) endedWith() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ended
}

// The request whose challenge started the login may give up; the login
// goes on, and the request waiting for the same server gets its token.
func TestLoginOutlivesTheRequestThatStartedIt(t *testing.T) {
	as := newAS(t, nil)
	rs := newRS(t, as, nil)
	ui := newGateUI(nil)
	f := mustFlow(t, Config{Interaction: ui})

	ctx1, cancel1 := context.WithCancel(testCtx(t))
	first := make(chan error, 1)
	go func() {
		_, err := do(ctx1, f, http.MethodGet, rs.url())
		first <- err
	}()
	<-ui.started
	cancel1()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled request: err %v, want context.Canceled", err)
	}
	second := make(chan error, 1)
	go func() {
		st, err := do(testCtx(t), f, http.MethodGet, rs.url())
		if err == nil && st != 200 {
			err = &httpStatus{st}
		}
		second <- err
	}()
	close(ui.proceed)
	if err := <-second; err != nil {
		t.Fatalf("the waiting request: %v", err)
	}
	if err := ui.endedWith(); err != nil {
		t.Errorf("the login ended with the request that started it: %v", err)
	}
	if ui.count() != 1 {
		t.Errorf("%d authorizations, want 1", ui.count())
	}
}

// The login's own bound is Config.AuthorizeTimeout (5 minutes unless
// set), not the deadline of the request that started it.
func TestAuthorizeTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := memNet{}
		as := newMemAS(t, n, "as.localhost", nil)
		rs := newMemRS(n, "mcp.localhost", as, nil)
		hc := &http.Client{Transport: n}
		for _, tt := range []struct {
			set, want time.Duration
		}{{0, 5 * time.Minute}, {90 * time.Second, 90 * time.Second}} {
			ui := newGateUI(n)
			f := mustFlow(t, Config{Interaction: ui, HTTPClient: hc, AuthorizeTimeout: tt.set})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			start := time.Now()
			go func() { _, _ = doOn(ctx, hc, f, http.MethodGet, rs.url(), nil) }()
			<-ui.started
			ui.mu.Lock()
			got := ui.deadline.Sub(start)
			ui.mu.Unlock()
			if got != tt.want {
				t.Errorf("AuthorizeTimeout %v: the login's deadline is %v away, want %v", tt.set, got, tt.want)
			}
			// Past the request's deadline the login waits on; at its own
			// it ends.
			<-ui.gaveUp
			if err, took := ui.endedWith(), time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took != tt.want {
				t.Errorf("AuthorizeTimeout %v: the login ended with %v after %v, want its deadline after %v", tt.set, err, took, tt.want)
			}
			cancel()
			_ = f.Close()
		}
	})
}

// Close ends the login in progress and waits for it; the waiting request
// is told, and no login starts afterwards.
func TestCloseEndsLogins(t *testing.T) {
	as := newAS(t, nil)
	rs := newRS(t, as, nil)
	ui := newGateUI(nil)
	f := mustFlow(t, Config{Interaction: ui})
	waiting := make(chan error, 1)
	go func() {
		_, err := do(testCtx(t), f, http.MethodGet, rs.url())
		waiting <- err
	}()
	<-ui.started
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ui.endedWith(); !errors.Is(err, context.Canceled) {
		t.Errorf("the login ended with %v, want cancellation", err)
	}
	if err := <-waiting; !errors.Is(err, ErrClosed) {
		t.Errorf("the waiting request: err %v, want ErrClosed", err)
	}
	if _, err := do(testCtx(t), f, http.MethodGet, rs.url()); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: err %v, want ErrClosed", err)
	}
	if err := f.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}
