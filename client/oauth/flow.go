package oauth

import (
	"context"
	"crypto"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-json-experiment/json"
	"golang.org/x/oauth2"
)

// Config configures a [Flow]. Only Interaction is needed for the
// authorization code grant; everything else has a default.
type Config struct {
	// HTTPClient sends the flow's own requests: metadata, registration,
	// token requests. Default: a client with a 30 s timeout. Token and
	// registration requests never follow redirects.
	HTTPClient *http.Client
	// Interaction is the user's part of the authorization code grant.
	// Required for it; unused by the other grants.
	Interaction Interaction
	// Store keeps registered clients and tokens across runs. Default: in
	// memory, for the Flow's life.
	Store Store
	// Logger gets the flow's events (never a token, secret or code).
	// Default: discard.
	Logger *slog.Logger

	// ClientName is the client_name of dynamic registrations.
	ClientName string
	// ClientURI is the client_uri of dynamic registrations.
	ClientURI string
	// ClientMetadataURL is the HTTPS URL of the client's Client ID
	// Metadata Document, used as its client_id with authorization servers
	// that advertise client_id_metadata_document_supported.
	ClientMetadataURL string
	// ApplicationType is the application_type of dynamic registrations:
	// "native" or "web". Default: native for a loopback or private-scheme
	// redirect URI, web otherwise.
	ApplicationType string

	// ClientID and ClientSecret are pre-registered credentials, used
	// before any other way of identifying the client.
	ClientID     string
	ClientSecret string
	// ClientIssuer is the issuer identifier of the authorization server
	// ClientID was registered with. It is required with ClientID (New
	// fails without it, unless TrustFirstIssuer): a client ID, and above
	// all a secret or key, belongs to one authorization server, and the
	// MCP servers the flow meets name their own, any of which may be an
	// attacker's. The credentials go to no other server: when an MCP
	// server names another one, the request fails with ErrClientIssuer
	// rather than identifying the client some other way, as the MCP
	// specification advises. A public client ID (no secret, no key) is
	// held to the same rule, so that the first MCP server cannot claim it
	// for an authorization server of its choice either.
	ClientIssuer string
	// TrustFirstIssuer, when ClientIssuer is empty, binds the
	// pre-registered credentials to the first authorization server an
	// MCP server names, remembered in the Store per ClientID.
	//
	// It is dangerous: whichever MCP server the flow meets first chooses
	// where the client secret or client assertions are sent. It exists
	// for test harnesses that learn the authorization server only at run
	// time, and talk to nothing else.
	TrustFirstIssuer bool
	// ClientAuthMethod is how the pre-registered client authenticates at
	// the token endpoint (AuthClientSecretBasic, AuthClientSecretPost,
	// AuthPrivateKeyJWT, AuthNone). Default, from what the client has
	// and the server's token_endpoint_auth_methods_supported:
	// private_key_jwt with a PrivateKey when the server lists it, or
	// lists nothing and there is no secret to use instead; else, with a
	// ClientSecret, client_secret_basic or client_secret_post as the
	// server supports (basic when it lists nothing, as RFC 8414 says);
	// else none.
	ClientAuthMethod string
	// PrivateKey signs private_key_jwt client assertions (RFC 7523 §2.2).
	PrivateKey crypto.Signer
	// PrivateKeyAlg is the JWS algorithm of PrivateKey's assertions.
	// Default: ES256/ES384/ES512 by curve, EdDSA, or RS256.
	PrivateKeyAlg string
	// PrivateKeyID is the kid of PrivateKey's assertions, if any.
	PrivateKeyID string

	// Scopes are asked for in every authorization, besides the ones the
	// server names.
	Scopes []string
	// NoOfflineAccess stops the flow from adding offline_access to its
	// scopes when the authorization server lists it (it does, to get a
	// refresh token, SEP-2207).
	NoOfflineAccess bool

	// Grant is how tokens are obtained. Default (nil): the authorization
	// code grant with PKCE, through Interaction.
	Grant Grant

	// DPoP, when true, asks for DPoP-bound tokens (RFC 9449) from
	// authorization servers that support them: a token bound to a key
	// is worthless to whoever steals it without the key.
	DPoP bool
	// DPoPKey is the key DPoP proofs are signed with (ECDSA P-256,
	// P-384 or P-521, Ed25519, or RSA), implying DPoP. A host that keeps
	// tokens across runs in its Store needs the same key on the next run:
	// a saved token bound to another key is not used. Default, with DPoP:
	// a P-256 key made for the Flow, for its life only.
	DPoPKey crypto.Signer

	// AllowHTTP lets authorization servers be reached over plain HTTP
	// anywhere; without it only HTTPS, or HTTP on a loopback address,
	// is accepted (OAuth 2.1 §1.5).
	AllowHTTP bool

	// AuthorizeTimeout bounds an authorization: the user's login at the
	// authorization server (Interaction.Authorize) and the token
	// requests that follow. It runs detached from the request whose
	// challenge started it, which may be cancelled, or have a short
	// timeout of its own, while other requests wait for the same login;
	// each of them still stops waiting when its own context ends, and
	// the login goes on for the rest. Close ends it too. Default 5
	// minutes.
	AuthorizeTimeout time.Duration

	// MaxStepUps bounds the re-authorizations for more scope
	// (insufficient_scope, on a 403 or a 401) the flow makes for one
	// operation of one server, as the MCP specification has clients
	// track them "for the same resource and operation". An operation is
	// what the request's Mcp-Method and Mcp-Name header fields name (a
	// tools/call of one tool, say); a request without them, such as a
	// 2025-11-25 session's, counts as its HTTP method, so that all of a
	// server's such requests share one budget. Each step-up asks for the
	// union of the scopes asked for before and the challenge's, and no
	// scope set is asked for twice. Default 3.
	MaxStepUps int

	// Now is the clock. Default: time.Now.
	Now func() time.Time
}

