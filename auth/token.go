package auth

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// allowedAlgs are the asymmetric signature algorithms a token may use.
// "none" and the HMAC family are absent on purpose: a resource server
// holds only public keys, and accepting HS256 would let anyone sign with
// the published key bytes.
var allowedAlgs = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512,
	jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512,
	jose.EdDSA,
}

// Info is what a validated access token says about the caller.
type Info struct {
	// Issuer is the authorization server that vouched for the token: the
	// Guard's issuer, which a JWT's iss must equal and an introspection
	// answer's, when it has one.
	Issuer string
	// Subject is the token's sub claim.
	Subject string
	// ClientID is the client_id claim (RFC 9068), if any.
	ClientID string
	// Scopes are the granted scopes, from scope (space-separated) or scp.
	Scopes []string
	// Expiry is when the token stops being valid.
	Expiry time.Time
}

// Principal names the caller as the rest of the server keys on it
// (tasks, sessions, cursors, visibility, cache privacy): the issuer and
// the subject, or, for a client-credentials token without a subject,
// the issuer and the client id. It is "" when the token names neither.
//
// The name is one string with every part length-prefixed, as netstrings
// are — the claim it came from ("sub" or "client"), then the issuer and
// the value each as "<bytes>:<value>," — for example
//
//	sub:27:https://issuer.example.com,5:alice,
//	client:27:https://issuer.example.com,3:svc,
//
// so that no value of one claim can spell a value of the other (a user
// whose sub is "client:svc" is not the client svc), nor a subject of one
// issuer that of another when several Guards, each with its issuer,
// front one server. To name a caller in a visibility rule or an item
// scope function, build its Info the same way:
// (&auth.Info{Issuer: iss, Subject: "alice"}).Principal().
func (i *Info) Principal() string {
	switch {
	case i.Subject != "":
		return principal("sub", i.Issuer, i.Subject)
	case i.ClientID != "":
		return principal("client", i.Issuer, i.ClientID)
	}
	return ""
}

// principal writes kind, then issuer and id as netstrings: each part's
// length says where it ends, so whatever bytes the claims hold, two
// different triples never make the same string.
func principal(kind, issuer, id string) string {
	b := make([]byte, 0, len(kind)+len(issuer)+len(id)+16)
	b = append(b, kind...)
	b = append(b, ':')
	for _, part := range []string{issuer, id} {
		b = strconv.AppendInt(b, int64(len(part)), 10)
		b = append(b, ':')
		b = append(b, part...)
		b = append(b, ',')
	}
	return string(b)
}

// claims are the registered claims plus the ones scopes come from.
type claims struct {
	jwt.Claims
	ClientID string          `json:"client_id"`
	Scope    json.RawMessage `json:"scope"`
	Scp      json.RawMessage `json:"scp"`
}

// tokenError is a validation failure, answered with 401 invalid_token;
// its text is safe to show the client and never contains the token.
type tokenError struct{ msg string }

func (e *tokenError) Error() string { return e.msg }

func invalid(format string, args ...any) error {
	return &tokenError{msg: fmt.Sprintf(format, args...)}
}

// validator checks a compact JWS access token against the issuer's keys,
// the issuer, this server's audience and the clock.
type validator struct {
	issuer   string
	audience string // canonical form
	skew     time.Duration
	now      func() time.Time
	keys     *keySource
	// introspect, when set, checks the tokens that are not JWTs.
	introspect *introspector

	// valid remembers tokens already validated, by their SHA-256 (never
	// the token itself), until they expire: checking a signature costs
	// far more than the rest of a request, and a client sends the same
	// token many times.
	mu    sync.Mutex
	valid map[[sha256.Size]byte]remembered
}

// remembered is a validated token's Info, trusted until until.
type remembered struct {
	info  *Info
	until time.Time
}

// maxRemember bounds how long a validated token is trusted without being
// checked again, whatever its expiry: a key the issuer withdrew, or an
// opaque token it revoked, is refused again within it.
const maxRemember = 5 * time.Minute

// maxRemembered bounds the validated tokens kept; past it one is
// forgotten for each new one.
const maxRemembered = 4096

