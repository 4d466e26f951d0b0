package bus

import (
	"context"
	"sync"
)

// localInbox is how many messages a Local connection holds for its
// receiver; past it, messages to that connection are lost (and the loss is
// detected), as a slow subscriber's are on a broker.
const localInbox = 1024

// Local is a bus within one process: several servers of one program, or
// of a test, joined without a broker. (A server alone needs no bus.) It
// goes through the same encoding, numbering and gap detection as a
// broker. The zero value is not usable; call NewLocal.
type Local struct {
	mu      sync.Mutex
	members map[*localConn]struct{}
}

// NewLocal returns an empty group.
func NewLocal() *Local { return &Local{members: make(map[*localConn]struct{})} }

// Conn returns a new connection to the group; pass it to New. Every
// message sent on it reaches every other connection of the group.
func (l *Local) Conn() Conn {
	c := &localConn{l: l, inbox: make(chan []byte, localInbox), done: make(chan struct{})}
	l.mu.Lock()
	l.members[c] = struct{}{}
	l.mu.Unlock()
	return c
}

type localConn struct {
	l     *Local
	inbox chan []byte
	done  chan struct{}
	once  sync.Once
}

func (c *localConn) Send(_ context.Context, msg []byte) error {
	select {
	case <-c.done:
		return errClosed
	default:
	}
	b := append([]byte(nil), msg...) // receivers share one copy and never change it
	c.l.mu.Lock()
	defer c.l.mu.Unlock()
	for m := range c.l.members {
		if m == c {
			continue
		}
		select {
		case m.inbox <- b:
		default: // that member is not keeping up: it will see the gap
		}
	}
	return nil
}

func (c *localConn) Run(ctx context.Context, r Receiver) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.done:
			return errClosed
		case b := <-c.inbox:
			r.Message(b)
		}
	}
}

func (c *localConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.members, c)
		c.l.mu.Unlock()
		close(c.done)
	})
	return nil
}
