package gateway

import (
	"container/list"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tidings/auth"
	"tidings/client/oauth"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// An upstream whose Auth is token_exchange is spoken to with a token the
// authorization server issues, for that upstream and in the caller's
// name, in exchange for the caller's own (RFC 8693). The caller's token
// reaches the gateway's origin only through auth.SubjectTokenFromContext
// and leaves only as the subject_token of an exchange; the upstream sees
// the issued token alone.
//
// The exchanger is the upstream client's Authorizer: each HTTP request
// the client sends carries the token of the caller its context names
// (withCaller), obtained once per caller and caller's token and kept
// until shortly before it expires. Every answer of such an upstream
// depends on who asks, so every list is kept per caller, whatever
// cacheScope the upstream gives, and no read is kept at all; its changes
// are heard on one listen per caller that listens here (hold), and told
// to that caller's listens alone.

// check reports what is wrong with x, the token exchange of an upstream
// at upURL; nil x is nothing to check.
func (x *TokenExchange) check(upURL string) error {
	if x == nil {
		return nil
	}
	if x.Issuer == "" || x.ClientID == "" || x.SecretFile == "" {
		return errors.New("token_exchange needs issuer, client_id and client_secret_file")
	}
	if upURL == "" {
		return errors.New("token_exchange is for an upstream over HTTP (url): a stdio upstream is spoken to by the gateway alone")
	}
	if oauth.CheckIssuer(x.Issuer) != nil {
		return fmt.Errorf("token_exchange: the issuer %q must be an https URL, or http on a loopback address: the callers' tokens go there", x.Issuer)
	}
	if x.Resource != "" {
		if r, err := url.Parse(x.Resource); err != nil || !r.IsAbs() || r.Fragment != "" {
			return fmt.Errorf("token_exchange: the resource %q must be an absolute URI without a fragment", x.Resource)
		}
	}
	return nil
}

// ExchangesTokens reports whether an upstream is spoken to with each
// caller's token exchanged (token_exchange): the gateway then needs its
// callers to bring tokens, that is, to be served behind an
// authorization check (auth.Guard), or such an upstream is never
// reached.
func (c *Config) ExchangesTokens() bool {
	for _, u := range c.Upstreams {
		if u.Auth.TokenExchange != nil {
			return true
		}
	}
	return false
}

// callerKey carries, in a request's context, whose token the upstream's
// client is to present.
type callerKey struct{}

// caller is who a request to an upstream speaks for: the principal and,
// for a caller's own request, its token; a listen held for the principal
// carries none, and takes the principal's latest (watch.latest).
type caller struct {
	principal string
	token     *auth.SubjectToken
}

func withCaller(ctx context.Context, c caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// exchangeCaller is the part of the gateway's middleware for upstreams
// that exchange tokens: the request's context is made to name its caller
// and token, the token is noted as the caller's latest for the listens
// held for it, and a subscriptions/listen holds one listen on each such
// upstream for its caller until it ends (release).
func (g *Gateway) exchangeCaller(ctx context.Context, req *server.Request) (context.Context, func()) {
	tok, ok := auth.SubjectTokenFromContext(ctx)
	if !ok || req.Principal == "" {
		return ctx, func() {}
	}
	var releases []func()
	// Held while the holds are taken, so that a reload hands each over
	// to the upstream that replaces its own (adoptListens), or finds it
	// there already.
	g.mu.RLock()
	var exchangers []*exchanger
	for _, u := range g.ups {
		if u.x == nil {
			continue
		}
		exchangers = append(exchangers, u.x)
		u.x.note(req.Principal, tok)
		// A 2025-11-25 session's stream comes as a listen too.
		if req.Method == mcp.MethodListen {
			u.x.hold(req.Principal, tok)
			releases = append(releases, g.releaser(u.cfg.ID, req.Principal))
		}
	}
	g.mu.RUnlock()
	if len(exchangers) == 0 {
		return ctx, func() {}
	}
	ctx = withCaller(ctx, caller{req.Principal, tok})
	if answerDependsOnOffer(req.Method) {
		for _, x := range exchangers {
			x.learn(ctx)
		}
	}
	return ctx, func() {
		for _, r := range releases {
			r()
		}
	}
}

// viewKey is the key under which a list of an upstream that exchanges
// tokens is kept for the caller of ctx: its principal and the digest of
// the token it came with, which the token presented upstream was
// exchanged for — the list is the answer to that credential.
func viewKey(ctx context.Context, principal string) string {
	c, ok := ctx.Value(callerKey{}).(caller)
	if !ok || c.token == nil {
		return principal
	}
	return credentialKey(principal, c.token)
}

func credentialKey(principal string, tok *auth.SubjectToken) string {
	d := tok.Digest()
	return principal + "\x00" + hex.EncodeToString(d[:])
}

// releaser returns the function that lets go of a hold of principal's
// listen on the upstream id: on the upstream of that id when it is
// called, which a reload may have replaced meanwhile (adoptListens).
func (g *Gateway) releaser(id, principal string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			ups, _ := g.upstreams()
			for _, u := range ups {
				if u.cfg.ID == id && u.x != nil {
					u.x.release(principal)
				}
			}
		})
	}
}

