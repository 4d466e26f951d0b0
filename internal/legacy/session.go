// Package legacy serves clients of the previous protocol era, 2025-11-25,
// as a layer over the 2026-07-28 core: the same registries, handlers and
// change hub, reached through engine.Server.
//
// Such a client opens a session with initialize; its requests carry no
// _meta; it learns of changes on a session-wide stream (the HTTP GET
// stream, or the stdio connection itself) and subscribes to resources one
// by one; and the server asks it for input with requests of its own.
// Session state is bounded (a cap on sessions, idle expiry) and is never
// consulted for 2026-07-28 requests. Nothing in the core knows of
// sessions: deleting this package and the transports' legacy files
// removes the era.
package legacy

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/hub"
	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// Versions are the earlier protocol versions served through sessions.
func Versions() []string { return engine.LegacyVersions() }

// IsVersion reports whether v is served through sessions.
func IsVersion(v string) bool { return engine.IsLegacyVersion(v) }

// Session is one client's session.
type Session struct {
	id        string
	version   string
	caps      mcp.ClientCaps
	principal string // who opened it; nobody else may use it
	srv       engine.Server
	lastSeen  atomic.Int64 // unix nanoseconds
	table     *Table       // nil for a connection's own session
	// lruElem and ownElem place the session in its table's lists (under
	// the table's lock).
	lruElem, ownElem *list.Element

	// follows holds the server's allowance of the URIs the session
	// subscribes to: they are the session's to keep, stream or none.
	follows engine.Lease

	mu       sync.Mutex
	logLevel int
	uris     map[string]bool
	// unfollow ends the server's following of each URI in uris.
	unfollow  map[string]func()
	pending   map[string]chan *jsonrpc.Message
	inflight  map[string]context.CancelFunc
	streaming bool
	ended     chan struct{}
	endOnce   sync.Once
	nextID    atomic.Int64

	// sub (under mu) is the hub subscription of the open stream, nil
	// without one. A subscribe or unsubscribe changes it by its one URI
	// before it answers, so no change published after the answer is
	// missed, and none of a URI unsubscribed is told after it.
	sub *hub.Subscription
}

// ID returns the session id (visible ASCII, unguessable).
func (ss *Session) ID() string { return ss.id }

// Version returns the protocol version negotiated at initialize.
func (ss *Session) Version() string { return ss.version }

// Ended is closed when the session ends.
func (ss *Session) Ended() <-chan struct{} { return ss.ended }

// End ends the session: its stream closes and questions to its client
// are given up.
func (ss *Session) End() {
	if ss.table != nil {
		ss.table.End(ss.id)
		return
	}
	ss.end()
}

func (ss *Session) end() {
	ss.endOnce.Do(func() {
		ss.mu.Lock()
		for _, stop := range ss.unfollow {
			stop()
		}
		clear(ss.unfollow)
		ss.mu.Unlock()
		ss.follows.Release()
		close(ss.ended)
	})
}

func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// initParams is what initialize carries.
type initParams struct {
	ProtocolVersion string              `json:"protocolVersion"`
	Capabilities    mcp.ClientCaps      `json:"capabilities"`
	ClientInfo      *mcp.Implementation `json:"clientInfo"`
}

// Open answers initialize, for principal, with a new session that lives
// as long as its caller keeps it (a stdio connection): it is in no table,
// where idle expiry or eviction could end it. Call End when the
// connection ends. The request goes through the server's middleware like
// any other; a refused one opens no session.
func Open(ctx context.Context, srv engine.Server, c *engine.Call, principal string) (*Session, engine.Reply) {
	var p initParams
	if err := jsonrpc.UnmarshalParams(c.Msg.Params, &p); err != nil || p.ProtocolVersion == "" {
		return nil, engine.Fail(c.Msg.ID, jsonrpc.CodeInvalidParams, "Invalid params: initialize needs protocolVersion, capabilities and clientInfo", nil)
	}
	version := mcp.LegacyVersion
	if IsVersion(p.ProtocolVersion) {
		version = p.ProtocolVersion
	}
	var ss *Session
	era := engine.Era{Version: version, Capabilities: p.Capabilities, Principal: principal, LogLevel: -1, Encoder: encoder{}}
	rep := srv.Run(ctx, c, era, func(context.Context) engine.Reply {
		var r engine.Reply
		ss, r = open(ctx, srv, c, p, version, principal)
		return r
	})
	if ss != nil && (rep.Err != nil || rep.Body == nil) {
		ss.end() // a middleware answered otherwise after all
		ss = nil
	}
	return ss, rep
}

