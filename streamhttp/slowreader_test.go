package streamhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tidings/internal/engine"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// The slow-reader tests open listen A over a raw TCP connection that never
// reads, and listen B through a normal client, then publish far more
// change traffic for A than the kernel can buffer. They check the design's
// central promise: a stalled reader costs the others nothing, its pending
// state stays bounded by its filter, and a write deadline cuts it off.

const (
	fillerURIs = 2000 // URIs only A follows; one round updates them all
	markURI    = "res://mark"
)

// fillers returns long URIs, so that a round of updates is ~0.7 MB of
// events for A: a few rounds exceed any socket buffer.
func fillers() []string {
	out := make([]string, fillerURIs)
	pad := strings.Repeat("x", 180)
	for i := range out {
		out[i] = fmt.Sprintf("res://filler/%04d/%s", i, pad)
	}
	return out
}

// dialListen sends a listen POST over a raw TCP connection and returns the
// connection without reading anything from it.
func dialListen(t *testing.T, f *fixture, body []byte) net.Conn {
	t.Helper()
	addr := f.ts.Listener.Addr().String()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST / HTTP/1.1\r\nHost: %s\r\n", addr)
	fmt.Fprintf(&req, "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n")
	fmt.Fprintf(&req, "%s: %s\r\n%s: %s\r\n", mcp.HeaderProtocolVersion, mcp.Version, mcp.HeaderMethod, mcp.MethodListen)
	fmt.Fprintf(&req, "Content-Length: %d\r\n\r\n", len(body))
	req.Write(body)
	if _, err := conn.Write(req.Bytes()); err != nil {
		t.Fatal(err)
	}
	return conn
}

// listenFilter encodes a filter following tools and the given URIs.
func listenFilter(uris []string) string {
	b, _ := json.Marshal(mcp.SubscriptionFilter{ToolsListChanged: true, ResourceSubscriptions: uris})
	return string(b)
}

// eventPump reads a stream's events on its own goroutine, which ends when
// the stream does; stop closes the stream and waits for it.
type eventPump struct {
	events chan envelope
	done   chan struct{}
	body   io.Closer
}

