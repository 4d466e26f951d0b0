package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/spf13/cobra"

	"tidings/client"
	"tidings/client/oauth"
)

// defaultRedirect is where the browser's redirect is received unless
// --oauth-redirect says otherwise. A fixed port keeps the redirect URI,
// and so the client registered with it, the same from run to run.
const defaultRedirect = "127.0.0.1:33418"

// check refuses flag combinations that cannot work, before anything is
// started, and notes what the flags alone do not tell.
func (f *clientFlags) check(cmd *cobra.Command, t target) error {
	f.redirectGiven = cmd.Flags().Changed("oauth-redirect")
	if f.protocol != "" && !slices.Contains(client.Versions(), f.protocol) {
		return fmt.Errorf("--protocol %s: not a revision this client speaks (%s)", f.protocol, strings.Join(client.Versions(), ", "))
	}
	if t.url == "" && len(f.headers) > 0 {
		return fmt.Errorf("--header %q is an HTTP header; a stdio server (a command after --) gets none", f.headers[0])
	}
	if !f.oauth {
		for _, name := range []string{"oauth-redirect", "oauth-store", "oauth-client-id", "oauth-client-issuer", "oauth-client-secret-file"} {
			if cmd.Flags().Changed(name) {
				return fmt.Errorf("--%s is for --oauth, which is not given", name)
			}
		}
		return nil
	}
	if t.url == "" {
		return errors.New("--oauth authorizes HTTP requests; a stdio server (a command after --) has none")
	}
	for _, h := range f.headers {
		if name, _, _ := strings.Cut(h, ":"); strings.EqualFold(strings.TrimSpace(name), "Authorization") {
			return errors.New("--oauth and an Authorization header (-H) both authorize the requests; pass one of them")
		}
	}
	switch {
	case f.clientID == "" && f.clientIssuer != "":
		return errors.New("--oauth-client-issuer names the authorization server of --oauth-client-id, which is not given")
	case f.clientID == "" && f.clientSecretFile != "":
		return errors.New("--oauth-client-secret-file is the secret of --oauth-client-id, which is not given")
	case f.clientID != "" && f.clientIssuer == "":
		return errors.New("--oauth-client-id needs --oauth-client-issuer, the authorization server the client is registered with: its credentials go to no other")
	}
	return nil
}

// readSecret reads a client secret from path: the file's content
// without surrounding white space. The secret itself is never part of
// an error.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--oauth-client-secret-file: %w", err)
	}
	secret := strings.TrimSpace(string(b))
	if secret == "" {
		return "", fmt.Errorf("--oauth-client-secret-file: %s is empty", path)
	}
	return secret, nil
}

// authorizer is what --oauth adds to a client: the option that makes it
// authorize its requests, and the flow and loopback listener to close
// with it.
type authorizer struct {
	opt      client.HTTPOption
	flow     *oauth.Flow
	loopback *oauth.Loopback
}

// close ends a sign-in still in progress and frees the redirect's port.
func (a *authorizer) close() {
	a.flow.Close()
	a.loopback.Close()
}

// newAuthorizer sets up --oauth: the browser's redirect is received on
// a loopback port, the URL to open is printed to prompt, and clients and
// tokens are kept in the store file, so a later run signs in again only
// when the refresh token no longer works. share, when set, is the live
// view that gives up the terminal while the URL is shown.
func newAuthorizer(f clientFlags, prompt io.Writer, logger *slog.Logger, share *termShare) (*authorizer, error) {
	storePath := f.oauthStore
	if storePath == "" {
		p, err := oauth.DefaultStorePath()
		if err != nil {
			return nil, fmt.Errorf("--oauth-store: %w", err)
		}
		storePath = p
	}
	var secret string
	if f.clientSecretFile != "" {
		s, err := readSecret(f.clientSecretFile)
		if err != nil {
			return nil, err
		}
		secret = s
	}
	lb, err := listenRedirect(f.oauthRedirect, f.redirectGiven, prompt)
	if err != nil {
		return nil, err
	}
	var ia oauth.Interaction = lb
	if share != nil {
		ia = sharedTerm{Interaction: lb, share: share}
	}
	// The HTTP client's timeout bounds each of the flow's own requests
	// (metadata, registration, tokens), not the sign-in: the wait for the
	// browser is bounded by the flow's AuthorizeTimeout.
	flow, err := oauth.New(oauth.Config{
		HTTPClient:   &http.Client{Timeout: f.timeout},
		Interaction:  ia,
		Store:        oauth.NewFileStore(storePath),
		ClientName:   "tidings",
		ClientID:     f.clientID,
		ClientSecret: secret,
		ClientIssuer: f.clientIssuer,
		Logger:       logger,
	})
	if err != nil {
		lb.Close()
		return nil, fmt.Errorf("--oauth: %w", err)
	}
	return &authorizer{opt: client.WithAuthorizer(flow), flow: flow, loopback: lb}, nil
}

