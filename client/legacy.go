package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/jsonrpc"
	"tidings/mcp"
)

// The 2025-11-25 protocol: a session opened by initialize, requests
// without the 2026-07-28 _meta and headers, the server's own requests for
// input answered as requests of their own, and change notifications on
// the session's stream (legacy_watch.go). The session's transport is in
// legacy_transport.go.

// legacySession is what initialize established; it is the dialect of a
// 2025-11-25 server.
type legacySession struct {
	id           string
	version      string
	caps         mcp.ServerCaps
	info         mcp.Implementation
	instructions string
	// shared is what the session hands on to the sessions that replace
	// it (see reinitialize).
	shared *sessionShared
}

// sessionShared is the state of a Watcher's notification stream, which
// outlives the session it was opened in when the server forgets that
// session and the client shakes hands again.
type sessionShared struct {
	// live is set while a Watcher holds the notification stream: it holds
	// the cache topics that stream announces changes of, and only answers
	// of those topics, which carry no TTL, may be kept as fresh.
	live atomic.Pointer[map[string]bool]
	// mu guards stream: on stdio, where the connection is the stream, the
	// handler of the session's messages that belong to no request.
	mu     sync.Mutex
	stream func(*jsonrpc.Message)
}

func (s *sessionShared) setStream(fn func(*jsonrpc.Message)) {
	s.mu.Lock()
	s.stream = fn
	s.mu.Unlock()
}

// streaming reports whether a stream's handler is set.
func (s *sessionShared) streaming() bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stream != nil
}

// streamed hands m to the stream's handler, if a stream is open. A nil
// sessionShared (a session made by hand) has none.
func (s *sessionShared) streamed(m *jsonrpc.Message) {
	if s == nil {
		return
	}
	s.mu.Lock()
	fn := s.stream
	s.mu.Unlock()
	if fn != nil {
		fn(m)
	}
}

// legacyLiveTTL bounds how long a legacy answer counts as fresh while the
// notification stream is up: notifications still beat it, and the bound
// catches changes a server forgot to announce.
const legacyLiveTTL = 5 * time.Minute

// legacy returns the session in use, or nil.
func (c *Client) legacy() *legacySession {
	ls, _ := c.era.current().(*legacySession)
	return ls
}

func (*legacySession) era() Era { return EraLegacy }

func (ls *legacySession) do(ctx context.Context, c *Client, method string, params map[string]any, o callOpts) (jsontext.Value, error) {
	return c.doLegacy(ctx, ls, method, params, o)
}

// discovered returns what initialize said, which is all server/discover
// would.
func (ls *legacySession) discovered() *DiscoverResult {
	return &DiscoverResult{SupportedVersions: []string{ls.version}, Capabilities: ls.caps, Instructions: ls.instructions, ServerInfo: &ls.info}
}

func (ls *legacySession) follow(ctx context.Context, w *Watcher, want mcp.SubscriptionFilter, bo *backoff) bool {
	return w.legacyListen(ctx, ls, want, bo)
}

// serverMessage handles what a stdio connection carries outside any
// request: the server's own requests, log messages, and the session's
// notifications, which go to a Watcher's stream when one is open.
func (ls *legacySession) serverMessage(c *Client, m *jsonrpc.Message) {
	switch {
	case m.IsRequest():
		c.answerServer(context.Background(), m)
	case m.Method == mcp.NotifyMessage:
		c.deliverLog(m)
	default:
		ls.shared.streamed(m)
	}
}

// end ends the session so the server can free it now rather than at its
// idle expiry, with the credentials that opened it.
func (ls *legacySession) end(c *Client) {
	root := c
	for root.shared != nil {
		root = root.shared
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ls.over(root).end(ctx)
}

// fallback is the era probe's way to the 2025-11-25 protocol, once
// server/discover failed with derr (and HTTP status, 0 when none): the
// initialize handshake, when the failure shows a server that does not
// know the method.
func (c *Client) fallback(ctx context.Context, derr error, status int) (dialect, error) {
	if _, ok := errors.AsType[*ServerExitError](derr); ok {
		return nil, derr // says all there is to say
	}
	if !c.speaksLegacy(derr, status) {
		return nil, fmt.Errorf("client: era probe (server/discover): %w", derr)
	}
	ls, err := c.initialize(ctx, mcp.LegacyVersion)
	if err != nil {
		if _, ok := errors.AsType[*VersionError](err); ok {
			return nil, err
		}
		if he, ok := errors.AsType[*HTTPError](err); ok && he.Status == http.StatusNotFound {
			if nf := c.notFound(ctx, he); nf != nil {
				return nil, nf
			}
		}
		return nil, fmt.Errorf("client: the server answered neither server/discover (%v) nor initialize: %w", derr, err)
	}
	return ls, nil
}

// speaksLegacy reports whether server/discover's failure (not a modern
// error) shows a server that does not know the method, so initialize is
// worth trying. Over HTTP only an answer counts (BC-3): a 400, 404 or 405
// without a JSON-RPC body, or a JSON-RPC error that came with a success or
// one of those statuses. On stdio any JSON-RPC error, and a request that
// timed out, count (BC-2).
func (c *Client) speaksLegacy(err error, status int) bool {
	var he *HTTPError
	if errors.As(err, &he) {
		return isRefusal(he.Status)
	}
	var rpc *jsonrpc.Error
	if errors.As(err, &rpc) {
		return status == 0 || status < 300 || isRefusal(status)
	}
	if _, overHTTP := c.t.(*httpTransport); overHTTP {
		return false
	}
	// stdio: no answer within the request timeout (the caller's own ctx
	// is still live, see probe).
	return errors.Is(err, context.DeadlineExceeded)
}

// isRefusal reports the HTTP statuses with which servers of the old era
// refuse a method or a request without a session.
func isRefusal(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed:
		return true
	}
	return false
}

