package redisbus

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"tidings/bus"
	"tidings/bus/internal/brokerkit"
)

// redisState is a bus.State in one Redis hash: a field per key, "1" or "0".
// A hash makes Load one HGETALL and Set one HSET, each atomic.
type redisState struct {
	client *client
	hash   string
}

// OpenState connects to the shared state of the replicas that Dial joins
// with the same URL: the hash "<channel>:state" (default
// "tidings:state") in the URL's db. Unlike pub/sub channels, hashes live
// in one database, so replicas must name the same db. Load is one
// HGETALL and Set one HSET, each atomic; with wait=N (the default
// through Sentinel) Set is done once N replicas have it, and fails with
// ErrUnreplicated otherwise (see the package doc). OpenState fails once
// ctx ends (within 5s if ctx has no deadline) if the server cannot be
// reached; later losses are reported by the methods' errors, and the
// client reconnects on its own, to the new primary after a failover. It
// takes the options of Dial for a uniform signature; none applies to it.
func OpenState(ctx context.Context, rawURL string, opts ...bus.Option) (bus.State, error) {
	c, err := dial(ctx, rawURL, "state", 1)
	if err != nil {
		return nil, err
	}
	return &redisState{client: c, hash: c.channel + ":state"}, nil
}

func (s *redisState) Load(ctx context.Context) (map[string]bool, error) {
	all, err := s.client.HGetAll(ctx, s.hash).Result()
	if err != nil {
		return nil, fmt.Errorf("redisbus: load state from redis hash %q: %w", s.hash, err)
	}
	m := make(map[string]bool, len(all))
	for k, v := range all {
		if on, ok := brokerkit.ParseStateValue(v); ok {
			m[k] = on
		}
	}
	return m, nil
}

func (s *redisState) Set(ctx context.Context, key string, on bool) error {
	err := s.client.write(ctx, func(c redis.Cmdable) (bool, error) {
		return true, c.HSet(ctx, s.hash, key, brokerkit.StateValue(on)).Err()
	})
	if err != nil {
		return fmt.Errorf("redisbus: set %q in redis hash %q: %w", key, s.hash, err)
	}
	return nil
}

func (s *redisState) Close() error {
	if err := s.client.Close(); err != nil {
		return fmt.Errorf("redisbus: close redis state: %w", err)
	}
	return nil
}
