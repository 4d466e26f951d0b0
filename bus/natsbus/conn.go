package natsbus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"tidings/bus"
	"tidings/bus/internal/brokerkit"
)

// natsInbox is how many received messages wait for the receiving loop;
// past it, the client drops them (a slow consumer), which is detected.
const natsInbox = 4096

// natsConn is a bus.Conn over a NATS connection, publishing and
// subscribing on one subject. The client library reconnects on its own,
// with the bus's backoff, and reports losses and returns through
// callbacks, which only count them and wake the receiving loop. The
// client may also give up for good — it closes itself after repeated
// authorization failures, say — and then the receiving loop dials a new
// one, with the same backoff, rather than leave the replica deaf until
// it restarts.
type natsConn struct {
	ep      endpoint
	cfg     brokerkit.Config
	msgs    chan *nats.Msg
	changed chan struct{} // capacity 1: downs or ups moved
	downs   atomic.Int64
	ups     atomic.Int64
	lastErr atomic.Pointer[error]
	// server is the name of the server the client last connected to, and
	// failovers counts the reconnects to a server of another name.
	server    atomic.Pointer[string]
	failovers atomic.Int64
	stop      chan struct{} // closed by Close
	once      sync.Once

	mu      sync.Mutex // guards what follows against the receiving loop's redial
	nc      *nats.Conn
	ncEnded chan struct{} // closed by nc's closed callback
	closing bool
}

var _ bus.NodeReporter = (*natsConn)(nil)

// natsRedialTimeout bounds one attempt at dialling a new client after the
// old one gave up.
const natsRedialTimeout = 5 * time.Second

// Dial connects to the NATS server, or to one server of the cluster,
// that rawURL names, subscribed to its subject and ready when it returns,
// or fails once ctx ends (within 5s if ctx has no deadline):
//
//	nats://[user:password@]host:port[,nats://host:port...][/subject][?replicas=N]
//
// (tls:// for TLS; default subject "tidings"; see the package doc for
// the seeds of a cluster). Replicas that share a subject on one NATS
// server or cluster form one bus; pass the Conn to bus.New. Events are
// published on the subject and nothing is kept while the connection is
// down: the bus sees what it missed and re-notifies. The client
// reconnects on its own, to any server of a cluster, and a new one is
// dialled if it gives up; the Conn is a bus.NodeReporter, which names
// the server it is on and counts its moves to another. Of the options,
// WithBackoff (the delay between reconnects) and WithLogger apply.
func Dial(ctx context.Context, rawURL string, opts ...bus.Option) (bus.Conn, error) {
	ep, err := parse(rawURL)
	if err != nil {
		return nil, err
	}
	c := &natsConn{ep: ep, cfg: settings(opts), msgs: make(chan *nats.Msg, natsInbox),
		changed: make(chan struct{}, 1), stop: make(chan struct{})}
	ctx, cancel := bounded(ctx)
	defer cancel()
	nc, ended, err := ep.dial(ctx, c.cfg, "bus", c.options()...)
	if err != nil {
		return nil, err
	}
	if err := c.subscribe(ctx, nc, ended); err != nil {
		return nil, fmt.Errorf("natsbus: bus at %s: %w", ep.redacted, err)
	}
	c.nc, c.ncEnded = nc, ended
	c.landed(nc)
	return c, nil
}

// landed records the server nc is connected to, and counts a failover
// when it is not the one the connection was on before. Servers are told
// apart by name, which a cluster's servers must have, and which a server
// keeps when it restarts (its id changes).
func (c *natsConn) landed(nc *nats.Conn) {
	name := nc.ConnectedServerName()
	if name == "" {
		return // lost again already
	}
	if prev := c.server.Swap(&name); prev != nil && *prev != name {
		c.failovers.Add(1)
	}
}

// Node names the server the connection is on, without a password (see
// bus.NodeReporter), or "" while it is on none.
func (c *natsConn) Node() string {
	nc, _ := c.current()
	name, addr := nc.ConnectedServerName(), nc.ConnectedUrlRedacted()
	if name == "" || addr == "" {
		return addr
	}
	return name + " (" + addr + ")"
}

// Failovers counts the reconnects to another server than the one lost
// (see bus.NodeReporter).
func (c *natsConn) Failovers() int64 { return c.failovers.Load() }

