// Package auth makes a Streamable HTTP MCP endpoint an OAuth 2.1
// resource server, as the MCP authorization specification asks: every
// request must carry a bearer access token that the configured issuer
// issued for this server (RFC 8707 audience), with the scopes the
// request needs; the server publishes RFC 9728 Protected Resource
// Metadata so clients can find the issuer.
//
// JWT access tokens are validated locally against the issuer's published
// keys, found through RFC 8414 or OpenID Connect discovery; with
// WithIntrospection, opaque ones are checked by asking the issuer
// (RFC 7662). A token is never
// logged, and the Authorization header is removed before the wrapped
// handler runs, so nothing downstream can forward it: the token is left
// to the handler only as a SubjectToken (SubjectTokenFromContext), to
// exchange for a token of its own (RFC 8693) and for nothing else.
//
// The stdio transport takes its credentials from the environment and
// does not use this package.
package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"tidings/internal/engine"
	"tidings/internal/xheader"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// Option configures a Guard.
type Option func(*config)

type config struct {
	scopes       []string
	methodScopes map[string][]string
	itemScopes   func(principal, method, name string) []string
	client       *http.Client
	now          func() time.Time
	skew         time.Duration
	logger       *slog.Logger

	introspectID, introspectSecret string
	introspect                     bool
}

// WithScopes sets scopes every request needs. They are also the
// scopes_supported of the metadata, the minimum a client should ask for.
func WithScopes(scopes ...string) Option {
	return func(c *config) { c.scopes = append(c.scopes, scopes...) }
}

// WithMethodScopes adds scopes that requests of one MCP method need on
// top of the server-wide ones, e.g. WithMethodScopes("tools/call",
// "tools:call").
func WithMethodScopes(method string, scopes ...string) Option {
	return func(c *config) {
		if c.methodScopes == nil {
			c.methodScopes = map[string][]string{}
		}
		c.methodScopes[method] = append(c.methodScopes[method], scopes...)
	}
}

// WithItemScopes adds the scopes a request for a given item needs — the
// tool of a tools/call, the prompt of a prompts/get, the URI of a
// resources/read — as fn reports them for the caller's principal. Pass
// (*server.Server).RequiredScopes to enforce what server.RequireScopes
// declared where each item was registered. Requests of the 2025-11-25
// era name no item in their headers: add Middleware to the server, or
// their item scopes go unchecked.
func WithItemScopes(fn func(principal, method, name string) []string) Option {
	return func(c *config) { c.itemScopes = fn }
}

// WithHTTPClient sets the client used for discovery, key fetches and
// introspection
// (default: one with a 10 s timeout).
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.client = hc } }

// WithClock sets the time source for expiry checks and key refetch
// limits (default time.Now), so tests can move time.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithClockSkew sets how far exp, nbf and iat may be off (default 30 s).
func WithClockSkew(d time.Duration) Option { return func(c *config) { c.skew = d } }

// WithIntrospection lets the Guard accept opaque access tokens as well
// as JWTs, for issuers that hand out reference tokens. A token that has
// the shape of a JWT is still validated locally, since that costs no
// round trip; any other is sent to the issuer's RFC 7662
// introspection_endpoint, found by the same discovery as its keys, with
// this resource server's own client credentials (client_secret_basic).
// The token must be active, may name only this issuer and, if it names
// audiences, must name this resource; it must carry an expiry, until
// which the answer is remembered, so a token revoked meanwhile stays
// accepted until then or until it is forgotten. When the issuer cannot
// be asked, the request is refused and the failure logged.
func WithIntrospection(clientID, clientSecret string) Option {
	return func(c *config) {
		c.introspect, c.introspectID, c.introspectSecret = true, clientID, clientSecret
	}
}

// WithLogger sets where failures to reach the issuer are logged (default
// slog.Default). Tokens are never logged.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// Guard is a resource server for one protected resource (one MCP
// endpoint) and one issuer. It is safe for concurrent use.
type Guard struct {
	cfg         config
	resource    string // as configured, for the metadata document
	metadataURL string
	wellKnown   []string // paths the metadata is served at
	metadata    []byte
	v           validator
}

