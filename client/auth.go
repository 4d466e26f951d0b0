package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"reflect"
	"strings"
)

// An Authorizer puts credentials on the client's HTTP requests and
// answers the server's refusals, so that a token can be obtained,
// refreshed or widened while the client runs rather than fixed when it
// is made. The OAuth flow of package tidings/client/oauth (its Flow) is
// one.
//
// The client asks it before every HTTP request it sends — calls, lists,
// the era probe, listens, and a 2025-11-25 session's requests, stream and
// end alike — and tells it of every 401 and 403 answer. When it has new
// credentials the request is built and sent again, at most three times;
// after that, or when it has none, the refusal is returned as an
// *HTTPError.
//
// The client also calls Authorize on requests it never sends, to learn
// which credentials its next request would carry and so which cached
// private answers are its own (see Client.As). Authorize must therefore
// be cheap and free of visible effects while it holds a usable token.
//
// The request timeout (WithTimeout) does not count the time spent in
// Authorize and Challenge, which may wait for the user: an Authorizer
// bounds such waits itself (the Flow's AuthorizeTimeout does), and the
// request's context is passed on to it.
//
// Only HTTP requests carry credentials, so WithAuthorizer is an
// HTTPOption: NewCommand and New do not take it. An Authorizer is called
// concurrently.
type Authorizer interface {
	// Authorize sets req's credentials: its Authorization header, and a
	// DPoP proof header when the token is DPoP-bound. It may do network
	// I/O, such as refreshing an expired token. Without a token yet it
	// may set nothing: the request then goes without, and the server's
	// 401 challenge starts the flow.
	Authorize(ctx context.Context, req *http.Request) error
	// Challenge is called with a 401 or 403 response to a request
	// Authorize prepared (its headers are what counts; the body may be
	// read). It returns retry=true when it now has credentials worth one
	// more try (a new authorization, a refreshed token, more scopes, a
	// DPoP nonce), false when the refusal is final.
	Challenge(ctx context.Context, req *http.Request, resp *http.Response) (retry bool, err error)
}

// WithAuthorizer has a set the credentials of every HTTP request and
// answer the server's 401 and 403 refusals, for tokens that change while
// the client runs (obtained on the first refusal, refreshed, widened). It runs after the client's
// own headers (WithAuthorization, WithHeader), so what it sets wins.
// Views made with As do not use it: they speak for the authorization
// they were given.
func WithAuthorizer(a Authorizer) HTTPOption {
	return httpOption(func(c *config) { c.authorizer = a })
}

// authContext names whose credentials an answer was given to: the cache
// keeps an answer the server marked private under it, and serves it only
// to requests that would carry the same credentials.
//
// It is derived from the Authorization header field of the HTTP request
// that was actually sent — whatever set it: WithAuthorization, WithHeader,
// As or an Authorizer — hashed, so that tokens are not kept as map keys.
// A request without one is anonymous. When what reached the wire cannot
// be known (see httpTransport.answeredAs) the context is unknown, the zero
// value, and private answers are not cached at all. Over stdio and other
// transports nothing travels with a request: the connection is the
// caller, and its answers are anonymous ones, shared by all its views.
type authContext string

const (
	// unknownAuth is an answer whose caller cannot be told. It is the
	// zero value, so that an answer nobody vouched for is never filed as
	// someone's.
	unknownAuth authContext = ""
	// anonymousAuth is an answer to a request without credentials. Known
	// contexts are hex digests, which this can never be.
	anonymousAuth authContext = "anonymous"
)

// contextOf returns the context of a request whose Authorization header
// field has values.
func contextOf(values []string) authContext {
	v := strings.Join(values, "\n")
	if v == "" {
		return anonymousAuth
	}
	sum := sha256.Sum256([]byte(v))
	return authContext(hex.EncodeToString(sum[:]))
}

// authRecord collects the contexts of the exchanges that produced one
// answer (a list's pages, the rounds of a request that needed input). An
// answer assembled under more than one — the token was refreshed midway —
// belongs to no single caller.
type authRecord struct {
	as   authContext
	seen bool
}

func (r *authRecord) add(a authContext) {
	switch {
	case !r.seen:
		r.as, r.seen = a, true
	case r.as != a:
		r.as = unknownAuth
	}
}

// context returns the context of the answer: unknown when no exchange was
// recorded.
func (r *authRecord) context() authContext {
	if r == nil || !r.seen {
		return unknownAuth
	}
	return r.as
}

// plainTransport reports whether hc sends requests with net/http's own
// Transport, which sends a request's header as it is. Any other
// RoundTripper may change it on the way (oauth2.Transport adds a token).
func plainTransport(hc *http.Client) bool {
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	_, ok := rt.(*http.Transport)
	return ok
}

// sameHeader reports whether a and b are one map: a request that shares
// the header of the request the client built is that request, or a
// shallow copy of it, and tells nothing of what a RoundTripper sent in
// its place.
func sameHeader(a, b http.Header) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// redact replaces every credential of values (a whole header value, and
// the token after its auth-scheme) found in s, so that a server echoing
// the token it refused does not put it into an error.
func redact(s string, values []string) string {
	for _, v := range values {
		if v == "" {
			continue
		}
		s = strings.ReplaceAll(s, v, "[redacted]")
		if _, cred, ok := strings.Cut(v, " "); ok && strings.TrimSpace(cred) != "" {
			s = strings.ReplaceAll(s, strings.TrimSpace(cred), "[redacted]")
		}
	}
	return s
}
