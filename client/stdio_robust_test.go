package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
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
	small := Option(func(c *config) { c.maxMsg = 64 << 10 })
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
