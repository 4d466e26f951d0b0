package bus

import (
	"context"
	"fmt"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisState is a State in one Redis hash: a field per key, "1" or "0".
// A hash makes Load one HGETALL and Set one HSET, each atomic.
type redisState struct {
	client *redis.Client
	hash   string
}

func openRedisState(ctx context.Context, u *url.URL) (*redisState, error) {
	opt, channel, err := redisOptions(u)
	if err != nil {
		return nil, err
	}
	s := &redisState{client: redis.NewClient(opt), hash: channel + ":state"}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	if err := s.client.Ping(ctx).Err(); err != nil {
		_ = s.client.Close()
		return nil, fmt.Errorf("bus: state at %s: %w", u.Redacted(), err)
	}
	return s, nil
}

func (s *redisState) Load(ctx context.Context) (map[string]bool, error) {
	all, err := s.client.HGetAll(ctx, s.hash).Result()
	if err != nil {
		return nil, fmt.Errorf("bus: load state from redis hash %q: %w", s.hash, err)
	}
	m := make(map[string]bool, len(all))
	for k, v := range all {
		if on, ok := parseStateValue(v); ok {
			m[k] = on
		}
	}
	return m, nil
}

func (s *redisState) Set(ctx context.Context, key string, on bool) error {
	if err := s.client.HSet(ctx, s.hash, key, stateValue(on)).Err(); err != nil {
		return fmt.Errorf("bus: set %q in redis hash %q: %w", key, s.hash, err)
	}
	return nil
}

func (s *redisState) Close() error {
	if err := s.client.Close(); err != nil {
		return fmt.Errorf("bus: close redis state: %w", err)
	}
	return nil
}