// adoptListens has each upstream started by a reload that exchanges
// tokens take over the callers' listens held on the one of its id it
// replaces: their holds, latest tokens and resources. It is called with
// g.mu held, when the upstreams change, so that no hold is let go of in
// between; the returned function, called once g.mu is let go of, opens
// the adopted listens.
func adoptListens(old map[string]*upstream, started []*upstream) func() {
	var opens []func()
	for _, u := range started {
		o := old[u.cfg.ID]
		if u.x == nil || o == nil || o.x == nil {
			continue
		}
		o.x.mu.Lock()
		u.x.mu.Lock()
		for p, w := range o.x.watches {
			u.x.watches[p] = &watch{refs: w.refs, latest: w.latest, uris: maps.Clone(w.uris)}
			opens = append(opens, func() { u.x.relisten(p) })
		}
		u.x.mu.Unlock()
		o.x.mu.Unlock()
	}
	return func() {
		for _, open := range opens {
			open()
		}
	}
}

// exchanger obtains, keeps and presents the exchanged tokens of one
// upstream, and holds its listens per caller.
type exchanger struct {
	u        *upstream
	flow     *oauth.Flow
	audience string
	resource string
	scopes   []string

	mu      sync.Mutex
	tokens  map[tokenKey]*list.Element // of *kept; lru's front is the latest used
	lru     *list.List
	flights map[tokenKey]*flight
	watches map[string]*watch // by principal
	// refused holds, by principal, the refusal of its latest exchange,
	// until one succeeds: the reason a caller sees none of the
	// upstream's items.
	refused map[string]error
	// refusedUntil says, by caller and token, until when a refused
	// exchange is not asked again: the authorization server's answer
	// will not change for the same token, and the callers' listens would
	// otherwise ask on every retry.
	refusedUntil map[tokenKey]time.Time
	ctx          context.Context // the upstream's, once it started
	// learning is closed when the discover under way (learn) ends, nil
	// when none is; learnAgain is when to ask again after one failed.
	learning   chan struct{}
	learnAgain time.Time

	exchanges, failures, evicted atomic.Int64
}

// tokenKey names an exchanged token: the caller, and the digest of the
// caller's token it was obtained for (never the token in clear).
type tokenKey struct {
	principal string
	digest    [32]byte
}

// kept is an exchanged token the gateway keeps.
type kept struct {
	key   tokenKey
	token string
	// until is when it is no longer presented: shortly before it expires.
	until time.Time
	// obtained is when; retry says it was obtained because the upstream
	// refused the one before, and a refusal of it soon after is final.
	obtained time.Time
	retry    bool
}

// flight is an exchange under way, which callers of the same key wait for.
type flight struct {
	done  chan struct{}
	token string
	err   error
}

// Bounds and margins of exchanged tokens.
const (
	// renewBefore is how long before its expiry an exchanged token is
	// replaced; a token shorter-lived than 5 times this is replaced
	// after four fifths of its life.
	renewBefore = 30 * time.Second
	// finalRefusal is how soon after a token was obtained to replace a
	// refused one that the upstream's refusal of it is taken as final.
	finalRefusal = time.Minute
	// refusalHold is how long an exchange the authorization server
	// refused is not asked again for the same token.
	refusalHold = 10 * time.Second
)

// newExchanger reads the secret of cfg.Auth.TokenExchange and makes the
// flow that exchanges tokens for u.
func newExchanger(u *upstream) (*exchanger, error) {
	te := u.cfg.Auth.TokenExchange
	f, err := u.clientFlow("token_exchange", ClientCredentials{Issuer: te.Issuer, ClientID: te.ClientID, SecretFile: te.SecretFile, Scopes: te.Scopes}, u.g.now)
	if err != nil {
		return nil, err
	}
	x := &exchanger{u: u, flow: f, resource: te.Resource, audience: te.Audience, scopes: te.Scopes,
		tokens: map[tokenKey]*list.Element{}, lru: list.New(), flights: map[tokenKey]*flight{}, watches: map[string]*watch{},
		refused: map[string]error{}, refusedUntil: map[tokenKey]time.Time{}}
	if x.resource == "" {
		x.resource = u.cfg.URL
	}
	if x.audience == "" {
		x.audience = x.resource
	}
	return x, nil
}

