package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// maxDocBytes bounds a metadata or JWKS document: an authorization
// server's answer should never cost the resource server much memory.
const maxDocBytes = 1 << 20

// errUnknownKey is a token signed with a key the issuer does not
// publish (after a refetch, or while refetching is rate limited).
var errUnknownKey = errors.New("token signed with an unknown key")

// keySource finds the issuer's signing keys: its JWKS URI by RFC 8414 or
// OpenID Connect discovery, then the key set, cached and refetched when a
// token names a key the cache lacks — at most once per refresh interval,
// so forged kids cannot make the server hammer the issuer. No lock is
// held while fetching: one fetch runs at a time and concurrent callers
// wait for it on a channel.
type keySource struct {
	issuer   string
	client   *http.Client
	now      func() time.Time
	interval time.Duration // least time between fetches after success
	backoff  time.Duration // least time between fetches after a failure

	mu        sync.Mutex
	jwksURI   string
	keys      map[string]jose.JSONWebKey // by kid; "" for a key without one
	fetched   time.Time
	failed    bool
	inflight  chan struct{} // closed when the running fetch ends
	lastError error
}

// maxKeyAge is how long a fetched key set is trusted before it is read
// again on its next use: a key the issuer withdrew stops being accepted
// within it (tokens it signed within maxRemember more, see validator). If the issuer cannot be reached then, the keys it last
// published stay in use, so that its outage does not refuse every token.
const maxKeyAge = time.Hour

// key returns the verification key named kid.
func (s *keySource) key(ctx context.Context, kid string) (jose.JSONWebKey, error) {
	s.mu.Lock()
	stale, known := s.keys[kid]
	if known && (s.inflight != nil || s.now().Sub(s.fetched) < maxKeyAge) {
		s.mu.Unlock()
		return stale, nil
	}
	if ch := s.inflight; ch != nil {
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return jose.JSONWebKey{}, ctx.Err()
		}
		return s.cached(kid)
	}
	if !s.fetched.IsZero() {
		wait := s.interval
		if s.failed {
			wait = s.backoff
		}
		if s.now().Sub(s.fetched) < wait {
			err := s.lastError
			s.mu.Unlock()
			if err != nil {
				return jose.JSONWebKey{}, err
			}
			return jose.JSONWebKey{}, errUnknownKey
		}
	}
	ch := make(chan struct{})
	s.inflight = ch
	jwksURI := s.jwksURI
	s.mu.Unlock()

	// The fetch is everyone's, not this caller's: one that gives up or
	// goes away must not make it fail for the others (and, through the
	// backoff, for a while after).
	keys, jwksURI, err := s.fetch(context.WithoutCancel(ctx), jwksURI)

	s.mu.Lock()
	s.inflight = nil
	s.fetched = s.now()
	s.failed = err != nil
	s.lastError = err
	if err == nil {
		s.keys = keys
		s.jwksURI = jwksURI
	}
	close(ch)
	s.mu.Unlock()
	if err != nil {
		if known {
			return stale, nil
		}
		return jose.JSONWebKey{}, err
	}
	return s.cached(kid)
}

func (s *keySource) cached(kid string) (jose.JSONWebKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.keys[kid]; ok {
		return k, nil
	}
	if s.lastError != nil {
		return jose.JSONWebKey{}, s.lastError
	}
	return jose.JSONWebKey{}, errUnknownKey
}

// fetch discovers the JWKS URI when it is not known yet and reads the
// key set, keeping only public signing keys.
func (s *keySource) fetch(ctx context.Context, jwksURI string) (map[string]jose.JSONWebKey, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if jwksURI == "" {
		var err error
		jwksURI, err = discover(ctx, s.client, s.issuer, "jwks_uri", func(md asMetadata) string { return md.JWKSURI })
		if err != nil {
			return nil, "", err
		}
	}
	var set jose.JSONWebKeySet
	if err := getJSON(ctx, s.client, jwksURI, &set); err != nil {
		return nil, "", fmt.Errorf("fetching the issuer's keys: %w", err)
	}
	keys := make(map[string]jose.JSONWebKey, len(set.Keys))
	for _, k := range set.Keys {
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		pub := k.Public()
		if !pub.Valid() || !pub.IsPublic() {
			continue // symmetric keys never verify a token here
		}
		if _, dup := keys[k.KeyID]; dup {
			continue
		}
		keys[k.KeyID] = pub
	}
	return keys, jwksURI, nil
}

// discoveryURLs lists where the issuer's metadata may be, in the order
// RFC 8414 §3.1 and §5 and OpenID Connect Discovery give.
func discoveryURLs(issuer string) ([]string, error) {
	u, err := url.Parse(issuer)
	if err != nil {
		return nil, fmt.Errorf("issuer %q: %w", issuer, err)
	}
	path := strings.TrimSuffix(u.Path, "/")
	at := func(p string) string {
		c := *u
		c.Path, c.RawPath = p, ""
		return c.String()
	}
	if path == "" {
		return []string{
			at("/.well-known/oauth-authorization-server"),
			at("/.well-known/openid-configuration"),
		}, nil
	}
	return []string{
		at("/.well-known/oauth-authorization-server" + path),
		at("/.well-known/openid-configuration" + path),
		at(path + "/.well-known/openid-configuration"),
	}, nil
}

// asMetadata is the part of the authorization server's metadata this
// package uses.
type asMetadata struct {
	Issuer                string `json:"issuer"`
	JWKSURI               string `json:"jwks_uri"`
	IntrospectionEndpoint string `json:"introspection_endpoint"`
}

// discover reads the first metadata document that names exactly the
// configured issuer (RFC 8414 §3.3) and has the field want picks.
func discover(ctx context.Context, hc *http.Client, issuer, field string, want func(asMetadata) string) (string, error) {
	urls, err := discoveryURLs(issuer)
	if err != nil {
		return "", err
	}
	var errs []error
	for _, u := range urls {
		var md asMetadata
		if err := getJSON(ctx, hc, u, &md); err != nil {
			errs = append(errs, err)
			continue
		}
		if md.Issuer != issuer {
			errs = append(errs, fmt.Errorf("%s names issuer %q, not %q", u, md.Issuer, issuer))
			continue
		}
		v := want(md)
		if v == "" {
			errs = append(errs, fmt.Errorf("%s has no %s", u, field))
			continue
		}
		return v, nil
	}
	return "", fmt.Errorf("discovering the issuer's metadata: %w", errors.Join(errs...))
}

func getJSON(ctx context.Context, hc *http.Client, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDocBytes))
		return fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxDocBytes+1))
	if err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	if len(body) > maxDocBytes {
		return fmt.Errorf("GET %s: document larger than %d bytes", u, maxDocBytes)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w", u, err)
	}
	return nil
}
