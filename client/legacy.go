package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
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

// A client speaks to servers of both eras. It probes with server/discover:
// a DiscoverResult, or an error only a 2026-07-28 server sends, means the
// modern protocol; anything else (another error, a non-JSON-RPC HTTP
// failure, a timeout) means a 2025-11-25 server, which gets the
// initialize handshake and a session. The fallback never keys on one
// error code. The application sees the same API, events and freshness
// model either way.

// Era names the protocol generation a server speaks.
type Era string

// The two eras.
const (
	EraModern Era = mcp.Version
	EraLegacy Era = mcp.LegacyVersion
)

// eraState is the probe's outcome, shared by a client and its views.
type eraState struct {
	mu     sync.Mutex
	probed bool
	legacy atomic.Pointer[legacySession]
	// reprobe asks the next request to probe again (the server restarted).
	reprobe atomic.Bool
	// live is set while a Watcher holds the legacy notification stream: it
	// holds the cache topics that stream announces changes of, and only
	// answers of those topics, which carry no TTL, may be kept as fresh.
	live atomic.Pointer[map[string]bool]
}

// legacySession is what initialize established.
type legacySession struct {
	id           string
	version      string
	caps         mcp.ServerCaps
	info         mcp.Implementation
	instructions string
}

// legacyLiveTTL bounds how long a legacy answer counts as fresh while the
// notification stream is up: notifications still beat it, and the bound
// catches changes a server forgot to announce.
const legacyLiveTTL = 5 * time.Minute

func (c *Client) legacy() *legacySession { return c.era.legacy.Load() }

// Era reports the protocol era in use, probing the server if needed.
func (c *Client) Era(ctx context.Context) (Era, error) {
	if err := c.ensureEra(ctx); err != nil {
		return "", err
	}
	if c.legacy() != nil {
		return EraLegacy, nil
	}
	return EraModern, nil
}

// isModernError reports an error only a 2026-07-28 server would send.
func isModernError(err error) bool {
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) {
		return false
	}
	switch rpc.Code {
	case mcp.CodeUnsupportedProtocolVersion, mcp.CodeHeaderMismatch, mcp.CodeMissingRequiredCapability:
		return true
	}
	return false
}

// ensureEra probes the server once.
func (c *Client) ensureEra(ctx context.Context) error {
	e := c.era
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.reprobe.Swap(false) {
		e.probed = false
		e.legacy.Store(nil)
	}
	if e.probed {
		return nil
	}
	_, derr := c.doModern(ctx, mcp.MethodDiscover, nil, callOpts{})
	if derr == nil || isModernError(derr) {
		e.probed = true
		return nil
	}
	if ctx.Err() != nil {
		return derr
	}
	ls, err := c.initialize(ctx)
	if err != nil {
		return fmt.Errorf("client: the server answered neither server/discover (%v) nor initialize: %w", derr, err)
	}
	e.legacy.Store(ls)
	e.probed = true
	return nil
}

// initialize performs the 2025-11-25 handshake.
func (c *Client) initialize(ctx context.Context) (*legacySession, error) {
	if c.cfg.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.timeout)
		defer cancel()
	}
	params, err := json.Marshal(map[string]any{
		"protocolVersion": mcp.LegacyVersion,
		"capabilities":    c.Capabilities(),
		"clientInfo":      c.cfg.info,
	}, json.Deterministic(true))
	if err != nil {
		return nil, err
	}
	id := c.nextID()
	req := &outbound{id: id, method: mcp.MethodInitialize, body: jsonrpc.AppendRequest(nil, id, mcp.MethodInitialize, params), legacy: true}
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
	ls := &legacySession{id: req.sessionOut, version: res.ProtocolVersion, caps: res.Capabilities, info: res.ServerInfo, instructions: res.Instructions}
	if ls.version == "" {
		ls.version = mcp.LegacyVersion
	}
	note := &outbound{method: mcp.NotifyInitialized, body: jsonrpc.AppendNotification(nil, mcp.NotifyInitialized, nil),
		legacy: true, session: ls.id, version: ls.version}
	if err := c.t.send(ctx, note); err != nil {
		return nil, fmt.Errorf("notifications/initialized: %w", err)
	}
	return ls, nil
}

// forgetEra makes the next request probe the server again: a restarted
// server process may speak another era, and never has the old session.
// It only raises a flag: it runs deep inside a request, possibly under
// the probe's own lock.
func (c *Client) forgetEra() { c.era.reprobe.Store(true) }

// reinitialize replaces a session the server forgot.
func (c *Client) reinitialize(ctx context.Context, old *legacySession) error {
	e := c.era
	e.mu.Lock()
	defer e.mu.Unlock()
	if c.legacy() != old {
		return nil // someone else already did
	}
	ls, err := c.initialize(ctx)
	if err != nil {
		return err
	}
	e.legacy.Store(ls)
	return nil
}