func open(ctx context.Context, srv engine.Server, c *engine.Call, p initParams, version, principal string) (*Session, engine.Reply) {
	ss := &Session{
		id: newSessionID(), version: version, caps: p.Capabilities, principal: principal, srv: srv,
		follows: srv.Follows(ctx, principal), logLevel: -1, uris: map[string]bool{}, unfollow: map[string]func(){},
		pending: map[string]chan *jsonrpc.Message{}, inflight: map[string]context.CancelFunc{}, ended: make(chan struct{}),
	}
	ss.lastSeen.Store(srv.Now().UnixNano())
	intro := srv.Introduction()
	res := struct {
		ProtocolVersion string             `json:"protocolVersion"`
		Capabilities    mcp.ServerCaps     `json:"capabilities"`
		ServerInfo      mcp.Implementation `json:"serverInfo"`
		Instructions    string             `json:"instructions,omitempty"`
	}{version, intro.Capabilities, intro.Info, intro.Instructions}
	b, err := jsonrpc.Marshal(res)
	if err != nil {
		return nil, engine.Fail(c.Msg.ID, jsonrpc.CodeInternalError, "Internal error", nil)
	}
	return ss, engine.Reply{Body: jsonrpc.AppendResponse(nil, c.Msg.ID, b)}
}

// encoder finishes 2025-11-25 results: no resultType, no cache hints;
// the handler's own _meta, if any, is kept.
type encoder struct{}

func (encoder) Finish(dst []byte, t engine.Tail) ([]byte, error) {
	if len(t.Meta) > 0 {
		mb, err := jsonrpc.Marshal(t.Meta)
		if err != nil {
			return nil, err
		}
		dst = append(dst, `"_meta":`...)
		dst = append(dst, mb...)
	} else if dst[len(dst)-1] == ',' {
		dst = dst[:len(dst)-1]
	}
	return append(dst, '}'), nil
}

func empty(id jsonrpc.ID) engine.Reply {
	return engine.Reply{Body: jsonrpc.AppendResponse(nil, id, []byte("{}"))}
}

// Principal returns who opened the session.
func (ss *Session) Principal() string { return ss.principal }

// era describes the session's requests to the core.
func (ss *Session) era(out engine.Stream) engine.Era {
	ss.mu.Lock()
	level := ss.logLevel
	ss.mu.Unlock()
	return engine.Era{
		Version: ss.version, Capabilities: ss.caps, Principal: ss.principal, LogLevel: level, Encoder: encoder{},
		AskInput: func(ctx context.Context, reqs map[string]mcp.InputRequest) (map[string]jsontext.Value, error) {
			return ss.ask(ctx, reqs, out)
		},
	}
}

// Serve runs one request of the session, as the principal that opened
// it. out carries what the server sends before the response: progress,
// log messages, and requests for client input (whose answers come back
// through Deliver).
func (ss *Session) Serve(ctx context.Context, c *engine.Call, out engine.Stream) engine.Reply {
	m := c.Msg
	if m.IsNotification() {
		return engine.Reply{Outcome: engine.Silent}
	}
	if c.ParamErr != nil {
		return engine.Fail(m.ID, jsonrpc.CodeInvalidParams, "Invalid params: "+c.ParamErr.Error(), nil)
	}
	era := ss.era(out)
	if r, ok := ss.srv.Dispatch(ctx, c, era, out); ok {
		return r
	}
	return ss.srv.Run(ctx, c, era, func(context.Context) engine.Reply { return ss.serveOwn(c) })
}

// serveOwn answers the methods the era has and the core has not.
func (ss *Session) serveOwn(c *engine.Call) engine.Reply {
	m := c.Msg
	switch c.M.Handler {
	case engine.HandlePing:
		return empty(m.ID)
	case engine.HandleSetLevel:
		var p struct {
			Level mcp.LogLevel `json:"level"`
		}
		_ = jsonrpc.UnmarshalParams(m.Params, &p)
		sev, ok := p.Level.Severity()
		if !ok {
			return engine.Fail(m.ID, jsonrpc.CodeInvalidParams, "Invalid params: unknown log level "+strconv.Quote(string(p.Level)), nil)
		}
		ss.mu.Lock()
		ss.logLevel = sev
		ss.mu.Unlock()
		return empty(m.ID)
	case engine.HandleSubscribe, engine.HandleUnsubscribe:
		if r, ok := ss.subscribe(c); ok {
			return r
		}
	}
	return engine.Fail(m.ID, jsonrpc.CodeMethodNotFound, "Method not found: "+strconv.Quote(m.Method), nil)
}