// Flow is an OAuth 2.1 client for MCP servers: it puts tokens on the
// client's requests and answers the servers' 401 and 403 challenges by
// discovering their authorization servers, identifying itself, and
// obtaining, refreshing or stepping up tokens. One Flow may serve
// clients of several servers: it keeps a token per server and a client
// identity per authorization server (pre-registered credentials,
// though, serve the one authorization server Config.ClientIssuer names).
// It is safe for concurrent use;
// while it obtains a token for a server (the user may take minutes),
// other requests to that server wait for it, or for their context (see
// Config.AuthorizeTimeout). A Flow runs each authorization in a
// goroutine of its own; [Flow.Close] ends them.
type Flow struct {
	cfg     Config
	hc      *http.Client // metadata
	tokenHC *http.Client // token and registration requests
	log     *slog.Logger
	store   Store
	now     func() time.Time
	dpop    *dpopKey

	mu        sync.Mutex
	servers   map[string]*serverState
	meta      map[string]cachedMeta
	clients   map[string]*clientInfo
	asNonces  map[string]*nonceBox
	preIssuer string
	// issuerLocks serialise client registration per issuer (lockIssuer).
	issuerLocks map[string]chan struct{}
	closed      bool

	// life ends at Close; logins counts the authorizations running in
	// the Flow's goroutines (see login).
	life    context.Context
	endLife context.CancelFunc
	logins  sync.WaitGroup
}

// serverState is what a flow knows of one MCP server.
type serverState struct {
	key  string
	url  *url.URL
	lock chan struct{} // held while obtaining or refreshing a token

	loaded  bool     // the Store was consulted
	sess    *session // the current token, or nil
	rsNonce nonceBox // the server's latest DPoP nonce

	streak  int             // fresh tokens refused at first use, in a row
	stepUps map[string]int  // re-authorizations per operation (see operationOf)
	tried   map[string]bool // scope sets re-authorized for, sorted and joined
}

type cachedMeta struct {
	md  *serverMetadata
	exp time.Time
}

// Store keys.
const (
	keyClient        = "oauth/client/"               // + issuer
	keySession       = "oauth/session/"              // + server URL
	keyPreregistered = "oauth/preregistered-issuer/" // + client ID
)

