package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/jsonrpc"
	"tidings/mcp"
)

// pending is a request waiting for its response on a stdio connection.
type pending struct {
	onMsg func(*jsonrpc.Message)
	resp  chan answer
	// listen marks a subscriptions/listen: the only request a server may
	// end with notifications/cancelled. A 2025-11-25 server sends that
	// notification for its own requests, whose ids may equal ours.
	listen bool
	// filter is what a listen asked for: a change notification that
	// names no subscription goes to every listen whose filter covers it.
	filter mcp.SubscriptionFilter
}

// answer is how a pending request ends: its final message, or an error
// the connection found on its behalf (a response too large to read).
type answer struct {
	m   *jsonrpc.Message
	err error
}

// writeReq is one line for the writer goroutine. A request whose ctx has
// ended by the time its turn comes is not written at all.
type writeReq struct {
	ctx  context.Context
	line []byte
	done chan error // buffered: the writer never waits for the requester
}

// stdioConn is the client end of a connection that carries one JSON-RPC
// message per line in each direction: a server's stdin and stdout, or any
// pair of streams. One goroutine reads and routes every line; another
// writes, so that a server that stops reading holds up the writer alone,
// never the requests, whose contexts still end them.
type stdioConn struct {
	w      io.WriteCloser
	rc     io.Closer // closed by close to end the reader; nil when w's close ends it
	maxMsg int

	mu      sync.Mutex
	pending map[string]*pending
	tokens  map[string]string
	onOther func(*jsonrpc.Message)
	readErr error
	// answered is set once the server has sent a response: from then
	// on, a line that is not a message breaks an answer (see garbage).
	answered bool
	// onEnd runs once when the reader stops.
	onEnd func()

	queue chan *writeReq
	// notes holds notifications that no caller waits for (cancellations);
	// when the writer is stuck and it is full, more are dropped.
	notes      chan []byte
	told       peerNotes
	quit       chan struct{}
	quitOnce   sync.Once
	done       chan struct{} // the reader stopped
	writerDone chan struct{}
}

// newStdioConn starts reading r and writing w. When rc is not nil, close
// closes it to stop the reader; otherwise the reader stops when r ends.
func newStdioConn(r io.Reader, w io.WriteCloser, rc io.Closer, maxMsg int, onOther func(*jsonrpc.Message), onEnd func()) *stdioConn {
	c := &stdioConn{
		w: w, rc: rc, maxMsg: maxMsg,
		pending: map[string]*pending{}, tokens: map[string]string{},
		onOther: onOther, onEnd: onEnd,
		queue: make(chan *writeReq), notes: make(chan []byte, 16),
		quit: make(chan struct{}), done: make(chan struct{}), writerDone: make(chan struct{}),
	}
	go c.read(r)
	go c.writeLoop()
	return c
}

// setOther replaces the handler of messages that belong to no request.
func (c *stdioConn) setOther(fn func(*jsonrpc.Message)) {
	c.mu.Lock()
	c.onOther = fn
	c.mu.Unlock()
}

func (c *stdioConn) other() func(*jsonrpc.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.onOther
}

// read routes every line the server writes: responses by id, listen
// notifications by subscription id (or, without one, by what each listen
// asked for), progress by token. A line longer than
// maxMsg is skipped without being held in memory; when its beginning
// shows a response, that request fails instead of waiting for nothing.
func (c *stdioConn) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	var line, head []byte
	tooLong := false
	var err error
	for {
		chunk, e := br.ReadSlice('\n')
		if !tooLong && len(line)+len(chunk) > c.maxMsg+1 { // +1: the newline
			tooLong = true
			head = append(line, chunk...)[:min(len(line)+len(chunk), 4096)]
			head = bytes.Clone(head)
		}
		if !tooLong {
			line = append(line, chunk...)
		}
		if errors.Is(e, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			c.dropLong(head)
		} else if len(bytes.TrimSpace(line)) > 0 {
			if m, derr := jsonrpc.Decode(line, 0); derr == nil {
				c.route(m)
			} else {
				c.garbage(line, derr)
			}
		}
		line, head, tooLong = line[:0], nil, false
		if e != nil {
			err = e
			break
		}
	}
	c.mu.Lock()
	c.readErr = err
	c.mu.Unlock()
	if c.onEnd != nil {
		c.onEnd()
	}
	close(c.done)
}

