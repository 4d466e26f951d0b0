package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/sse"
	"tidings/mcp"
)

const (
	// stalledIDBytes is the length of a stalled listen's request id. The
	// server echoes the id in every notification, so one notification to a
	// stalled listen is larger than the two socket buffers between it and
	// the server (both held at stalledBuffer): the server's write to it
	// blocks at the first change, as it would after a real client had
	// stopped reading for long enough to fill them.
	stalledIDBytes = 256 << 10
	// stalledBuffer is the socket buffer size asked for on both ends of a
	// stalled listen's connection; the kernel rounds it up to its minimum
	// and doubles it.
	stalledBuffer = 4096
	// dialers bounds how many listens are being opened at once, so that
	// the server's accept queue never overflows into SYN retries.
	dialers = 64
	// listenPath is where both servers under test are mounted.
	listenPath = "/mcp"
)

// openSpec says which listens to open for one run.
type openSpec struct {
	Run         int    `json:"run"`
	Addr        string `json:"addr"`
	StalledAddr string `json:"stalledAddr"`
	Listeners   int    `json:"listeners"`
	Stalled     int    `json:"stalled"`
	Changes     int    `json:"changes"`
	// OpenTimeoutMs bounds opening every listen and reading its ack.
	OpenTimeoutMs int64 `json:"openTimeoutMs"`
	// HTTP2Conns, when positive, opens the listens as HTTP/2 streams
	// (h2c) spread over this many connections.
	HTTP2Conns int `json:"http2Conns,omitzero"`
}

// stalledPositions marks which of n listens stop reading after their ack.
// They are spread evenly through the opening order, so that a server that
// writes to its streams in the order they arrived meets one early on
// rather than after every healthy listen has been served.
func stalledPositions(n, k int) []bool {
	out := make([]bool, n)
	for j := range k {
		out[(2*j+1)*n/(2*k)] = true
	}
	return out
}

// listenerSet is the reading side of one run: every listen's connection,
// one reading goroutine per healthy listen, and when each healthy listen
// received each change.
type listenerSet struct {
	spec    openSpec
	stalled []bool
	slot    []int // listen index → healthy slot, or -1 for a stalled listen
	healthy int

	// cur is the change being fanned out (-1 before the first).
	cur atomic.Int64
	// recv[c][slot] is when a healthy listen got change c, in Unix
	// nanoseconds, or 0. Each slot is written by its own reader only.
	recv   [][]int64
	counts []atomic.Int64
	// done receives each change once every healthy listen has it.
	done chan int
	// bad counts messages a healthy listen did not ask for, or that
	// carried another listen's id.
	bad atomic.Int64

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	wg     sync.WaitGroup
	// h2 holds the HTTP/2 connections when the spec asks for them.
	h2 *h2Conns
}

// newListenerSet allocates the bookkeeping for spec, so that a memory
// measurement taken after it and around open sees only the listens.
func newListenerSet(spec openSpec) *listenerSet {
	s := &listenerSet{
		spec:    spec,
		stalled: stalledPositions(spec.Listeners, spec.Stalled),
		slot:    make([]int, spec.Listeners),
		recv:    make([][]int64, spec.Changes),
		counts:  make([]atomic.Int64, spec.Changes),
		done:    make(chan int, spec.Changes),
		conns:   make([]net.Conn, 0, min(spec.Listeners, 1<<16)),
	}
	for i, st := range s.stalled {
		if st {
			s.slot[i] = -1
			continue
		}
		s.slot[i] = s.healthy
		s.healthy++
	}
	for c := range s.recv {
		s.recv[c] = make([]int64, s.healthy)
	}
	s.cur.Store(-1)
	return s
}

// open opens every listen and waits for every ack. On failure it closes
// whatever it opened.
//
// Healthy listens are opened many at a time, but each stalled one alone,
// after every listen before it has its ack and before any after it
// starts: a server that keeps its streams in the order they arrived then
// holds them in the order of the spec.
func (s *listenerSet) open(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if s.spec.HTTP2Conns > 0 {
		cs, err := dialH2(ctx, s, s.spec.Addr, s.spec.HTTP2Conns)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.h2 = cs
		s.mu.Unlock()
	}
	from := 0
	for i, st := range s.stalled {
		if !st {
			continue
		}
		s.openRange(ctx, cancel, from, i)
		s.openRange(ctx, cancel, i, i+1)
		from = i + 1
	}
	s.openRange(ctx, cancel, from, s.spec.Listeners)
	if err := context.Cause(ctx); err != nil {
		if s.h2 != nil {
			err = fmt.Errorf("%w (meanwhile the server reset %d streams, sent %d GOAWAYs and cut %d connections)",
				err, s.h2.resets.Load(), s.h2.goAways.Load(), s.h2.cut.Load())
		}
		s.close()
		return err
	}
	return nil
}

