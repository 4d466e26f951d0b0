package auth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// introspector asks the authorization server about the tokens that
// cannot be checked locally, by RFC 7662 token introspection. Its
// endpoint is found through the same discovery as the keys, once; no
// lock is held while a request is under way, so two first requests may
// both discover it.
type introspector struct {
	issuer       string
	clientID     string
	clientSecret string
	client       *http.Client

	// slots bounds the introspections under way, and refused remembers
	// answers of "not active" for a while: together they keep clients
	// that send made-up tokens from turning this server into a flood of
	// requests at the authorization server.
	slots chan struct{}
	now   func() time.Time

	mu       sync.Mutex
	endpoint string
	refused  map[[sha256.Size]byte]time.Time // until when
}

// The bounds of introspection.
const (
	maxIntrospections = 8                // under way at once
	maxRefused        = 4096             // inactive answers remembered
	refusedFor        = 30 * time.Second // how long one is remembered
)

// introspection is an RFC 7662 §2.2 response: the JWT claims, which it
// shares, and active.
type introspection struct {
	claims
	Active bool `json:"active"`
}

// introspect returns what the authorization server says of raw. An error
// that is not a *tokenError means the server could not be asked or gave
// no usable answer; an inactive token is a *tokenError.
func (in *introspector) introspect(ctx context.Context, raw string) (*claims, error) {
	sum := sha256.Sum256([]byte(raw))
	in.mu.Lock()
	until, known := in.refused[sum]
	in.mu.Unlock()
	if known && in.now().Before(until) {
		return nil, invalid("the token is not active")
	}
	select {
	case in.slots <- struct{}{}:
		defer func() { <-in.slots }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c, err := in.ask(ctx, raw)
	var te *tokenError
	if errors.As(err, &te) {
		in.mu.Lock()
		if in.refused == nil || len(in.refused) >= maxRefused {
			in.refused = make(map[[sha256.Size]byte]time.Time)
		}
		in.refused[sum] = in.now().Add(refusedFor)
		in.mu.Unlock()
	}
	return c, err
}

// ask sends one introspection request.
func (in *introspector) ask(ctx context.Context, raw string) (*claims, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	endpoint, err := in.endpointURL(ctx)
	if err != nil {
		return nil, err
	}
	form := url.Values{"token": {raw}, "token_type_hint": {"access_token"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", endpoint, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	// client_secret_basic: both halves are form-encoded first (RFC 6749
	// §2.3.1), so a colon in the identifier survives.
	creds := url.QueryEscape(in.clientID) + ":" + url.QueryEscape(in.clientSecret)
	req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(creds)))
	resp, err := in.client.Do(req)
	if err != nil {
		// The error names the URL, whose query the token is not in.
		return nil, fmt.Errorf("POST %s: %w", endpoint, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocBytes+1))
	if err != nil {
		return nil, fmt.Errorf("POST %s: %w", endpoint, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("POST %s: status %d", endpoint, resp.StatusCode)
	}
	if len(body) > maxDocBytes {
		return nil, fmt.Errorf("POST %s: answer larger than %d bytes", endpoint, maxDocBytes)
	}
	var r introspection
	if err := json.Unmarshal(body, &r); err != nil {
		if !json.Valid(body) {
			return nil, fmt.Errorf("POST %s: %w", endpoint, err)
		}
		// Well-formed JSON with a claim of the wrong type: the server
		// answered, and its answer does not describe a usable token.
		return nil, invalid("the token's introspection claims are malformed")
	}
	if !r.Active {
		return nil, invalid("the token is not active")
	}
	return &r.claims, nil
}

func (in *introspector) endpointURL(ctx context.Context) (string, error) {
	in.mu.Lock()
	ep := in.endpoint
	in.mu.Unlock()
	if ep != "" {
		return ep, nil
	}
	ep, err := discover(ctx, in.client, in.issuer, "introspection_endpoint",
		func(md asMetadata) string { return md.IntrospectionEndpoint })
	if err != nil {
		return "", err
	}
	in.mu.Lock()
	in.endpoint = ep
	in.mu.Unlock()
	return ep, nil
}

// looksLikeJWT reports whether raw has the shape of a compact JWS: three
// dot-separated parts whose first is a base64url JSON object. Such a
// token is validated locally; any other goes to introspection.
func looksLikeJWT(raw string) bool {
	head, rest, ok := strings.Cut(raw, ".")
	if !ok || strings.Count(rest, ".") != 1 {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(head)
	if err != nil {
		return false
	}
	var hdr map[string]json.RawMessage
	return json.Unmarshal(b, &hdr) == nil
}
