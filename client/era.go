package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

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

// The two eras.
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
// the server answered in a way only a 2025-11-25 server would, the
// fallback. A failure that says nothing about the era (a broken
// connection, a 5xx, our own deadline over HTTP) is returned, and the next
// request probes again: one transient error must not switch a dual-era
// server to the old protocol for good.
func (c *Client) probe(ctx context.Context) (dialect, error) {
	if c.life.closed() {
		return nil, ErrClosed
	}
	ctx, stop := bindLife(ctx, c.life.ctx)
	defer stop()
	status := 0
	_, derr := c.doModern(ctx, mcp.MethodDiscover, nil, callOpts{httpStatus: &status})
	if derr == nil || isModernError(derr) {
		return modern{}, nil
	}
	if errors.Is(context.Cause(ctx), ErrClosed) {
		return nil, ErrClosed
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("client: era probe (server/discover): %w", derr)
	}
	return c.fallback(ctx, derr, status)
}

// forgetEra makes the next request probe the server again: a restarted
// server process may speak another era, and knows nothing of the old
// connection. It only raises a flag: it runs deep inside a request,
// possibly inside the probe itself.
func (c *Client) forgetEra() { c.era.reprobe.Store(true) }

// hints returns the cache hints of a result of the given cache topic.
func (c *Client) hints(topic string, res jsontext.Value) (time.Duration, mcp.CacheScope) {
	return c.dialect().hints(c, topic, res)
}
