package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"sync/atomic"
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

// HTTPError is an HTTP failure that carried no JSON-RPC response: any
// answer that is not one, and every 401 or 403 refusal that stands once
// the Authorizer, if any, had its say. Body is a bounded part of the
// response body, with the request's credentials cut out.
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
	// authOut receives whose credentials the HTTP request that got the
	// response carried (see authContext).
	authOut authContext
	// idle, for long-lived streams, cuts the stream when nothing at all
	// (not even a keep-alive) arrives for that long.
	idle time.Duration
	// timeout, when set, bounds each HTTP exchange of the request, from
	// the moment its credentials are ready until its response is read:
	// the client's request timeout over HTTP (see Client.limit).
	timeout time.Duration
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
	// auth, when set, puts credentials on every request and answers
	// refusals. Views made with As have none.
	auth   Authorizer
	logger *slog.Logger
	// opaque is set, for the client and all its views, once the HTTP
	// client was seen to send credentials other than the client's or to
	// hide what it sent: from then on no request's context can be
	// foretold, and private answers are neither cached nor looked up.
	opaque *atomic.Bool
	// own is the context of header's Authorization values, which a
	// request carries when no Authorizer sets others. The header does not
	// change once the transport is made, so it is hashed once (setHeader).
	own authContext
	// told is what was logged about the server, shared with the views:
	// over HTTP the client as a whole is the connection.
	told *peerNotes
}

func newHTTPTransport(url string, cfg config) *httpTransport {
	t := &httpTransport{url: url, hc: cfg.hc, maxMsg: cfg.maxMsg, auth: cfg.authorizer, logger: cfg.logger, opaque: new(atomic.Bool), told: &peerNotes{}}
	t.setHeader(cfg.header)
	return t
}

// setHeader makes h the header fields every request carries.
func (t *httpTransport) setHeader(h http.Header) {
	t.header, t.own = h, contextOf(h.Values("Authorization"))
}

// maxAuthRetries bounds how often one request is sent again because the
// Authorizer answered a refusal with new credentials.
const maxAuthRetries = 3

// exchange is one HTTP request the client sends.
type exchange struct {
	method string // the HTTP method
	what   string // what the request is, for errors and logs
	body   []byte // nil for none
	// header sets the request's own header fields, over the client's.
	header func(http.Header)
	// timeout, when set, bounds each try from the moment the Authorizer
	// has set its credentials until its response body is closed; the
	// time the Authorizer takes is not counted.
	timeout time.Duration
}

// reply is the answer to an exchange. Its body is the caller's to close.
type reply struct {
	*http.Response
	// ctx is the context the request went out under: the caller's, or
	// one bounded by the exchange's timeout, which ends when the body is
	// closed.
	ctx context.Context
	// as is whose credentials the request that got the answer carried.
	as authContext
	// creds are the Authorization values the client sent, kept out of
	// errors.
	creds []string
}

// httpError reports a response that carried no JSON-RPC answer, with a
// bounded part of its body and no credential of the request.
func (r *reply) httpError(body []byte) *HTTPError {
	return &HTTPError{Status: r.StatusCode, Body: snippet([]byte(redact(string(body), r.creds)))}
}

