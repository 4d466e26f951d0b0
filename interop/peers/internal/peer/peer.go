// Package peer holds what the peer servers share, whatever SDK they are
// built on: the names the tests rely on, the loop that adds and removes
// the flicker tool, the Changer that makes the same changes (and one of a
// tool's schema) when a caller asks, and an HTTP listener that prints the
// address it chose, so that a test can start a peer on 127.0.0.1:0 and
// find it.
//
// The SDK-specific parts stay in each command, written as that SDK's
// documentation has them.
package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// FlickerTool is the name of the tool a peer adds and removes again and
// again: each change makes the server send notifications/tools/list_changed.
const FlickerTool = "flicker"

// URLPrefix starts the line on which a peer serving HTTP prints its
// endpoint; the rest of the line is the URL.
const URLPrefix = "mcp endpoint: "

// ListsLine is the line a peer run with -log-lists prints to stdout for
// each tools/list it answers.
const ListsLine = "answered tools/list"

// StartFlicker calls add, then remove, then add again, and so on, one call
// every period, from a goroutine of its own, until ctx ends or the
// returned stop is called; stop waits for that goroutine. A period of zero
// or less calls neither. With first set, add is called at once, before
// StartFlicker returns, and the first call after a period is remove: a
// server spawned for one request then has the tool from its start.
func StartFlicker(ctx context.Context, period time.Duration, first bool, add, remove func()) (stop func()) {
	if first {
		add()
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if period <= 0 {
			return
		}
		t := time.NewTicker(period)
		defer t.Stop()
		for on := first; ; on = !on {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if on {
				remove()
			} else {
				add()
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// ServeHTTP serves h at /mcp on addr until ctx ends, then shuts down,
// giving open streams a second to end. Once it listens, it prints
// URLPrefix and the endpoint's URL on a line of its own to out: with
// addr's port 0, that is the only way to learn the port.
func ServeHTTP(ctx context.Context, addr string, h http.Handler, out io.Writer) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "%shttp://%s/mcp\n", URLPrefix, ln.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Streams that outlive the grace (a listen never ends by itself)
		// are cut.
		srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving on %s: %w", ln.Addr(), err)
	}
	return nil
}
