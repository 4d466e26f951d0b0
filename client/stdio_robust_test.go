package client

import (
	"context"
	"errors"
	"testing"
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
