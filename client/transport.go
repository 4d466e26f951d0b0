package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/sse"
	"tidings/internal/xheader"
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
	name    *string
	params  []paramHeader
	token   string // raw JSON of the progress token, for stdio routing
	// legacy requests belong to a 2025-11-25 session: they carry the
	// session id and none of the 2026-07-28 headers.
	legacy  bool
	session string
	// sessionOut receives the Mcp-Session-Id the server answered with.
	sessionOut string
	// statusOut receives the HTTP status of the response (0 on stdio).
	statusOut int
	// idle, for long-lived streams, cuts the stream when nothing at all
	// (not even a keep-alive) arrives for that long.
	idle time.Duration
}

type paramHeader struct{ name, value string }

// transport carries requests to one server. roundTrip returns the
// request's final response; messages that belong to the request and
// arrive before it (progress, log, listen notifications) go to onMsg.
type transport interface {
	roundTrip(ctx context.Context, r *outbound, onMsg func(*jsonrpc.Message)) (*jsonrpc.Message, error)
	// send delivers a message that gets no response (a notification, or
	// the answer to a server's request in a legacy session).
	send(ctx context.Context, r *outbound) error
	// stream receives a legacy session's notifications until ctx ends or
	// the stream drops. errNoStream means the server offers none.
	// onOpen runs once the stream is established.
	stream(ctx context.Context, r *outbound, onOpen func(), onMsg func(*jsonrpc.Message)) error
	close() error
}

// errNoStream reports a legacy server without a notification stream.
var errNoStream = errors.New("client: the server offers no notification stream")

// errSessionGone reports a legacy session the server no longer knows.
var errSessionGone = errors.New("client: session expired")

// ---- Streamable HTTP ----