// New returns a Flow configured by cfg.
func New(cfg Config) (*Flow, error) {
	f := &Flow{
		cfg:         cfg,
		hc:          cfg.HTTPClient,
		log:         cfg.Logger,
		store:       cfg.Store,
		now:         cfg.Now,
		servers:     map[string]*serverState{},
		meta:        map[string]cachedMeta{},
		clients:     map[string]*clientInfo{},
		asNonces:    map[string]*nonceBox{},
		issuerLocks: map[string]chan struct{}{},
	}
	if f.hc == nil {
		f.hc = &http.Client{Timeout: 30 * time.Second}
	}
	base := f.hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	f.tokenHC = &http.Client{
		Transport:     tokenTransport{base: base},
		Timeout:       f.hc.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if f.store == nil {
		f.store = newVolatileStore()
	}
	if f.now == nil {
		f.now = time.Now
	}
	if f.cfg.MaxStepUps <= 0 {
		f.cfg.MaxStepUps = 3
	}
	if f.cfg.AuthorizeTimeout <= 0 {
		f.cfg.AuthorizeTimeout = 5 * time.Minute
	}
	if cfg.ClientID != "" {
		switch {
		case cfg.ClientIssuer != "":
			if err := checkSecureURL(cfg.ClientIssuer, cfg.AllowHTTP); err != nil {
				return nil, fmt.Errorf("oauth: Config.ClientIssuer: %w", err)
			}
		case !cfg.TrustFirstIssuer:
			return nil, errors.New("oauth: Config.ClientID needs Config.ClientIssuer, the authorization server it was registered with")
		}
	}
	if cfg.Grant == nil && cfg.Interaction == nil {
		return nil, errors.New("oauth: the authorization code grant needs an Interaction")
	}
	if cfg.Grant != nil {
		if err := cfg.Grant.check(&f.cfg); err != nil {
			return nil, err
		}
	}
	if cfg.ClientMetadataURL != "" {
		u, err := url.Parse(cfg.ClientMetadataURL)
		if err != nil || u.Scheme != "https" || u.Host == "" || strings.Trim(u.Path, "/") == "" {
			return nil, errors.New("oauth: ClientMetadataURL must be an https URL with a path")
		}
	}
	if cfg.DPoP || cfg.DPoPKey != nil {
		k, err := newDPoPKey(cfg.DPoPKey, f.now)
		if err != nil {
			return nil, err
		}
		f.dpop = k
	}
	f.life, f.endLife = context.WithCancel(context.Background())
	return f, nil
}

// serverKey is the identity of the MCP server a request goes to: its
// URL without query or fragment, scheme and host lowercased.
func serverKey(u *url.URL) (string, *url.URL) {
	c := &url.URL{Scheme: strings.ToLower(u.Scheme), Host: strings.ToLower(u.Host), Path: u.Path, RawPath: u.RawPath}
	return c.String(), c
}

func (f *Flow) server(u *url.URL) *serverState {
	k, cu := serverKey(u)
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.servers[k]
	if !ok {
		st = &serverState{key: k, url: cu, lock: make(chan struct{}, 1), stepUps: map[string]int{}, tried: map[string]bool{}}
		f.servers[k] = st
	}
	return st
}

func (st *serverState) acquire(ctx context.Context) error {
	select {
	case st.lock <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (st *serverState) release() { <-st.lock }

// Authorize puts the flow's credentials for req's server on req: the
// Authorization header, and a DPoP proof for a DPoP-bound token. It
// refreshes an expired token first. With no token, or an expired one the
// authorization server will not refresh, it sets nothing: the server's
// 401 then starts the flow, through [Flow.Challenge]. When the refresh
// fails otherwise (the authorization server unreachable, say) it returns
// the error and keeps the token for the next try.
func (f *Flow) Authorize(ctx context.Context, req *http.Request) error {
	st := f.server(req.URL)
	if err := st.acquire(ctx); err != nil {
		return err
	}
	defer st.release()
	f.load(ctx, st)
	s := st.sess
	if s == nil {
		return nil
	}
	if s.expired(f.now()) {
		if err := f.renew(ctx, st); err != nil || st.sess == nil {
			return err
		}
	}
	return f.present(req, st)
}

// present sets the current token's credentials on req.
func (f *Flow) present(req *http.Request, st *serverState) error {
	s := st.sess
	s.presented++
	if s.dpop() {
		if f.dpop == nil {
			return errors.New("oauth: DPoP-bound token without a DPoP key")
		}
		p, err := f.dpop.proof(req.Method, req.URL.String(), s.AccessToken, st.rsNonce.get())
		if err != nil {
			return fmt.Errorf("oauth: DPoP proof: %w", err)
		}
		req.Header.Set("Authorization", "DPoP "+s.AccessToken)
		req.Header.Set("DPoP", p)
		return nil
	}
	req.Header.Set("Authorization", "Bearer "+s.AccessToken)
	return nil
}

// presentedToken is the access token req carried, or "".
func presentedToken(req *http.Request) string {
	v := req.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(v, " ")
	if !ok || !(strings.EqualFold(scheme, "Bearer") || strings.EqualFold(scheme, "DPoP")) {
		return ""
	}
	return strings.TrimSpace(tok)
}

// Challenge answers a 401 or 403 response to a request Authorize
// prepared. On a 401 it refreshes the token, or authorizes anew
// (discovering the server's authorization server, which may have
// changed); on a 401 naming use_dpop_nonce it takes the server's nonce;
// on insufficient_scope (a 403, or a 401) it re-authorizes with the
// union of the scopes it asked for and the ones the challenge names,
// once per scope set and at most MaxStepUps times per operation. It
// reports retry=true
// when a new try is worth it; false with a nil error when the refusal
// is not one it can answer.
func (f *Flow) Challenge(ctx context.Context, req *http.Request, resp *http.Response) (retry bool, err error) {
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		return false, nil
	}
	st := f.server(req.URL)
	if err := st.acquire(ctx); err != nil {
		return false, err
	}
	lk := &heldLock{st: st}
	defer lk.release()
	f.load(ctx, st)

	ch, _ := findChallenge(challengesOf(resp.Header), "DPoP", "Bearer")
	presented := presentedToken(req)
	s := st.sess

	// Another request got a new token meanwhile: try with it.
	if s != nil && s.AccessToken != presented {
		return true, nil
	}

	if resp.StatusCode == http.StatusUnauthorized && ch.Param("error") == "use_dpop_nonce" {
		n := resp.Header.Get("DPoP-Nonce")
		if n == "" || s == nil || !s.dpop() || n == proofNonce(req.Header.Get("DPoP")) {
			return false, nil
		}
		st.rsNonce.set(n)
		f.log.Debug("oauth: server asked for a DPoP nonce", "server", st.key)
		return true, nil
	}

	// insufficient_scope is a step-up whatever the status: a server that
	// sends it with a 401 is held to the same limits.
	if strings.EqualFold(ch.Param("error"), "insufficient_scope") {
		return f.stepUp(ctx, lk, operationOf(req), ch)
	}
	if resp.StatusCode == http.StatusForbidden {
		return false, nil
	}

	// 401.
	if s != nil {
		if s.fresh && s.presented <= 1 {
			st.streak++
		} else {
			st.streak = 0
		}
		if st.streak >= 2 {
			f.drop(ctx, st)
			return false, fmt.Errorf("oauth: %s refuses the tokens its authorization server issues", st.key)
		}
	}
	prm, err := f.discoverResource(ctx, st.url, ch.Param("resource_metadata"))
	if err != nil {
		return false, err
	}
	issuer := f.chooseIssuer(ctx, prm, s)
	if s != nil && s.RefreshToken != "" && issuer == s.Issuer {
		err := f.refresh(ctx, st)
		if err == nil {
			return true, nil
		}
		if !refreshRefused(err) {
			return false, err
		}
	}
	scopes := scopeList(ch.Param("scope"))
	switch {
	case len(scopes) == 0 && s != nil && len(s.Requested) > 0:
		scopes = s.Requested
	case len(scopes) == 0:
		scopes = prm.ScopesSupported
	case s != nil:
		scopes = union(s.Requested, scopes)
	}
	if err := f.login(ctx, lk, prm, issuer, scopes); err != nil {
		return false, err
	}
	return true, nil
}

// operationOf names the operation req performs, for the step-up budget
// (Config.MaxStepUps): the MCP method and name of the Mcp-Method and
// Mcp-Name header fields, else the HTTP method.
func operationOf(req *http.Request) string {
	if m := req.Header.Get("Mcp-Method"); m != "" {
		return m + " " + req.Header.Get("Mcp-Name")
	}
	return req.Method
}

// stepUp answers insufficient_scope to a request performing op.
func (f *Flow) stepUp(ctx context.Context, lk *heldLock, op string, ch AuthChallenge) (bool, error) {
	st := lk.st
	s := st.sess
	need := scopeList(ch.Param("scope"))
	var held []string
	if s != nil {
		held = s.Requested
	}
	want := union(held, need)
	if s != nil && len(need) > 0 && subset(want, held) {
		// Everything was asked for already and the server still refuses:
		// asking the user again would not help.
		return false, &ScopeError{Server: st.key, Scopes: need}
	}
	k := strings.Join(sortedCopy(want), " ")
	if st.tried[k] || st.stepUps[op] >= f.cfg.MaxStepUps {
		return false, &ScopeError{Server: st.key, Scopes: need}
	}
	st.tried[k] = true
	st.stepUps[op]++
	prm, err := f.discoverResource(ctx, st.url, ch.Param("resource_metadata"))
	if err != nil {
		return false, err
	}
	f.log.Info("oauth: stepping up authorization", "server", st.key, "scopes", want)
	if err := f.login(ctx, lk, prm, f.chooseIssuer(ctx, prm, s), want); err != nil {
		return false, err
	}
	return true, nil
}

// ScopeError is a final refusal for want of scope: the server asks for
// scopes the flow already asked for, or the step-up limit is reached.
type ScopeError struct {
	Server string
	Scopes []string // what the server's challenge named
}

func (e *ScopeError) Error() string {
	return fmt.Sprintf("oauth: %s requires scope %q, which authorization did not grant", e.Server, strings.Join(e.Scopes, " "))
}

// chooseIssuer picks the authorization server of the ones the metadata
// lists: the current token's, if still listed; else the pre-registered
// client's, if listed; else the first.
func (f *Flow) chooseIssuer(ctx context.Context, prm *resourceMetadata, s *session) string {
	if s != nil && slices.Contains(prm.AuthorizationServers, s.Issuer) {
		return s.Issuer
	}
	if f.cfg.ClientID != "" {
		if bound := f.boundIssuer(ctx, ""); bound != "" && slices.Contains(prm.AuthorizationServers, bound) {
			return bound
		}
	}
	return prm.AuthorizationServers[0]
}

// heldLock is a server's lock as its holder sees it: released once,
// either by the holder or by the login it is handed to.
type heldLock struct {
	st   *serverState
	gone bool
}

func (h *heldLock) release() {
	if !h.gone {
		h.gone = true
		h.st.release()
	}
}

// handOff gives the lock to another goroutine, which must call the
// function it returns.
func (h *heldLock) handOff() func() {
	h.gone = true
	return h.st.release
}

// ErrClosed is returned for an authorization asked of a Flow after
// [Flow.Close].
var ErrClosed = errors.New("oauth: the flow is closed")

// login obtains a new token for lk's server and waits for it, or for
// ctx. The authorization runs in a goroutine of the Flow's, which takes
// over the server's lock, under a context that keeps ctx's values but
// not its cancellation or deadline: it is bounded by
// Config.AuthorizeTimeout and by [Flow.Close] instead. So a request that
// gives up (its caller cancels it, or its own timeout is short) leaves
// the user's login going for the requests that wait for the same
// server, and for the next ones.
func (f *Flow) login(ctx context.Context, lk *heldLock, prm *resourceMetadata, issuer string, scopes []string) error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return ErrClosed
	}
	f.logins.Add(1)
	f.mu.Unlock()
	st := lk.st
	release := lk.handOff()
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.cfg.AuthorizeTimeout)
	stop := context.AfterFunc(f.life, cancel)
	done := make(chan error, 1)
	go func() {
		defer f.logins.Done()
		defer release()
		defer cancel()
		defer stop()
		err := f.obtain(lctx, st, prm, issuer, scopes)
		if err != nil && lctx.Err() != nil && f.life.Err() != nil {
			err = fmt.Errorf("%w: %w", ErrClosed, err)
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		f.log.Debug("oauth: a request stopped waiting for the authorization; it goes on", "server", st.key)
		return ctx.Err()
	}
}

