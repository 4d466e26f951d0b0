package oauth

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"log"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// loopbackPath is the path of the redirect URI a Loopback serves.
const loopbackPath = "/callback"

// loopbackMaxHeader bounds a request's line and headers together: an
// authorization response is a code, a state and an issuer, or an error
// and its description, far below this.
const loopbackMaxHeader = 16 << 10

// Loopback is the Interaction of a command-line host whose user runs a
// browser on the same machine (RFC 8252, section 7.3): it prints the
// authorization URL and receives the authorization server's redirect on
// a port of a loopback address, so nothing has to be copied back by
// hand.
//
// The redirect is accepted only on the redirect path, only with the
// bound address in the Host header (a page on another site that rebinds
// its own name to 127.0.0.1 cannot deliver one), and only while an
// Authorize waits; one Authorize may wait at a time. Close stops the
// server.
type Loopback struct {
	// OpenBrowser, when set, is called with the authorization URL after
	// it is printed, to open it for the user (a command-line host may
	// run xdg-open or open). Its error is reported to the output and
	// does not stop the wait: the printed URL still works. It must not
	// block for long, and must be set before the first Authorize.
	OpenBrowser func(url string) error

	out      io.Writer
	host     string // the bound address as it appears in the Host header
	redirect string
	srv      *http.Server
	served   chan struct{}  // closed when the server's Serve returns
	conns    sync.WaitGroup // the server's connections, until closed
	closed   chan struct{}  // closed by Close
	once     sync.Once
	closeErr error

	mu sync.Mutex
	// waiter receives the first redirect that carries a code or an
	// error; nil while no Authorize waits. busy is set while one does.
	waiter chan url.Values
	busy   bool
}

// NewLoopback listens on addr, which must name a loopback IP address
// and a port ("127.0.0.1:0" or "[::1]:0" pick a free port), and serves
// the redirect path there until Close. Output (the line with the
// authorization URL) goes to out. Host names, even "localhost", are
// refused: the redirect URI names the literal address bound, as RFC
// 8252 advises, so no resolver can send the browser elsewhere.
func NewLoopback(addr string, out io.Writer) (*Loopback, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("oauth: loopback address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("oauth: loopback address %q: want a loopback IP address such as 127.0.0.1, not %q", addr, host)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("oauth: listening for the authorization redirect: %w", err)
	}
	bound := ln.Addr().(*net.TCPAddr)
	l := &Loopback{
		out:    out,
		host:   net.JoinHostPort(bound.IP.String(), fmt.Sprint(bound.Port)),
		served: make(chan struct{}),
		closed: make(chan struct{}),
	}
	l.redirect = "http://" + l.host + loopbackPath
	l.srv = &http.Server{
		Handler:           http.HandlerFunc(l.serve),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       20 * time.Second,
		WriteTimeout:      20 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    loopbackMaxHeader,
		// What a stray client gets wrong is no news for the user.
		ErrorLog: log.New(io.Discard, "", 0),
		// Close waits for every connection's goroutine, even one that
		// lingers after refusing an oversized request.
		ConnState: func(_ net.Conn, s http.ConnState) {
			switch s {
			case http.StateNew:
				l.conns.Add(1)
			case http.StateClosed, http.StateHijacked:
				l.conns.Done()
			}
		},
	}
	go func() {
		defer close(l.served)
		_ = l.srv.Serve(ln) // ends with ErrServerClosed at Close
	}()
	return l, nil
}

// RedirectURI is http://IP:PORT/callback with the address bound.
func (l *Loopback) RedirectURI() string { return l.redirect }

