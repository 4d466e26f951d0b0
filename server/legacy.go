package server

import (
	"container/list"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/hub"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// This file serves clients of the previous protocol era, 2025-11-25, from
// the same registries and the same change hub as modern clients. Such a
// client opens a session with initialize; its requests carry no _meta; it
// learns of changes on a session-wide stream (the HTTP GET stream, or the
// stdio connection itself) and subscribes to resources one by one; and the
// server asks it for input with requests of its own. Session state is
// bounded (a cap on sessions, idle expiry) and is never consulted for
// modern requests.

// LegacyVersions are the earlier protocol versions served through sessions.
func LegacyVersions() []string { return []string{mcp.LegacyVersion, "2025-06-18", "2025-03-26"} }

// IsLegacyVersion reports whether v is served through sessions.
func IsLegacyVersion(v string) bool { return slices.Contains(LegacyVersions(), v) }

// Session is one legacy client's session.
type Session struct {
	id       string
	version  string
	caps     mcp.ClientCaps
	srv      *Server
	lastSeen atomic.Int64 // unix nanoseconds
	elem     *list.Element

	mu        sync.Mutex
	logLevel  int
	uris      map[string]bool
	changed   chan struct{} // poked when uris change
	pending   map[string]chan *jsonrpc.Message
	inflight  map[string]context.CancelFunc
	streaming bool
	ended     chan struct{}
	endOnce   sync.Once
	nextID    atomic.Int64

	// subs (under mu) are the hub subscriptions of the open stream, oldest
	// first; the last has the current filter. A subscribe or unsubscribe
	// adds one before it answers, so no change published after the answer
	// is missed; the stream drains and retires the older ones.
	subs []*hub.Subscription
}

// ID returns the session id (visible ASCII, unguessable).
func (ss *Session) ID() string { return ss.id }

// Version returns the protocol version negotiated at initialize.
func (ss *Session) Version() string { return ss.version }

// Ended is closed when the session ends (deleted, expired or evicted).
func (ss *Session) Ended() <-chan struct{} { return ss.ended }

func (ss *Session) end() {
	ss.endOnce.Do(func() { close(ss.ended) })
}

// sessions is the bounded session table.
type sessions struct {
	mu   sync.Mutex
	m    map[string]*Session
	lru  *list.List // front: most recently used
	max  int
	idle time.Duration
}

func newSessions(max int, idle time.Duration) *sessions {
	return &sessions{m: map[string]*Session{}, lru: list.New(), max: max, idle: idle}
}

// WithSessionLimits bounds legacy sessions: at most max at once (the least
// recently used is evicted to admit a new one) and idle ones expire after
// idle. Defaults: 10000 and 30 minutes.
func WithSessionLimits(max int, idle time.Duration) Option {
	return func(c *config) {
		if max > 0 {
			c.maxSessions = max
		}
		if idle > 0 {
			c.sessionIdle = idle
		}
	}
}

// SessionCount returns the number of live legacy sessions.
func (s *Server) SessionCount() int {
	s.sessions.mu.Lock()
	defer s.sessions.mu.Unlock()
	return len(s.sessions.m)
}

func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Session returns the live session with id, refreshing its idle clock.
// Expired sessions are removed and reported as absent.
func (s *Server) Session(id string) (*Session, bool) {
	t := s.sessions
	now := s.cfg.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	ss, ok := t.m[id]
	if !ok {
		return nil, false
	}
	if now.Sub(time.Unix(0, ss.lastSeen.Load())) > t.idle {
		t.removeLocked(ss)
		return nil, false
	}
	ss.lastSeen.Store(now.UnixNano())
	t.lru.MoveToFront(ss.elem)
	return ss, true
}

// EndSession ends a session (a DELETE, or the client going away).
func (s *Server) EndSession(id string) bool {
	t := s.sessions
	t.mu.Lock()
	defer t.mu.Unlock()
	ss, ok := t.m[id]
	if ok {
		t.removeLocked(ss)
	}
	return ok
}

func (t *sessions) removeLocked(ss *Session) {
	delete(t.m, ss.id)
	t.lru.Remove(ss.elem)
	ss.end()
}

// add admits a session, first dropping expired ones from the cold end
// and then, at the cap, evicting the least recently used.
func (t *sessions) add(ss *Session, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for e := t.lru.Back(); e != nil; {
		old := e.Value.(*Session)
		prev := e.Prev()
		if now.Sub(time.Unix(0, old.lastSeen.Load())) <= t.idle && len(t.m) < t.max {
			break
		}
		t.removeLocked(old)
		e = prev
	}
	ss.elem = t.lru.PushFront(ss)
	t.m[ss.id] = ss
}

// legacyInit is what initialize carries.
type legacyInit struct {
	ProtocolVersion string              `json:"protocolVersion"`
	Capabilities    mcp.ClientCaps      `json:"capabilities"`
	ClientInfo      *mcp.Implementation `json:"clientInfo"`
}

// Initialize opens a legacy session kept in the server's bounded session
// table, for transports where a client names its session on every request
// (Mcp-Session-Id on HTTP). The reply is the InitializeResult.
func (s *Server) Initialize(c *Call) (*Session, Reply) {
	ss, rep := s.initialize(c)
	if ss != nil {
		s.sessions.add(ss, s.cfg.now())
	}
	return ss, rep
}

// InitializeConnection opens a legacy session owned by one connection (a
// stdio process): it lives exactly as long as the connection, so it is not
// kept in the session table, where idle expiry or eviction could end it.
// Call EndConnectionSession when the connection ends.
func (s *Server) InitializeConnection(c *Call) (*Session, Reply) { return s.initialize(c) }

// EndConnectionSession ends a session made by InitializeConnection.
func (s *Server) EndConnectionSession(ss *Session) { ss.end() }

func (s *Server) initialize(c *Call) (*Session, Reply) {
	var p legacyInit
	if err := jsonrpc.UnmarshalParams(c.Msg.Params, &p); err != nil || p.ProtocolVersion == "" {
		return nil, s.errorReply(c.Msg.ID, jsonrpc.CodeInvalidParams, "Invalid params: initialize needs protocolVersion, capabilities and clientInfo", nil)
	}
	version := mcp.LegacyVersion
	if IsLegacyVersion(p.ProtocolVersion) {
		version = p.ProtocolVersion
	}
	now := s.cfg.now()
	ss := &Session{
		id: newSessionID(), version: version, caps: p.Capabilities, srv: s,
		logLevel: -1, uris: map[string]bool{}, changed: make(chan struct{}, 1),
		pending: map[string]chan *jsonrpc.Message{}, inflight: map[string]context.CancelFunc{}, ended: make(chan struct{}),
	}
	ss.lastSeen.Store(now.UnixNano())

	caps := s.Capabilities()
	res := struct {
		ProtocolVersion string             `json:"protocolVersion"`
		Capabilities    mcp.ServerCaps     `json:"capabilities"`
		ServerInfo      mcp.Implementation `json:"serverInfo"`
		Instructions    string             `json:"instructions,omitempty"`
	}{version, caps, s.info, s.cfg.instructions}
	b, err := jsonrpc.Marshal(res)
	if err != nil {
		return nil, s.internal(c.Msg.ID, err)
	}
	return ss, s.okReply(c.Msg.ID, b)
}

// legacyResult finishes a 2025-11-25 result: no resultType, no cache
// hints; the handler's own _meta, if any, is kept.
func (s *Server) legacyResult(b []byte, meta mcp.Meta) ([]byte, error) {
	if len(meta) == 0 {
		return b, nil
	}
	mb, err := jsonrpc.Marshal(meta)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(b)+len(mb)+10)
	out = append(out, b[:len(b)-1]...)
	if len(b) > 2 {
		out = append(out, ',')
	}
	out = append(out, `"_meta":`...)
	out = append(out, mb...)
	return append(out, '}'), nil
}