// Close ends the authorizations in progress, cancelling their
// Interaction's context, and waits for their goroutines to return;
// requests waiting for one get an error wrapping ErrClosed. Afterwards
// the Flow starts no authorization (Challenge reports ErrClosed), though
// it still presents and refreshes the tokens it holds. A host closes
// the Flow when it is done with the clients that use it: package
// client's Client.Close does not, as one Flow may serve several
// clients. Close is safe to call more than once; it returns nil.
func (f *Flow) Close() error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.endLife()
	f.logins.Wait()
	return nil
}

// obtain gets a new token for st from issuer, by the configured grant.
func (f *Flow) obtain(ctx context.Context, st *serverState, prm *resourceMetadata, issuer string, scopes []string) error {
	as, err := f.discoverServer(ctx, issuer)
	if err != nil {
		return err
	}
	if as.TokenEndpoint == "" {
		return fmt.Errorf("oauth: %s has no token endpoint", issuer)
	}
	if s := st.sess; s != nil && s.Issuer != issuer {
		f.log.Info("oauth: the server's authorization server changed", "server", st.key, "from", s.Issuer, "to", issuer)
	}
	scopes = union(scopes, f.cfg.Scopes)
	g := f.cfg.Grant
	if g == nil {
		g = authorizationCode{}
	}
	if g.refreshable() && !f.cfg.NoOfflineAccess && slices.Contains(as.ScopesSupported, "offline_access") {
		scopes = union(scopes, []string{"offline_access"})
	}
	req := &grantRequest{st: st, prm: prm, as: as, issuer: issuer, resource: prm.Resource, scopes: scopes}
	f.log.Debug("oauth: obtaining a token", "server", st.key, "issuer", issuer, "resource", prm.Resource, "scopes", scopes)
	tok, c, err := g.obtain(ctx, f, req)
	if err != nil {
		return err
	}
	s := &session{
		Issuer:       issuer,
		ClientID:     c.ClientID,
		Resource:     prm.Resource,
		Requested:    scopes,
		Granted:      scopeList(tok.Scope),
		AccessToken:  tok.AccessToken,
		TokenType:    tok.TokenType,
		RefreshToken: tok.RefreshToken,
		Expiry:       tok.Expiry,
		fresh:        true,
	}
	if s.dpop() {
		if f.dpop == nil {
			return errors.New("oauth: the authorization server issued a DPoP-bound token to a client without DPoP")
		}
		s.JKT = f.dpop.jkt
	}
	f.set(ctx, st, s)
	f.log.Info("oauth: authorized", "server", st.key, "issuer", issuer, "scopes", s.Granted, "token_type", s.TokenType, "expires", s.Expiry, "refreshable", s.RefreshToken != "")
	return nil
}

