package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tidings/internal/testrig/testkit"
)

// runCmd runs tidings with args in this process and returns its error
// and what it wrote to stderr.
func runCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newRootCmd()
	var stdout, stderr bytes.Buffer
	cmd.SetOut(&stdout)
	cmd.SetErr(&stderr)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(t.Context())
	return stderr.String(), err
}

func TestOAuthFlagsRefused(t *testing.T) {
	store := filepath.Join(t.TempDir(), "oauth.json")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"call", "--oauth", "tools", "--", "tidings", "serve", "--stdio"}, "stdio"},
		{[]string{"watch", "--oauth", "--", "tidings", "serve", "--stdio"}, "stdio"},
		{[]string{"call", "-H", "X-Team: blue", "tools", "--", "tidings", "serve", "--stdio"}, "--header \"X-Team: blue\" is an HTTP header"},
		{[]string{"call", "--oauth-redirect", "127.0.0.1:0", "http://127.0.0.1:1/mcp", "tools"}, "--oauth-redirect is for --oauth"},
		{[]string{"watch", "--oauth-store", store, "http://127.0.0.1:1/mcp"}, "--oauth-store is for --oauth"},
		{[]string{"call", "--oauth", "-H", "authorization: Bearer x", "http://127.0.0.1:1/mcp", "tools"}, "Authorization header"},
		{[]string{"call", "--oauth", "--oauth-store", store, "--oauth-redirect", "0.0.0.0:0", "http://127.0.0.1:1/mcp", "tools"}, "--oauth-redirect"},
		{[]string{"call", "--oauth", "--oauth-store", store, "--oauth-redirect", "localhost:0", "http://127.0.0.1:1/mcp", "tools"}, "loopback IP"},
		{[]string{"call", "--oauth-client-id", "app", "http://127.0.0.1:1/mcp", "tools"}, "--oauth-client-id is for --oauth"},
		{[]string{"watch", "--oauth-client-issuer", "http://127.0.0.1:2", "http://127.0.0.1:1/mcp"}, "--oauth-client-issuer is for --oauth"},
		{[]string{"call", "--oauth-client-secret-file", store, "http://127.0.0.1:1/mcp", "tools"}, "--oauth-client-secret-file is for --oauth"},
		{[]string{"call", "--oauth", "--oauth-client-id", "app", "http://127.0.0.1:1/mcp", "tools"}, "needs --oauth-client-issuer"},
		{[]string{"call", "--oauth", "--oauth-client-issuer", "http://127.0.0.1:2", "http://127.0.0.1:1/mcp", "tools"}, "--oauth-client-id, which is not given"},
		{[]string{"watch", "--oauth", "--oauth-client-secret-file", store, "http://127.0.0.1:1/mcp"}, "--oauth-client-id, which is not given"},
		{[]string{"call", "--oauth", "--oauth-store", store, "--oauth-redirect", "127.0.0.1:0", "--oauth-client-id", "app", "--oauth-client-issuer", "https://as.example",
			"--oauth-client-secret-file", filepath.Join(t.TempDir(), "missing"), "http://127.0.0.1:1/mcp", "tools"}, "--oauth-client-secret-file"},
		{[]string{"call", "--oauth", "--oauth-store", store, "--oauth-redirect", "127.0.0.1:0", "--oauth-client-id", "app", "--oauth-client-issuer", "http://as.example",
			"http://127.0.0.1:1/mcp", "tools"}, "ClientIssuer"},
	} {
		_, err := runCmd(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("tidings %q: %v, want an error about %q", c.args, err, c.want)
		}
	}
}

func TestOAuthFlagDefaults(t *testing.T) {
	cmd := newCallCmd()
	if f := cmd.Flags().Lookup("oauth-redirect"); f == nil || f.DefValue != defaultRedirect {
		t.Fatalf("--oauth-redirect default: %+v", f)
	}
	for _, name := range []string{"oauth", "oauth-store", "oauth-client-id", "oauth-client-issuer", "oauth-client-secret-file"} {
		if newWatchCmd().Flags().Lookup(name) == nil || cmd.Flags().Lookup(name) == nil {
			t.Errorf("--%s missing from watch or call", name)
		}
	}
}