// subscribe serves resources/subscribe and resources/unsubscribe; ok is
// false when the server offers no resources.
func (ss *Session) subscribe(c *engine.Call) (engine.Reply, bool) {
	m := c.Msg
	if c.P.URI == nil || *c.P.URI == "" {
		return engine.Fail(m.ID, jsonrpc.CodeInvalidParams, "Invalid params: missing uri", nil), true
	}
	if ss.srv.Introduction().Capabilities.Resources == nil {
		return engine.Reply{}, false
	}
	uri := *c.P.URI
	subscribe := c.M.Handler == engine.HandleSubscribe
	if subscribe {
		// The same grant a 2026-07-28 listen gets: a resource the
		// principal may not see is refused as if it did not exist.
		if g, _ := ss.srv.Grant(ss.principal, mcp.SubscriptionFilter{ResourceSubscriptions: []string{uri}}); len(g.ResourceSubscriptions) == 0 {
			return engine.Fail(m.ID, jsonrpc.CodeInvalidParams, "Resource not found", map[string]string{"uri": uri}), true
		}
	}
	// The server starts following before the lock is taken (it may ask
	// another server); a subscription the session already had lets go.
	var stop func()
	if subscribe {
		stop = ss.srv.Follow(ss.principal, uri)
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	switch {
	case subscribe && !ss.uris[uri]:
		if err := ss.follows.Grow(0, 1); err != nil {
			stop()
			return engine.ErrorReply(m.ID, err), true
		}
		ss.uris[uri] = true
		ss.unfollow[uri], stop = stop, nil
		if ss.sub != nil {
			ss.sub.Follow(uri)
		}
	case !subscribe && ss.uris[uri]:
		delete(ss.uris, uri)
		ss.unfollow[uri]()
		delete(ss.unfollow, uri)
		ss.follows.Shrink(1)
		if ss.sub != nil {
			ss.sub.Unfollow(uri)
		}
	}
	if stop != nil {
		stop()
	}
	return empty(m.ID), true
}

// ErrNoAnswer reports a client that did not answer a server request.
var ErrNoAnswer = errors.New("legacy: the client did not answer")

// ask sends the input requests to the client as server-to-client requests
// on the request's stream and waits for every answer.
func (ss *Session) ask(ctx context.Context, reqs map[string]mcp.InputRequest, out engine.Stream) (map[string]jsontext.Value, error) {
	keys := slices.Sorted(maps.Keys(reqs))
	answers := make(map[string]jsontext.Value, len(keys))
	for _, key := range keys {
		r := reqs[key]
		id := jsonrpc.StringID("s-" + ss.id[:8] + "-" + strconv.FormatInt(ss.nextID.Add(1), 10))
		ch := make(chan *jsonrpc.Message, 1)
		ss.mu.Lock()
		ss.pending[id.Raw()] = ch
		ss.mu.Unlock()
		params := r.Params
		if len(params) == 0 {
			params = jsontext.Value("{}")
		}
		err := out.Send(jsonrpc.AppendRequest(nil, id, r.Method, params))
		var resp *jsonrpc.Message
		if err == nil {
			select {
			case resp = <-ch:
			case <-ctx.Done():
				err = ctx.Err()
			case <-ss.ended:
				err = ErrNoAnswer
			}
		}
		ss.mu.Lock()
		delete(ss.pending, id.Raw())
		ss.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("asking for %s: %w", r.Method, err)
		}
		if resp.Error != nil {
			return nil, fmt.Errorf("the client refused %s: %w", r.Method, resp.Error)
		}
		answers[key] = resp.Result
	}
	return answers, nil
}

// Track records a request of the session as in flight, so that a
// notifications/cancelled naming its id can stop it (on HTTP the
// cancellation arrives on another POST). Call the returned function when
// the request ends. ok is false, and nothing is recorded, when a request
// with the same id is in flight: ids must be unique among them, or a
// cancellation could stop the wrong one.
func (ss *Session) Track(id jsonrpc.ID, cancel context.CancelFunc) (untrack func(), ok bool) {
	key := id.Raw()
	ss.mu.Lock()
	if _, dup := ss.inflight[key]; dup {
		ss.mu.Unlock()
		return nil, false
	}
	ss.inflight[key] = cancel
	ss.mu.Unlock()
	return func() {
		ss.mu.Lock()
		delete(ss.inflight, key)
		ss.mu.Unlock()
	}, true
}

// Cancel stops the in-flight request named by a notifications/cancelled
// of the session; unknown or finished ids are ignored.
func (ss *Session) Cancel(m *jsonrpc.Message) {
	var p struct {
		RequestID jsonrpc.ID `json:"requestId"`
	}
	if jsonrpc.UnmarshalParams(m.Params, &p) != nil || p.RequestID.IsZero() {
		return
	}
	ss.mu.Lock()
	cancel := ss.inflight[p.RequestID.Raw()]
	ss.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Deliver hands a client's response to the server request it answers and
// reports whether one was waiting for it.
func (ss *Session) Deliver(m *jsonrpc.Message) bool {
	ss.mu.Lock()
	ch := ss.pending[m.ID.Raw()]
	ss.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case ch <- m:
	default:
	}
	return true
}
