package oauth

import (
	"context"
	"errors"
	"io"
	"net/url"
	"strings"
	"testing"

	"tidings/internal/testrig/testkit"
)

const testRedirect = "http://127.0.0.1:33418/callback"

// newTestPrompt returns a Prompt reading from a pipe the test writes to;
// the pipe is closed at the end, which ends the reader goroutine.
func newTestPrompt(t *testing.T) (*Prompt, *io.PipeWriter, *testkit.SyncBuffer) {
	t.Helper()
	r, w := io.Pipe()
	out := &testkit.SyncBuffer{}
	p := NewPrompt(testRedirect, r, out)
	t.Cleanup(func() {
		p.Close()
		w.Close()
	})
	return p, w, out
}

// promptAuthorize runs Authorize in a goroutine the test waits for.
func promptAuthorize(ctx context.Context, p *Prompt) <-chan authResult {
	res := make(chan authResult, 1)
	go func() {
		q, err := p.Authorize(ctx, testAuthURL)
		res <- authResult{q, err}
	}()
	return res
}

// paste types a line. It returns once the reader has taken it, so the
// reader is reading for an Authorize that waits.
func paste(t *testing.T, w io.Writer, line string) {
	t.Helper()
	if _, err := io.WriteString(w, line); err != nil {
		t.Fatal(err)
	}
}

func TestPromptPastedAddress(t *testing.T) {
	p, w, out := newTestPrompt(t)
	if p.RedirectURI() != testRedirect {
		t.Errorf("RedirectURI = %q", p.RedirectURI())
	}
	res := promptAuthorize(t.Context(), p)
	paste(t, w, "\n")                                              // nothing: asked again quietly
	paste(t, w, "http://127.0.0.1:9999/callback?code=wrongport\n") // another address
	paste(t, w, "http://127.0.0.1:33418/callback?state=s1\n")      // no code
	paste(t, w, "  HTTP://127.0.0.1:33418/callback?code=c0de\r\n") // spaces and CRLF
	r := result(t, res)
	if r.err != nil {
		t.Fatal(r.err)
	}
	if want := (url.Values{"code": {"c0de"}}); r.q.Encode() != want.Encode() {
		t.Errorf("Authorize returned %v, want %v", r.q, want)
	}
	got := out.String()
	if !strings.Contains(got, testAuthURL) || !strings.Contains(got, testRedirect) {
		t.Errorf("the prompt does not show the URL and the redirect: %q", got)
	}
	if n := strings.Count(got, "That will not do"); n != 2 {
		t.Errorf("complained %d times, want 2 (not for the empty line): %q", n, got)
	}
	if !strings.Contains(got, "not an address under the redirect URI") || !strings.Contains(got, "no code or error") {
		t.Errorf("the complaints do not say what is wrong: %q", got)
	}
}

func TestPromptErrorResponse(t *testing.T) {
	p, w, _ := newTestPrompt(t)
	res := promptAuthorize(t.Context(), p)
	paste(t, w, testRedirect+"?error=access_denied&state=s1\n")
	if r := result(t, res); r.err != nil || r.q.Get("error") != "access_denied" {
		t.Errorf("Authorize returned %v, %v", r.q, r.err)
	}
}

// A line typed while no Authorize waits is not given to the next one.
func TestPromptCancelWhileReading(t *testing.T) {
	p, w, _ := newTestPrompt(t)
	dropped := make(chan struct{}, 1)
	p.dropped = func() { dropped <- struct{}{} }
	ctx, cancel := context.WithCancel(t.Context())
	res := promptAuthorize(ctx, p)
	cancel()
	if r := result(t, res); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Authorize after cancel: %v", r.err)
	}
	paste(t, w, testRedirect+"?code=stale\n") // read, for nobody
	<-dropped
	res = promptAuthorize(t.Context(), p)
	paste(t, w, testRedirect+"?code=fresh\n")
	if r := result(t, res); r.err != nil || r.q.Get("code") != "fresh" {
		t.Errorf("Authorize returned %v, %v; want code=fresh", r.q, r.err)
	}
}

// A reader still in the middle of a line for a cancelled Authorize
// hands the line, when it ends, to the Authorize that waits then.
func TestPromptLineGoesToTheAuthorizeWaiting(t *testing.T) {
	r, w := io.Pipe()
	defer w.Close()
	out := make(printed, 16)
	p := NewPrompt(testRedirect, r, out)
	defer p.Close()
	ctx, cancel := context.WithCancel(t.Context())
	res := promptAuthorize(ctx, p)
	out.next(t)
	paste(t, w, testRedirect) // half a line: the reader is in it now
	cancel()
	if r := result(t, res); !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Authorize after cancel: %v", r.err)
	}
	res = promptAuthorize(t.Context(), p)
	for !strings.Contains(out.next(t), "paste") {
	}
	paste(t, w, "?code=mine\n")
	if r := result(t, res); r.err != nil || r.q.Get("code") != "mine" {
		t.Errorf("Authorize returned %v, %v; want code=mine", r.q, r.err)
	}
}

func TestPromptEndOfInput(t *testing.T) {
	p, w, _ := newTestPrompt(t)
	res := promptAuthorize(t.Context(), p)
	w.Close()
	if r := result(t, res); !errors.Is(r.err, io.EOF) {
		t.Errorf("Authorize at end of input: %v", r.err)
	}
	if _, err := p.Authorize(t.Context(), testAuthURL); !errors.Is(err, io.EOF) {
		t.Errorf("Authorize after end of input: %v", err)
	}
}

