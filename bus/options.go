package bus

import (
	"log/slog"
	"math/rand/v2"
	"time"
)

// Option tunes a Bus (New, Open) or a broker connection (Dial, Open).
type Option func(*config)

type config struct {
	heartbeat   time.Duration
	queue       int
	logger      *slog.Logger
	minBackoff  time.Duration
	maxBackoff  time.Duration
	sendTimeout time.Duration
	// key signs and checks messages (see WithSecret); nil for none.
	key []byte
}

func newConfig(opts []Option) config {
	c := config{
		heartbeat:   5 * time.Second,
		queue:       1024,
		minBackoff:  100 * time.Millisecond,
		maxBackoff:  10 * time.Second,
		sendTimeout: 2 * time.Second,
	}
	for _, o := range opts {
		o(&c)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return c
}

// WithHeartbeat sets how often the bus tells its peers its latest
// sequence number (default 5s): a peer that missed the last events of a
// burst finds out, and re-notifies, within one interval. Each heartbeat
// is one small message per replica.
func WithHeartbeat(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.heartbeat = d
		}
	}
}

// WithQueue sets how many events may wait to be sent (default 1024).
// Publish never blocks: past the bound, events are dropped and counted,
// and the peers re-notify when they see the gap.
func WithQueue(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.queue = n
		}
	}
}

// WithSecret has the bus sign every message it sends, and refuse every
// message that is not signed, under a key derived from secret: pass the
// key given to server.WithSecret, which every replica shares already.
// A message is then believed only if it comes from a replica that holds
// the key; those that do not are dropped and counted
// (Stats.Unsigned, Stats.BadMAC), with a warning at most every ten
// seconds, and make no listener re-read: a broker that others can
// publish on can no longer make replicas tell of changes that did not
// happen, nor re-notify at will. Replicas with different keys, or with
// a key and without, do not hear each other: during a change of key,
// changes made through a replica reach only those that share its key
// until every replica has restarted with the new one.
//
// Without it the bus signs nothing and believes every message, as a bus
// must whose broker only the deployment can reach; New warns of it.
// Signing proves who sent a message, not when: a message recorded off
// the broker can be sent again, which at most makes the replicas
// re-notify (see Bus). An empty secret is the same as none.
func WithSecret(secret []byte) Option {
	return func(c *config) {
		c.key = nil
		if len(secret) > 0 {
			c.key = busKey(secret)
		}
	}
}

// WithLogger sets where the bus logs connection losses, reconnects and
// drops (default slog.Default). Warnings are rate-limited.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithBackoff bounds the delay between reconnect attempts (defaults
// 100ms and 10s): it doubles from min after each failed attempt up to
// max, and each delay is drawn at random from its upper half, so that
// replicas that lost the broker together do not return in step.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) {
		if min > 0 {
			c.minBackoff = min
		}
		if max >= c.minBackoff {
			c.maxBackoff = max
		}
	}
}

// backoff returns the delay before reconnect attempt n (from 1).
func (c *config) backoff(n int) time.Duration {
	d := c.minBackoff
	for i := 1; i < n && d < c.maxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.maxBackoff)
	return d/2 + rand.N(d/2+1)
}
