package auth

import (
	"context"
	"crypto/sha256"
	"log/slog"
)

// SubjectToken is the caller's own access token, kept for one use: to be
// exchanged (RFC 8693) at an authorization server for a token of its
// own, as a gateway does for an upstream that trusts the caller's
// identity but not the gateway's word. It is not a credential to send
// anywhere else, and it shows itself nowhere: String, GoString,
// LogValue, MarshalJSON and MarshalText all write "[redacted]", so that
// it cannot reach a log, an error or a response by accident. Only
// ForExchange hands out the token itself.
type SubjectToken struct{ raw string }

// redacted is what a SubjectToken shows of itself.
const redacted = "[redacted]"

// ForExchange returns the token as the caller sent it, to be put in the
// subject_token of a token exchange request and nowhere else.
func (t *SubjectToken) ForExchange() string { return t.raw }

// Digest is the SHA-256 of the token: a key under which what was obtained
// for it can be kept without keeping the token in clear.
func (t *SubjectToken) Digest() [sha256.Size]byte { return sha256.Sum256([]byte(t.raw)) }

// String hides the token.
func (t *SubjectToken) String() string { return redacted }

// GoString hides the token from %#v.
func (t *SubjectToken) GoString() string { return redacted }

// LogValue hides the token from slog.
func (t *SubjectToken) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON hides the token from encoders.
func (t *SubjectToken) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText hides the token from text encoders.
func (t *SubjectToken) MarshalText() ([]byte, error) { return []byte(redacted), nil }

type subjectKey struct{}

// SubjectTokenFromContext returns the access token of the request ctx
// belongs to, which Require validated, for a token exchange: what a
// gateway presents upstream in the caller's stead. The Authorization
// header itself is gone by then (see Require); this is the one way left
// to the token.
func SubjectTokenFromContext(ctx context.Context) (*SubjectToken, bool) {
	t, ok := ctx.Value(subjectKey{}).(*SubjectToken)
	return t, ok
}