// legacyEmpty is the result of ping, logging/setLevel and the
// subscription methods: exactly an empty object.
func (s *Server) legacyEmpty(id jsonrpc.ID) Reply { return s.okReply(id, []byte("{}")) }

// ServeLegacy runs one request of a legacy session. out carries what the
// server sends before the response: progress, log messages, and requests
// for client input (whose answers come back through Session.Deliver).
func (s *Server) ServeLegacy(ctx context.Context, ss *Session, c *Call, principal string, out Stream) Reply {
	m := c.Msg
	if m.IsNotification() {
		return Reply{Status: http.StatusAccepted}
	}
	if r := s.paramError(c); r != nil {
		return *r
	}
	ss.mu.Lock()
	level := ss.logLevel
	ss.mu.Unlock()
	req := &Request{
		ID: m.ID, Method: m.Method, ProtocolVersion: ss.version, Capabilities: ss.caps,
		Principal: principal, logLevel: level, legacy: true,
		out: &requestOut{stream: out},
	}
	if c.p.Meta != nil {
		req.progress = c.p.Meta.ProgressToken
	}
	req.askInput = func(ctx context.Context, ir *InputRequired) (map[string]jsontext.Value, error) {
		return ss.ask(ctx, req, ir, out)
	}
	defer req.out.finish()
	ctx = context.WithValue(ctx, ctxKey{}, req)

	switch m.Method {
	case mcp.MethodPing:
		return s.legacyEmpty(m.ID)
	case mcp.MethodLoggingSetLevel:
		var p struct {
			Level mcp.LogLevel `json:"level"`
		}
		_ = jsonrpc.UnmarshalParams(m.Params, &p)
		sev, ok := p.Level.Severity()
		if !ok {
			return s.errorReply(m.ID, jsonrpc.CodeInvalidParams, "Invalid params: unknown log level "+strconv.Quote(string(p.Level)), nil)
		}
		ss.mu.Lock()
		ss.logLevel = sev
		ss.mu.Unlock()
		return s.legacyEmpty(m.ID)
	case mcp.MethodResourcesSubscribe, mcp.MethodResourcesUnsubscribe:
		if c.p.URI == nil || *c.p.URI == "" {
			return s.errorReply(m.ID, jsonrpc.CodeInvalidParams, "Invalid params: missing uri", nil)
		}
		if !s.advertisesResources() {
			break
		}
		ss.mu.Lock()
		if m.Method == mcp.MethodResourcesSubscribe {
			if len(ss.uris) >= maxListenURIs && !ss.uris[*c.p.URI] {
				ss.mu.Unlock()
				return s.errorReply(m.ID, jsonrpc.CodeInvalidParams, "Invalid params: too many subscriptions", nil)
			}
			ss.uris[*c.p.URI] = true
		} else {
			delete(ss.uris, *c.p.URI)
		}
		if len(ss.subs) > 0 {
			if sub, err := s.hub.Subscribe(ss.filterLocked()); err == nil {
				ss.subs = append(ss.subs, sub)
			}
		}
		ss.mu.Unlock()
		select {
		case ss.changed <- struct{}{}:
		default:
		}
		return s.legacyEmpty(m.ID)
	}
	if r, ok := s.primitive(ctx, c, req); ok {
		return r
	}
	return s.errorReply(m.ID, jsonrpc.CodeMethodNotFound, "Method not found: "+strconv.Quote(m.Method), nil)
}