type httpTransport struct {
	url    string
	hc     *http.Client
	header http.Header
	maxMsg int
	// life ends when the client closes; the legacy GET stream, which runs
	// outside any request, ends with it.
	life context.Context
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
	r.sessionOut = resp.Header.Get(mcp.HeaderSessionID)
	r.statusOut = resp.StatusCode
	if r.session != "" && resp.StatusCode == http.StatusNotFound {
		return nil, errSessionGone
	}
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
	if r.session != "" {
		h.Set(mcp.HeaderSessionID, r.session)
	}
	if r.legacy {
		return
	}
	h.Set(mcp.HeaderMethod, r.method)
	if r.name != nil {
		h.Set(mcp.HeaderName, xheader.Encode(*r.name))
	}
	for _, p := range r.params {
		h.Set(p.name, p.value)
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

// stream opens a legacy session's GET stream.
func (t *httpTransport) stream(ctx context.Context, r *outbound, onOpen func(), onMsg func(*jsonrpc.Message)) error {
	ctx, unbind := bindLife(ctx, t.life)
	defer unbind()
	ctx, stop := watchIdle(ctx, r.idle)
	defer stop()
	err := t.get(ctx, r, onOpen, onMsg)
	switch {
	case err == nil:
	case errors.Is(context.Cause(ctx), errIdle):
		return fmt.Errorf("%w (GET stream: nothing received for %s)", ErrDropped, r.idle)
	case errors.Is(context.Cause(ctx), ErrClosed):
		return fmt.Errorf("%w (GET stream)", ErrClosed)
	}
	return err
}

func (t *httpTransport) get(ctx context.Context, r *outbound, onOpen func(), onMsg func(*jsonrpc.Message)) error {
	req, err := t.newRequest(ctx, http.MethodGet, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(mcp.HeaderSessionID, r.session)
	if r.version != "" {
		req.Header.Set(mcp.HeaderProtocolVersion, r.version)
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w (GET stream: %v)", ErrDropped, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return errSessionGone
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

// endSession asks the server to end a 2025-11-25 session (best effort).
func (t *httpTransport) endSession(ctx context.Context, session, version string) {
	req, err := t.newRequest(ctx, http.MethodDelete, nil)
	if err != nil {
		return
	}
	req.Header.Set(mcp.HeaderSessionID, session)
	req.Header.Set(mcp.HeaderProtocolVersion, version)
	if resp, err := t.hc.Do(req); err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
	}
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

// ---- stdio (a server subprocess) ----

type pending struct {
	onMsg func(*jsonrpc.Message)
	resp  chan *jsonrpc.Message
	// listen marks a subscriptions/listen: the only request a server may
	// end with notifications/cancelled. A 2025-11-25 server sends that
	// notification for its own requests, whose ids may equal ours.
	listen bool
}

type stdioTransport struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	wmu     sync.Mutex
	mu      sync.Mutex
	pending map[string]*pending
	tokens  map[string]string
	onOther func(*jsonrpc.Message)
	// streamMsg receives notifications that belong to no request while a
	// legacy watcher listens (see stream).
	streamMsg func(*jsonrpc.Message)
	done      chan struct{}
	readErr   error
	exited    chan struct{}
	grace     time.Duration
	closeOnce sync.Once
	// started is when the process started; ended, guarded by mu, when it
	// stopped serving (its stdout ended or it exited, whichever came
	// first): the crash-loop guard judges a life by the two.
	started time.Time
	ended   time.Time
}

// noteEnd records when the process stopped serving, once.
func (t *stdioTransport) noteEnd() {
	t.mu.Lock()
	if t.ended.IsZero() {
		t.ended = time.Now()
	}
	t.mu.Unlock()
}

// lifespan is how long the process served; only meaningful after done.
func (t *stdioTransport) lifespan() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ended.Sub(t.started)
}

// startStdio starts the server. ctx bounds the start only (see
// NewCommand): the process runs until close. It gets a process group of
// its own where the platform has them, so that close can stop whatever it
// started too; without that, a helper that inherited its stdout or stderr
// would keep close waiting.
func startStdio(ctx context.Context, name string, args []string, env []string, stderr io.Writer, onOther func(*jsonrpc.Message), maxMsg int) (*stdioTransport, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("client: start %s: %w", name, err)
	}
	const grace = 2 * time.Second
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = ownGroup()
	// Once the process has exited, stop waiting for output a survivor
	// still holds open.
	cmd.WaitDelay = grace
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	if stderr == nil {
		stderr = io.Discard
	}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("client: start %s: %w", name, err)
	}
	t := &stdioTransport{
		cmd: cmd, stdin: stdin,
		pending: map[string]*pending{}, tokens: map[string]string{},
		onOther: onOther, done: make(chan struct{}), exited: make(chan struct{}),
		grace: grace, started: time.Now(),
	}
	go func() {
		_ = cmd.Wait()
		t.noteEnd()
		close(t.exited)
	}()
	go t.read(stdout, maxMsg)
	return t, nil
}

// read routes every line the server writes: responses by id, listen
// notifications by subscription id, progress by token.
func (t *stdioTransport) read(stdout io.Reader, maxMsg int) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), maxMsg)
	for sc.Scan() {
		m, err := jsonrpc.Decode(sc.Bytes(), 0)
		if err != nil {
			continue
		}
		t.route(m)
	}
	t.noteEnd()
	t.mu.Lock()
	t.readErr = sc.Err()
	if t.readErr == nil {
		t.readErr = io.EOF
	}
	t.mu.Unlock()
	close(t.done)
}

// routeParams is what routing needs from a notification's params.
type routeParams struct {
	Meta struct {
		SubscriptionID jsontext.Value `json:"io.modelcontextprotocol/subscriptionId,omitzero"`
	} `json:"_meta"`
	ProgressToken jsontext.Value `json:"progressToken,omitzero"`
	RequestID     jsontext.Value `json:"requestId,omitzero"`
}

// finish hands m to the request with the given id as its final message;
// with listenOnly, only if that request is a listen.
func (t *stdioTransport) finish(key string, m *jsonrpc.Message, listenOnly bool) {
	t.mu.Lock()
	p := t.pending[key]
	t.mu.Unlock()
	if p != nil && (p.listen || !listenOnly) {
		select {
		case p.resp <- m:
		default:
		}
	}
}