// doLegacy sends one request of a 2025-11-25 session: no protocol _meta,
// the session header, and answers to the server's own requests.
func (c *Client) doLegacy(ctx context.Context, method string, params map[string]any, o callOpts) (jsontext.Value, error) {
	if method == mcp.MethodListen || method == mcp.MethodDiscover {
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeMethodNotFound, Message: method + " does not exist in " + mcp.LegacyVersion}
	}
	if !o.noLimit && c.cfg.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.timeout)
		defer cancel()
	}
	for attempt := 0; ; attempt++ {
		ls := c.legacy()
		id := c.nextID()
		p := make(map[string]any, len(params)+1)
		for k, v := range params {
			p[k] = v
		}
		token := ""
		if o.progress != nil {
			token = strconv.Quote("p" + id.Raw())
			p["_meta"] = map[string]any{mcp.MetaProgressToken: jsontext.Value(token)}
		}
		pb, err := json.Marshal(p, json.Deterministic(true))
		if err != nil {
			return nil, fmt.Errorf("client: %s params: %w", method, err)
		}
		req := &outbound{id: id, method: method, body: jsonrpc.AppendRequest(nil, id, method, pb),
			legacy: true, session: ls.id, version: ls.version, token: token}
		onMsg := func(m *jsonrpc.Message) {
			switch {
			case m.IsRequest():
				c.answerServer(ctx, m)
			case m.Method == mcp.NotifyMessage:
				c.deliverLog(m)
			case m.Method == mcp.NotifyProgress && o.progress != nil:
				var pr struct {
					Progress float64  `json:"progress"`
					Total    *float64 `json:"total"`
					Message  string   `json:"message"`
				}
				if jsonrpc.UnmarshalParams(m.Params, &pr) == nil {
					o.progress(pr.Progress, pr.Total, pr.Message)
				}
			case o.onMsg != nil:
				o.onMsg(m)
			}
		}
		resp, err := c.t.roundTrip(ctx, req, onMsg)
		if errors.Is(err, errSessionGone) && attempt == 0 {
			if rerr := c.reinitialize(ctx, ls); rerr != nil {
				return nil, rerr
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if resp.Error != nil {
			return nil, resp.Error
		}
		if err := checkResultType(resp.Result); err != nil {
			return nil, fmt.Errorf("client: %s: %w", method, err)
		}
		return resp.Result, nil
	}
}

// answerServer answers a legacy server's request (elicitation, sampling,
// roots, ping) through the installed handlers. It runs in the background:
// the answer may need a person, and the stream it came on must keep being
// read meanwhile.
func (c *Client) answerServer(ctx context.Context, m *jsonrpc.Message) {
	ls := c.legacy()
	if ls == nil {
		return
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		ctx := context.WithoutCancel(ctx)
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
				body = jsonrpc.AppendErrorResponse(nil, m.ID, jsonrpc.NewError(jsonrpc.CodeMethodNotFound, err.Error(), nil))
			} else {
				body = jsonrpc.AppendResponse(nil, m.ID, res)
			}
		}
		_ = c.t.send(ctx, &outbound{method: m.Method, body: body, legacy: true, session: ls.id, version: ls.version})
	}()
}

// hints returns the cache hints of a result of the given cache topic. A
// 2025-11-25 server gives none, so its answers count as fresh only while a
// Watcher holds the notification stream that would announce their change
// (and then for legacyLiveTTL at most): a list whose changes the server
// announces, a resource the session subscribed to. Every other read goes
// to the server.
func (c *Client) hints(topic string, res jsontext.Value) (time.Duration, mcp.CacheScope) {
	if c.legacy() == nil {
		return cacheHints(res)
	}
	if live := c.era.live.Load(); live != nil && (*live)[topic] {
		return legacyLiveTTL, mcp.ScopePublic
	}
	return 0, mcp.ScopePublic
}

// setLive records that a legacy stream with grant g is up.
func (c *Client) setLive(g mcp.SubscriptionFilter) {
	t := liveTopics(g)
	c.era.live.Store(&t)
}

// endLive records that the legacy stream is down: the answers kept fresh
// on its word lose that with it.
func (c *Client) endLive() {
	if live := c.era.live.Swap(nil); live != nil {
		c.cache.invalidate(slices.Collect(maps.Keys(*live))...)
	}
}

// liveTopics are the cache topics a legacy stream with grant g announces.
func liveTopics(g mcp.SubscriptionFilter) map[string]bool {
	t := map[string]bool{}
	if g.ToolsListChanged {
		t[topicTools] = true
	}
	if g.PromptsListChanged {
		t[topicPrompts] = true
	}
	if g.ResourcesListChanged {
		t[topicResources], t[topicTemplates] = true, true
	}
	for _, u := range g.ResourceSubscriptions {
		t[topicResource+u] = true
	}
	return t
}