// ErrNoAnswer reports a client that did not answer a server request.
var ErrNoAnswer = errors.New("server: the client did not answer")

// ask sends the input requests to the client as server-to-client requests
// on the request's stream and waits for every answer.
func (ss *Session) ask(ctx context.Context, req *Request, ir *InputRequired, out Stream) (map[string]jsontext.Value, error) {
	missing, need, err := missingCapabilities(ss.caps, ir.Requests)
	if err != nil {
		return nil, err
	}
	if need {
		return nil, missingCapabilityError(missing)
	}
	keys := slices.Sorted(maps.Keys(ir.Requests))
	answers := make(map[string]jsontext.Value, len(keys))
	for _, key := range keys {
		r := ir.Requests[key]
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
// the request ends.
func (ss *Session) Track(id jsonrpc.ID, cancel context.CancelFunc) (untrack func()) {
	key := id.Raw()
	ss.mu.Lock()
	ss.inflight[key] = cancel
	ss.mu.Unlock()
	return func() {
		ss.mu.Lock()
		delete(ss.inflight, key)
		ss.mu.Unlock()
	}
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

// ErrStreamOpen is returned when a session already has its stream.
var ErrStreamOpen = errors.New("server: the session already has a notification stream")

// ServeSessionStream sends a session's notifications to out until ctx
// ends, the session ends, or the server shuts down: list changes of every
// kind the server advertises, and resources/updated for the URIs the
// session subscribed to. Notifications of modern listeners never go here,
// nor these there: each is its own hub subscription.
//
// start runs once the stream is claimed, before anything is sent (a
// transport writes its response headers there); a session has at most one
// stream, and a second one fails with ErrStreamOpen before start.
func (s *Server) ServeSessionStream(ctx context.Context, ss *Session, out Stream, start func() error) error {
	ss.mu.Lock()
	if ss.streaming {
		ss.mu.Unlock()
		return ErrStreamOpen
	}
	// Subscribe before start: once the client sees the stream open, every
	// change from then on must reach it.
	sub, err := s.hub.Subscribe(ss.filterLocked())
	if err == nil {
		ss.streaming = true
		ss.subs = []*hub.Subscription{sub}
	}
	ss.mu.Unlock()
	if err != nil {
		return start() // shutting down: the stream opens and ends at once
	}
	defer func() {
		ss.mu.Lock()
		for _, o := range ss.subs {
			o.Close()
		}
		ss.subs = nil
		ss.streaming = false
		ss.mu.Unlock()
	}()
	if err := start(); err != nil {
		return err
	}
	kinds := [3]string{mcp.NotifyToolsListChanged, mcp.NotifyPromptsListChanged, mcp.NotifyResourcesListChanged}
	var uris []string
	// flush sends what sub has pending. Updates of resources the session
	// no longer subscribes to are dropped: after unsubscribe answers,
	// nothing more arrives for that URI.
	flush := func(sub *hub.Subscription) error {
		var k hub.Kind
		k, uris = sub.Take(uris[:0])
		for i, method := range kinds {
			if k&(hub.Kind(1)<<i) != 0 {
				if err := out.Send(jsonrpc.AppendNotification(nil, method, nil)); err != nil {
					return err
				}
			}
		}
		for _, u := range uris {
			ss.mu.Lock()
			still := ss.uris[u]
			ss.mu.Unlock()
			if !still {
				continue
			}
			p, _ := jsonrpc.Marshal(map[string]string{"uri": u})
			if err := out.Send(jsonrpc.AppendNotification(nil, mcp.NotifyResourceUpdated, p)); err != nil {
				return err
			}
		}
		return nil
	}
	var timer *time.Timer
	var keepAlive <-chan time.Time
	if s.cfg.keepAlive > 0 {
		timer = time.NewTimer(s.cfg.keepAlive)
		defer timer.Stop()
		keepAlive = timer.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ss.ended:
			return nil
		case <-s.hub.Done():
			return nil
		case <-keepAlive:
			if err := out.KeepAlive(); err != nil {
				return err
			}
			// An open stream is a session in use, however long it stays
			// quiet: it must not expire as idle under its client.
			ss.lastSeen.Store(s.cfg.now().UnixNano())
			timer.Reset(s.cfg.keepAlive)
		case <-ss.changed:
			ss.mu.Lock()
			n := len(ss.subs)
			retired := slices.Clone(ss.subs[:n-1])
			sub = ss.subs[n-1]
			ss.subs = []*hub.Subscription{sub}
			ss.mu.Unlock()
			for _, o := range retired {
				err := flush(o)
				o.Close()
				if err != nil {
					return err
				}
			}
		case <-sub.Wake():
			if err := flush(sub); err != nil {
				return err
			}
		}
	}
}

// filterLocked is the hub filter of the session's stream: every list kind,
// and the resources the session subscribed to.
func (ss *Session) filterLocked() hub.Filter {
	f := hub.Filter{Kinds: hub.ToolsList | hub.PromptsList | hub.ResourcesList}
	for u := range ss.uris {
		f.URIs = append(f.URIs, u)
	}
	return f
}