// New returns a Guard for the resource at the canonical URI resource,
// whose tokens come from issuer. Nothing is fetched until the first
// token arrives, so the issuer need not be up yet.
func New(issuer, resource string, opts ...Option) (*Guard, error) {
	cfg := config{now: time.Now, skew: 30 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.client == nil {
		cfg.client = &http.Client{Timeout: 10 * time.Second}
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	if err := checkURL("issuer", issuer); err != nil {
		return nil, err
	}
	if err := checkURL("resource", resource); err != nil {
		return nil, err
	}
	if cfg.introspect && cfg.introspectID == "" {
		return nil, errors.New("introspection needs a client identifier")
	}
	all := slices.Clone(cfg.scopes)
	for _, s := range cfg.methodScopes {
		all = append(all, s...)
	}
	for _, s := range all {
		if s == "" || strings.ContainsAny(s, "\" \\\t\r\n") {
			return nil, fmt.Errorf("scope %q is not a valid scope name", s)
		}
	}
	ru, _ := url.Parse(resource)
	path := strings.TrimSuffix(ru.EscapedPath(), "/")
	base := ru.Scheme + "://" + ru.Host + "/.well-known/oauth-protected-resource"
	g := &Guard{
		cfg:         cfg,
		resource:    resource,
		metadataURL: base + path,
		wellKnown:   []string{"/.well-known/oauth-protected-resource"},
	}
	if path != "" {
		g.wellKnown = append([]string{"/.well-known/oauth-protected-resource" + path}, g.wellKnown...)
	}
	md := map[string]any{
		"resource":                 resource,
		"authorization_servers":    []string{issuer},
		"bearer_methods_supported": []string{"header"},
	}
	if len(cfg.scopes) > 0 {
		md["scopes_supported"] = cfg.scopes
	}
	var err error
	if g.metadata, err = json.Marshal(md); err != nil {
		return nil, fmt.Errorf("encoding the resource metadata: %w", err)
	}
	g.v = validator{
		issuer:   issuer,
		audience: canonicalResource(resource),
		skew:     cfg.skew,
		now:      cfg.now,
		keys: &keySource{
			issuer: issuer, client: cfg.client, now: cfg.now,
			interval: 30 * time.Second, backoff: 5 * time.Second,
		},
	}
	if cfg.introspect {
		g.v.introspect = &introspector{
			issuer: issuer, clientID: cfg.introspectID, clientSecret: cfg.introspectSecret, client: cfg.client,
			slots: make(chan struct{}, maxIntrospections), now: cfg.now,
		}
	}
	return g, nil
}

func checkURL(what, s string) error {
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Errorf("%s %q: %w", what, s, err)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Fragment != "" || u.RawQuery != "" ||
		strings.ContainsAny(s, "\"\\ ") {
		return fmt.Errorf("%s %q must be an absolute http(s) URL without query or fragment", what, s)
	}
	return nil
}

// canonicalResource lowercases the scheme and host and drops a lone
// trailing slash, so that audiences differing only there still match.
func canonicalResource(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return s
	}
	u.Scheme, u.Host = strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	if u.Path == "/" {
		u.Path, u.RawPath = "", ""
	}
	return u.String()
}

// MetadataURL is the URL of the Protected Resource Metadata, as named
// in challenges: the well-known URI with the resource's path appended.
func (g *Guard) MetadataURL() string { return g.metadataURL }

// Metadata serves the RFC 9728 Protected Resource Metadata document.
func (g *Guard) Metadata() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "use GET", http.StatusMethodNotAllowed)
			return
		}
		h := w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Access-Control-Allow-Origin", "*")
		h.Set("Cache-Control", "max-age=3600")
		_, _ = w.Write(g.metadata)
	})
}

// Mount serves next behind Require at the resource's path (or "/" for a
// resource without one) and the metadata at both well-known forms: the
// path-suffixed one the challenges name and the root one.
func (g *Guard) Mount(mux *http.ServeMux, next http.Handler) {
	u, _ := url.Parse(g.resource)
	path := u.Path
	if path == "" {
		path = "/"
	}
	mux.Handle(path, g.Require(next))
	for _, p := range g.wellKnown {
		mux.Handle(p, g.Metadata())
	}
}

type ctxKey struct{}

// FromContext returns the validated token of the request ctx belongs to.
func FromContext(ctx context.Context) (*Info, bool) {
	i, ok := ctx.Value(ctxKey{}).(*Info)
	return i, ok
}

// Principal names the caller of a request that passed Require ("" for
// any other), as Info.Principal does — issuer and subject or client id,
// kept apart so that no token can pass for another caller; give it to
// streamhttp.WithPrincipal.
func Principal(r *http.Request) string {
	if i, ok := FromContext(r.Context()); ok {
		return i.Principal()
	}
	return ""
}