// refresh replaces st's token by the refresh_token grant. When the
// refresh token is refused for good (see refreshRefused) it is dropped
// and the caller authorizes anew; on any other failure (the network, a
// server error, the caller's context) the session is kept as it is, for
// a later try, and the error is returned.
func (f *Flow) refresh(ctx context.Context, st *serverState) error {
	s := st.sess
	as, err := f.discoverServer(ctx, s.Issuer)
	if err != nil {
		return fmt.Errorf("oauth: refreshing the token for %s: %w", st.key, err)
	}
	c, err := f.clientFor(ctx, s.Issuer, as, f.cfg.Interaction != nil && (f.cfg.Grant == nil || f.cfg.Grant.refreshable()))
	if err != nil && !errors.Is(err, ErrClientIssuer) {
		return fmt.Errorf("oauth: refreshing the token for %s: %w", st.key, err)
	}
	if err != nil || c.ClientID != s.ClientID {
		// The token came to another client (a registration since lost):
		// its refresh token is of no use to this one.
		f.dropRefreshToken(ctx, st)
		return errClientGone
	}
	tok, err := f.refreshToken(ctx, st, as, c, s)
	if err != nil {
		f.log.Info("oauth: refresh failed", "server", st.key, "issuer", s.Issuer, "err", err)
		if !refreshRefused(err) {
			return fmt.Errorf("oauth: refreshing the token for %s: %w", st.key, err)
		}
		var te *TokenError
		if errors.As(err, &te) && te.Code == "invalid_client" && c.Kind == "registered" {
			f.forgetClient(ctx, s.Issuer)
		}
		f.dropRefreshToken(ctx, st)
		return err
	}
	ns := &session{
		Issuer:       s.Issuer,
		ClientID:     s.ClientID,
		Resource:     s.Resource,
		Requested:    s.Requested,
		Granted:      s.Granted,
		AccessToken:  tok.AccessToken,
		TokenType:    tok.TokenType,
		RefreshToken: tok.RefreshToken,
		Expiry:       tok.Expiry,
	}
	if g := scopeList(tok.Scope); len(g) > 0 {
		ns.Granted = g
	}
	if ns.RefreshToken == "" {
		ns.RefreshToken = s.RefreshToken
	}
	if ns.dpop() && f.dpop != nil {
		ns.JKT = f.dpop.jkt
	}
	f.set(ctx, st, ns)
	f.log.Info("oauth: refreshed", "server", st.key, "issuer", s.Issuer, "expires", ns.Expiry)
	return nil
}

