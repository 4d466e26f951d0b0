package bus

import (
	"context"
	"fmt"
	"net/url"
)

// Dial connects to the broker rawURL names, subscribed and ready when it
// returns, or fails once ctx ends. Two kinds of URL are understood:
//
//	nats://[user:password@]host:port[/subject]           (default subject "tidings")
//	redis://[user:password@]host:port[/db][?channel=name] (rediss:// for TLS; default channel "tidings")
//
// Replicas that share a subject or channel on one broker form one bus.
// Redis channels span every database of a server, so db selects nothing
// for pub/sub. Replicas in one process join with NewLocal instead, which
// has no URL: a name would have to be looked up in process-wide state.
func Dial(ctx context.Context, rawURL string, opts ...Option) (Conn, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("bus: %w", err)
	}
	cfg := newConfig(opts)
	switch u.Scheme {
	case "nats":
		return dialNATS(ctx, u, cfg)
	case "redis", "rediss":
		return dialRedis(ctx, u, cfg)
	}
	return nil, fmt.Errorf("bus: %s: unknown scheme %q (want nats, redis or rediss)", u.Redacted(), u.Scheme)
}

// Open dials rawURL (see Dial) and starts a Bus over the connection.
func Open(ctx context.Context, rawURL string, opts ...Option) (Bus, error) {
	c, err := Dial(ctx, rawURL, opts...)
	if err != nil {
		return nil, err
	}
	return New(c, opts...), nil
}