// options are what the bus's client adds to what every client here has:
// no echo of its own messages, pings that find a dead connection within
// some 30s, and callbacks that count losses and returns.
func (c *natsConn) options() []nats.Option {
	return []nats.Option{
		nats.NoEcho(),
		nats.PingInterval(10 * time.Second),
		nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil {
				err = errDisconnected
			}
			c.lastErr.Store(&err)
			c.downs.Add(1)
			c.poke()
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) { c.landed(nc); c.ups.Add(1); c.poke() }),
	}
}

// subscribe subscribes nc to the subject, in place when it returns, or
// closes nc.
func (c *natsConn) subscribe(ctx context.Context, nc *nats.Conn, ended chan struct{}) error {
	_, err := nc.ChanSubscribe(c.ep.subject, c.msgs)
	if err == nil {
		err = nc.FlushWithContext(ctx) // the subscription is in place when the client is used
	}
	if err != nil {
		nc.Close()
		<-ended
		return fmt.Errorf("subscribe to %q: %w", c.ep.subject, err)
	}
	return nil
}

// current returns the client in use and the channel that says it ended.
func (c *natsConn) current() (*nats.Conn, chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nc, c.ncEnded
}

func (c *natsConn) poke() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *natsConn) Send(_ context.Context, msg []byte) error {
	// Publish only appends to the client's buffer, which its own
	// goroutine flushes at once; it fails while disconnected.
	nc, _ := c.current()
	if err := nc.Publish(c.ep.subject, msg); err != nil {
		return fmt.Errorf("nats publish: %w", err)
	}
	return nil
}

func (c *natsConn) Run(ctx context.Context, r bus.Receiver) error {
	var downs, ups int64
	for {
		nc, ended := c.current()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.stop:
			return errClosed
		case <-ended:
			// The old client reported its last loss before it said it
			// ended (its callbacks run in order); redial reports that
			// loss itself, so it must not be reported again after the
			// new client is up.
			downs, ups = c.downs.Load(), c.ups.Load()
			if err := c.redial(ctx, r); err != nil {
				return err
			}
		case m := <-c.msgs:
			r.Message(m.Data)
		case <-c.changed:
			// A loss and a return may both have happened since we last
			// looked; report them in that order.
			if d := c.downs.Load(); d != downs {
				downs = d
				err := errDisconnected
				if p := c.lastErr.Load(); p != nil {
					err = *p
				}
				r.Down(err)
			}
			if u := c.ups.Load(); u != ups {
				ups = u
				r.Up()
				if !nc.IsConnected() {
					r.Down(errors.New("disconnected again")) // its own callback is still to come
				}
			}
		}
	}
}

// redial replaces a client that closed without Close being called, trying
// with the bus's backoff until it succeeds or the connection is closed.
func (c *natsConn) redial(ctx context.Context, r bus.Receiver) error {
	var err error = errors.New("the NATS client gave up reconnecting")
	if p := c.lastErr.Load(); p != nil {
		err = fmt.Errorf("the NATS client gave up reconnecting: %w", *p)
	}
	r.Down(err)
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(c.cfg.Backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-c.stop:
			t.Stop()
			return errClosed
		case <-t.C:
		}
		nc, ended, err := c.reconnect()
		if err != nil {
			c.cfg.Logger.Debug("natsbus: dialling NATS again failed", "attempt", attempt, "err", err)
			continue
		}
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			nc.Close()
			<-ended
			return errClosed
		}
		c.nc, c.ncEnded = nc, ended
		c.mu.Unlock()
		c.landed(nc)
		r.Up()
		return nil
	}
}

func (c *natsConn) Close() error {
	c.once.Do(func() {
		c.mu.Lock()
		c.closing = true
		nc, ended := c.nc, c.ncEnded
		c.mu.Unlock()
		close(c.stop)
		if nc.IsConnected() {
			_ = nc.FlushTimeout(time.Second)
		}
		nc.Close()
		<-ended // the client's callbacks have run; its goroutines are ending
	})
	return nil
}

// reconnect dials and subscribes a new client, within natsRedialTimeout.
func (c *natsConn) reconnect() (*nats.Conn, chan struct{}, error) {
	ctx, cancel := context.WithTimeout(context.Background(), natsRedialTimeout)
	defer cancel()
	nc, ended, err := c.ep.connect(ctx, c.cfg, "bus", c.options()...)
	if err != nil {
		return nil, nil, err
	}
	if err := c.subscribe(ctx, nc, ended); err != nil {
		return nil, nil, err
	}
	return nc, ended, nil
}