// errClientGone: the session's token was issued to a client the flow no
// longer has, so its refresh token cannot be used.
var errClientGone = errors.New("oauth: the client that obtained the token is gone")

// refreshRefused reports whether err, from refresh, means the refresh
// token will never work: the authorization server refused the grant or
// the client (RFC 6749 §5.2), or the client is gone. Other failures pass
// (a network error, a server error, a timeout), and dropping the session
// for one of them would send the user back through the browser, or lose
// a token the next try would have refreshed.
func refreshRefused(err error) bool {
	var te *TokenError
	if errors.As(err, &te) {
		switch te.Code {
		case "invalid_grant", "invalid_client", "unauthorized_client":
			return true
		}
	}
	return errors.Is(err, errClientGone)
}

// dropRefreshToken keeps st's access token and forgets its refresh token.
func (f *Flow) dropRefreshToken(ctx context.Context, st *serverState) {
	ns := *st.sess
	ns.RefreshToken = ""
	f.set(ctx, st, &ns)
}

// renew refreshes st's expired token. It drops the session when the
// token cannot be refreshed (none, or refused), reporting nil, so that
// the request goes without and the server's 401 starts a new
// authorization; on another failure it keeps the session and returns
// the error.
func (f *Flow) renew(ctx context.Context, st *serverState) error {
	if st.sess.RefreshToken != "" {
		err := f.refresh(ctx, st)
		if err == nil {
			return nil
		}
		if !refreshRefused(err) {
			return err
		}
	}
	f.log.Debug("oauth: token expired", "server", st.key)
	f.drop(ctx, st)
	return nil
}