// initialize performs the handshake of the older revisions, asking for
// version. The server may answer with another revision; one this client
// does not speak is a *VersionError.
func (c *Client) initialize(ctx context.Context, version string) (*legacySession, error) {
	ctx, perExchange, cancel := c.limit(ctx, false)
	defer cancel()
	caps := c.requestCaps(mcp.MethodInitialize)
	if version == "2025-03-26" {
		caps.Elicitation = nil // it came with 2025-06-18
	}
	params, err := json.Marshal(map[string]any{
		"protocolVersion": version,
		"capabilities":    caps,
		"clientInfo":      c.cfg.info,
	}, json.Deterministic(true))
	if err != nil {
		return nil, err
	}
	id := c.nextID()
	req := &outbound{id: id, method: mcp.MethodInitialize, body: jsonrpc.AppendRequest(nil, id, mcp.MethodInitialize, params), timeout: perExchange}
	resp, err := c.t.roundTrip(ctx, req, nil)
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return nil, resp.Error
	}
	var res struct {
		ProtocolVersion string             `json:"protocolVersion"`
		Capabilities    mcp.ServerCaps     `json:"capabilities"`
		ServerInfo      mcp.Implementation `json:"serverInfo"`
		Instructions    string             `json:"instructions"`
	}
	if err := json.Unmarshal(resp.Result, &res); err != nil {
		return nil, fmt.Errorf("initialize result: %w", err)
	}
	ls := &legacySession{id: req.headerOut.Get(mcp.HeaderSessionID), version: res.ProtocolVersion, caps: res.Capabilities,
		info: res.ServerInfo, instructions: res.Instructions, shared: &sessionShared{}}
	switch {
	case ls.version == "":
		ls.version = version
	case ls.version == mcp.Version || !speaks(ls.version):
		return nil, &VersionError{Offered: []string{ls.version}}
	}
	note := &outbound{method: mcp.NotifyInitialized, body: jsonrpc.AppendNotification(nil, mcp.NotifyInitialized, nil), timeout: perExchange}
	if err := ls.over(c).send(ctx, note); err != nil {
		return nil, fmt.Errorf("notifications/initialized: %w", err)
	}
	return ls, nil
}

