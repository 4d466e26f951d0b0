package redisbus

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"tidings/bus"
	"tidings/bus/internal/brokerkit"
)

// redisConn is a bus.Conn over Redis pub/sub: one pooled client to
// publish, one subscription to receive, and the receiving loop
// reconnects it with the bus's backoff.
type redisConn struct {
	client  *client
	channel string
	cfg     brokerkit.Config

	// sentAt is when a Send last succeeded (Unix ns). Own messages come
	// back on the subscription, so silence means a stuck subscription
	// only while sends have been going out.
	sentAt atomic.Int64

	mu     sync.Mutex // guards ps against Close
	ps     *redis.PubSub
	closed bool
	done   chan struct{}
	once   sync.Once
}

// Dial connects to the Redis server rawURL names, subscribed to its
// channel and ready when it returns, or fails once ctx ends (within 5s
// if ctx has no deadline):
//
//	redis://[user:password@]host:port[/db][?channel=name]   (rediss:// for TLS; default channel "tidings")
//	redis+sentinel://[user:password@]host[:port],.../master[/db][?channel=name]
//
// (see the package doc). Replicas that share a channel on one Redis form
// one bus; pass the Conn to bus.New. Through Sentinel the subscription
// moves to the primary they promote, and the Conn tells bus.Stats which
// server it uses and how many times that changed (Node, Failovers).
// Redis channels span every database of a server, so db selects nothing
// for pub/sub. A subscription that stays silent for
// three heartbeats while events go out is taken for stuck and renewed.
// Of the options, WithHeartbeat (that silence), WithBackoff (the delay
// between reconnects) and WithLogger apply.
func Dial(ctx context.Context, rawURL string, opts ...bus.Option) (bus.Conn, error) {
	cl, err := dial(ctx, rawURL, "bus", 1) // once, past a pooled connection the server closed; then the event is dropped
	if err != nil {
		return nil, err
	}
	c := &redisConn{client: cl, channel: cl.channel, cfg: settings(opts), done: make(chan struct{})}
	wait := dialWait // for the subscription's confirmation
	if dl, ok := ctx.Deadline(); ok {
		wait = max(time.Until(dl), time.Millisecond)
	}
	c.ps = c.client.Subscribe(ctx, c.channel)
	msg, err := c.ps.ReceiveTimeout(ctx, wait)
	if err == nil {
		if s, ok := msg.(*redis.Subscription); !ok || s.Kind != "subscribe" {
			err = fmt.Errorf("unexpected reply %v", msg)
		}
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("redisbus: subscribe to %q at %s: %w", c.channel, cl.redacted, err)
	}
	return c, nil
}

func (c *redisConn) Send(ctx context.Context, msg []byte) error {
	if err := c.client.Publish(ctx, c.channel, msg).Err(); err != nil {
		return fmt.Errorf("redis publish: %w", err)
	}
	c.sentAt.Store(time.Now().UnixNano())
	return nil
}

// pubsub returns the current subscription, nil once closed.
func (c *redisConn) pubsub() *redis.PubSub {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	return c.ps
}

// renew replaces a subscription that has gone quiet with a new one.
func (c *redisConn) renew(ctx context.Context) {
	ps := c.client.Subscribe(ctx, c.channel)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = ps.Close()
		return
	}
	old := c.ps
	c.ps = ps
	c.mu.Unlock()
	_ = old.Close()
}

func (c *redisConn) Run(ctx context.Context, r bus.Receiver) error {
	// Every replica's heartbeats come back to it on its own subscription,
	// so a subscription that stays silent for three intervals is stuck.
	idle := max(3*c.cfg.Heartbeat, time.Second)
	up, attempt := true, 0
	for {
		ps := c.pubsub()
		if ps == nil {
			return errClosed
		}
		waitFrom := time.Now()
		msg, err := ps.ReceiveTimeout(ctx, idle)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			if c.pubsub() == nil {
				return errClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if c.sentAt.Load() < waitFrom.UnixNano() {
					// Nothing of ours went out while we waited (the
					// broker refuses our publishes, say): the silence
					// says nothing about the subscription.
					continue
				}
				err = fmt.Errorf("nothing received in %v", idle)
				c.renew(ctx)
			}
			if up {
				up = false
				r.Down(err)
			}
			attempt++
			t := time.NewTimer(c.cfg.Backoff(attempt))
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-c.done:
				t.Stop()
				return errClosed
			case <-t.C:
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			// The client resubscribes each connection it makes.
			if m.Kind == "subscribe" && !up {
				up, attempt = true, 0
				r.Up()
			}
		case *redis.Message:
			r.Message([]byte(m.Payload))
		}
	}
}

// Node is the Redis server the connection last connected to, when it
// found it through Sentinel ("" else): bus.Stats reports it (see
// bus.NodeReporter).
func (c *redisConn) Node() string {
	addr, _ := c.client.primary.get()
	return addr
}

// Failovers counts the times the primary the connection found through
// Sentinel changed.
func (c *redisConn) Failovers() int64 {
	_, n := c.client.primary.get()
	return n
}

func (c *redisConn) Close() error {
	var err error
	c.once.Do(func() {
		c.mu.Lock()
		c.closed = true
		ps := c.ps
		c.mu.Unlock()
		close(c.done)
		err = errors.Join(ps.Close(), c.client.Close())
	})
	if err != nil {
		return fmt.Errorf("redis close: %w", err)
	}
	return nil
}
