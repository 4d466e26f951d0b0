package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
// failure, a timeout) may mean a 2025-11-25 server, which gets the
// initialize handshake and a session (see fallback). The fallback never
// keys on one error code. The application sees the same API, events and
// freshness model either way.
//
// The probe's outcome is a dialect, and that is the only place where the
// eras part: requests, cache hints, watching and Close all go through the
// dialect the probe picked.

// Era names the protocol generation a server speaks.
type Era string

// The two eras: 2026-07-28, and the generation of the initialize
// handshake, named by its newest revision; a session of 2025-06-18 or
// 2025-03-26 is of EraLegacy too (ProtocolVersion tells which).
const (
	EraModern Era = mcp.Version
	EraLegacy Era = mcp.LegacyVersion
)

// dialect is the protocol generation a server was found to speak, as far
// as the client core needs to know it. modern is the 2026-07-28 one; the
// 2025-11-25 one is a session (legacySession).
type dialect interface {
	era() Era
	// do sends one request and returns its result (see Client.do).
	do(ctx context.Context, c *Client, method string, params map[string]any, o callOpts) (jsontext.Value, error)
	// discovered returns what the server told of itself on connecting, or
	// nil when that takes a server/discover.
	discovered() *DiscoverResult
	// hints returns how long an answer of the cache topic counts as
	// fresh, and for whom.
	hints(c *Client, topic string, res jsontext.Value) (time.Duration, mcp.CacheScope)
	// follow keeps w's cache topics honest for one connection: it listens
	// until the connection ends, reports the end, and waits out the
	// backoff. It reports whether w should connect again.
	follow(ctx context.Context, w *Watcher, want mcp.SubscriptionFilter, bo *backoff) bool
	// serverMessage handles a message of the server that belongs to no
	// request (stdio carries those).
	serverMessage(c *Client, m *jsonrpc.Message)
	// end runs once, at Close, before the transport closes.
	end(c *Client)
}

// modern is the 2026-07-28 dialect: every message belongs to a request,
// and nothing outlives one.
type modern struct{}

func (modern) era() Era { return EraModern }

func (modern) do(ctx context.Context, c *Client, method string, params map[string]any, o callOpts) (jsontext.Value, error) {
	return c.doModern(ctx, method, params, o)
}

func (modern) discovered() *DiscoverResult { return nil }

func (modern) hints(_ *Client, _ string, res jsontext.Value) (time.Duration, mcp.CacheScope) {
	return cacheHints(res)
}

func (modern) follow(ctx context.Context, w *Watcher, want mcp.SubscriptionFilter, bo *backoff) bool {
	return w.listen(ctx, want, bo)
}

// serverMessage delivers log messages; a 2026-07-28 server sends nothing
// else outside a request.
func (modern) serverMessage(c *Client, m *jsonrpc.Message) {
	if m.Method == mcp.NotifyMessage {
		c.deliverLog(m)
	}
}

func (modern) end(*Client) {}

// eraDecision is one probe's outcome.
type eraDecision struct{ dialect dialect }

// eraState is the probe's outcome, shared by a client and its views.
type eraState struct {
	// decided holds the probe's outcome once there is one; with reprobe
	// unset it lets every request skip the probe with two atomic loads.
	decided atomic.Pointer[eraDecision]
	// reprobe asks the next request to probe again (the server restarted).
	reprobe atomic.Bool
	// mu guards busy: the channel of the probe or handshake in flight,
	// closed when it ends, so that a single request talks to the server
	// while the others wait on it or on their own deadlines.
	mu   sync.Mutex
	busy chan struct{}
	// probe is the probe's server/discover answer until the first
	// Discover takes it.
	probe atomic.Pointer[probed]
}

// current returns the dialect decided on, or nil before the probe.
func (e *eraState) current() dialect {
	if d := e.decided.Load(); d != nil {
		return d.dialect
	}
	return nil
}

// claim makes the caller the one request that talks to the server, or
// returns the channel of the request that already does.
func (e *eraState) claim() (mine bool, wait <-chan struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.busy != nil {
		return false, e.busy
	}
	e.busy = make(chan struct{})
	return true, nil
}