// reinitialize replaces a session the server forgot and returns the
// session to use from now on (nil when the era is being probed again). It
// shares the probe's single flight: one request shakes hands, the others
// wait for it or for their own ctx.
func (c *Client) reinitialize(ctx context.Context, old *legacySession) (*legacySession, error) {
	e := c.era
	for {
		if cur := c.legacy(); cur != old {
			return cur, nil // someone else already did
		}
		mine, wait := e.claim()
		if !mine {
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if cur := c.legacy(); cur != old {
			e.release(func() {})
			return cur, nil
		}
		ls, err := c.initialize(ctx, old.version)
		if err == nil {
			ls.shared = old.shared
		}
		e.release(func() {
			if err == nil && c.legacy() == old {
				e.decided.Store(&eraDecision{dialect: ls})
			}
		})
		if err != nil {
			return nil, err
		}
		return ls, nil
	}
}

// doLegacy sends one request of session ls (a 2025-11-25 session): no
// protocol _meta, the session header, and answers to the server's own
// requests. The caller passes the session it loaded once: a concurrent
// reprobe may clear the shared one at any time.
func (c *Client) doLegacy(ctx context.Context, ls *legacySession, method string, params map[string]any, o callOpts) (jsontext.Value, error) {
	if method == mcp.MethodListen || method == mcp.MethodDiscover {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: method + " does not exist in " + mcp.LegacyVersion}
	}
	ctx, perExchange, cancel := c.limit(ctx, o.noLimit)
	defer cancel()
	for attempt := 0; ; attempt++ {
		id := c.nextID()
		p := make(map[string]any, len(params)+1)
		for k, v := range params {
			p[k] = v
		}
		token := ""
		meta := map[string]any{}
		if o.progress != nil {
			token = strconv.Quote("p" + id.Raw())
			meta[mcp.MetaProgressToken] = jsontext.Value(token)
		}
		addTrace(meta, o.trace)
		if len(meta) > 0 {
			p["_meta"] = meta
		}
		pb, err := json.Marshal(p, json.Deterministic(true))
		if err != nil {
			return nil, fmt.Errorf("client: %s params: %w", method, err)
		}
		req := &outbound{id: id, method: method, body: jsonrpc.AppendRequest(nil, id, method, pb), token: token, timeout: perExchange}
		onMsg := func(m *jsonrpc.Message) {
			switch {
			case m.IsRequest():
				c.answerServer(ctx, m)
			case m.Method == mcp.NotifyMessage:
				c.deliverLog(m)
			case m.Method == mcp.NotifyProgress && o.progress != nil:
				deliverProgress(m, o.progress)
			case o.onMsg != nil:
				o.onMsg(m)
			default:
				c.strayChange(ls, m)
			}
		}
		resp, err := ls.over(c).roundTrip(ctx, req, onMsg)
		if errors.Is(err, errSessionGone) && attempt == 0 {
			nls, rerr := c.reinitialize(ctx, ls)
			if rerr != nil {
				return nil, rerr
			}
			if nls == nil {
				// The server restarted and its era is to be probed again.
				return nil, fmt.Errorf("%w (%s: the server restarted)", ErrDropped, method)
			}
			ls = nls
			continue
		}
		if err != nil {
			return nil, err
		}
		if o.auth != nil {
			o.auth.add(c.answeredAs(req))
		}
		if resp.Error != nil {
			return nil, resp.Error
		}
		if err := checkResultType(resp.Result, false); err != nil {
			return nil, fmt.Errorf("client: %s: %w", method, err)
		}
		return resp.Result, nil
	}
}

// answerServer answers a legacy server's request (elicitation, sampling,
// roots, ping) through the installed handlers. It runs in the background:
// the answer may need a person, and the stream it came on must keep being
// read meanwhile. The answer outlives the request that carried the
// server's question, not the client: Close cancels it and waits for it,
// and once Close has begun no answer starts.
func (c *Client) answerServer(ctx context.Context, m *jsonrpc.Message) {
	ls := c.legacy()
	if ls == nil {
		return
	}
	c.life.goBackground(func() {
		ctx, stop := bindLife(context.WithoutCancel(ctx), c.life.ctx)
		defer stop()
		if c.cfg.timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.cfg.timeout)
			defer cancel()
		}
		var body []byte
		if m.Method == mcp.MethodPing {
			body = jsonrpc.AppendResponse(nil, m.ID, []byte("{}"))
		} else {
			res, err := c.answer(ctx, mcp.InputRequest{Method: m.Method, Params: m.Params})
			if err != nil {
				body = jsonrpc.AppendErrorResponse(nil, m.ID, jsonrpc.Wrap(jsonrpc.CodeMethodNotFound, "", err))
			} else {
				body = jsonrpc.AppendResponse(nil, m.ID, res)
			}
		}
		_ = ls.over(c).send(ctx, &outbound{method: m.Method, body: body})
	})
}

// hints returns the cache hints of a result of the given cache topic. A
// 2025-11-25 server gives none, so its answers count as fresh only while a
// Watcher holds the notification stream that would announce their change
// (and then for legacyLiveTTL at most): a list whose changes the server
// announces, a resource the session subscribed to. Every other read goes
// to the server.
func (ls *legacySession) hints(_ *Client, topic string, _ jsontext.Value) (time.Duration, mcp.CacheScope) {
	// Private: nothing tells whether the answer depends on who asked, and
	// views made with As share the cache under other authorizations. A
	// private entry is kept under the credentials its request carried, so
	// a client of one user loses nothing.
	if ls.shared != nil {
		if live := ls.shared.live.Load(); live != nil && (*live)[topic] {
			return legacyLiveTTL, mcp.ScopePrivate
		}
	}
	return 0, mcp.ScopePrivate
}

// setLive records that the session's stream is up with grant g.
func (ls *legacySession) setLive(g mcp.SubscriptionFilter) {
	t := liveTopics(g)
	ls.shared.live.Store(&t)
}

// endLive records that the session's stream is down: the answers kept
// fresh on its word lose that with it.
func (ls *legacySession) endLive(cache *cache) {
	if live := ls.shared.live.Swap(nil); live != nil {
		cache.invalidate(slices.Collect(maps.Keys(*live))...)
	}
}

// liveTopics are the cache topics a session's stream with grant g
// announces.
func liveTopics(g mcp.SubscriptionFilter) map[string]bool {
	t := map[string]bool{}
	for _, topic := range filterTopics(g) {
		t[topic] = true
	}
	return t
}