// garbage handles a line that is not a JSON-RPC message. A server must
// write nothing else on its stdout; one that does, once it has answered
// anything, has most likely written an answer that cannot be read, and
// the request it answers would wait for its deadline. So every request
// in flight fails at once, naming the line — but listens, which outlive
// any one answer. Before its first answer a server's stray lines (a
// banner, say) are passed over, so that such a server still starts.
func (c *stdioConn) garbage(line []byte, derr error) {
	c.mu.Lock()
	if !c.answered {
		c.mu.Unlock()
		return
	}
	var fail []*pending
	for _, p := range c.pending {
		if !p.listen {
			fail = append(fail, p)
		}
	}
	c.mu.Unlock()
	shown := bytes.TrimSpace(line)
	if len(shown) > 80 {
		shown = append(shown[:77:77], "..."...)
	}
	err := fmt.Errorf("client: the server wrote a line that is not a JSON-RPC message (%v): %q", derr, shown)
	for _, p := range fail {
		select {
		case p.resp <- answer{err: err}:
		default:
		}
	}
}

// dropLong fails the request that an over-long line answers, when the
// line's beginning says which one: an "id" member followed by "result"
// or "error" (a line with "method" instead is the server's own request
// or a notification, whose id is not ours).
func (c *stdioConn) dropLong(head []byte) {
	d := jsontext.NewDecoder(bytes.NewReader(head))
	if tok, err := d.ReadToken(); err != nil || tok.Kind() != '{' {
		return
	}
	var id jsontext.Value
	for {
		name, err := d.ReadToken()
		if err != nil || name.Kind() != '"' {
			return
		}
		switch name.String() {
		case "result", "error":
			if id != nil {
				c.finish(idKey(id), answer{err: fmt.Errorf("client: response larger than %d bytes", c.maxMsg)}, false)
			}
			return
		case "method":
			return
		case "id":
			v, err := d.ReadValue()
			if err != nil {
				return
			}
			id = bytes.Clone(v)
		default:
			if d.SkipValue() != nil {
				return
			}
		}
	}
}

// writeLoop writes queued lines one at a time until close. A write that
// blocks (a server that stopped reading) blocks only this goroutine; close
// unblocks it by closing w.
func (c *stdioConn) writeLoop() {
	defer close(c.writerDone)
	for {
		select {
		case r := <-c.queue:
			if err := r.ctx.Err(); err != nil {
				r.done <- err
				continue
			}
			_, err := c.w.Write(r.line)
			r.done <- err
		case b := <-c.notes:
			_, _ = c.w.Write(b)
		case <-c.quit:
			return
		}
	}
}

func asLine(b []byte) []byte {
	line := make([]byte, 0, len(b)+1)
	return append(append(line, b...), '\n')
}