// release ends a claim: it runs commit under the lock (so that no other
// request starts a probe in between) and wakes the waiters.
func (e *eraState) release(commit func()) {
	e.mu.Lock()
	commit()
	ch := e.busy
	e.busy = nil
	e.mu.Unlock()
	close(ch)
}

// dialect returns the dialect decided on without probing: modern until a
// probe found otherwise, as nothing the client holds yet came from an
// older server.
func (c *Client) dialect() dialect {
	if d := c.era.current(); d != nil {
		return d
	}
	return modern{}
}

// Era reports the protocol era in use, probing the server if needed.
func (c *Client) Era(ctx context.Context) (Era, error) {
	d, err := c.ensureEra(ctx)
	if err != nil {
		return "", err
	}
	return d.era(), nil
}

// ProtocolVersion reports the protocol revision spoken with the server,
// probing it if needed: 2026-07-28, or the revision an initialize
// handshake agreed on (one of Versions).
func (c *Client) ProtocolVersion(ctx context.Context) (string, error) {
	d, err := c.ensureEra(ctx)
	if err != nil {
		return "", err
	}
	if ls, ok := d.(*legacySession); ok {
		return ls.version, nil
	}
	return c.currentVersion(), nil
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

// ensureEra probes the server once and returns its dialect. It runs on
// every request: once the era is known it costs two atomic loads. While
// one request probes, the others wait for it, each no longer than its own
// ctx allows.
func (c *Client) ensureEra(ctx context.Context) (dialect, error) {
	e := c.era
	for {
		if d := e.decided.Load(); d != nil && !e.reprobe.Load() {
			return d.dialect, nil
		}
		mine, wait := e.claim()
		if !mine {
			select {
			case <-wait:
				continue // decided, or failed: look again
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if e.reprobe.Swap(false) {
			e.decided.Store(nil)
		}
		if e.decided.Load() != nil {
			e.release(func() {})
			continue
		}
		d, err := c.probe(ctx)
		e.release(func() {
			if err == nil {
				e.decided.Store(&eraDecision{dialect: d})
			}
		})
		return d, err
	}
}

// probe asks the server which era it speaks: server/discover, then, when
// the server answered in a way only an older server would, the fallback.
// A list of supported versions that lacks 2026-07-28 — in a version error
// (-32022, or any error whose data lists them) or in a DiscoverResult — is
// such an answer: the server knows of server/discover but not this
// revision, and gets the newest older one both sides speak. A pinned
// version (WithProtocolVersion) skips the probe. A failure that says
// nothing about the era (a broken connection, a 5xx, our own deadline
// over HTTP) is returned, and the next request probes again: one
// transient error must not switch a dual-era server to the old protocol
// for good.
func (c *Client) probe(ctx context.Context) (dialect, error) {
	if c.life.closed() {
		return nil, ErrClosed
	}
	ctx, stop := bindLife(ctx, c.life.ctx)
	defer stop()
	if v := c.cfg.pinned; v != "" {
		if !speaks(v) {
			return nil, fmt.Errorf("client: protocol version %q is not one this client speaks (%s)", v, strings.Join(Versions(), ", "))
		}
		if v == mcp.Version {
			return modern{}, nil
		}
		return c.handshake(ctx, v)
	}
	status := 0
	var who authRecord
	res, derr := c.doModern(ctx, mcp.MethodDiscover, nil, callOpts{httpStatus: &status, auth: &who})
	supported, listed := offeredVersions(derr)
	if derr == nil {
		// A server may answer server/discover and yet not speak this
		// revision (the go-sdk's stateful handler lists only older ones
		// and refuses every 2026-07-28 request after it).
		var d struct {
			SupportedVersions []string `json:"supportedVersions"`
		}
		_ = json.Unmarshal(res, &d)
		if supported, listed = d.SupportedVersions, len(d.SupportedVersions) > 0; !listed || slices.Contains(supported, mcp.Version) {
			c.era.keepProbe(&probed{res: res, as: who.context()})
			return modern{}, nil
		}
	}
	if listed && !slices.Contains(supported, mcp.Version) {
		v, ok := newestShared(supported)
		if !ok {
			return nil, &VersionError{Offered: supported}
		}
		return c.handshake(ctx, v)
	}
	if isModernError(derr) {
		return modern{}, nil
	}
	if ce, ok := errors.AsType[*ConnectError](derr); ok {
		return nil, ce // says all there is to say
	}
	if errors.Is(context.Cause(ctx), ErrClosed) {
		return nil, ErrClosed
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("client: era probe (server/discover): %w", derr)
	}
	return c.fallback(ctx, derr, status)
}

// handshake opens a session of an older revision, v, which the server
// named as one it speaks or the caller pinned: the server must answer
// with v itself.
func (c *Client) handshake(ctx context.Context, v string) (dialect, error) {
	ls, err := c.initialize(ctx, v)
	if err != nil {
		return nil, fmt.Errorf("client: initialize (protocol %s): %w", v, err)
	}
	if ls.version != v {
		return nil, &VersionError{Offered: []string{ls.version}, Asked: v}
	}
	return ls, nil
}

// probed is the answer of the era probe's server/discover, kept for the
// first Discover so that connecting costs one server/discover, not two.
type probed struct {
	res jsontext.Value
	as  authContext
}

// keepProbe keeps the probe's answer for the first Discover.
func (e *eraState) keepProbe(p *probed) { e.probe.Store(p) }

// takeProbe hands the probe's answer, once, to a Discover whose request
// would have carried the same credentials, and nil to any other.
func (e *eraState) takeProbe(as authContext) *probed {
	p := e.probe.Load()
	if p == nil || p.as != as || !e.probe.CompareAndSwap(p, nil) {
		return nil
	}
	return p
}

// Versions lists the protocol revisions this client speaks, newest first:
// 2026-07-28, then the revisions of the initialize handshake that share
// its transports (Streamable HTTP and stdio). Features a revision lacks
// are simply absent when it is spoken: no structured tool output on
// 2025-03-26, for one.
func Versions() []string {
	return []string{mcp.Version, mcp.LegacyVersion, "2025-06-18", "2025-03-26"}
}

// VersionError reports that the client and the server have no protocol
// revision in common, naming both sides' lists.
type VersionError struct {
	// Offered lists the versions the server says it supports (or the one
	// it answered initialize with).
	Offered []string
	// Asked is the version the client asked for when it was pinned
	// (WithProtocolVersion), or empty.
	Asked string
}

func (e *VersionError) Error() string {
	if e.Asked != "" {
		return fmt.Sprintf("client: the server answered initialize with protocol version %s, not %s as asked (this client speaks %s)",
			strings.Join(e.Offered, ", "), e.Asked, strings.Join(Versions(), ", "))
	}
	return fmt.Sprintf("client: no protocol version in common: the server supports %s; this client speaks %s",
		strings.Join(e.Offered, ", "), strings.Join(Versions(), ", "))
}

// offeredVersions returns the list of supported versions an error's data
// carries ({"supported": [...]}, the shape of -32022 and of the older
// revisions' initialize refusals), and whether it carries one.
func offeredVersions(err error) ([]string, bool) {
	var rpc *jsonrpc.Error
	if !errors.As(err, &rpc) || len(rpc.Data) == 0 {
		return nil, false
	}
	var data struct {
		Supported []string `json:"supported"`
	}
	if json.Unmarshal(rpc.Data, &data) != nil || len(data.Supported) == 0 {
		return nil, false
	}
	return data.Supported, true
}

// newestShared returns the newest older revision the client speaks that
// is among supported.
func newestShared(supported []string) (string, bool) {
	for _, v := range Versions()[1:] {
		if slices.Contains(supported, v) {
			return v, true
		}
	}
	return "", false
}

// speaks reports whether v is a revision this client speaks.
func speaks(v string) bool { return slices.Contains(Versions(), v) }

// forgetEra makes the next request probe the server again: a restarted
// server process may speak another era, and knows nothing of the old
// connection. It only raises a flag: it runs deep inside a request,
// possibly inside the probe itself.
func (c *Client) forgetEra() { c.era.reprobe.Store(true) }

// hints returns the cache hints of a result of the given cache topic.
func (c *Client) hints(topic string, res jsontext.Value) (time.Duration, mcp.CacheScope) {
	return c.dialect().hints(c, topic, res)
}