// validate returns what a valid token says of its bearer. The *Info may
// be shared between requests and must not be modified.
func (v *validator) validate(ctx context.Context, raw string) (*Info, error) {
	sum := sha256.Sum256([]byte(raw))
	now := v.now()
	v.mu.Lock()
	r, ok := v.valid[sum]
	if ok && !now.Before(r.until) {
		delete(v.valid, sum)
		ok = false
	}
	v.mu.Unlock()
	if ok {
		return r.info, nil
	}
	info, err := v.check(ctx, raw)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	if v.valid == nil {
		v.valid = make(map[[sha256.Size]byte]remembered)
	}
	if len(v.valid) >= maxRemembered {
		for k := range v.valid {
			delete(v.valid, k)
			break
		}
	}
	until := info.Expiry.Add(v.skew)
	if limit := now.Add(maxRemember); limit.Before(until) {
		until = limit
	}
	v.valid[sum] = remembered{info: info, until: until}
	v.mu.Unlock()
	return info, nil
}

// check validates a token in full: a JWT by its signature, issuer,
// audience and times; any other by introspection, when configured.
func (v *validator) check(ctx context.Context, raw string) (*Info, error) {
	if v.introspect != nil && !looksLikeJWT(raw) {
		c, err := v.introspect.introspect(ctx, raw)
		if err != nil {
			return nil, err
		}
		return v.accept(c, true)
	}
	tok, err := jwt.ParseSigned(raw, allowedAlgs)
	if err != nil {
		return nil, invalid("the token is not a signed JWT with an accepted algorithm")
	}
	if len(tok.Headers) != 1 {
		return nil, invalid("the token must carry exactly one signature")
	}
	hdr := tok.Headers[0]
	key, err := v.keys.key(ctx, hdr.KeyID)
	if err != nil {
		if errors.Is(err, errUnknownKey) {
			return nil, invalid("the token is signed with an unknown key")
		}
		return nil, fmt.Errorf("finding the token's key: %w", err)
	}
	if key.Algorithm != "" && key.Algorithm != hdr.Algorithm {
		return nil, invalid("the token's algorithm does not match its key")
	}
	var c claims
	if err := tok.Claims(key.Key, &c); err != nil {
		return nil, invalid("the token's signature or claims are invalid")
	}
	return v.accept(&c, false)
}

// accept checks a token's claims and reads them into an Info. A JWT must
// name this issuer and this resource; an introspection answer, which the
// issuer itself gives, may leave iss and aud out (RFC 7662 §2.2), but a
// value it does give must match.
func (v *validator) accept(c *claims, introspected bool) (*Info, error) {
	if c.Issuer != v.issuer && (!introspected || c.Issuer != "") {
		return nil, invalid("the token was issued by another issuer")
	}
	if !v.audienceMatches(c.Audience) && (!introspected || len(c.Audience) > 0) {
		return nil, invalid("the token was issued for another resource")
	}
	now := v.now()
	if c.Expiry == nil {
		return nil, invalid("the token has no expiry")
	}
	exp := c.Expiry.Time()
	if !now.Before(exp.Add(v.skew)) {
		return nil, invalid("the token has expired")
	}
	if c.NotBefore != nil && now.Add(v.skew).Before(c.NotBefore.Time()) {
		return nil, invalid("the token is not valid yet")
	}
	if c.IssuedAt != nil && now.Add(v.skew).Before(c.IssuedAt.Time()) {
		return nil, invalid("the token was issued in the future")
	}
	info := &Info{Issuer: v.issuer, Subject: c.Subject, ClientID: c.ClientID, Expiry: exp}
	if info.Principal() == "" {
		return nil, invalid("the token names neither a subject nor a client")
	}
	var err error
	if info.Scopes, err = scopesOf(c.Scope, c.Scp); err != nil {
		return nil, invalid("the token's scope claim is malformed")
	}
	return info, nil
}

func (v *validator) audienceMatches(aud jwt.Audience) bool {
	for _, a := range aud {
		if canonicalResource(a) == v.audience {
			return true
		}
	}
	return false
}

// scopesOf reads scope (a space-separated string, RFC 9068 §2.2.3) or,
// failing that, scp (a string or an array, as some issuers write it).
func scopesOf(scope, scp json.RawMessage) ([]string, error) {
	for _, raw := range []json.RawMessage{scope, scp} {
		if len(raw) == 0 || string(raw) == "null" {
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			return strings.Fields(s), nil
		}
		var list []string
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, err
		}
		return list, nil
	}
	return nil, nil
}