// Require refuses every request without a valid token before next sees
// it. The scopes an MCP method needs are checked against the Mcp-Method
// and Mcp-Name headers, which the 2026-07-28 transport requires and
// verifies against the body, so a false header is refused before
// dispatch. Requests of the 2025-11-25 era carry no such header; add
// Middleware to the server to check their method scopes too.
func (g *Guard) Require(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("access_token") {
			g.fail(w, http.StatusBadRequest, "invalid_request", "send the access token in the Authorization header", "")
			return
		}
		raw, ok, err := bearerToken(r.Header)
		if err != nil {
			g.fail(w, http.StatusBadRequest, "invalid_request", "malformed Authorization header", "")
			return
		}
		method := r.Header.Get(mcp.HeaderMethod)
		name := nameOf(method, r.Header)
		// Before a token is validated, item scopes are those an anonymous
		// caller would need: a challenge must not reveal what a hidden
		// item requires, or that it exists.
		need := g.required("", method, name)
		if !ok {
			g.fail(w, http.StatusUnauthorized, "", "", strings.Join(need, " "))
			return
		}
		info, err := g.v.validate(r.Context(), raw)
		if err != nil {
			if r.Context().Err() != nil {
				return // the client went away; nothing to answer or log
			}
			var te *tokenError
			if !errors.As(err, &te) {
				g.cfg.logger.Warn("cannot validate access tokens", "issuer", g.v.issuer, "err", err)
				err = invalid("the token could not be validated")
			}
			g.fail(w, http.StatusUnauthorized, "invalid_token", err.Error(), strings.Join(need, " "))
			return
		}
		need = g.required(info.Principal(), method, name)
		if !hasScopes(info.Scopes, need) {
			g.fail(w, http.StatusForbidden, "insufficient_scope", "the token lacks a scope this request needs", strings.Join(need, " "))
			return
		}
		ctx := context.WithValue(r.Context(), ctxKey{}, info)
		ctx = context.WithValue(ctx, subjectKey{}, &SubjectToken{raw: raw})
		r2 := r.WithContext(ctx)
		r2.Header = r.Header.Clone()
		r2.Header.Del("Authorization")
		next.ServeHTTP(w, r2)
	})
}

// Middleware checks the scopes of every request that reaches the server
// with a token in its context — server-wide, the method's, and the
// item's (WithItemScopes and server.RequireScopes) — whatever the era; a
// request without one (stdio, or no Guard in front) passes untouched.
// It answers an insufficient scope with a JSON-RPC error, since the HTTP
// response may already be under way; Require gives modern requests the
// 403 challenge before that.
func (g *Guard) Middleware() server.Middleware {
	return func(next server.MethodHandler) server.MethodHandler {
		return func(ctx context.Context, req *server.Request) error {
			if info, ok := FromContext(ctx); ok {
				if need := g.required(req.Principal, req.Method, req.Name, req.Scopes...); !hasScopes(info.Scopes, need) {
					return jsonrpc.NewError(jsonrpc.CodeInvalidRequest, "Forbidden: insufficient scope",
						map[string]string{"scope": strings.Join(need, " ")})
				}
			}
			return next(ctx, req)
		}
	}
}

func nameOf(method string, h http.Header) string {
	if m, _ := engine.Lookup(method); !m.NamesItem() {
		return ""
	}
	if len(h.Values(mcp.HeaderName)) != 1 {
		return ""
	}
	v, err := xheader.Decode(h.Get(mcp.HeaderName))
	if err != nil {
		return ""
	}
	return v
}

// required lists the scopes a request of principal needs: the
// server-wide ones, the method's, the item's (WithItemScopes), and those
// declared where the item was registered.
func (g *Guard) required(principal, method, name string, declared ...string) []string {
	need := slices.Clone(g.cfg.scopes)
	need = append(need, g.cfg.methodScopes[method]...)
	if name != "" && g.cfg.itemScopes != nil {
		need = append(need, g.cfg.itemScopes(principal, method, name)...)
	}
	need = append(need, declared...)
	slices.Sort(need)
	return slices.Compact(need)
}

// hasScopes reports whether granted covers every needed scope. Scopes
// form a hierarchy by colon-separated prefixes: "tools" grants
// "tools:call" and "tools:call:search", but "tools:call" does not grant
// "tools".
func hasScopes(granted, need []string) bool {
	for _, n := range need {
		if !slices.ContainsFunc(granted, func(s string) bool {
			return s == n || strings.HasPrefix(n, s+":")
		}) {
			return false
		}
	}
	return true
}

func (g *Guard) fail(w http.ResponseWriter, status int, code, desc, scope string) {
	h := w.Header()
	h.Set("WWW-Authenticate", challenge(code, desc, scope, g.metadataURL))
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	body := map[string]string{"error": code, "error_description": desc}
	if code == "" {
		body = map[string]string{"error": "unauthorized", "error_description": "this resource needs a bearer access token"}
	}
	b, _ := json.Marshal(body)
	_, _ = w.Write(b)
}