// Authorize prints authURL to the output, opens it with OpenBrowser when
// that is set, and waits for the browser to be redirected to
// RedirectURI with a code or an error. It returns that redirect's query
// as it came. It fails at once if another Authorize is waiting, and when
// ctx ends or the Loopback is closed before the redirect.
func (l *Loopback) Authorize(ctx context.Context, authURL string) (url.Values, error) {
	if err := checkAuthURL(authURL); err != nil {
		return nil, err
	}
	got := make(chan url.Values, 1)
	l.mu.Lock()
	if l.busy {
		l.mu.Unlock()
		return nil, errors.New("oauth: loopback: another authorization is already waiting for its redirect")
	}
	l.busy, l.waiter = true, got
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.busy, l.waiter = false, nil
		l.mu.Unlock()
	}()
	select {
	case <-l.closed:
		return nil, errLoopbackClosed
	default:
	}

	if _, err := fmt.Fprintf(l.out, "Open this address in a browser to authorize: %s\n", authURL); err != nil {
		return nil, fmt.Errorf("oauth: loopback: printing the authorization URL: %w", err)
	}
	if l.OpenBrowser != nil {
		if err := l.OpenBrowser(authURL); err != nil {
			// The URL is printed; the user can still open it by hand.
			fmt.Fprintf(l.out, "Could not open a browser (%v); open the address above by hand.\n", err)
		}
	}
	select {
	case q := <-got:
		return q, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("oauth: loopback: waiting for the redirect to %s: %w", l.redirect, ctx.Err())
	case <-l.closed:
		return nil, errLoopbackClosed
	}
}

var errLoopbackClosed = errors.New("oauth: loopback: closed")

// Close stops the server, ends a waiting Authorize, frees the port, and
// returns once the server's goroutines have. Calling it again returns
// the first call's result.
func (l *Loopback) Close() error {
	l.once.Do(func() {
		close(l.closed)
		if err := l.srv.Close(); err != nil {
			l.closeErr = fmt.Errorf("oauth: loopback: closing: %w", err)
		}
		<-l.served // no connection is accepted after this
		l.conns.Wait()
	})
	return l.closeErr
}

// serve answers the browser. Only a GET of the redirect path with the
// bound address as Host counts; of those, only the first that carries a
// code or an error while an Authorize waits is delivered.
func (l *Loopback) serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	if r.Host != l.host {
		http.Error(w, "wrong host", http.StatusMisdirectedRequest)
		return
	}
	if r.URL.Path != loopbackPath {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet {
		h.Set("Allow", http.MethodGet)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	q := r.URL.Query()
	if !q.Has("code") && !q.Has("error") {
		http.Error(w, "no authorization response here", http.StatusBadRequest)
		return
	}
	l.mu.Lock()
	waiter := l.waiter
	l.waiter = nil // the first answer is the one
	l.mu.Unlock()
	if waiter == nil {
		// A reload of an old tab, or a second redirect: not for anyone.
		writePage(w, http.StatusConflict, "Nothing is waiting for this",
			"No authorization is in progress in the terminal. You can close this tab.")
		return
	}
	waiter <- q // buffered, and sent to once
	if e := q.Get("error"); e != "" {
		msg := "The authorization server refused: " + e
		if d := q.Get("error_description"); d != "" {
			msg += " (" + d + ")"
		}
		writePage(w, http.StatusOK, "Authorization failed", clip(msg, 500)+". You can close this tab.")
		return
	}
	writePage(w, http.StatusOK, "Authorization received",
		"The authorization server answered. You can close this tab and go back to the terminal.")
}

// writePage answers with a small page that needs nothing else to show.
func writePage(w http.ResponseWriter, status int, title, text string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>%[1]s</title>
<style>body{font-family:sans-serif;max-width:36em;margin:4em auto;padding:0 1em}</style></head>
<body><h1>%[1]s</h1><p>%[2]s</p></body></html>
`, html.EscapeString(title), html.EscapeString(text))
}

// checkAuthURL refuses an authorization URL that is not an absolute
// http(s) URL in printable ASCII. The URL is built from what an
// authorization server published, and it is printed to a terminal: an
// escape sequence must not reach one, and what the user sees (no
// bidirectional overrides, no look-alike letters) must be what the
// browser opens. A well-formed URL percent-encodes everything else.
func checkAuthURL(s string) error {
	if i := strings.IndexFunc(s, func(r rune) bool { return r <= ' ' || r > '~' }); i >= 0 {
		return fmt.Errorf("oauth: the authorization URL holds a space, a control character or non-ASCII at byte %d", i)
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("oauth: the authorization URL: %w", err)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("oauth: the authorization URL %q is not an absolute http(s) URL", s)
	}
	return nil
}

var _ Interaction = (*Loopback)(nil)