// Authorize puts on req the exchanged token of the caller ctx names. A
// request that names none is refused here: the upstream is never asked
// in nobody's name, nor in the gateway's.
func (x *exchanger) Authorize(ctx context.Context, req *http.Request) error {
	c, ok := ctx.Value(callerKey{}).(caller)
	if !ok || c.principal == "" {
		return x.refusal("it is reached with each caller's own token exchanged, and this request has no caller", nil)
	}
	tok := c.token
	if tok == nil {
		if tok = x.latest(c.principal); tok == nil {
			return x.refusal("the caller's token to exchange is gone (its listens ended)", nil)
		}
	}
	t, err := x.token(ctx, tokenKey{c.principal, tok.Digest()}, tok, false)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+t)
	return nil
}

// Challenge answers the upstream's 401 to a token it was given: that
// token is dropped and the caller's token exchanged again, once; a
// refusal of the new one is final. A 403 (the token lacks a scope) is
// final at once: another exchange would bring the same scopes.
func (x *exchanger) Challenge(ctx context.Context, req *http.Request, resp *http.Response) (bool, error) {
	c, ok := ctx.Value(callerKey{}).(caller)
	if !ok || resp.StatusCode != http.StatusUnauthorized {
		return false, nil
	}
	tok := c.token
	if tok == nil {
		if tok = x.latest(c.principal); tok == nil {
			return false, nil
		}
	}
	key := tokenKey{c.principal, tok.Digest()}
	sent := strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer ")
	x.mu.Lock()
	if el, ok := x.tokens[key]; ok {
		k := el.Value.(*kept)
		switch {
		case k.token != sent:
			x.mu.Unlock()
			return true, nil // another request has already replaced it
		case k.retry && x.u.g.now().Sub(k.obtained) < finalRefusal:
			x.dropLocked(el)
			x.mu.Unlock()
			return false, x.refusal("it refused the token exchanged for this caller, twice", nil)
		}
		x.dropLocked(el)
	}
	x.mu.Unlock()
	x.u.log.Debug("upstream refused an exchanged token; exchanging the caller's again")
	if _, err := x.token(ctx, key, tok, true); err != nil {
		return false, err
	}
	return true, nil
}

// token returns the exchanged token for key (the caller's token tok):
// kept, or obtained now — once, however many requests ask at a time.
// retry says the upstream refused the one before.
func (x *exchanger) token(ctx context.Context, key tokenKey, tok *auth.SubjectToken, retry bool) (string, error) {
	for {
		now := x.u.g.now()
		x.mu.Lock()
		if el, ok := x.tokens[key]; ok {
			k := el.Value.(*kept)
			if now.Before(k.until) {
				x.lru.MoveToFront(el)
				x.mu.Unlock()
				return k.token, nil
			}
			x.dropLocked(el)
		}
		if until, ok := x.refusedUntil[key]; ok {
			if now.Before(until) {
				err := x.refused[key.principal]
				x.mu.Unlock()
				if err == nil {
					err = x.refusal("the authorization server did not exchange the caller's token", nil)
				}
				return "", err
			}
			delete(x.refusedUntil, key)
		}
		if f, ok := x.flights[key]; ok {
			x.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return "", ctx.Err()
			}
			if f.err == nil {
				return f.token, nil
			}
			if errors.Is(f.err, context.Canceled) || errors.Is(f.err, context.DeadlineExceeded) {
				continue // the caller that asked went away: ask again
			}
			return "", f.err
		}
		f := &flight{done: make(chan struct{})}
		x.flights[key] = f
		x.mu.Unlock()
		f.token, f.err = x.exchange(ctx, key, tok, retry)
		x.mu.Lock()
		delete(x.flights, key)
		x.mu.Unlock()
		close(f.done)
		return f.token, f.err
	}
}