// listenRedirect binds the loopback listener for the browser's redirect
// on addr. The default address, when taken (another tidings signing in),
// gives way to a free port, and the user is told: the redirect URI then
// differs from the one registered before, so the client is registered
// anew. An address the user gave is used or the command fails.
func listenRedirect(addr string, given bool, stderr io.Writer) (*oauth.Loopback, error) {
	lb, err := oauth.NewLoopback(addr, stderr)
	if err == nil {
		return lb, nil
	}
	if given {
		return nil, fmt.Errorf("--oauth-redirect: %w", err)
	}
	lb, ferr := oauth.NewLoopback("127.0.0.1:0", stderr)
	if ferr != nil {
		return nil, fmt.Errorf("--oauth-redirect: %w; and no free port either: %w", err, ferr)
	}
	fmt.Fprintf(stderr, "tidings: cannot receive the browser's redirect on %s (%v); using %s instead\n", addr, err, lb.RedirectURI())
	return lb, nil
}

// sharedTerm is an Interaction that takes the terminal from the live
// view while it waits for the user, so the URL it prints is on a normal
// screen rather than under the next frame.
type sharedTerm struct {
	oauth.Interaction
	share *termShare
}

// Authorize borrows the terminal for the inner Authorize.
func (s sharedTerm) Authorize(ctx context.Context, authURL string) (url.Values, error) {
	giveBack, err := s.share.borrow(ctx)
	if err != nil {
		return nil, fmt.Errorf("waiting for the terminal to show the authorization URL: %w", err)
	}
	defer giveBack()
	return s.Interaction.Authorize(ctx, authURL)
}

// termShare hands the terminal between the live view, which redraws it
// in place, and an authorization prompt, which prints a line and waits.
// While the view draws, its loop takes loans: it leaves the screen,
// lets the prompt print, and draws again once the loan is back. Before
// the view starts and after it stops, a prompt has the terminal to
// itself, and the view waits for it to finish before it starts.
type termShare struct {
	mu sync.Mutex
	// loans is received from by the view loop while it draws, and done
	// is closed when it stops; both nil while it does not draw.
	loans chan termLoan
	done  chan struct{}
	// held is closed when the prompt that has the terminal without a
	// view gives it back; nil while none does.
	held chan struct{}
}

// termLoan is the terminal lent by the view to a prompt.
type termLoan struct {
	given chan struct{} // closed by the view once the screen is the prompt's
	back  chan struct{} // closed by the prompt when it is done
}

// borrow waits until the terminal is the prompt's, and returns the
// function that gives it back.
func (s *termShare) borrow(ctx context.Context) (giveBack func(), err error) {
	for {
		s.mu.Lock()
		if s.loans == nil {
			if held := s.held; held != nil {
				s.mu.Unlock()
				select {
				case <-held:
					continue
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			held := make(chan struct{})
			s.held = held
			s.mu.Unlock()
			return func() {
				s.mu.Lock()
				s.held = nil
				s.mu.Unlock()
				close(held)
			}, nil
		}
		loans, done := s.loans, s.done
		s.mu.Unlock()
		l := termLoan{given: make(chan struct{}), back: make(chan struct{})}
		select {
		case loans <- l:
			select {
			case <-l.given:
			case <-done: // the view ended instead: the terminal is free
			case <-ctx.Done():
				// The sign-in ended (the command stops) while the view
				// left the screen: it gets the screen straight back.
				close(l.back)
				return nil, ctx.Err()
			}
			return func() { close(l.back) }, nil
		case <-done:
			// The view stopped drawing; look again.
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// draw waits for a prompt that has the terminal to finish, then makes the
// terminal the view's: loans arrive on the channel returned until stop.
func (s *termShare) draw(ctx context.Context) (loans <-chan termLoan, stop func(), err error) {
	for {
		s.mu.Lock()
		if held := s.held; held != nil {
			s.mu.Unlock()
			select {
			case <-held:
				continue
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			}
		}
		ch, done := make(chan termLoan), make(chan struct{})
		s.loans, s.done = ch, done
		s.mu.Unlock()
		return ch, func() {
			s.mu.Lock()
			s.loans, s.done = nil, nil
			s.mu.Unlock()
			close(done)
		}, nil
	}
}
