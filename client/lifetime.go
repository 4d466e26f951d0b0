package client

import (
	"context"
	"sync"
)

// lifetime is what Close ends, shared by a client and its views: the
// context every request and listen is bound to, and the background work
// Close waits for (answers to a server's own requests).
type lifetime struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	closing bool
	bg      sync.WaitGroup
}

func newLifetime() *lifetime {
	ctx, cancel := context.WithCancel(context.Background())
	return &lifetime{ctx: ctx, cancel: cancel}
}

// closed reports whether Close has begun.
func (l *lifetime) closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closing
}

// end marks the client closed and cancels everything bound to it. It
// reports whether this was the first call.
func (l *lifetime) end() bool {
	l.mu.Lock()
	first := !l.closing
	l.closing = true
	l.mu.Unlock()
	l.cancel()
	return first
}

// goBackground runs fn in a goroutine that Close waits for, unless Close
// has begun: then it reports false and runs nothing. Adding to the group
// under the same lock that Close takes keeps every Add before the Wait.
func (l *lifetime) goBackground(fn func()) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return false
	}
	l.bg.Go(fn)
	return true
}

// bindLife returns ctx, cancelled as well, with cause ErrClosed, when
// life ends.
func bindLife(ctx, life context.Context) (context.Context, context.CancelFunc) {
	if life == nil {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(life, func() { cancel(ErrClosed) })
	return ctx, func() {
		stop()
		cancel(nil)
	}
}
