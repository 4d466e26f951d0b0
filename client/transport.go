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
	"syscall"
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
}

type paramHeader struct{ name, value string }

// transport carries requests to one server. roundTrip returns the
// request's final response; messages that belong to the request and
// arrive before it (progress, log, listen notifications) go to onMsg.
type transport interface {
	roundTrip(ctx context.Context, r *outbound, onMsg func(*jsonrpc.Message)) (*jsonrpc.Message, error)
	close() error
}

// ---- Streamable HTTP ----

type httpTransport struct {
	url    string
	hc     *http.Client
	header http.Header
	maxMsg int
}

func (t *httpTransport) roundTrip(ctx context.Context, r *outbound, onMsg func(*jsonrpc.Message)) (*jsonrpc.Message, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(r.body))
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	h := req.Header
	for k, v := range t.header {
		h[k] = append([]string(nil), v...)
	}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	h.Set(mcp.HeaderProtocolVersion, r.version)
	h.Set(mcp.HeaderMethod, r.method)
	if r.name != nil {
		h.Set(mcp.HeaderName, xheader.Encode(*r.name))
	}
	for _, p := range r.params {
		h.Set(p.name, p.value)
	}
	resp, err := t.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("client: %s: %w", r.method, err)
	}
	defer resp.Body.Close()
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch mt {
	case "text/event-stream":
		rd := sse.NewReader(resp.Body, t.maxMsg)
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
}

type stdioTransport struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	wmu     sync.Mutex
	mu      sync.Mutex
	pending map[string]*pending
	tokens  map[string]string
	onOther func(*jsonrpc.Message)
	done    chan struct{}
	readErr error
	exited  chan struct{}
	grace   time.Duration
	closeMu sync.Once
}

func startStdio(ctx context.Context, name string, args []string, env []string, stderr io.Writer, onOther func(*jsonrpc.Message), maxMsg int) (*stdioTransport, error) {
	cmd := exec.Command(name, args...)
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
		grace: 2 * time.Second,
	}
	go func() {
		_ = cmd.Wait()
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

func (t *stdioTransport) route(m *jsonrpc.Message) {
	if m.IsResponse() {
		t.mu.Lock()
		p := t.pending[m.ID.Raw()]
		t.mu.Unlock()
		if p != nil {
			select {
			case p.resp <- m:
			default:
			}
		}
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
		// The server ended a request itself (a listen on shutdown): that
		// ends the request gracefully, whatever follows.
		t.mu.Lock()
		p := t.pending[idKey(rm.RequestID)]
		t.mu.Unlock()
		if p != nil {
			select {
			case p.resp <- m:
			default:
			}
		}
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
	p := &pending{onMsg: onMsg, resp: make(chan *jsonrpc.Message, 1)}
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

// close shuts the server down the way stdio servers expect: close its
// stdin, wait, then SIGTERM, wait, then SIGKILL.
func (t *stdioTransport) close() error {
	t.closeMu.Do(func() {
		_ = t.stdin.Close()
		select {
		case <-t.exited:
			return
		case <-time.After(t.grace):
		}
		_ = t.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-t.exited:
			return
		case <-time.After(t.grace):
		}
		_ = t.cmd.Process.Kill()
		<-t.exited
	})
	<-t.done
	return nil
}