// load fills st from the Store on first use.
func (f *Flow) load(ctx context.Context, st *serverState) {
	if st.loaded {
		return
	}
	st.loaded = true
	raw, err := f.store.Load(ctx, keySession+st.key)
	if err != nil {
		if !errors.Is(err, ErrNotStored) {
			f.log.Warn("oauth: could not load the saved token", "server", st.key, "err", err)
		}
		return
	}
	var s session
	if json.Unmarshal(raw, &s) != nil || s.AccessToken == "" {
		return
	}
	if s.dpop() && (f.dpop == nil || s.JKT != f.dpop.jkt) {
		return // bound to a key this flow does not hold
	}
	st.sess = &s
}

func (f *Flow) set(ctx context.Context, st *serverState, s *session) {
	st.sess = s
	raw, err := json.Marshal(s)
	if err == nil {
		err = f.store.Save(ctx, keySession+st.key, raw)
	}
	if err != nil {
		f.log.Warn("oauth: could not save the token", "server", st.key, "err", err)
	}
}

func (f *Flow) drop(ctx context.Context, st *serverState) {
	st.sess = nil
	if err := f.store.Delete(ctx, keySession+st.key); err != nil {
		f.log.Warn("oauth: could not delete the saved token", "server", st.key, "err", err)
	}
}

