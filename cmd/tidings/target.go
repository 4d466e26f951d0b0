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
	"strings"
	"time"

	"github.com/spf13/cobra"

	"tidings/client"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// target is the server a client command talks to: a Streamable HTTP URL,
// or a stdio server to spawn.
type target struct {
	url     string
	command []string
}

// String names the target for people.
func (t target) String() string {
	if t.url != "" {
		return t.url
	}
	return strings.Join(t.command, " ")
}

// splitTarget separates the target from the rest of the arguments. Without
// "--" the first argument is the URL; with "--" everything after it is the
// command to spawn and everything before it is the rest. So the two forms
// can never be confused, whatever the rest looks like.
func splitTarget(cmd *cobra.Command, args []string) (target, []string, error) {
	if dash := cmd.ArgsLenAtDash(); dash >= 0 {
		if dash == len(args) {
			return target{}, nil, errors.New("no server command after --")
		}
		if dash > 0 && isHTTPURL(args[0]) {
			return target{}, nil, fmt.Errorf("both a URL (%s) and a command after -- given; pass one", args[0])
		}
		return target{command: args[dash:]}, args[:dash], nil
	}
	if len(args) == 0 {
		return target{}, nil, errors.New("no server given: pass a URL, or a command after --")
	}
	if !isHTTPURL(args[0]) {
		return target{}, nil, fmt.Errorf("%q is not an http(s) URL; to spawn a stdio server, put its command after --", args[0])
	}
	return target{url: args[0]}, args[1:], nil
}

func isHTTPURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// clientFlags are the connection flags the client commands share.
type clientFlags struct {
	headers []string
	timeout time.Duration
	// oauth signs in with OAuth when the server asks; the redirect is
	// received on oauthRedirect (redirectGiven: set by the user, so no
	// other port will do) and tokens kept in oauthStore ("": the
	// default file).
	oauth         bool
	oauthRedirect string
	redirectGiven bool
	oauthStore    string
	// clientID, clientIssuer and clientSecretFile name a client
	// registered beforehand with the authorization server clientIssuer,
	// for servers whose authorization server registers none on request.
	clientID         string
	clientIssuer     string
	clientSecretFile string
	// protocol pins the protocol revision and skips the era probe.
	protocol string
}

func (f *clientFlags) register(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVarP(&f.headers, "header", "H", nil, `send this HTTP header on every request, as "Name: value" (repeatable)`)
	fl.DurationVar(&f.timeout, "timeout", 60*time.Second, "how long one request may take")
	fl.StringVar(&f.protocol, "protocol", "", "speak this protocol revision ("+strings.Join(client.Versions(), ", ")+") from the first request, without probing the server for it")
	fl.BoolVar(&f.oauth, "oauth", false, "sign in with OAuth when the server asks for it: once in the browser, then with the tokens kept in --oauth-store")
	fl.StringVar(&f.oauthRedirect, "oauth-redirect", defaultRedirect, "with --oauth, the loopback address that receives the browser's redirect (the default gives way to a free port when taken)")
	fl.StringVar(&f.oauthStore, "oauth-store", "", "with --oauth, the file that keeps registered clients and tokens, private to you (default tidings/oauth.json in the user config directory)")
	fl.StringVar(&f.clientID, "oauth-client-id", "", "with --oauth, the client ID registered beforehand with the authorization server --oauth-client-issuer (its redirect URI: http://<--oauth-redirect>/callback)")
	fl.StringVar(&f.clientIssuer, "oauth-client-issuer", "", "with --oauth-client-id, the issuer URL of the authorization server the client is registered with; the client ID and secret go to no other")
	fl.StringVar(&f.clientSecretFile, "oauth-client-secret-file", "", "with --oauth-client-id, the file holding the client's secret, for a confidential client")
}

// silentAfter is how long a spawned server may stay silent on its stdout
// before the user is told what may be wrong.
const silentAfter = 3 * time.Second

// noteSilentServer asks the spawned server who it is, and tells w when
// no answer comes within silentAfter: a command that is not a stdio
// server — tidings serve without --stdio, which serves HTTP — says
// nothing on its stdout, and the request would otherwise wait, silent,
// for the whole --timeout. The answer is kept by the client, so asking
// costs the requests that follow nothing.
func noteSilentServer(ctx context.Context, c *client.Client, t target, w io.Writer) {
	probe, cancel := context.WithTimeout(ctx, silentAfter)
	defer cancel()
	if _, err := c.Discover(probe); err == nil || ctx.Err() != nil || probe.Err() == nil {
		return
	}
	fmt.Fprintf(w, "tidings: %s has written nothing on its stdout for %s: is it an MCP server over stdio? "+
		"(tidings serve needs --stdio.) Still waiting, up to --timeout.\n", printable(t.command[0]), silentAfter)
}

// dialOut says where what dial sets up writes.
type dialOut struct {
	// log takes a spawned server's stderr and the client's warnings.
	log io.Writer
	// prompt takes what the user must see and act on, the URL to open
	// for --oauth: stderr, even when log goes to a file or a pane.
	prompt io.Writer
	// share, when set, is the live view that gives up the terminal
	// while the prompt waits.
	share *termShare
}