func TestPromptLastLineWithoutNewline(t *testing.T) {
	p, w, _ := newTestPrompt(t)
	res := promptAuthorize(t.Context(), p)
	paste(t, w, testRedirect+"?code=last")
	w.Close()
	if r := result(t, res); r.err != nil || r.q.Get("code") != "last" {
		t.Errorf("Authorize returned %v, %v", r.q, r.err)
	}
}

func TestPromptLongLine(t *testing.T) {
	p, w, out := newTestPrompt(t)
	res := promptAuthorize(t.Context(), p)
	paste(t, w, testRedirect+"?code="+strings.Repeat("x", 2*maxPasted)+"\n")
	paste(t, w, testRedirect+"?code=short\n")
	if r := result(t, res); r.err != nil || r.q.Get("code") != "short" {
		t.Errorf("Authorize returned %v, %v", r.q, r.err)
	}
	if !strings.Contains(out.String(), "too long") {
		t.Errorf("the long line was not refused: %q", out.String())
	}
}

func TestPromptClose(t *testing.T) {
	r, w := io.Pipe()
	defer w.Close()
	out := make(printed, 16)
	p := NewPrompt(testRedirect, r, out)
	res := promptAuthorize(t.Context(), p)
	out.next(t) // printed: it waits for a line
	p.Close()
	if r := result(t, res); !errors.Is(r.err, errPromptClosed) {
		t.Errorf("Authorize after Close: %v", r.err)
	}
	if _, err := p.Authorize(t.Context(), testAuthURL); !errors.Is(err, errPromptClosed) {
		t.Errorf("Authorize on a closed Prompt: %v", err)
	}
}

func TestPromptOneAuthorizeAtATime(t *testing.T) {
	p, w, _ := newTestPrompt(t)
	res := promptAuthorize(t.Context(), p)
	paste(t, w, "\n") // the first one reads now
	if _, err := p.Authorize(t.Context(), testAuthURL); err == nil || !strings.Contains(err.Error(), "already waiting") {
		t.Errorf("second Authorize: %v", err)
	}
	paste(t, w, testRedirect+"?code=one\n")
	if r := result(t, res); r.err != nil || r.q.Get("code") != "one" {
		t.Errorf("Authorize returned %v, %v", r.q, r.err)
	}
}

func TestPromptBadRedirectURI(t *testing.T) {
	for _, u := range []string{"/callback", "::", ""} {
		p := NewPrompt(u, strings.NewReader(""), io.Discard)
		if _, err := p.Authorize(t.Context(), testAuthURL); err == nil {
			t.Errorf("NewPrompt(%q): Authorize accepted", u)
		}
		p.Close()
	}
}

func TestParsePasted(t *testing.T) {
	redirect, _ := url.Parse(testRedirect)
	for _, c := range []struct {
		in string
		ok bool
	}{
		{testRedirect + "?code=a", true},
		{testRedirect + "?error=x", true},
		{"http://127.0.0.1:33418/callback?code=a#frag", true},
		{"https://127.0.0.1:33418/callback?code=a", false},
		{"http://127.0.0.2:33418/callback?code=a", false},
		{"http://127.0.0.1/callback?code=a", false},
		{"http://127.0.0.1:33418/callback/x?code=a", false},
		{"http://127.0.0.1:33418/?code=a", false},
		{"http://user@127.0.0.1:33418/callback?code=a", false},
		{"http://127.0.0.1:33418/callback?code=%zz", false},
		{"http://127.0.0.1:33418/callback", false},
		{"code=a", false},
		{"", false},
	} {
		_, err := parsePasted(redirect, c.in)
		if (err == nil) != c.ok {
			t.Errorf("parsePasted(%q) = %v, want ok=%v", c.in, err, c.ok)
		}
	}
	// The default port counts as given.
	https, _ := url.Parse("https://app.example/cb")
	if _, err := parsePasted(https, "https://APP.example:443/cb?code=a"); err != nil {
		t.Errorf("explicit default port: %v", err)
	}
}

func FuzzPromptParse(f *testing.F) {
	for _, s := range []string{
		testRedirect + "?code=a&state=b",
		testRedirect + "?error=access_denied&error_description=no",
		"http://127.0.0.1:33418/callback?code=%zz",
		"http://[::1]:33418/callback?code=a",
		"  " + testRedirect + "?code=a\r",
		"http://127.0.0.1:33418/callback;x?code=a",
		"",
	} {
		f.Add(s)
	}
	redirect, _ := url.Parse(testRedirect)
	f.Fuzz(func(t *testing.T, pasted string) {
		q, err := parsePasted(redirect, pasted)
		if err != nil {
			return
		}
		if !q.Has("code") && !q.Has("error") {
			t.Fatalf("accepted %q without a code or an error", pasted)
		}
		u, err := url.Parse(strings.TrimSpace(pasted))
		if err != nil {
			t.Fatalf("accepted %q, which does not parse: %v", pasted, err)
		}
		if !strings.EqualFold(u.Scheme, "http") || u.Hostname() != "127.0.0.1" || u.Port() != "33418" || u.Path != "/callback" || u.User != nil {
			t.Fatalf("accepted %q, which is not under %s", pasted, testRedirect)
		}
	})
}
