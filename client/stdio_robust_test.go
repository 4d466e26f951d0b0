package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"tidings/internal/testrig/testkit"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// TestStdioRestartAfterStartContextEnds: the context NewCommand was given
// ends long before the server crashes, as when a client is made inside a
// request handler and kept; the next request still starts the server
// again.
func TestStdioRestartAfterStartContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c, err := NewCommand(ctx, stdioServerPath(t), nil,
		WithLogger(quietLogger()), WithTimeout(waitTimeout), WithStderr(testWriter{t}))
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	cancel()
	bg := context.Background()
	if _, err := c.CallTool(bg, "seed1", nil); err != nil {
		t.Fatalf("call after the start context ended: %v", err)
	}
	if _, err := c.CallTool(bg, "crash", nil); !errors.Is(err, ErrDropped) {
		t.Fatalf("call that crashed the server: err = %v, want ErrDropped", err)
	}
	res, err := c.CallTool(bg, "seed1", nil)
	if err != nil {
		t.Fatalf("call after the crash: %v, want the server started again", err)
	}
	if got := *res.Content[0].Text; got != "seed1" {
		t.Errorf("seed1 answered %q", got)
	}
}

// TestStdioOversizedLineKeepsServer: a line from the server longer than
// the client's message bound is dropped; the connection and the server
// process stay (a restart would lose the tool added first).
func TestStdioOversizedLineKeepsServer(t *testing.T) {
	small := option(func(c *config) { c.maxMsg = 64 << 10 })
	c, err := NewCommand(context.Background(), stdioServerPath(t), nil,
		WithLogger(quietLogger()), WithTimeout(waitTimeout), WithStderr(testWriter{t}), small)
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	control(t, c, "add_tool", map[string]any{"name": "marker"})

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := c.CallTool(ctx, "big", map[string]any{"size": 256 << 10}); err == nil {
		t.Fatal("a response over the message bound was accepted")
	} else if errors.Is(err, ErrDropped) {
		t.Fatalf("oversized response: err = %v; the connection was dropped", err)
	}
	res, err := c.CallTool(context.Background(), "marker", nil)
	if err != nil {
		t.Fatalf("call after the oversized line: %v", err)
	}
	if res.IsError || *res.Content[0].Text != "marker" {
		t.Errorf("marker answered %+v: the server was restarted", res)
	}
}

// TestStdioStuckWriteRespectsContext: a server that stops reading its
// stdin must not hold requests past their context: neither the one whose
// write is stuck, nor the others waiting to write, nor the cancellation
// that follows a timeout.
func TestStdioStuckWriteRespectsContext(t *testing.T) {
	c := stdioClient(t)
	control(t, c, "stall", nil)
	pad := strings.Repeat("y", 4<<20) // more than any pipe buffer holds
	const n = 3
	errs := make(chan error, n)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	go func() {
		_, err := c.CallTool(ctx, "seed1", map[string]any{"pad": pad})
		errs <- err
	}()
	for range n - 1 {
		go func() {
			_, err := c.CallTool(ctx, "seed2", nil)
			errs <- err
		}()
	}
	deadline := time.NewTimer(waitTimeout / 2)
	defer deadline.Stop()
	for i := range n {
		select {
		case err := <-errs:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("request %d: err = %v, want its deadline", i, err)
			}
		case <-deadline.C:
			t.Fatalf("%d of %d requests still blocked on a server that stopped reading", n-i, n)
		}
	}
	// The stuck write is still stuck; a later request still ends on time.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel2()
	done := make(chan error, 1)
	go func() {
		_, err := c.CallTool(ctx2, "seed3", nil)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("later request: err = %v, want its deadline", err)
		}
	case <-deadline.C:
		t.Fatal("a later request blocked behind the stuck write")
	}
}

// ackTransport is a server that answers every read at once with an empty
// result and hands each listen's message callback to the test, which
// plays the transport's reader with it.
type ackTransport struct {
	listens chan func(*jsonrpc.Message)
}