// do is the one way the client's HTTP requests go out: it builds the
// request (the client's headers, the exchange's, then the Authorizer's
// credentials) and sends it. A 401 or 403 goes to the Authorizer, and
// when it has new credentials the request is built afresh and sent
// again, at most maxAuthRetries times; a refusal that stands is returned
// as an *HTTPError.
//
// The exchange's timeout starts anew on each try once the Authorizer
// has set the credentials, so a sign-in that keeps the user at the
// browser for minutes does not use up a request timeout meant for the
// server; ctx, the caller's, bounds everything.
func (t *httpTransport) do(ctx context.Context, x exchange) (*reply, error) {
	for retry := 0; ; retry++ {
		req, creds, err := t.prepare(ctx, x)
		if err != nil {
			return nil, err
		}
		sctx, cancel := ctx, context.CancelFunc(func() {})
		if x.timeout > 0 {
			sctx, cancel = context.WithTimeout(ctx, x.timeout)
		}
		sent := req.WithContext(sctx)
		resp, err := t.hc.Do(sent)
		if err != nil {
			// Whether the exchange's own bound ran out is read before
			// cancel, which would make it look so.
			timedOut := sctx.Err() != nil && ctx.Err() == nil
			cancel()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			bound := time.Duration(0)
			if timedOut {
				bound = x.timeout
			}
			if ce := connectError(t.url, err, bound); ce != err {
				return nil, ce
			}
			return nil, fmt.Errorf("client: %s: %w", x.what, err)
		}
		resp.Body = cancelBody{ReadCloser: resp.Body, cancel: cancel}
		r := &reply{Response: resp, ctx: sctx, creds: creds}
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
			r.as = t.answeredAs(sent, resp, creds)
			return r, nil
		}
		// Free the connection before the Authorizer, which may take long;
		// it gets the part of the body worth reading.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if t.auth == nil || retry == maxAuthRetries {
			t.logger.Debug("mcp: the server refused the request", "request", x.what, "status", resp.StatusCode, "retries", retry)
			return nil, r.httpError(body)
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		resume := holdIdle(ctx)
		again, err := t.auth.Challenge(ctx, req, resp)
		resume()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("client: %s: answering the server's HTTP %d: %w", x.what, resp.StatusCode, err)
		}
		if !again {
			t.logger.Debug("mcp: the server refused the request; no other credentials", "request", x.what, "status", resp.StatusCode)
			return nil, r.httpError(body)
		}
		t.logger.Debug("mcp: the server refused the request; sending it again with new credentials", "request", x.what, "status", resp.StatusCode, "retry", retry+1)
	}
}

// cancelBody is a response body that ends its exchange's context when
// it is closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// prepare builds one try of an exchange and returns it with the
// Authorization values it carries.
func (t *httpTransport) prepare(ctx context.Context, x exchange) (*http.Request, []string, error) {
	var body io.Reader
	if x.body != nil {
		body = bytes.NewReader(x.body)
	}
	req, err := t.newRequest(ctx, x.method, body)
	if err != nil {
		return nil, nil, err
	}
	if x.header != nil {
		x.header(req.Header)
	}
	if t.auth != nil {
		resume := holdIdle(ctx)
		err := t.auth.Authorize(ctx, req)
		resume()
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err()
			}
			return nil, nil, fmt.Errorf("client: %s: authorizing the request: %w", x.what, err)
		}
	}
	return req, slices.Clone(req.Header.Values("Authorization")), nil
}

// answeredAs returns the context of the answer resp to req, which the
// client sent with Authorization values creds. net/http sets resp.Request
// to the request its Transport sent, so a RoundTripper that wraps it with
// a changed copy (as oauth2.Transport does) shows that copy. The context
// is creds' when that request carried them; it is unknown when it carried
// others, when there is none, and when a RoundTripper other than
// net/http's hands back the client's own request, which says nothing of
// what it sent.
func (t *httpTransport) answeredAs(req *http.Request, resp *http.Response, creds []string) authContext {
	wire := resp.Request
	switch {
	case wire == nil,
		!plainTransport(t.hc) && sameHeader(wire.Header, req.Header),
		!slices.Equal(wire.Header.Values("Authorization"), creds):
		if !t.opaque.Swap(true) {
			t.logger.Info("mcp: the HTTP client sends credentials of its own or does not tell which; answers private to a caller will not be cached")
		}
		return unknownAuth
	}
	return contextOf(creds)
}

