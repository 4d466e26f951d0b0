package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"time"

	"tidings/mcp"
)

// ConnectError reports that an HTTP request never got an answer from the
// server: the connection was refused, the host name did not resolve, the
// TLS handshake failed, or no answer came in time. Its message names the
// URL and the failure in words a person can act on; Unwrap gives the
// underlying error (errors.Is(err, syscall.ECONNREFUSED),
// context.DeadlineExceeded and the like still hold).
type ConnectError struct {
	// URL is the endpoint the request went to, without its password.
	URL string
	// What says what failed, in words: "connection refused", "unknown
	// host", "TLS handshake failed", "no answer within 30s" …
	What string
	// Hint, when set, suggests what to check.
	Hint string
	// Err is the error the request failed with.
	Err error
	// detail is the underlying error's own words, when they add to What.
	detail string
}

func (e *ConnectError) Error() string {
	s := fmt.Sprintf("client: %s: %s", e.URL, e.What)
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	if e.detail != "" {
		s += ": " + e.detail
	}
	return s
}

func (e *ConnectError) Unwrap() error { return e.Err }

// connectError names why a request to endpoint got no answer. timeout is
// the per-exchange bound that ran out, when it did.
func connectError(endpoint string, err error, timeout time.Duration) error {
	ce := &ConnectError{URL: redacted(endpoint), Err: err}
	var dns *net.DNSError
	var unknownAuthority x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var invalid x509.CertificateInvalidError
	var recordHeader tls.RecordHeaderError
	var certVerify *tls.CertificateVerificationError
	switch {
	case timeout > 0 && errors.Is(err, context.DeadlineExceeded):
		ce.What = fmt.Sprintf("no answer within %v", timeout)
		ce.Hint = "the server is slow or unreachable; the timeout is the client's request timeout"
	case errors.As(err, &dns):
		ce.What = "unknown host " + dns.Name
		if !dns.IsNotFound {
			ce.What = "cannot look up host " + dns.Name
		}
		ce.Hint = "check the host name in the URL"
	case errors.Is(err, syscall.ECONNREFUSED):
		ce.What = "connection refused"
		ce.Hint = "is the server running, and listening on " + hostPort(endpoint) + "?"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		ce.What = "host unreachable"
	case errors.Is(err, syscall.ECONNRESET):
		ce.What = "connection reset by the server"
	case errors.As(err, &recordHeader), strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		ce.What = "TLS handshake failed: the server does not speak TLS on " + hostPort(endpoint)
		ce.Hint = "try http:// instead of https://"
	case errors.As(err, &certVerify), errors.As(err, &unknownAuthority), errors.As(err, &hostname), errors.As(err, &invalid):
		ce.What = "TLS handshake failed: the server's certificate is not trusted"
	case isTimeout(err):
		ce.What = "timed out"
	default:
		return err
	}
	if d := innermost(err).Error(); !strings.Contains(ce.What, d) && dns == nil {
		ce.detail = d
	}
	return ce
}

// isTimeout reports a network timeout.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// hostPort returns the host and port an endpoint URL connects to.
func hostPort(endpoint string) string {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return endpoint
	}
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// innermost returns the last error in err's Unwrap chain that still says
// something of its own, for a message without the layers of wrapping
// (url.Error, net.OpError) that repeat the URL and the operation.
func innermost(err error) error {
	for {
		var next error
		switch e := err.(type) {
		case *url.Error:
			next = e.Err
		case *net.OpError:
			next = e.Err
		case interface{ Unwrap() error }:
			next = e.Unwrap()
		}
		if next == nil {
			return err
		}
		err = next
	}
}

// NotFoundError reports an HTTP endpoint that answered 404 to the first
// request of either era (server/discover and initialize): nothing answers
// MCP at that URL. When the same server answers MCP at the path with
// "/mcp" added, the usual mistake, Alternative names that URL.
type NotFoundError struct {
	// URL is the endpoint that answered 404, without its password.
	URL string
	// Alternative, when set, is a URL nearby that answers MCP.
	Alternative string
	// Err is the 404 itself.
	Err *HTTPError
}

func (e *NotFoundError) Error() string {
	s := fmt.Sprintf("client: nothing answers MCP at %s (HTTP 404 to server/discover and initialize)", e.URL)
	if e.Alternative != "" {
		s += "; did you mean " + e.Alternative + "?"
	}
	return s
}

func (e *NotFoundError) Unwrap() error { return e.Err }

// notFound builds the error for an endpoint that answered 404 to both
// eras, asking whether the same server answers MCP where it usually does:
// at the URL with "/mcp" added, or at "/mcp" on the same origin (a
// server/discover that gets any JSON-RPC answer counts). It returns nil
// over stdio.
func (c *Client) notFound(ctx context.Context, he *HTTPError) *NotFoundError {
	ht, ok := c.t.(*httpTransport)
	if !ok {
		return nil
	}
	nf := &NotFoundError{URL: redacted(ht.url), Err: he}
	for _, alt := range mcpPaths(ht.url) {
		if c.answersAt(ctx, ht, alt) {
			nf.Alternative = redacted(alt)
			break
		}
	}
	return nf
}

// redacted returns rawURL with any password in it replaced by "xxxxx",
// as url.URL.Redacted does, for messages and logs: a URL given with
// user:password@ sends them as Basic credentials, and an error naming
// the URL must not show them. A URL that does not parse is returned as
// it is.
func redacted(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return rawURL
	}
	return u.Redacted()
}

// answersAt reports whether a server/discover POSTed to endpoint gets a
// JSON-RPC answer, within a few seconds.
func (c *Client) answersAt(ctx context.Context, ht *httpTransport, endpoint string) bool {
	at := *ht
	at.url = endpoint
	// A guess is asked without the Authorizer: its challenge could start
	// a sign-in for a URL the user never named, to build an error.
	at.auth = nil
	id := c.nextID()
	body, err := c.encode(id, mcp.MethodDiscover, nil, "", nil)
	if err != nil {
		return false
	}
	timeout := c.cfg.timeout
	if timeout <= 0 || timeout > 5*time.Second {
		timeout = 5 * time.Second
	}
	req := &outbound{id: id, method: mcp.MethodDiscover, body: body, version: c.currentVersion(),
		header: modernHeader(mcp.MethodDiscover, callOpts{}), timeout: timeout}
	resp, err := at.roundTrip(ctx, req, nil)
	return err == nil && resp != nil
}

// mcpPaths returns where an MCP endpoint usually is, near one that is
// not: endpoint with "/mcp" added to its path, and "/mcp" on its origin.
func mcpPaths(endpoint string) []string {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return nil
	}
	var alts []string
	add := func(path string) {
		v := *u
		v.Path, v.RawPath, v.RawQuery, v.Fragment = path, "", "", ""
		if s := v.String(); s != endpoint && !slices.Contains(alts, s) {
			alts = append(alts, s)
		}
	}
	if !strings.HasSuffix(u.Path, "/mcp") {
		add(strings.TrimSuffix(u.Path, "/") + "/mcp")
	}
	add("/mcp")
	return alts
}