// openRange opens listens from up to (not including) to, up to dialers
// at a time, and returns when all have their ack or one has failed (and
// cancelled ctx).
func (s *listenerSet) openRange(ctx context.Context, fail context.CancelCauseFunc, from, to int) {
	if from >= to || ctx.Err() != nil {
		return
	}
	jobs := make(chan int)
	var wg sync.WaitGroup
	n := dialers
	if s.spec.HTTP2Conns > 0 {
		// A listen over HTTP/2 costs no dial: more may wait for their
		// acks at once, a few per connection.
		n = min(max(dialers, 64*s.spec.HTTP2Conns), 65536)
	}
	for range min(n, to-from) {
		wg.Go(func() {
			for i := range jobs {
				if err := s.openOne(ctx, i); err != nil {
					fail(fmt.Errorf("listen %d: %w", i, err))
				}
			}
		})
	}
feed:
	for i := from; i < to; i++ {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
}

// track remembers conn for close; it refuses (and closes) conn once the
// set is closed.
func (s *listenerSet) track(conn net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		conn.Close()
		return false
	}
	s.conns = append(s.conns, conn)
	return true
}

// openOne opens listen i over its own TCP connection and reads its ack.
// A healthy listen then gets a goroutine that reads the rest; a stalled
// one is never read again.
func (s *listenerSet) openOne(ctx context.Context, i int) error {
	if s.h2 != nil {
		return s.openOneH2(ctx, i)
	}
	stalled := s.stalled[i]
	addr := s.spec.Addr
	id := strconv.Itoa(i + 1)
	if stalled {
		addr = s.spec.StalledAddr
		prefix := "stalled-" + id + "-"
		id = `"` + prefix + strings.Repeat("x", stalledIDBytes-len(prefix)) + `"`
	}
	var d net.Dialer
	if stalled {
		d.Control = smallReceiveBuffer
	}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	if !s.track(conn) {
		return errors.New("listener set closed")
	}
	// A handshake blocked on a dead server ends with ctx.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	if _, err := conn.Write(listenRequest(addr, id)); err != nil {
		return fmt.Errorf("sending the listen: %w", err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return fmt.Errorf("reading the response: %w", err)
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("listen refused: %s %s: %s", resp.Status, resp.Header.Get("Content-Type"), b)
	}
	r := sse.NewReader(resp.Body, stalledIDBytes+4096)
	ev, err := r.Next()
	if err != nil {
		return fmt.Errorf("reading the ack: %w", err)
	}
	if err := checkAck(ev.Data, id); err != nil {
		return err
	}
	if !stop() {
		return fmt.Errorf("opening: %w", context.Cause(ctx))
	}
	if !stalled {
		slot := s.slot[i]
		s.wg.Go(func() { s.read(slot, r, []byte(id)) })
	}
	return nil
}

// listenRequest is the raw HTTP request of one listen for tools list
// changes, with the headers a conforming client sends.
func listenRequest(addr, id string) []byte {
	body := listenBody(id)
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\n", listenPath, addr)
	b.WriteString("Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n")
	fmt.Fprintf(&b, "%s: %s\r\n%s: %s\r\n", mcp.HeaderProtocolVersion, mcp.Version, mcp.HeaderMethod, mcp.MethodListen)
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n", len(body))
	b.Write(body)
	return b.Bytes()
}

// listChanged is the part of a notification a reader checks.
type listChanged struct {
	Method string `json:"method"`
	Params struct {
		Meta struct {
			SubscriptionID jsontext.Value `json:"io.modelcontextprotocol/subscriptionId"`
		} `json:"_meta"`
	} `json:"params"`
}

// read records when each change reaches one healthy listen, until its
// connection is closed.
func (s *listenerSet) read(slot int, r *sse.Reader, id []byte) {
	last := int64(-1)
	for {
		ev, err := r.Next()
		if err != nil {
			return
		}
		s.deliver(slot, ev.Data, id, &last)
	}
}

// deliver records one message to the healthy listen in slot, whose id is
// id and whose last change received is *last. The time is taken before
// the message is decoded, so decoding one listen's message does not
// count against it.
func (s *listenerSet) deliver(slot int, data, id []byte, last *int64) {
	now := time.Now().UnixNano()
	var m listChanged
	if json.Unmarshal(data, &m) != nil || m.Method != mcp.NotifyToolsListChanged ||
		!bytes.Equal(m.Params.Meta.SubscriptionID, id) {
		s.bad.Add(1)
		return
	}
	c := s.cur.Load()
	if c <= *last {
		return // not armed yet, or a repeat of a change already seen
	}
	*last = c
	s.recv[c][slot] = now
	if s.counts[c].Add(1) == int64(s.healthy) {
		s.done <- int(c)
	}
}

// arm makes change c the one the readers attribute notifications to. The
// caller arms a change before making it and makes the next one only after
// every healthy listen has this one (or gives up).
func (s *listenerSet) arm(c int) { s.cur.Store(int64(c)) }

// close closes every connection, waits for the readers and returns when
// each healthy listen received each change, and the count of messages no
// listen asked for.
func (s *listenerSet) close() ([][]int64, int64) {
	s.mu.Lock()
	s.closed = true
	for _, c := range s.conns {
		c.Close()
	}
	s.conns = nil
	h2 := s.h2
	s.mu.Unlock()
	if h2 != nil {
		h2.close()
	}
	s.wg.Wait()
	return s.recv, s.bad.Load()
}

// waitDone waits until change c has reached every healthy listen, the
// deadline passes (false) or ctx ends.
func waitDone(ctx context.Context, done <-chan int, c int, deadline time.Time) (bool, error) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		select {
		case got := <-done:
			if got == c {
				return true, nil
			}
		case <-t.C:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}