// wouldSend returns the context the client's next request would carry,
// for looking up private answers: the client's own Authorization header,
// or what the Authorizer sets on a request that is never sent. It is
// unknown when the Authorizer fails, and once the HTTP client was seen
// to change credentials.
func (t *httpTransport) wouldSend(ctx context.Context) authContext {
	if t.opaque.Load() {
		return unknownAuth
	}
	if t.auth == nil {
		return t.own
	}
	req, err := t.newRequest(ctx, http.MethodPost, nil)
	if err != nil || t.auth.Authorize(ctx, req) != nil {
		return unknownAuth
	}
	return contextOf(req.Header.Values("Authorization"))
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

// holdIdle stops the context's idle clock while the client itself is
// busy (an Authorizer may send the user to a browser) and returns the
// function that restarts it: silence is the server's only while the
// client waits on the server.
func holdIdle(ctx context.Context) (resume func()) {
	it, _ := ctx.Value(idleKey{}).(*idleTimer)
	if it == nil || !it.tm.Stop() {
		return func() {} // no clock, or it has already run out
	}
	return func() { it.tm.Reset(it.d) }
}

type readFunc func([]byte) (int, error)

func (f readFunc) Read(p []byte) (int, error) { return f(p) }

func (t *httpTransport) post(ctx context.Context, r *outbound, onMsg func(*jsonrpc.Message)) (*jsonrpc.Message, error) {
	rep, err := t.do(ctx, postOf(r))
	if err != nil {
		if he, ok := errors.AsType[*HTTPError](err); ok {
			r.statusOut = he.Status
		}
		return nil, err
	}
	resp := rep.Response
	defer resp.Body.Close()
	r.statusOut, r.headerOut, r.authOut = resp.StatusCode, resp.Header, rep.as
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "text/event-stream":
		rd := sse.NewReader(idleBody(ctx, resp.Body), t.maxMsg)
		for {
			ev, err := rd.Next()
			if err != nil {
				if rep.ctx.Err() != nil {
					return nil, rep.ctx.Err()
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
		body, err := readBody(resp, t.maxMsg)
		if err != nil {
			if rep.ctx.Err() != nil {
				return nil, rep.ctx.Err()
			}
			return nil, fmt.Errorf("%w (%s: %v)", ErrDropped, r.method, err)
		}
		if len(body) > t.maxMsg {
			return nil, fmt.Errorf("client: %s: response larger than %d bytes", r.method, t.maxMsg)
		}
		m, err := jsonrpc.Decode(body, 0)
		if err != nil {
			if resp.StatusCode >= 400 {
				return nil, rep.httpError(body)
			}
			return nil, fmt.Errorf("client: %s: bad response: %w", r.method, err)
		}
		if !m.IsResponse() {
			return nil, fmt.Errorf("client: %s: server answered with a %q message instead of a response", r.method, m.Method)
		}
		return m, nil
	default:
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, rep.httpError(body)
	}
}

// postOf is the exchange that POSTs r.
func postOf(r *outbound) exchange {
	return exchange{method: http.MethodPost, what: r.method, body: r.body, header: func(h http.Header) { setHeaders(h, r) }, timeout: r.timeout}
}

// setHeaders sets the header fields of a POST of r.
func setHeaders(h http.Header, r *outbound) {
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
	rep, err := t.do(ctx, postOf(r))
	if err != nil {
		return err
	}
	defer rep.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(rep.Body, 64<<10))
	if rep.StatusCode >= 300 {
		return &HTTPError{Status: rep.StatusCode, Body: "message not accepted"}
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

// readBody reads resp's body, up to max bytes and one more (so that a
// caller sees it is over). A body of known length is read into one
// buffer of its size, where io.ReadAll would grow one, copying, to
// twice it: a tools/list of many tools is read on every change.
func readBody(resp *http.Response, max int) ([]byte, error) {
	if n := resp.ContentLength; n > 0 && n <= int64(max) {
		body := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, body); err != nil {
			return nil, err
		}
		return body, nil
	}
	return io.ReadAll(io.LimitReader(resp.Body, int64(max)+1))
}
