package oauth

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"
)

const testAuthURL = "https://as.example/authorize?client_id=tidings&state=s1&code_challenge=abc&code_challenge_method=S256"

// printed is an output that hands every write to the test.
type printed chan string

func (p printed) Write(b []byte) (int, error) {
	p <- string(b)
	return len(b), nil
}

// next returns the next write, failing the test if none comes.
func (p printed) next(t *testing.T) string {
	t.Helper()
	select {
	case s := <-p:
		return s
	case <-time.After(10 * time.Second):
		t.Fatal("nothing printed")
		return ""
	}
}

type authResult struct {
	q   url.Values
	err error
}

// newTestLoopback binds a Loopback on a free port, closed at the end of
// the test.
func newTestLoopback(t *testing.T) (*Loopback, printed) {
	t.Helper()
	out := make(printed, 16)
	l, err := NewLoopback("127.0.0.1:0", out)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	return l, out
}

// authorize runs Authorize in a goroutine the test waits for, and returns
// once it has printed the URL, that is, once it waits for the redirect.
func authorize(t *testing.T, ctx context.Context, l *Loopback, out printed) <-chan authResult {
	t.Helper()
	res := make(chan authResult, 1)
	go func() {
		q, err := l.Authorize(ctx, testAuthURL)
		res <- authResult{q, err}
	}()
	line := out.next(t)
	if !strings.Contains(line, testAuthURL) || strings.Count(line, "\n") != 1 || !strings.HasSuffix(line, "\n") {
		t.Fatalf("printed %q, want one line with the URL", line)
	}
	return res
}

func result(t *testing.T, res <-chan authResult) authResult {
	t.Helper()
	select {
	case r := <-res:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("Authorize did not return")
		return authResult{}
	}
}

// browse does what a browser does with the redirect: a GET, here with
// the given Host header ("" for the URL's own).
// redirectWithCode sends the browser to l's redirect URI with code, and
// checks that Authorize returns it.
func redirectWithCode(t *testing.T, l *Loopback, res <-chan authResult, code string) {
	t.Helper()
	browse(t, http.MethodGet, l.RedirectURI()+"?code="+code, "")
	if r := result(t, res); r.err != nil || r.q.Get("code") != code {
		t.Errorf("Authorize returned %v, %v; want code=%s", r.q, r.err, code)
	}
}