// Forget drops the token the flow holds for the MCP server at serverURL
// (a sign-out). Registered clients are kept.
func (f *Flow) Forget(ctx context.Context, serverURL string) error {
	u, err := url.Parse(serverURL)
	if err != nil {
		return err
	}
	st := f.server(u)
	if err := st.acquire(ctx); err != nil {
		return err
	}
	defer st.release()
	st.loaded = true
	f.drop(ctx, st)
	return nil
}

// Token returns the access token the flow holds for the MCP server at
// serverURL, refreshing it if it has expired; ok is false when it holds
// none (the first request's challenge will get one). As with
// [Flow.Authorize], a refresh that fails other than by the authorization
// server's refusal is an error, and the token is kept.
func (f *Flow) Token(ctx context.Context, serverURL string) (token *oauth2.Token, ok bool, err error) {
	u, err := url.Parse(serverURL)
	if err != nil {
		return nil, false, err
	}
	st := f.server(u)
	if err := st.acquire(ctx); err != nil {
		return nil, false, err
	}
	defer st.release()
	f.load(ctx, st)
	if st.sess != nil && st.sess.expired(f.now()) {
		if err := f.renew(ctx, st); err != nil {
			return nil, false, err
		}
	}
	if st.sess == nil {
		return nil, false, nil
	}
	s := st.sess
	return &oauth2.Token{AccessToken: s.AccessToken, TokenType: s.TokenType, Expiry: s.Expiry}, true, nil
}

func (f *Flow) cachedServer(issuer string) (*serverMetadata, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.meta[issuer]
	if !ok || f.now().After(c.exp) {
		return nil, false
	}
	return c.md, true
}

func (f *Flow) cacheServer(issuer string, md *serverMetadata) {
	f.mu.Lock()
	f.meta[issuer] = cachedMeta{md: md, exp: f.now().Add(time.Hour)}
	f.mu.Unlock()
}

func (f *Flow) asNonce(issuer string) *nonceBox {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.asNonces[issuer]
	if !ok {
		b = &nonceBox{}
		f.asNonces[issuer] = b
	}
	return b
}

// scopeList splits a scope parameter.
func scopeList(s string) []string { return strings.Fields(s) }

// union returns a's scopes followed by b's that a lacks.
func union(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func subset(a, b []string) bool {
	for _, s := range a {
		if !slices.Contains(b, s) {
			return false
		}
	}
	return true
}

func sortedCopy(a []string) []string {
	c := slices.Clone(a)
	slices.Sort(c)
	return c
}

// volatileStore is the default Store: a map, for the Flow's life.
type volatileStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

func newVolatileStore() *volatileStore { return &volatileStore{m: map[string][]byte{}} }

func (s *volatileStore) Load(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotStored, key)
	}
	return slices.Clone(v), nil
}

func (s *volatileStore) Save(_ context.Context, key string, value []byte) error {
	s.mu.Lock()
	s.m[key] = slices.Clone(value)
	s.mu.Unlock()
	return nil
}

func (s *volatileStore) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
	return nil
}
