package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	"tidings/internal/sse"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// ErrDropped reports that a stream ended without a response: the
// connection broke, the server died, or an intermediary cut it. For a
// listen it means notifications may have been missed.
var ErrDropped = errors.New("client: stream ended without a response")

// ErrClosed is returned for requests made after Close.
var ErrClosed = errors.New("client: closed")

// HTTPError is an HTTP failure that carried no JSON-RPC response.
type HTTPError struct {
	Status int
	Body   string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("client: HTTP %d: %s", e.Status, e.Body)
}

// outbound is one request ready to send.
type outbound struct {
	id      jsonrpc.ID
	method  string
	body    []byte
	version string
	// header holds the request's protocol header fields (Mcp-Method and
	// the like): whoever builds the request decides which it carries.
	// Only HTTP sends them.
	header []headerField
	token  string // raw JSON of the progress token, for stdio routing
	// statusOut and headerOut receive the HTTP status and header fields
	// of the response (0 and nil on stdio, or when none came).
	statusOut int
	headerOut http.Header
	// idle, for long-lived streams, cuts the stream when nothing at all
	// (not even a keep-alive) arrives for that long.
	idle time.Duration
}

// headerField is one HTTP header field of a request.
type headerField struct{ name, value string }

// transport carries requests to one server. roundTrip returns the
// request's final response; messages that belong to the request and
// arrive before it (progress, log, listen notifications) go to onMsg.
type transport interface {
	roundTrip(ctx context.Context, r *outbound, onMsg func(*jsonrpc.Message)) (*jsonrpc.Message, error)
	// send delivers a message that gets no response: a notification, or
	// the answer to a server's own request.
	send(ctx context.Context, r *outbound) error
	close() error
}

// ---- Streamable HTTP ----

type httpTransport struct {
	url    string
	hc     *http.Client
	header http.Header
	maxMsg int
}

// newRequest builds a request carrying the client's own headers.
func (t *httpTransport) newRequest(ctx context.Context, method string, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, t.url, body)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	for k, v := range t.header {
		req.Header[k] = append([]string(nil), v...)
	}
	return req, nil
}

func (t *httpTransport) roundTrip(ctx context.Context, r *outbound, onMsg func(*jsonrpc.Message)) (*jsonrpc.Message, error) {
	ctx, stop := watchIdle(ctx, r.idle)
	defer stop()
	m, err := t.post(ctx, r, onMsg)
	if err != nil && errors.Is(context.Cause(ctx), errIdle) {
		return nil, fmt.Errorf("%w (%s: nothing received for %s)", ErrDropped, r.method, r.idle)
	}
	return m, err
}

// errIdle is the cause of a stream cut for silence.
var errIdle = errors.New("stream idle")

// watchIdle derives a context that is cancelled with errIdle when nothing
// arrives for idle (0: never); idleBody restarts the clock on every byte.
func watchIdle(ctx context.Context, idle time.Duration) (context.Context, func()) {
	if idle <= 0 {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	tm := time.AfterFunc(idle, func() { cancel(errIdle) })
	ctx = context.WithValue(ctx, idleKey{}, &idleTimer{tm: tm, d: idle})
	return ctx, func() {
		tm.Stop()
		cancel(nil)
	}
}

type idleKey struct{}

type idleTimer struct {
	tm *time.Timer
	d  time.Duration
}

// idleBody wraps a response body so that every byte received (events and
// keep-alive comments alike) restarts the context's idle timer.
func idleBody(ctx context.Context, body io.Reader) io.Reader {
	it, _ := ctx.Value(idleKey{}).(*idleTimer)
	if it == nil {
		return body
	}
	return readFunc(func(p []byte) (int, error) {
		n, err := body.Read(p)
		if n > 0 {
			it.tm.Reset(it.d)
		}
		return n, err
	})
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }

func (t *httpTransport) post(ctx context.Context, r *outbound, onMsg func(*jsonrpc.Message)) (*jsonrpc.Message, error) {
	req, err := t.newRequest(ctx, http.MethodPost, bytes.NewReader(r.body))
	if err != nil {
		return nil, err
	}
	t.setHeaders(req.Header, r)
	resp, err := t.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("client: %s: %w", r.method, err)
	}
	defer resp.Body.Close()
	r.statusOut, r.headerOut = resp.StatusCode, resp.Header
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "text/event-stream":
		rd := sse.NewReader(idleBody(ctx, resp.Body), t.maxMsg)
		for {
			ev, err := rd.Next()
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, fmt.Errorf("%w (%s: %v)", ErrDropped, r.method, err)
			}
			m, err := jsonrpc.Decode(ev.Data, 0)
			if err != nil {
				continue // not a message we can use; keep reading
			}
			if m.IsResponse() && m.ID == r.id {
				return m, nil
			}
			if !m.IsResponse() && onMsg != nil {
				onMsg(m)
			}
		}
	case "application/json":
		body, err := io.ReadAll(io.LimitReader(resp.Body, int64(t.maxMsg)+1))
		if err != nil {
			return nil, fmt.Errorf("%w (%s: %v)", ErrDropped, r.method, err)
		}
		if len(body) > t.maxMsg {
			return nil, fmt.Errorf("client: %s: response larger than %d bytes", r.method, t.maxMsg)
		}
		m, err := jsonrpc.Decode(body, 0)
		if err != nil {
			if resp.StatusCode >= 400 {
				return nil, &HTTPError{Status: resp.StatusCode, Body: snippet(body)}
			}
			return nil, fmt.Errorf("client: %s: bad response: %w", r.method, err)
		}
		if !m.IsResponse() {
			return nil, fmt.Errorf("client: %s: server answered with a %q message instead of a response", r.method, m.Method)
		}
		return m, nil
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, &HTTPError{Status: resp.StatusCode, Body: snippet(body)}
	}
}

func (t *httpTransport) setHeaders(h http.Header, r *outbound) {
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	if r.version != "" {
		h.Set(mcp.HeaderProtocolVersion, r.version)
	}
	for _, f := range r.header {
		h.Set(f.name, f.value)
	}
}

func (t *httpTransport) send(ctx context.Context, r *outbound) error {
	req, err := t.newRequest(ctx, http.MethodPost, bytes.NewReader(r.body))
	if err != nil {
		return err
	}
	t.setHeaders(req.Header, r)
	resp, err := t.hc.Do(req)
	if err != nil {
		return fmt.Errorf("client: %s: %w", r.method, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 300 {
		return &HTTPError{Status: resp.StatusCode, Body: "message not accepted"}
	}
	return nil
}

func (t *httpTransport) close() error {
	t.hc.CloseIdleConnections()
	return nil
}

func snippet(b []byte) string {
	b = bytes.TrimSpace(b)
	if len(b) > 512 {
		return string(b[:512]) + "…"
	}
	return string(b)
}