func (f *ackTransport) roundTrip(ctx context.Context, r *outbound, onMsg func(*jsonrpc.Message)) (*jsonrpc.Message, error) {
	var result string
	switch r.method {
	case mcp.MethodDiscover:
		result = `{"supportedVersions":["` + mcp.Version + `"],"capabilities":{}}`
	case mcp.MethodListen:
		f.listens <- onMsg
		<-ctx.Done()
		return nil, ctx.Err()
	case mcp.MethodResourcesRead:
		result = `{"contents":[]}`
	default:
		result = `{}`
	}
	return jsonrpc.Decode(jsonrpc.AppendResponse(nil, r.id, []byte(result)), 0)
}

func (f *ackTransport) send(context.Context, *outbound) error { return nil }

func (f *ackTransport) close() error { return nil }

// TestSlowOnEventNeverBlocksReader: with the event callback stuck and
// the watcher's event backlog full, a message arriving on the listen
// (here a second acknowledgement) is still taken at once, so the
// transport's reader, which on stdio serves every request, never waits
// for the callback.
func TestSlowOnEventNeverBlocksReader(t *testing.T) {
	ft := &ackTransport{listens: make(chan func(*jsonrpc.Message), 1)}
	c := newClient(ft, newConfig([]Option{WithLogger(quietLogger()), WithTimeout(waitTimeout)}, Option.apply), newLifetime())
	t.Cleanup(func() { _ = c.Close() })
	var uris []string
	for i := range 70 {
		uris = append(uris, fmt.Sprintf("mem://r%02d", i))
	}
	release := make(chan struct{})
	var released bool
	unblock := func() {
		if !released {
			released = true
			close(release)
		}
	}
	w := c.Watch(context.Background(), WatchOptions{URIs: uris, PollInterval: waitTimeout,
		OnEvent: func(Event) { <-release }})
	readerDone := make(chan struct{})
	t.Cleanup(func() {
		unblock()
		w.Close()
		<-readerDone
	})
	var onMsg func(*jsonrpc.Message)
	select {
	case onMsg = <-ft.listens:
	case <-time.After(waitTimeout):
		t.Fatal("no listen")
	}
	ack := &jsonrpc.Message{Method: mcp.NotifyAcknowledged,
		Params: []byte(`{"notifications":{"resourceSubscriptions":["mem://r00"]}}`)}
	onMsg(ack)
	waitUntil(t, "the event backlog to fill", func() bool { return w.Stats().Rereads >= 65 })
	go func() {
		defer close(readerDone)
		onMsg(ack)
	}()
	select {
	case <-readerDone:
	case <-time.After(waitTimeout / 2):
		t.Fatal("the listen's message handler blocked on the event callback")
	}
}

// TestWithStderr: what a spawned server writes to stderr reaches the
// writer WithStderr gave, all of it by the time Close returns.
func TestWithStderr(t *testing.T) {
	var buf testkit.SyncBuffer
	c, err := NewCommand(context.Background(), "sh", []string{"-c", "echo diagnostics >&2; cat >/dev/null"},
		WithLogger(quietLogger()), WithStderr(&buf))
	must(t, err)
	must(t, c.Close())
	if got := buf.String(); got != "diagnostics\n" {
		t.Errorf("stderr = %q, want the server's diagnostics", got)
	}
}

// TestStdioGarbageFailsAtOnce: a server that answers with a line that is
// not JSON fails the request at once, in words that show the line, where
// the request waited for its deadline; the connection goes on.
func TestStdioGarbageFailsAtOnce(t *testing.T) {
	c := stdioClient(t)
	control(t, c, "add_tool", map[string]any{"name": "marker"})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err := c.CallTool(ctx, "garble", nil)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "Traceback") {
		t.Fatalf("a garbled answer: %v (context: %v), want an error showing the line at once", err, ctx.Err())
	}
	if res, err := c.CallTool(context.Background(), "marker", nil); err != nil || *res.Content[0].Text != "marker" {
		t.Fatalf("a call after the garbled answer: %+v, %v", res, err)
	}
}
