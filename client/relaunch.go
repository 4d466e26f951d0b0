package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"tidings/jsonrpc"
)

// ErrServerGone reports a spawned server that keeps dying right after it
// starts; the client stops starting it again.
var ErrServerGone = fmt.Errorf("%w: the server process keeps exiting", ErrClosed)

// Crash-loop guard: a process that dies within quickDeath of its start
// this many times in a row is not started again.
const (
	quickDeath    = 2 * time.Second
	maxQuickDeath = 3
)

// commandTransport runs a stdio server and, when it dies, starts it again
// on the next request: a crashed server costs the requests that were in
// flight, not the client. A new process knows nothing of the old one, so
// the client probes its era again and watchers re-listen (they see the
// death as a drop and reconcile).
type commandTransport struct {
	// spawn starts a process; ctx bounds the start only.
	spawn func(ctx context.Context) (*stdioTransport, error)
	// onRestart is told of each new process, with how the one before
	// ended (see ServerExitError.State).
	onRestart func(ended string)
	// life bounds restarts: it is the client's, not that of whoever made
	// the client, so restarts keep working after that caller is gone.
	life context.Context

	// quickDeath is the crash-loop guard's bound (the constant, but for
	// tests).
	quickDeath time.Duration
	// reaping counts goroutines stopping dead processes; close waits.
	reaping sync.WaitGroup

	mu     sync.Mutex
	cur    *stdioTransport
	quick  int // quick deaths in a row
	reaped bool
	closed bool
	gone   bool
}

// newCommandTransport starts the first process within ctx; later ones are
// started within life.
func newCommandTransport(ctx, life context.Context, spawn func(context.Context) (*stdioTransport, error), onRestart func(ended string)) (*commandTransport, error) {
	t, err := spawn(ctx)
	if err != nil {
		return nil, err
	}
	return &commandTransport{spawn: spawn, onRestart: onRestart, life: life, cur: t, quickDeath: quickDeath}, nil
}

// current returns the live process, starting a new one if it died. A dead
// process is reaped in the background: stopping it may take the whole
// shutdown sequence, which no request should wait for.
func (t *commandTransport) current() (*stdioTransport, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	if t.gone {
		return nil, ErrServerGone
	}
	dead := t.cur
	select {
	case <-dead.done:
	default:
		return dead, nil
	}
	if !t.reaped {
		t.reaped = true
		t.reaping.Go(func() { _ = dead.close() })
	}
	// A life is judged from its start to its end, not to this request,
	// which may come much later.
	prev := t.quick
	if dead.lifespan() < t.quickDeath {
		t.quick++
	} else {
		t.quick = 0
	}
	if t.quick >= maxQuickDeath {
		t.gone = true
		return nil, ErrServerGone
	}
	nt, err := t.spawn(t.life)
	if err != nil {
		// Judged again at the next request: do not count this death twice.
		t.quick = prev
		return nil, err
	}
	t.cur, t.reaped = nt, false
	t.onRestart(dead.exitState())
	return nt, nil
}

func (t *commandTransport) roundTrip(ctx context.Context, r *outbound, onMsg func(*jsonrpc.Message)) (*jsonrpc.Message, error) {
	cur, err := t.current()
	if err != nil {
		return nil, err
	}
	m, err := cur.roundTrip(ctx, r, onMsg)
	if err != nil && (errors.Is(err, ErrClosed) || errors.Is(err, ErrDropped)) && !t.isClosed() && ctx.Err() == nil {
		// The process died before it answered (between current() and
		// the write, or while r waited): say how it ended.
		return nil, &ServerExitError{Method: r.method, State: cur.exitState()}
	}
	return m, err
}

// ServerExitError reports a spawned server that ended before it answered
// a request, and how it ended: its exit status or the signal that killed
// it. It is an ErrDropped: the request may be sent again, to the server
// the client starts anew.
type ServerExitError struct {
	// Method is the request the server did not answer.
	Method string
	// State is how the process ended, as os.ProcessState says it ("exit
	// status 3", "signal: killed"), or "" when it closed its output
	// without exiting in time.
	State string
}

func (e *ServerExitError) Error() string {
	if e.State == "" {
		return fmt.Sprintf("client: the server closed its output before it answered %s", e.Method)
	}
	return fmt.Sprintf("client: the server exited (%s) before it answered %s", e.State, e.Method)
}

// Unwrap makes a ServerExitError an ErrDropped.
func (e *ServerExitError) Unwrap() error { return ErrDropped }

func (t *commandTransport) send(ctx context.Context, r *outbound) error {
	cur, err := t.current()
	if err != nil {
		return err
	}
	return cur.send(ctx, r)
}

func (t *commandTransport) isClosed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.closed
}

func (t *commandTransport) close() error {
	t.mu.Lock()
	t.closed = true
	cur := t.cur
	t.mu.Unlock()
	err := cur.close()
	t.reaping.Wait()
	return err
}