func pump(t *testing.T, s *stream) *eventPump {
	p := &eventPump{events: make(chan envelope, 64), done: make(chan struct{}), body: s.resp.Body}
	go func() {
		defer close(p.done)
		defer close(p.events)
		for {
			ev, err := s.r.Next()
			if err != nil {
				return
			}
			var e envelope
			if json.Unmarshal(ev.Data, &e) != nil {
				return
			}
			p.events <- e
		}
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *eventPump) stop() {
	p.body.Close()
	for range p.events {
	}
	<-p.done
}

// expect waits until B has seen a tools list change and an update of the
// mark URI, and fails if anything outside B's filter arrives.
func (p *eventPump) expect(t *testing.T, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	var tools, mark bool
	for !tools || !mark {
		select {
		case e, ok := <-p.events:
			if !ok {
				t.Fatal("listen B ended")
			}
			switch e.Method {
			case mcp.NotifyToolsListChanged:
				tools = true
			case mcp.NotifyResourceUpdated:
				var u struct {
					URI string `json:"uri"`
				}
				_ = json.Unmarshal(e.Params, &u)
				if u.URI != markURI {
					t.Fatalf("B got an update for %q, which it never asked for", u.URI)
				}
				mark = true
			default:
				t.Fatalf("B got unexpected %q", e.Method)
			}
		case <-timeout.C:
			t.Fatalf("B did not see the change within %v (tools %v, mark %v)", d, tools, mark)
		}
	}
	return time.Since(start)
}

// openB opens the well-behaved listen and waits for its ack.
func openB(t *testing.T, f *fixture) *eventPump {
	t.Helper()
	s := f.open(t, context.Background(), listenBody(2, listenFilter([]string{markURI})), headers(mcp.MethodListen, ""))
	if ev := s.next(t); ev.Method != mcp.NotifyAcknowledged {
		t.Fatalf("B: first event %q", ev.Method)
	}
	return pump(t, s)
}

// round publishes one update of every filler URI (only A follows them),
// one update of the mark URI and one tool list change (both follow them).
func round(t *testing.T, f *fixture, filler []string, i int) {
	t.Helper()
	for _, u := range filler {
		f.srv.ResourceUpdated(u)
	}
	f.srv.ResourceUpdated(markURI)
	name := "churn"
	if i%2 == 0 {
		if err := f.srv.AddTool(mcp.Tool{Name: name}, nopTool); err != nil {
			t.Fatal(err)
		}
	} else if f.srv.RemoveTools(name) != 1 {
		t.Fatal("churn tool was not registered")
	}
}

func nopTool(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{}, nil
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestSlowReaderIsolation: A never reads; 800k+ changes are published; B
// still sees every change promptly, the server's memory does not grow with
// the change count, and publishing allocates nothing.
func TestSlowReaderIsolation(t *testing.T) {
	if testing.Short() {
		t.Skip("publishes 200k changes")
	}
	f := newFixture(t, []server.Option{server.WithKeepAlive(0)}, streamhttp.WithWriteTimeout(10*time.Minute))
	filler := fillers()
	a := dialListen(t, f, listenBody(1, listenFilter(append(filler, markURI))))
	b := openB(t, f)
	testkit.WaitFor(t, 10*time.Second, "both listens to subscribe", func() bool { return engine.Of(f.srv).Hub().Len() == 2 })

	before := heapInUse()
	// At least 400 rounds (≈800k changes) and at least half a second of
	// them: each round offers A ~0.7 MB, far more than it can write, so A
	// fills its few MB of socket buffers early and stays stuck.
	const minRounds, minTime = 400, 500 * time.Millisecond
	var worst time.Duration
	start := time.Now()
	rounds := 0
	for ; rounds < minRounds || time.Since(start) < minTime; rounds++ {
		round(t, f, filler, rounds)
		worst = max(worst, b.expect(t, 5*time.Second))
	}
	after := heapInUse()
	t.Logf("%d changes; B's slowest round %v; heap %d KB → %d KB", rounds*(fillerURIs+2), worst, before>>10, after>>10)

	// Every round handed A ~0.7 MB of events; queued, that would be >280 MB.
	// Pending state is a flag per URI, so the heap must not grow with it.
	if after > before && after-before > 8<<20 {
		t.Fatalf("heap grew by %d KB over %d rounds: pending state is growing with the change count", (after-before)>>10, rounds)
	}
	// A is stuck in a write, so publishing to it is pure flag-setting.
	if n := testing.AllocsPerRun(1000, func() { f.srv.ResourceUpdated(filler[0]) }); n != 0 {
		t.Fatalf("ResourceUpdated allocates %v times per call with a stalled subscriber", n)
	}
	// A was never cut (the write timeout is long) yet never delayed B.
	if n := engine.Of(f.srv).Hub().Len(); n != 2 {
		t.Fatalf("hub has %d subscriptions, want both listens still open", n)
	}
	a.Close()
	testkit.WaitFor(t, 10*time.Second, "A's listen to end after its connection closed", func() bool { return engine.Of(f.srv).Hub().Len() == 1 })
	round(t, f, filler, rounds)
	b.expect(t, 5*time.Second)
}

// TestStuckReaderIsCut: with a short write timeout, A's listen ends once
// its socket buffers are full, abruptly (no complete result), while B
// keeps working.
func TestStuckReaderIsCut(t *testing.T) {
	for _, m := range parkModes() {
		t.Run(m.name, func(t *testing.T) { testStuckReaderIsCut(t, m) })
	}
}

func testStuckReaderIsCut(t *testing.T, m parkMode) {
	obs := &cutCounter{}
	f := newFixture(t, []server.Option{server.WithKeepAlive(0), server.WithStreamObserver(obs)}, append(m.opts, streamhttp.WithWriteTimeout(200*time.Millisecond))...)
	filler := fillers()
	a := dialListen(t, f, listenBody(1, listenFilter(append(filler, markURI))))
	b := openB(t, f)
	testkit.WaitFor(t, 10*time.Second, "both listens to subscribe", func() bool { return engine.Of(f.srv).Hub().Len() == 2 })
	m.want(t, f, 2)

	deadline := time.Now().Add(60 * time.Second)
	i := 0
	for engine.Of(f.srv).Hub().Len() == 2 {
		if time.Now().After(deadline) {
			t.Fatalf("A was not cut after %d rounds", i)
		}
		round(t, f, filler, i)
		b.expect(t, 5*time.Second)
		i++
	}
	t.Logf("A cut after %d rounds", i)
	if n := engine.Of(f.srv).Hub().Len(); n != 1 {
		t.Fatalf("hub has %d subscriptions after the cut, want 1", n)
	}
	round(t, f, filler, i)
	b.expect(t, 5*time.Second)
	if n := obs.cuts.Load(); n != 1 {
		t.Errorf("the stream observer heard of %d cut-offs, want 1", n)
	}
	if obs.sent.Load() == 0 {
		t.Error("the stream observer heard of no notifications")
	}

	// What A would read: a stream that stops without the listen result and
	// without the chunked terminator, so its client knows it broke.
	if err := a.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(a)
	if err != nil && !isReset(err) {
		t.Fatalf("reading A: %v", err)
	}
	t.Logf("A had %d KB buffered when it was cut", len(got)>>10)
	if !bytes.HasPrefix(got, []byte("HTTP/1.1 200 OK\r\n")) {
		t.Fatalf("A's stream does not start with a 200: %.80q", got)
	}
	if !bytes.Contains(got, []byte(mcp.NotifyAcknowledged)) {
		t.Fatal("A never got its ack")
	}
	if bytes.Contains(got, []byte(`"resultType":"complete"`)) {
		t.Fatal("A's stream was ended gracefully; a cut reader must not get the complete result")
	}
	if bytes.HasSuffix(got, []byte("\r\n0\r\n\r\n")) {
		t.Fatal("A's stream ends with a clean chunked terminator; it must end abruptly")
	}
}

// cutCounter is a server.StreamObserver that counts.
type cutCounter struct{ sent, cuts atomic.Int64 }

func (c *cutCounter) Notified(sent, merged int) { c.sent.Add(int64(sent)) }
func (c *cutCounter) CutOff()                   { c.cuts.Add(1) }

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}
