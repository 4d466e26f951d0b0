package redisbus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"tidings/bus"
	"tidings/bus/internal/brokerkit"
)

// redisTasks is a bus.TaskStore in Redis: a hash per task, under
// "<channel>:task:<id>", with the fields "rev" (the revision, from 1) and
// "rec" (the record), and Redis's own expiry set on the key at Create.
// Redis drops a key once its expiry passes and never returns it after,
// so the expiry is the server's, exact to the millisecond, and what it
// frees is freed by Redis. Writing a hash's fields leaves the key's
// expiry as it is, so Update keeps it by not touching it.
//
// Create and Update are Lua scripts: each runs whole on the server, with
// nothing else in between, so the check of the revision and the write are
// one step, in one round trip. (WATCH/MULTI would take three, hold a
// connection of the pool for the transaction, and under contention fail
// the transaction for the client to retry, where the script simply
// answers ErrTaskConflict to the loser.)
type redisTasks struct {
	client *client
	prefix string // "<channel>:task:"
	create *redis.Script
	update *redis.Script
}

// redisCreate stores a task unless its key exists: KEYS[1] the key,
// ARGV[1] the record, ARGV[2] the expiry in Unix milliseconds. It returns
// 1 when stored, 0 when the key is taken. An expiry already past deletes
// the key at once, as Redis does.
const redisCreate = `
if redis.call('EXISTS', KEYS[1]) == 1 then
	return 0
end
redis.call('HSET', KEYS[1], 'rev', 1, 'rec', ARGV[1])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return 1
`

// redisUpdate replaces a task's record if its revision is ARGV[1] (in
// decimal, as stored): KEYS[1] the key, ARGV[2] the record. It returns the
// new revision, 0 when there is no such key (or it has expired), -1 when
// the revision is another.
const redisUpdate = `
local rev = redis.call('HGET', KEYS[1], 'rev')
if not rev then
	return 0
end
if rev ~= ARGV[1] then
	return -1
end
local next = redis.call('HINCRBY', KEYS[1], 'rev', 1)
redis.call('HSET', KEYS[1], 'rec', ARGV[2])
return next
`

// OpenTasks connects to the task store of the replicas that Dial joins
// with the same URL: a hash per task, "<channel>:task:<id>" (default
// channel "tidings"), in the URL's db, so replicas must name the same db.
//
// Compare-and-swap is linearisable, and so is Get: each Create and Update
// is one Lua script, which checks the revision and writes with nothing in
// between, and one server answers every call — the one the URL names, or
// the primary the Sentinels name. Across a failover this holds for the
// writes reported done when each waits for a replica (wait=N, the
// default through Sentinel; see the package doc): a Create or Update that
// returns nil is on N replicas, and one that fails with ErrUnreplicated
// is on the old primary and may be lost with it. Without wait, a write
// the old primary acknowledged just before it went down can be lost, and
// Get on the new primary answers an older revision.
// Revisions count from 1 for each task (and again from 1 for a task
// created anew under an id that expired, which is why ids are not to be
// reused). The key expires at the task's expiry, to the millisecond
// (rounded up), by the server's clock, and Redis frees it. No command is
// sent twice: when Create or Update fail otherwise (the server went away
// mid-call), the write may or may not have landed, and the caller is
// told.
//
// OpenTasks fails once ctx ends (within 5s if ctx has no deadline) if
// the server cannot be reached; later losses are reported by the
// methods' errors, within their context's deadline, and the client
// reconnects on its own, to the new primary after a failover. It takes
// the options of Dial for a uniform signature; none applies to it.
func OpenTasks(ctx context.Context, rawURL string, opts ...bus.Option) (bus.TaskStore, error) {
	// No command is sent twice. go-redis retries a command whose reply it
	// lost with its connection, after the server may have run it; a create
	// or an update run twice would answer ErrTaskExists or ErrTaskConflict
	// for a write that landed, and a caller who then reads, changes and
	// writes again would apply its change twice. The caller is told of the
	// lost reply instead.
	c, err := dial(ctx, rawURL, "tasks", -1)
	if err != nil {
		return nil, err
	}
	return &redisTasks{client: c, prefix: c.channel + ":task:",
		create: redis.NewScript(redisCreate), update: redis.NewScript(redisUpdate)}, nil
}

func (s *redisTasks) Create(ctx context.Context, id string, rec []byte, expires time.Time) error {
	if err := brokerkit.CheckTask("create", id, rec); err != nil {
		return err
	}
	var n int64
	err := s.client.write(ctx, func(c redis.Cmdable) (bool, error) {
		var err error
		n, err = s.create.Run(ctx, c, []string{s.prefix + id}, rec, brokerkit.CeilMilli(expires)).Int64()
		return n == 1, err
	})
	switch {
	case err != nil:
		return fmt.Errorf("redisbus: create task %q in redis: %w", id, err)
	case n == 0:
		return bus.ErrTaskExists
	}
	return nil
}

func (s *redisTasks) Get(ctx context.Context, id string) ([]byte, uint64, error) {
	if err := brokerkit.CheckTaskID(id); err != nil {
		return nil, 0, err
	}
	v, err := s.client.HMGet(ctx, s.prefix+id, "rev", "rec").Result()
	if err != nil {
		return nil, 0, fmt.Errorf("redisbus: get task %q from redis: %w", id, err)
	}
	if v[0] == nil {
		return nil, 0, bus.ErrNoTask
	}
	revs, ok1 := v[0].(string)
	rec, ok2 := v[1].(string)
	rev, err := strconv.ParseUint(revs, 10, 64)
	if !ok1 || !ok2 || err != nil || rev == 0 {
		return nil, 0, fmt.Errorf("redisbus: get task %q from redis: key %q is not a task (revision %.20q)", id, s.prefix+id, v[0])
	}
	return []byte(rec), rev, nil
}

func (s *redisTasks) Update(ctx context.Context, id string, rec []byte, rev uint64) (uint64, error) {
	if err := brokerkit.CheckTask("update", id, rec); err != nil {
		return 0, err
	}
	var n int64
	err := s.client.write(ctx, func(c redis.Cmdable) (bool, error) {
		var err error
		n, err = s.update.Run(ctx, c, []string{s.prefix + id}, strconv.FormatUint(rev, 10), rec).Int64()
		return n > 0, err
	})
	switch {
	case err != nil:
		return 0, fmt.Errorf("redisbus: update task %q in redis: %w", id, err)
	case n == 0:
		return 0, bus.ErrNoTask
	case n < 0:
		return 0, bus.ErrTaskConflict
	}
	return uint64(n), nil
}

func (s *redisTasks) Close() error {
	if err := s.client.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		return fmt.Errorf("redisbus: close redis tasks: %w", err)
	}
	return nil
}
