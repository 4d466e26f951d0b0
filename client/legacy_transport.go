package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"tidings/internal/sse"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// errNoStream reports a 2025-11-25 server without a notification stream.
var errNoStream = errors.New("client: the server offers no notification stream")

// errSessionGone reports a 2025-11-25 session the server no longer knows.
var errSessionGone = errors.New("client: session expired")

// sessionTransport decorates a client's transport with one 2025-11-25
// session. The transport underneath knows nothing of sessions: this is
// where a request gets the session's id and version, where a 404 becomes
// a session the server forgot, and where the session's own stream of
// messages that belong to no request (the GET stream over HTTP, the
// connection itself on stdio) is opened.
type sessionTransport struct {
	base transport
	ls   *legacySession
	// life is the client's: the GET stream, which runs outside any
	// request, ends with it.
	life context.Context
}

// over returns the session carried by c's transport.
func (ls *legacySession) over(c *Client) sessionTransport {
	return sessionTransport{base: c.t, ls: ls, life: c.life.ctx}
}

// prepare makes r a request of the session.
func (s sessionTransport) prepare(r *outbound) {
	r.version = s.ls.version
	if s.ls.id != "" {
		r.header = append(r.header, headerField{mcp.HeaderSessionID, s.ls.id})
	}
}

func (s sessionTransport) roundTrip(ctx context.Context, r *outbound, onMsg func(*jsonrpc.Message)) (*jsonrpc.Message, error) {
	s.prepare(r)
	m, err := s.base.roundTrip(ctx, r, onMsg)
	if s.ls.id != "" && sessionGone(r.statusOut, m, err) {
		return nil, errSessionGone
	}
	return m, err
}

// sessionGone reports whether an answer of HTTP status to a request of a
// session (its message m or error err) says the server no longer knows
// the session. The spec says so with 404; servers built on the
// TypeScript SDK, among others, answer 400 and name the session in
// their error ("No valid session ID provided"), and a client that took
// that for a bad request would never speak to a restarted server again.
func sessionGone(status int, m *jsonrpc.Message, err error) bool {
	switch status {
	case http.StatusNotFound:
		return true
	case http.StatusBadRequest:
		var text string
		switch {
		case m != nil && m.Error != nil:
			text = m.Error.Message
		case err != nil:
			text = err.Error()
		}
		return strings.Contains(strings.ToLower(text), "session")
	}
	return false
}

func (s sessionTransport) send(ctx context.Context, r *outbound) error {
	s.prepare(r)
	return s.base.send(ctx, r)
}

// connection is a transport on one connection that carries every message
// of the server, such as stdio: there the connection is the session's
// stream.
type connection interface {
	// ended returns a channel closed when the connection ends.
	ended() (<-chan struct{}, error)
}

func (c *stdioConn) ended() (<-chan struct{}, error) { return c.done, nil }

func (t *commandTransport) ended() (<-chan struct{}, error) {
	cur, err := t.current()
	if err != nil {
		return nil, err
	}
	return cur.done, nil
}

// stream receives the session's messages that belong to no request until
// ctx ends or the stream drops; onOpen runs once it is established.
// errNoStream means the server (or a transport from outside the package,
// which cannot tell such messages) offers none. idle cuts an HTTP stream
// on which nothing arrives for that long.
func (s sessionTransport) stream(ctx context.Context, idle time.Duration, onOpen func(), onMsg func(*jsonrpc.Message)) error {
	switch t := s.base.(type) {
	case *httpTransport:
		return s.getStream(ctx, t, idle, onOpen, onMsg)
	case connection:
		done, err := t.ended()
		if err != nil {
			return err
		}
		s.ls.shared.setStream(onMsg)
		defer s.ls.shared.setStream(nil)
		onOpen()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return fmt.Errorf("%w (server exited)", ErrDropped)
		}
	}
	return errNoStream
}

// getStream opens the session's GET stream.
func (s sessionTransport) getStream(ctx context.Context, t *httpTransport, idle time.Duration, onOpen func(), onMsg func(*jsonrpc.Message)) error {
	ctx, unbind := bindLife(ctx, s.life)
	defer unbind()
	ctx, stop := watchIdle(ctx, idle)
	defer stop()
	// Change notifications the server sends on the stream of a request
	// (a tools/call that changed the tool list) are the session's too.
	s.ls.shared.setStream(onMsg)
	defer s.ls.shared.setStream(nil)
	err := s.get(ctx, t, onOpen, onMsg)
	switch {
	case err == nil:
	case errors.Is(context.Cause(ctx), errIdle):
		return fmt.Errorf("%w (GET stream: nothing received for %s)", ErrDropped, idle)
	case errors.Is(context.Cause(ctx), ErrClosed):
		return fmt.Errorf("%w (GET stream)", ErrClosed)
	}
	return err
}

func (s sessionTransport) get(ctx context.Context, t *httpTransport, onOpen func(), onMsg func(*jsonrpc.Message)) error {
	rep, err := t.do(ctx, exchange{method: http.MethodGet, what: "GET stream", header: func(h http.Header) {
		h.Set("Accept", "text/event-stream")
		h.Set(mcp.HeaderSessionID, s.ls.id)
		if s.ls.version != "" {
			h.Set(mcp.HeaderProtocolVersion, s.ls.version)
		}
	}})
	if err != nil {
		return err
	}
	resp := rep.Response
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return errSessionGone
	case resp.StatusCode == http.StatusBadRequest:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if sessionGone(resp.StatusCode, nil, errors.New(string(body))) {
			return errSessionGone
		}
		return &HTTPError{Status: resp.StatusCode, Body: "GET stream refused: " + strings.TrimSpace(string(body))}
	case resp.StatusCode == http.StatusMethodNotAllowed:
		return errNoStream
	case resp.StatusCode >= 300:
		return &HTTPError{Status: resp.StatusCode, Body: "GET stream refused"}
	}
	onOpen()
	rd := sse.NewReader(idleBody(ctx, resp.Body), t.maxMsg)
	for {
		ev, err := rd.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("%w (GET stream: %v)", ErrDropped, err)
		}
		if m, err := jsonrpc.Decode(ev.Data, 0); err == nil {
			onMsg(m)
		}
	}
}

// end asks the server to end the session, best effort, so that it can
// free it now rather than at its idle expiry. Only HTTP sessions have an
// id to end; a stdio session ends with its connection.
func (s sessionTransport) end(ctx context.Context) {
	t, ok := s.base.(*httpTransport)
	if !ok || s.ls.id == "" {
		return
	}
	rep, err := t.do(ctx, exchange{method: http.MethodDelete, what: "session end", header: func(h http.Header) {
		h.Set(mcp.HeaderSessionID, s.ls.id)
		h.Set(mcp.HeaderProtocolVersion, s.ls.version)
	}})
	if err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(rep.Body, 4096))
		rep.Body.Close()
	}
}
