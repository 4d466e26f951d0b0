package bus

import (
	"log/slog"
	"time"

	"tidings/bus/internal/brokerkit"
)

// Option tunes a Bus (New) or a broker connection (the Dial, OpenState
// and OpenTasks of natsbus, redisbus and brokers, which take the same
// options, so that one list configures a replica's bus and its stores).
// Each names the parts it applies to.
type Option func(*config)

// config is what the options set. It is defined in brokerkit, so that
// the broker adapters read the same settings without package bus
// showing them.
type config = brokerkit.Config

func newConfig(opts []Option) config { return brokerkit.Apply(opts) }

// WithHeartbeat sets how often the bus tells its peers its latest
// sequence number (default 5s): a peer that missed the last events of a
// burst finds out, and re-notifies, within one interval. Each heartbeat
// is one small message per replica.
func WithHeartbeat(d time.Duration) Option { return func(c *config) { positive(&c.Heartbeat, d) } }

// WithQueue sets how many events may wait to be sent (default 1024).
// Publish never blocks: past the bound, events are dropped and counted,
// and the peers re-notify when they see the gap.
func WithQueue(n int) Option { return func(c *config) { positive(&c.Queue, n) } }

// positive sets *dst to v if v is positive and otherwise leaves the
// default there: the rule of every size, count and duration option (see
// the package doc).
func positive[T ~int | ~int64](dst *T, v T) {
	if v > 0 {
		*dst = v
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
		c.Key = nil
		if len(secret) > 0 {
			c.Key = busKey(secret)
		}
	}
}

// WithLogger sets where the bus logs connection losses, reconnects and
// drops (default slog.Default). Warnings are rate-limited.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.Logger = l } }

// WithBackoff bounds the delay between reconnect attempts (defaults
// 100ms and 10s): it doubles from min after each failed attempt up to
// max, and each delay is drawn at random from its upper half, so that
// replicas that lost the broker together do not return in step. A max
// below the min in force is ignored.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) {
		positive(&c.MinBackoff, min)
		if max >= c.MinBackoff {
			c.MaxBackoff = max
		}
	}
}