// The default redirect address, when taken, gives way to a free port,
// and stderr says so; an address the user gave does not.
func TestOAuthRedirectFallsBack(t *testing.T) {
	if ln, err := net.Listen("tcp", defaultRedirect); err == nil {
		defer ln.Close()
	} // else taken already: what the test needs
	var stderr bytes.Buffer
	lb, err := listenRedirect(defaultRedirect, false, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	if strings.Contains(lb.RedirectURI(), defaultRedirect) || !strings.HasPrefix(lb.RedirectURI(), "http://127.0.0.1:") {
		t.Errorf("RedirectURI %q", lb.RedirectURI())
	}
	if msg := stderr.String(); !strings.Contains(msg, defaultRedirect) || !strings.Contains(msg, lb.RedirectURI()) {
		t.Errorf("stderr %q does not say which address is used instead", msg)
	}
	if lb, err := listenRedirect(defaultRedirect, true, io.Discard); err == nil {
		lb.Close()
		t.Error("a taken address the user gave was replaced")
	}
}

// With --oauth, dial binds the redirect listener, and its stop frees it.
func TestOAuthDialBindsRedirect(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	f := clientFlags{
		timeout: time.Second, oauth: true,
		oauthRedirect: addr, redirectGiven: true,
		oauthStore: filepath.Join(t.TempDir(), "oauth.json"),
	}
	_, stop, err := dial(t.Context(), target{url: "http://127.0.0.1:1/mcp"}, f, dialOut{log: io.Discard, prompt: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		ln.Close()
		t.Errorf("nothing listens on %s for the redirect", addr)
	}
	stop()
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("%s still taken after stop: %v", addr, err)
	}
	ln.Close()
}

// Without a view, a prompt has the terminal at once, and a view that
// starts meanwhile waits for it.
func TestTermShareWithoutView(t *testing.T) {
	var s termShare
	giveBack, err := s.borrow(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// The view waits for the prompt: with a context that has ended, it
	// gives up at once instead of taking the terminal.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, _, err := s.draw(ctx); err == nil {
		t.Error("the view took the terminal from a prompt")
	}
	giveBack()
	_, stop, err := s.draw(ctx)
	if err != nil {
		t.Fatalf("the view did not get the terminal back: %v", err)
	}
	stop()
	// And a second prompt waits for the first.
	giveBack, _ = s.borrow(t.Context())
	if _, err := s.borrow(ctx); err == nil {
		t.Error("two prompts had the terminal")
	}
	giveBack()
}

// A sign-in while the view draws takes the terminal through the view's
// loop: the view leaves the screen first and draws again after, and the
// Loopback prints its URL in between, on a real redirect.
func TestTermShareLendsTheView(t *testing.T) {
	var s termShare
	loans, stopDrawing, err := s.draw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var events testkit.SyncBuffer
	lb, err := listenRedirect("127.0.0.1:0", true, &events)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	lb.OpenBrowser = func(string) error {
		resp, err := http.Get(lb.RedirectURI() + "?code=c0de&state=s")
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	ia := sharedTerm{Interaction: lb, share: &s}
	res := make(chan error, 1)
	go func() {
		q, err := ia.Authorize(t.Context(), "https://as.example/authorize?state=s")
		if err == nil && q.Get("code") != "c0de" {
			t.Errorf("Authorize returned %v", q)
		}
		res <- err
	}()
	// The view's loop.
	l := <-loans
	if events.String() != "" {
		t.Errorf("printed before the view left the screen: %q", events.String())
	}
	events.Write([]byte("[view left]\n"))
	close(l.given)
	<-l.back
	events.Write([]byte("[view back]\n"))
	if err := <-res; err != nil {
		t.Fatal(err)
	}
	stopDrawing()
	got := events.String()
	left, url, back := strings.Index(got, "[view left]"), strings.Index(got, "https://as.example/authorize"), strings.Index(got, "[view back]")
	if left < 0 || url < left || back < url {
		t.Errorf("terminal saw %q; want the view to leave, the URL, then the view back", got)
	}

	// A view that stops while a prompt waits for it lets the prompt go.
	loans, stopDrawing, _ = s.draw(t.Context())
	borrowed := make(chan func(), 1)
	go func() {
		giveBack, err := s.borrow(t.Context())
		if err != nil {
			t.Error(err)
		}
		borrowed <- giveBack
	}()
	<-loans // asked, and never answered: the view ends instead
	stopDrawing()
	(<-borrowed)()
}

// A client secret is read from its file without the white space around
// it; an empty file is refused, and no error holds the secret.
func TestOAuthClientSecretFile(t *testing.T) {
	dir := t.TempDir()
	good, empty := filepath.Join(dir, "secret"), filepath.Join(dir, "empty")
	if err := os.WriteFile(good, []byte("  s3cret-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := readSecret(good); err != nil || s != "s3cret-value" {
		t.Errorf("readSecret = %q, %v", s, err)
	}
	if _, err := readSecret(empty); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("an empty secret file: %v", err)
	}
}

// dial's stop ends a sign-in in progress, and returns once it has
// ended: here one that waits for the live view to leave the screen,
// which closing the redirect listener alone does not end.
func TestOAuthDialStopEndsTheSignIn(t *testing.T) {
	s := startOAuthServer(t)
	addr := freeLoopback(t)
	f := clientFlags{
		timeout: wait, oauth: true,
		oauthRedirect: addr, redirectGiven: true,
		oauthStore:   filepath.Join(t.TempDir(), "oauth.json"),
		clientID:     s.as.RegisterClient("http://" + addr + "/callback"),
		clientIssuer: s.as.Issuer(),
	}
	var share termShare
	loans, stopDrawing, err := share.draw(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer stopDrawing()
	var prompt testkit.SyncBuffer
	c, stop, err := dial(t.Context(), target{url: s.url}, f, dialOut{log: io.Discard, prompt: &prompt, share: &share})
	if err != nil {
		t.Fatal(err)
	}
	called := make(chan error, 1)
	go func() {
		_, err := c.CallTool(t.Context(), "whoami", nil)
		called <- err
	}()
	var l termLoan
	select {
	case l = <-loans: // the sign-in waits for the terminal
	case <-time.After(wait):
		t.Fatal("the sign-in never asked for the terminal")
	}
	// Before the view has left the screen, the command stops.
	stop()
	select {
	case <-l.back:
	default:
		t.Fatal("stop returned while the sign-in still waited for the terminal")
	}
	if strings.Contains(prompt.String(), "Open this address") {
		t.Errorf("the URL was printed before the view left the screen: %q", prompt.String())
	}
	if err := <-called; err == nil {
		t.Error("the call succeeded without a sign-in")
	}
}