// exchange asks the authorization server for a token for key, keeps it
// and returns it.
func (x *exchanger) exchange(ctx context.Context, key tokenKey, tok *auth.SubjectToken, retry bool) (string, error) {
	x.exchanges.Add(1)
	t, err := x.flow.Exchange(ctx, oauth.TokenExchange{SubjectToken: tok.ForExchange(), Audience: x.audience, Resource: x.resource, Scopes: x.scopes})
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		x.failures.Add(1)
		x.u.log.Warn("token exchange refused", "issuer", x.u.cfg.Auth.TokenExchange.Issuer, "err", redactToken(err.Error(), tok))
		err = x.refusal("the authorization server "+x.u.cfg.Auth.TokenExchange.Issuer+" did not exchange the caller's token", redactErr(err, tok))
		x.mu.Lock()
		if len(x.refused) >= maxCallers || len(x.refusedUntil) >= maxCallers {
			clear(x.refused)
			clear(x.refusedUntil)
		}
		x.refused[key.principal] = err
		x.refusedUntil[key] = x.u.g.now().Add(refusalHold)
		x.mu.Unlock()
		return "", err
	}
	// The configuration is read here, not kept: a reload may change
	// max_exchanged_tokens and keep this upstream.
	cfg := x.u.g.config()
	now := x.u.g.now()
	until := now.Add(cfg.maxTTL())
	if !t.Expiry.IsZero() {
		life := t.Expiry.Sub(now)
		until = t.Expiry.Add(-min(renewBefore, life/5))
	}
	k := &kept{key: key, token: t.AccessToken, until: until, obtained: now, retry: retry}
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.refused, key.principal)
	if el, ok := x.tokens[key]; ok {
		x.dropLocked(el)
	}
	for x.lru.Len() >= cfg.maxExchanged() {
		x.dropLocked(x.lru.Back())
		x.evicted.Add(1)
	}
	x.tokens[key] = x.lru.PushFront(k)
	return t.AccessToken, nil
}

func (x *exchanger) dropLocked(el *list.Element) {
	delete(x.tokens, el.Value.(*kept).key)
	x.lru.Remove(el)
}

// refusal returns the refusal of the latest exchange of principal's
// token for an upstream that may serve the item key of list i (i < 0:
// any upstream), nil when there is none: a caller whose token is not
// exchanged sees none of the upstream's items, and is told why rather
// than that the item is unknown.
func (g *Gateway) refusal(principal string, i int, key string) error {
	ups, _ := g.upstreams()
	for _, u := range ups {
		if u.x == nil || i >= 0 && (listsOf[i] == server.ListTools || listsOf[i] == server.ListPrompts) && !strings.HasPrefix(key, u.prefix) {
			continue
		}
		u.x.mu.Lock()
		err := u.x.refused[principal]
		u.x.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// refusal is the error a caller is told when the upstream cannot be
// asked in its name: it names the upstream and why, and never a token.
func (x *exchanger) refusal(why string, err error) error {
	msg := "upstream " + x.u.cfg.ID + ": " + why
	if err != nil {
		msg += ": " + err.Error()
	}
	return jsonrpc.NewError(jsonrpc.CodeInternalError, msg, nil)
}

// redactErr is err with the caller's token, should a server have echoed
// it, replaced.
func redactErr(err error, tok *auth.SubjectToken) error {
	return errors.New(redactToken(err.Error(), tok))
}

func redactToken(s string, tok *auth.SubjectToken) string {
	if raw := tok.ForExchange(); raw != "" {
		s = strings.ReplaceAll(s, raw, "[redacted]")
	}
	return s
}

// answerDependsOnOffer reports whether the answer to a request of method
// depends on whether an upstream runs tasks: the capabilities the
// gateway advertises, a call that may go on as a task, the task methods
// and a listen that may follow tasks. Only such a request waits for an
// upstream reached in its callers' names to say what it offers (learn);
// lists and reads go on at once, even while that upstream is slow.
func answerDependsOnOffer(method string) bool {
	switch method {
	case mcp.MethodDiscover, mcp.MethodToolsCall, mcp.MethodTasksGet, mcp.MethodTasksUpdate, mcp.MethodTasksCancel, mcp.MethodListen:
		return true
	}
	return false
}

// learn asks the upstream, in the name of the caller ctx names, what it
// offers, unless it has said already: such an upstream is asked nothing
// in the gateway's own name, so what it offers — whether it runs tasks
// above all — is learnt from the first caller's first request whose
// answer depends on it, which waits for the answer (within probeTimeout)
// and shares it with such requests that come meanwhile. A failure is
// asked again a second later at the soonest, by the next such request.
func (x *exchanger) learn(ctx context.Context) {
	if x.u.offers.Load() != nil {
		return
	}
	x.mu.Lock()
	if wait := x.learning; wait != nil {
		x.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
		}
		return
	}
	if x.u.g.now().Before(x.learnAgain) {
		x.mu.Unlock()
		return
	}
	done := make(chan struct{})
	x.learning = done
	x.mu.Unlock()
	dctx, cancel := context.WithTimeout(ctx, probeTimeout)
	d, err := x.u.c.Discover(dctx)
	cancel()
	x.mu.Lock()
	x.learning = nil
	if err == nil {
		x.u.offers.Store(offeredBy(d.Capabilities))
	} else {
		x.learnAgain = x.u.g.now().Add(time.Second)
	}
	x.mu.Unlock()
	close(done)
	if err != nil {
		x.u.log.Debug("what the upstream offers could not be learnt in a caller's name", "err", err)
	}
}
