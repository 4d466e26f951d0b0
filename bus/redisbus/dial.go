// Package redisbus connects the replicas of a server through Redis: a
// bus.Conn over Redis pub/sub (Dial), and the shared state and task store
// in Redis hashes (OpenState, OpenTasks). It is a package of its own so
// that a program links the Redis client only if it imports it; package
// brokers opens it, or NATS, by URL.
//
// Every URL has the form
//
//	redis://[user:password@]host:port[/db][?channel=name]   (rediss:// for TLS; default channel "tidings")
//
// and replicas that name the same channel on one Redis form one bus;
// those that also name the same db share one state and one task store.
// Other parameters are go-redis's own.
package redisbus

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"tidings/bus"
	"tidings/bus/internal/brokerkit"
)

// dialWait bounds dialling when ctx has no deadline.
const dialWait = 5 * time.Second

// client is a Redis client made by dial, with what its URL named.
type client struct {
	*redis.Client
	channel  string // the pub/sub channel, and the prefix of the keys
	redacted string // the URL without its password, for errors
}

// dial is where every client of this package is made, for the bus
// ("bus"), the state ("state") or the tasks ("tasks"): it reads rawURL
// (see options), lets tune change the client's options, and checks that
// the server answers within ctx, or within dialWait if ctx has no
// deadline. Its errors say what it dialled, without the password.
func dial(ctx context.Context, rawURL, what string, tune func(*redis.Options)) (*client, error) {
	opt, channel, redacted, err := options(rawURL)
	if err != nil {
		return nil, err
	}
	if tune != nil {
		tune(opt)
	}
	c := &client{Client: redis.NewClient(opt), channel: channel, redacted: redacted}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, dialWait)
		defer cancel()
	}
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redisbus: %s at %s: %w", what, redacted, err)
	}
	return c, nil
}

// options reads redis://[user:password@]host:port[/db][?channel=name]
// (rediss:// for TLS) into go-redis options, the channel name (default
// "tidings") and the URL without its password; other parameters are
// go-redis's own. Its errors never show the password.
func options(rawURL string) (*redis.Options, string, string, error) {
	u, err := brokerkit.ParseURL(rawURL)
	if err != nil {
		return nil, "", "", fmt.Errorf("redisbus: %w", err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return nil, "", "", fmt.Errorf("redisbus: %s: scheme %q is not redis or rediss", u.Redacted(), u.Scheme)
	}
	q := u.Query()
	channel := q.Get("channel")
	if channel == "" {
		channel = "tidings"
	}
	q.Del("channel")
	rest := *u
	rest.RawQuery = q.Encode()
	opt, err := redis.ParseURL(rest.String())
	if err != nil {
		return nil, "", "", fmt.Errorf("redisbus: %s: %w", u.Redacted(), err)
	}
	opt.ContextTimeoutEnabled = true
	opt.DisableIdentity = true
	opt.MaxRetries = 1    // once, past a pooled connection the server closed; then the event is dropped
	opt.DialerRetries = 1 // the receiving loop paces reconnects with the bus's own backoff
	opt.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return opt, channel, u.Redacted(), nil
}

// settings reads the options as every constructor here does.
func settings(opts []bus.Option) brokerkit.Config { return brokerkit.Apply(opts) }

// errClosed is what a closed connection returns from Run.
var errClosed = brokerkit.ErrClosed