func browse(t *testing.T, method, rawURL, host string) (int, http.Header, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	req, err := http.NewRequest(method, rawURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func TestLoopbackRedirect(t *testing.T) {
	l, out := newTestLoopback(t)
	if ok, _ := regexp.MatchString(`^http://127\.0\.0\.1:[1-9][0-9]*/callback$`, l.RedirectURI()); !ok {
		t.Fatalf("RedirectURI = %q", l.RedirectURI())
	}
	res := authorize(t, t.Context(), l, out)
	status, h, body := browse(t, http.MethodGet, l.RedirectURI()+"?code=c0de&state=s1&iss=https%3A%2F%2Fas.example", "")
	if status != http.StatusOK || !strings.Contains(body, "Authorization received") {
		t.Errorf("browser got %d %q", status, body)
	}
	if ct := h.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	if h.Get("Content-Security-Policy") == "" || h.Get("Cache-Control") != "no-store" || h.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("headers %v", h)
	}
	r := result(t, res)
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := url.Values{"code": {"c0de"}, "state": {"s1"}, "iss": {"https://as.example"}}
	if r.q.Encode() != want.Encode() {
		t.Errorf("Authorize returned %v, want %v", r.q, want)
	}

	// The same redirect again (a reload) reaches nobody.
	status, _, body = browse(t, http.MethodGet, l.RedirectURI()+"?code=again&state=s1", "")
	if status != http.StatusConflict || !strings.Contains(body, "No authorization is in progress") {
		t.Errorf("reload got %d %q", status, body)
	}
	// A later Authorize gets its own redirect, not the reload.
	res = authorize(t, t.Context(), l, out)
	redirectWithCode(t, l, res, "second")
}

func TestLoopbackErrorPageIsEscaped(t *testing.T) {
	l, out := newTestLoopback(t)
	res := authorize(t, t.Context(), l, out)
	q := url.Values{"error": {"access_denied"}, "error_description": {`<script>alert("x")</script>`}, "state": {"s1"}}
	status, _, body := browse(t, http.MethodGet, l.RedirectURI()+"?"+q.Encode(), "")
	if status != http.StatusOK || !strings.Contains(body, "Authorization failed") || !strings.Contains(body, "access_denied") {
		t.Errorf("browser got %d %q", status, body)
	}
	if strings.Contains(body, "<script>") || !strings.Contains(body, "&lt;script&gt;") {
		t.Errorf("the description is not escaped: %q", body)
	}
	r := result(t, res)
	if r.err != nil || r.q.Encode() != q.Encode() {
		t.Errorf("Authorize returned %v, %v; want %v", r.q, r.err, q)
	}
}

// Requests that are not the redirect leave Authorize waiting for the one
// that is.
func TestLoopbackIgnoresOtherRequests(t *testing.T) {
	l, out := newTestLoopback(t)
	res := authorize(t, t.Context(), l, out)
	base := strings.TrimSuffix(l.RedirectURI(), "/callback")
	port := strings.TrimPrefix(base, "http://127.0.0.1:")
	for _, c := range []struct {
		name, method, url, host string
		status                  int
	}{
		{"favicon", http.MethodGet, base + "/favicon.ico", "", http.StatusNotFound},
		{"root", http.MethodGet, base + "/?code=x", "", http.StatusNotFound},
		{"rebound host name", http.MethodGet, l.RedirectURI() + "?code=evil", "evil.example:" + port, http.StatusMisdirectedRequest},
		{"localhost", http.MethodGet, l.RedirectURI() + "?code=evil", "localhost:" + port, http.StatusMisdirectedRequest},
		{"other port", http.MethodGet, l.RedirectURI() + "?code=evil", "127.0.0.1:1", http.StatusMisdirectedRequest},
		{"POST", http.MethodPost, l.RedirectURI() + "?code=evil", "", http.StatusMethodNotAllowed},
		{"no code", http.MethodGet, l.RedirectURI() + "?state=s1", "", http.StatusBadRequest},
		{"huge", http.MethodGet, l.RedirectURI() + "?code=" + strings.Repeat("a", 2*loopbackMaxHeader), "", http.StatusRequestHeaderFieldsTooLarge},
	} {
		status, _, _ := browse(t, c.method, c.url, c.host)
		if status != c.status {
			t.Errorf("%s: status %d, want %d", c.name, status, c.status)
		}
	}
	redirectWithCode(t, l, res, "good")
}

// Of two redirects that arrive together, the first is delivered and the
// second is told nobody waits.
func TestLoopbackFirstRedirectCounts(t *testing.T) {
	l, out := newTestLoopback(t)
	second := make(chan int, 1)
	// OpenBrowser runs before Authorize waits on the redirect, so both
	// arrive while it is still waiting.
	l.OpenBrowser = func(string) error {
		// Not browse: this runs on Authorize's goroutine, not the test's.
		c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		status := 0
		for _, code := range []string{"first", "second"} {
			resp, err := c.Get(l.RedirectURI() + "?code=" + code)
			if err != nil {
				second <- 0
				return err
			}
			resp.Body.Close()
			status = resp.StatusCode
		}
		second <- status
		return nil
	}
	res := authorize(t, t.Context(), l, out)
	if r := result(t, res); r.err != nil || r.q.Get("code") != "first" {
		t.Errorf("Authorize returned %v, %v; want code=first", r.q, r.err)
	}
	if s := <-second; s != http.StatusConflict {
		t.Errorf("second redirect: status %d", s)
	}
}

func TestLoopbackOneAuthorizeAtATime(t *testing.T) {
	l, out := newTestLoopback(t)
	res := authorize(t, t.Context(), l, out)
	if _, err := l.Authorize(t.Context(), testAuthURL); err == nil || !strings.Contains(err.Error(), "already waiting") {
		t.Errorf("second Authorize: %v", err)
	}
	redirectWithCode(t, l, res, "first")
}

func TestLoopbackContextCancel(t *testing.T) {
	l, out := newTestLoopback(t)
	ctx, cancel := context.WithCancel(t.Context())
	res := authorize(t, ctx, l, out)
	cancel()
	r := result(t, res)
	if !errors.Is(r.err, context.Canceled) || !strings.Contains(r.err.Error(), l.RedirectURI()) {
		t.Errorf("Authorize after cancel: %v", r.err)
	}
	// Nobody waits now.
	if status, _, _ := browse(t, http.MethodGet, l.RedirectURI()+"?code=late", ""); status != http.StatusConflict {
		t.Errorf("late redirect: status %d", status)
	}
}

func TestLoopbackCloseFreesPortAndEndsAuthorize(t *testing.T) {
	out := make(printed, 16)
	l, err := NewLoopback("127.0.0.1:0", out)
	if err != nil {
		t.Fatal(err)
	}
	res := authorize(t, t.Context(), l, out)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if r := result(t, res); !errors.Is(r.err, errLoopbackClosed) {
		t.Errorf("Authorize after Close: %v", r.err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := l.Authorize(t.Context(), testAuthURL); !errors.Is(err, errLoopbackClosed) {
		t.Errorf("Authorize on a closed Loopback: %v", err)
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(l.RedirectURI(), "http://"), "/callback")
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("the port is still taken after Close: %v", err)
	}
	ln.Close()
}

func TestLoopbackRefusesOtherAddresses(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "localhost:0", "example.com:80", "127.0.0.1", "[::]:0"} {
		if l, err := NewLoopback(addr, io.Discard); err == nil {
			l.Close()
			t.Errorf("NewLoopback(%q) accepted", addr)
		}
	}
}

func TestLoopbackIPv6(t *testing.T) {
	l, err := NewLoopback("[::1]:0", io.Discard)
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	defer l.Close()
	if ok, _ := regexp.MatchString(`^http://\[::1\]:[1-9][0-9]*/callback$`, l.RedirectURI()); !ok {
		t.Errorf("RedirectURI = %q", l.RedirectURI())
	}
}

func TestLoopbackOpenBrowser(t *testing.T) {
	l, out := newTestLoopback(t)
	opened := make(chan string, 1)
	l.OpenBrowser = func(u string) error {
		opened <- u
		return errors.New("no display")
	}
	res := authorize(t, t.Context(), l, out)
	if u := <-opened; u != testAuthURL {
		t.Errorf("OpenBrowser got %q", u)
	}
	if line := out.next(t); !strings.Contains(line, "no display") || !strings.Contains(line, "by hand") {
		t.Errorf("after a failed OpenBrowser printed %q", line)
	}
	redirectWithCode(t, l, res, "c")
}

func TestLoopbackRefusesUnprintableURL(t *testing.T) {
	l, out := newTestLoopback(t)
	for _, u := range []string{
		"https://as.example/authorize?x=\x1b]0;owned\x07",
		"https://as.example/a b",
		"https://as.example/\u202eevil",
		"ftp://as.example/authorize",
		"/authorize?state=x",
		"",
	} {
		if _, err := l.Authorize(t.Context(), u); err == nil {
			t.Errorf("Authorize(%q) accepted", u)
		}
	}
	select {
	case s := <-out:
		t.Errorf("printed %q", s)
	default:
	}
}