// dial connects to the target. A spawned server's stderr goes to
// out.log, and it is stopped by the client's Close. With --oauth the
// client signs in when the server asks (see newAuthorizer). stop closes
// the client and whatever dial started for it.
func dial(ctx context.Context, t target, f clientFlags, out dialOut) (c *client.Client, stop func(), err error) {
	logger := slog.New(slog.NewTextHandler(out.log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	common := []client.Option{
		client.WithClientInfo(mcp.Implementation{Name: "tidings", Version: version()}),
		client.WithTimeout(f.timeout),
		client.WithLogger(logger),
	}
	if f.protocol != "" {
		common = append(common, client.WithProtocolVersion(f.protocol))
	}
	tel, err := startTelemetry(ctx, os.Getenv, "the command prints its output on")
	if err != nil {
		return nil, nil, err
	}
	common = append(common, tel.clientOptions()...)
	c, closeClient, err := dialWith(ctx, t, f, out, logger, common)
	if err != nil {
		tel.shutdown(logger)
		return nil, nil, err
	}
	return c, func() {
		closeClient()
		tel.shutdown(logger)
	}, nil
}

// dialWith is dial with the client options every transport takes.
func dialWith(ctx context.Context, t target, f clientFlags, out dialOut, logger *slog.Logger, common []client.Option) (c *client.Client, stop func(), err error) {
	if t.url == "" {
		opts := []client.CommandOption{client.WithStderr(out.log)}
		for _, o := range common {
			opts = append(opts, o)
		}
		c, err = client.NewCommand(ctx, t.command[0], t.command[1:], opts...)
		if err != nil {
			return nil, nil, fmt.Errorf("starting %s: %w", t.command[0], err)
		}
		noteSilentServer(ctx, c, t, out.prompt)
		return c, func() { c.Close() }, nil
	}
	var opts []client.HTTPOption
	for _, o := range common {
		opts = append(opts, o)
	}
	for _, h := range f.headers {
		name, value, ok := strings.Cut(h, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, nil, fmt.Errorf("--header %q: want \"Name: value\"", h)
		}
		opts = append(opts, client.WithHeader(name, strings.TrimSpace(value)))
	}
	if !f.oauth {
		c := client.NewHTTP(t.url, opts...)
		return c, func() { c.Close() }, nil
	}
	a, err := newAuthorizer(f, out.prompt, logger, out.share)
	if err != nil {
		return nil, nil, err
	}
	c = client.NewHTTP(t.url, append(opts, a.opt)...)
	return c, func() {
		c.Close()
		a.close()
	}, nil
}

// exitError ends the process with a given status once its message (if
// any) has been written; main reports nothing more.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// notMCP reports whether a failed request to an HTTP endpoint shows that
// no MCP server is there at all, and says why in words for people. Only
// an answer counts, and only one that no retry will change:
//
//   - 404, 405 or 410 to server/discover and to initialize alike (the
//     client tries both eras): no MCP endpoint at this URL;
//   - 401 or 403 without a JSON-RPC body: the headers given (-H) are not
//     accepted, and they stay the same on every retry (with --oauth, the
//     sign-in failed or its token does not do);
//   - any other 4xx without a JSON-RPC body, except 408, 425 and 429,
//     which ask for a retry;
//   - a success or redirect whose body is not JSON or an event stream
//     (an HTML page, plain text), or JSON that is not JSON-RPC.
//
// Everything else may pass and is retried: a refused or broken
// connection, a timeout, a 5xx, and every JSON-RPC error, which comes
// from a server that speaks the protocol.
func notMCP(err error) (string, bool) {
	var he *client.HTTPError
	if errors.As(err, &he) {
		switch s := he.Status; {
		case s == http.StatusNotFound || s == http.StatusMethodNotAllowed || s == http.StatusGone:
			reason := fmt.Sprintf("nothing answers MCP at this URL (HTTP %d %s)", s, http.StatusText(s))
			if nf, ok := errors.AsType[*client.NotFoundError](err); ok && nf.Alternative != "" {
				reason += "; did you mean " + nf.Alternative + "?"
			}
			return reason, true
		case s == http.StatusUnauthorized || s == http.StatusForbidden:
			return fmt.Sprintf("the server refuses the request (HTTP %d %s); pass credentials with -H, or sign in with --oauth", s, http.StatusText(s)), true
		case s == http.StatusRequestTimeout || s == http.StatusTooEarly || s == http.StatusTooManyRequests || s >= 500:
			return "", false
		case s >= 400:
			return fmt.Sprintf("HTTP %d %s without a JSON-RPC answer", s, http.StatusText(s)), true
		case looksLikeHTML(he.Body):
			return fmt.Sprintf("it answered HTTP %d with an HTML page, not JSON-RPC", s), true
		default:
			return fmt.Sprintf("it answered HTTP %d with something other than JSON-RPC", s), true
		}
	}
	var de *jsonrpc.DecodeError
	if errors.As(err, &de) {
		return "it answered with JSON that is not a JSON-RPC response", true
	}
	return "", false
}

// looksLikeHTML reports whether a response body starts like a web page.
func looksLikeHTML(body string) bool {
	b := strings.ToLower(strings.TrimSpace(body))
	return strings.HasPrefix(b, "<!doctype html") || strings.HasPrefix(b, "<html") || strings.HasPrefix(b, "<head") || strings.HasPrefix(b, "<body")
}

// notMCPError is the error that ends a command whose HTTP endpoint is not
// an MCP server; err, the failure that showed it, stays wrapped.
func notMCPError(t target, err error) error {
	if t.url == "" {
		return nil
	}
	reason, ok := notMCP(err)
	if !ok {
		return nil
	}
	return &notMCPEndpoint{url: redactedURL(t.url), reason: reason, err: err}
}

// notMCPEndpoint is the error of a URL where no MCP server answers. Its
// message is the reason in words, without the client's error that led to
// it, which says the same in more technical ones (-v logs show it).
type notMCPEndpoint struct {
	url, reason string
	err         error
}

func (e *notMCPEndpoint) Error() string { return e.url + " is not an MCP endpoint: " + e.reason }

func (e *notMCPEndpoint) Unwrap() error { return e.err }

// redactedURL is rawURL without its password, if it has one, for
// messages.
func redactedURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	return u.Redacted()
}