func (t *stdioTransport) route(m *jsonrpc.Message) {
	if m.IsResponse() {
		t.finish(m.ID.Raw(), m, false)
		return
	}
	var rm routeParams
	_ = jsonrpc.UnmarshalParams(m.Params, &rm)
	key := ""
	switch {
	case len(rm.Meta.SubscriptionID) > 0:
		key = idKey(rm.Meta.SubscriptionID)
	case m.Method == mcp.NotifyProgress && len(rm.ProgressToken) > 0:
		t.mu.Lock()
		key = t.tokens[string(rm.ProgressToken)]
		t.mu.Unlock()
	case m.Method == mcp.NotifyCancelled && len(rm.RequestID) > 0:
		// The server ended a listen itself (on shutdown): that ends it
		// gracefully, whatever follows. The same notification about
		// anything else is a legacy server cancelling its own request,
		// whose id is not ours even when it looks the same.
		t.finish(idKey(rm.RequestID), m, true)
		return
	}
	if key != "" {
		t.mu.Lock()
		p := t.pending[key]
		t.mu.Unlock()
		if p != nil && p.onMsg != nil {
			p.onMsg(m)
		}
		return
	}
	if m.IsRequest() {
		// A legacy server asking the client something: it belongs to the
		// request in flight that caused it, which we cannot tell on stdio,
		// so it goes to the client's general handler.
		if t.onOther != nil {
			t.onOther(m)
		}
		return
	}
	t.mu.Lock()
	sm := t.streamMsg
	t.mu.Unlock()
	if sm != nil && m.Method != mcp.NotifyMessage {
		sm(m)
		return
	}
	if t.onOther != nil {
		t.onOther(m)
	}
}

// idKey normalises a raw JSON id so "7" and 7 stay distinct but
// whitespace does not matter.
func idKey(raw jsontext.Value) string {
	var id jsonrpc.ID
	if err := id.UnmarshalJSON(raw); err != nil {
		return string(raw)
	}
	return id.Raw()
}

func (t *stdioTransport) write(b []byte) error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	buf := make([]byte, 0, len(b)+1)
	buf = append(append(buf, b...), '\n')
	_, err := t.stdin.Write(buf)
	return err
}

func (t *stdioTransport) roundTrip(ctx context.Context, r *outbound, onMsg func(*jsonrpc.Message)) (*jsonrpc.Message, error) {
	key := r.id.Raw()
	p := &pending{onMsg: onMsg, resp: make(chan *jsonrpc.Message, 1), listen: r.method == mcp.MethodListen}
	t.mu.Lock()
	select {
	case <-t.done:
		t.mu.Unlock()
		return nil, ErrClosed
	default:
	}
	t.pending[key] = p
	if r.token != "" {
		t.tokens[r.token] = key
	}
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(t.pending, key)
		if r.token != "" {
			delete(t.tokens, r.token)
		}
		t.mu.Unlock()
	}()
	if err := t.write(r.body); err != nil {
		return nil, fmt.Errorf("%w (%s: %v)", ErrDropped, r.method, err)
	}
	select {
	case m := <-p.resp:
		return m, nil
	case <-t.done:
		return nil, fmt.Errorf("%w (%s: server exited)", ErrDropped, r.method)
	case <-ctx.Done():
		// Tell the server to stop; it must not answer afterwards.
		b, _ := jsonrpc.Marshal(struct {
			RequestID jsonrpc.ID `json:"requestId"`
		}{r.id})
		_ = t.write(jsonrpc.AppendNotification(nil, mcp.NotifyCancelled, b))
		return nil, ctx.Err()
	}
}

func (t *stdioTransport) send(_ context.Context, r *outbound) error {
	select {
	case <-t.done:
		return ErrClosed
	default:
	}
	return t.write(r.body)
}

// stream hands the connection's session-wide notifications to onMsg until
// ctx ends or the server exits: on stdio the connection is the stream.
func (t *stdioTransport) stream(ctx context.Context, _ *outbound, onOpen func(), onMsg func(*jsonrpc.Message)) error {
	t.mu.Lock()
	t.streamMsg = onMsg
	t.mu.Unlock()
	onOpen()
	defer func() {
		t.mu.Lock()
		t.streamMsg = nil
		t.mu.Unlock()
	}()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.done:
		return fmt.Errorf("%w (server exited)", ErrDropped)
	}
}

// close shuts the server down the way stdio servers expect: close its
// stdin, wait, then SIGTERM, wait, then SIGKILL, the signals going to the
// server's whole process group where there is one.
func (t *stdioTransport) close() error {
	t.closeOnce.Do(func() {
		_ = t.stdin.Close()
		select {
		case <-t.exited:
			return
		case <-time.After(t.grace):
		}
		terminate(t.cmd.Process)
		select {
		case <-t.exited:
			return
		case <-time.After(t.grace):
		}
		kill(t.cmd.Process)
		<-t.exited
	})
	<-t.done
	return nil
}