// write sends one message, waiting no longer than ctx allows. A line
// whose write has begun is finished by the writer even when its caller
// gives up, so the framing stays intact.
func (c *stdioConn) write(ctx context.Context, b []byte) error {
	r := &writeReq{ctx: ctx, line: asLine(b), done: make(chan error, 1)}
	select {
	case c.queue <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.quit:
		return ErrClosed
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// notify queues a message no caller waits for; it never blocks.
func (c *stdioConn) notify(b []byte) {
	select {
	case c.notes <- asLine(b):
	default:
	}
}

// routeParams is what routing needs from a notification's params.
type routeParams struct {
	Meta struct {
		SubscriptionID jsontext.Value `json:"io.modelcontextprotocol/subscriptionId,omitzero"`
	} `json:"_meta"`
	ProgressToken jsontext.Value `json:"progressToken,omitzero"`
	RequestID     jsontext.Value `json:"requestId,omitzero"`
}

// finish ends the request with the given id with a;
// with listenOnly, only if that request is a listen.
func (c *stdioConn) finish(key string, a answer, listenOnly bool) {
	c.mu.Lock()
	p := c.pending[key]
	c.mu.Unlock()
	if p != nil && (p.listen || !listenOnly) {
		select {
		case p.resp <- a:
		default:
		}
	}
}

func (c *stdioConn) route(m *jsonrpc.Message) {
	if m.IsResponse() {
		c.mu.Lock()
		c.answered = true
		c.mu.Unlock()
		c.finish(m.ID.Raw(), answer{m: m}, false)
		return
	}
	var rm routeParams
	_ = jsonrpc.UnmarshalParams(m.Params, &rm)
	key := ""
	switch {
	case len(rm.Meta.SubscriptionID) > 0:
		key = idKey(rm.Meta.SubscriptionID)
	case m.Method == mcp.NotifyProgress && len(rm.ProgressToken) > 0:
		c.mu.Lock()
		key = c.tokens[string(rm.ProgressToken)]
		c.mu.Unlock()
	case m.Method == mcp.NotifyCancelled && len(rm.RequestID) > 0:
		// The server ended a listen itself (on shutdown): that ends it
		// gracefully, whatever follows. The same notification about
		// anything else is a server cancelling a request of its own, whose
		// id is not ours even when it looks the same.
		c.finish(idKey(rm.RequestID), answer{m: m}, true)
		return
	case isChange(m.Method) && c.routeUntagged(m):
		return
	}
	if key != "" {
		c.mu.Lock()
		p := c.pending[key]
		c.mu.Unlock()
		if p != nil && p.onMsg != nil {
			p.onMsg(m)
		}
		return
	}
	// A message that belongs to no request we can tell: a log message, a
	// notification of the connection as a whole, or a server's own
	// request (which belongs to the request in flight that caused it,
	// something stdio does not say). The client's general handler decides.
	if other := c.other(); other != nil {
		other(m)
	}
}

// routeUntagged hands a change notification that names no subscription
// to every open listen whose filter covers it, and reports whether any
// did. A server that leaves the id out (against the 2026-07-28 rules)
// still sent it for one of them; guessing wide costs a re-read at most,
// where dropping it would leave the cache stale until its TTL runs out.
// On a 2025-11-25 session there are no listens, and the notification is
// the session's (see route).
func (c *stdioConn) routeUntagged(m *jsonrpc.Message) bool {
	var to []func(*jsonrpc.Message)
	c.mu.Lock()
	for _, p := range c.pending {
		if p.listen && p.onMsg != nil && notifies(p.filter, m) {
			to = append(to, p.onMsg)
		}
	}
	c.mu.Unlock()
	for _, fn := range to {
		fn(m)
	}
	return len(to) > 0
}

// listenFilter reads what a subscriptions/listen request asks for.
func listenFilter(body []byte) mcp.SubscriptionFilter {
	var p struct {
		Notifications mcp.SubscriptionFilter `json:"notifications"`
	}
	if m, err := jsonrpc.Decode(body, 0); err == nil {
		_ = jsonrpc.UnmarshalParams(m.Params, &p)
	}
	return p.Notifications
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

func (c *stdioConn) roundTrip(ctx context.Context, r *outbound, onMsg func(*jsonrpc.Message)) (*jsonrpc.Message, error) {
	key := r.id.Raw()
	p := &pending{onMsg: onMsg, resp: make(chan answer, 1), listen: r.method == mcp.MethodListen}
	if p.listen {
		p.filter = listenFilter(r.body)
	}
	c.mu.Lock()
	select {
	case <-c.done:
		c.mu.Unlock()
		return nil, ErrClosed
	default:
	}
	c.pending[key] = p
	if r.token != "" {
		c.tokens[r.token] = key
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, key)
		if r.token != "" {
			delete(c.tokens, r.token)
		}
		c.mu.Unlock()
	}()
	err := c.write(ctx, r.body)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		// The request may be half sent and will be finished: tell the
		// server to drop it.
		c.cancel(r.id)
		return nil, ctx.Err()
	case errors.Is(err, ErrClosed):
		return nil, err
	default:
		return nil, fmt.Errorf("%w (%s: %v)", ErrDropped, r.method, err)
	}
	select {
	case a := <-p.resp:
		if a.err != nil {
			return nil, fmt.Errorf("client: %s: %w", r.method, a.err)
		}
		return a.m, nil
	case <-c.done:
		return nil, fmt.Errorf("%w (%s: server exited)", ErrDropped, r.method)
	case <-ctx.Done():
		// Tell the server to stop; it must not answer afterwards.
		c.cancel(r.id)
		return nil, ctx.Err()
	}
}

// cancel sends notifications/cancelled for id without waiting for it.
func (c *stdioConn) cancel(id jsonrpc.ID) {
	b, _ := jsonrpc.Marshal(struct {
		RequestID jsonrpc.ID `json:"requestId"`
	}{id})
	c.notify(jsonrpc.AppendNotification(nil, mcp.NotifyCancelled, b))
}

func (c *stdioConn) send(ctx context.Context, r *outbound) error {
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	return c.write(ctx, r.body)
}

// closeWrite stops the writer: it closes w, which also ends a write that
// is stuck, and waits for the writer goroutine. For a server process that
// is the end of its stdin, its cue to exit.
func (c *stdioConn) closeWrite() {
	c.quitOnce.Do(func() { close(c.quit) })
	_ = c.w.Close()
	<-c.writerDone
}

// close ends the connection and waits for both of its goroutines.
func (c *stdioConn) close() error {
	c.closeWrite()
	if c.rc != nil {
		_ = c.rc.Close()
	}
	<-c.done
	return nil
}
