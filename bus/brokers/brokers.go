// Package brokers opens a bus, a shared state and a task store by URL,
// on whichever broker the URL's scheme names:
//
//	nats://[user:password@]host:port[,nats://host:port...][/subject][?replicas=N]
//	                                                       (tls:// for TLS; default subject "tidings"; see natsbus)
//	redis://[user:password@]host:port[/db][?channel=name]  (rediss:// for TLS; default channel "tidings")
//	redis+sentinel://[user:password@]host[:port],host[:port],.../master[/db][?channel=name]
//	                                                       (rediss+sentinel:// for TLS; Sentinel port 26379)
//
// A redis+sentinel URL names the Sentinels that watch a Redis primary
// (master, as their config names it) and its replicas; the bus, the state
// and the tasks follow the primary they promote, and a write of the state
// or a task is done once a replica has it (wait=N sets how many, 0 none;
// see redisbus for what that guarantees across a failover).
//
// so that one setting (the --bus flag of tidings serve, say) joins a
// replica to its peers, to the state they share and to their tasks. It
// is the one package that imports every broker adapter (natsbus,
// redisbus) and so links both clients; a program that knows its broker
// can import that adapter alone, and one that imports only bus or the
// server links neither.
package brokers

import (
	"context"
	"fmt"
	"strings"

	"tidings/bus"
	"tidings/bus/internal/brokerkit"
	"tidings/bus/natsbus"
	"tidings/bus/redisbus"
)

// adapter is what one broker's package offers, by URL.
type adapter struct {
	dial  func(context.Context, string, ...bus.Option) (bus.Conn, error)
	state func(context.Context, string, ...bus.Option) (bus.State, error)
	tasks func(context.Context, string, ...bus.Option) (bus.TaskStore, error)
}

// adapterOf returns the adapter of rawURL's scheme: the one place that
// knows the schemes, for the bus, the state and the task store alike.
// Its errors never show the password.
func adapterOf(rawURL string) (adapter, error) {
	// A NATS URL may list several seeds (see natsbus), which do not parse
	// as one URL: its scheme is read before the first "://".
	if scheme, _, ok := strings.Cut(rawURL, "://"); ok && (strings.EqualFold(scheme, "nats") || strings.EqualFold(scheme, "tls")) {
		return adapter{natsbus.Dial, natsbus.OpenState, natsbus.OpenTasks}, nil
	}
	u, _, err := brokerkit.ParseURLHosts(rawURL, "")
	if err != nil {
		return adapter{}, fmt.Errorf("brokers: %w", err)
	}
	switch u.Scheme {
	case "redis", "rediss", "redis+sentinel", "rediss+sentinel":
		return adapter{redisbus.Dial, redisbus.OpenState, redisbus.OpenTasks}, nil
	}
	return adapter{}, fmt.Errorf("brokers: %s: unknown scheme %q (want nats, tls, redis, rediss, redis+sentinel or rediss+sentinel)", u.Redacted(), u.Scheme)
}

// Dial connects to the broker rawURL names, subscribed and ready when it
// returns, or fails once ctx ends (see natsbus.Dial and redisbus.Dial).
// Replicas that share a subject or channel on one broker form one bus.
// Redis channels span every database of a server, so db selects nothing
// for pub/sub. Replicas in one process join with bus.NewLocal instead,
// which has no URL: a name would have to be looked up in process-wide
// state.
func Dial(ctx context.Context, rawURL string, opts ...bus.Option) (bus.Conn, error) {
	a, err := adapterOf(rawURL)
	if err != nil {
		return nil, err
	}
	return a.dial(ctx, rawURL, opts...)
}

// Open dials rawURL (see Dial) and starts a bus over the connection with
// the same options (bus.New): the heartbeat, the queue, the logger, the
// backoff and the secret that signs every message (bus.WithSecret).
func Open(ctx context.Context, rawURL string, opts ...bus.Option) (bus.Bus, error) {
	c, err := Dial(ctx, rawURL, opts...)
	if err != nil {
		return nil, err
	}
	return bus.New(c, opts...), nil
}

// OpenState connects to the shared state in the broker rawURL names —
// the URL given to Open, so that one setting joins a replica both to the
// bus and to the state:
//
//	redis://host:port[/db][?channel=name]  the hash "<channel>:state" (default "tidings:state") in db
//	nats://host:port[/subject]             the JetStream key-value bucket named after the subject, dots
//	                                       escaped (default "tidings"); the server needs JetStream
//
// (and redis+sentinel://, the same hash on the primary the Sentinels
// name). Unlike pub/sub channels, Redis hashes live in one database, so
// replicas must name the same db. A NATS bucket that does not exist is
// created with the server's defaults (file storage, one value kept per
// key) and the replicas replicas=N asks, by default as many as the
// cluster has servers, up to 3; create it beforehand to choose otherwise
// — it is used as found, but for too few replicas (see
// natsbus.OpenState).
// OpenState fails once ctx ends if the store cannot be reached; later
// losses are reported by the methods' errors, and the connection is
// regained on its own. Of the options, WithLogger and WithBackoff apply
// (to NATS). See natsbus.OpenState and redisbus.OpenState.
func OpenState(ctx context.Context, rawURL string, opts ...bus.Option) (bus.State, error) {
	a, err := adapterOf(rawURL)
	if err != nil {
		return nil, err
	}
	return a.state(ctx, rawURL, opts...)
}

// OpenTasks connects to the task store in the broker rawURL names — the
// URL given to Open and OpenState, so that one setting joins a replica to
// the bus, the shared state and the tasks:
//
//	redis://host:port[/db][?channel=name]  a hash per task, "<channel>:task:<id>" (default channel "tidings"), in db
//	nats://host:port[/subject]             the JetStream key-value bucket "<state bucket>_tasks" (see OpenState),
//	                                       default "tidings_tasks"; the server needs JetStream
//
// (redis+sentinel:// as redis://, on the primary the Sentinels name;
// rediss://, rediss+sentinel:// and tls:// for TLS, with a user and
// password in the URL as for Dial.) Compare-and-swap is linearisable on
// both, and so is Get; how each achieves it, and how each expires a
// task, is told at
// redisbus.OpenTasks and natsbus.OpenTasks. When Create or Update fail
// otherwise (the broker went away mid-call), the write may or may not
// have landed: neither store sends it again by itself, since a write sent
// twice would report a conflict with itself.
//
// Limits. A record is at most bus.MaxTaskRecord (1 MiB less 4 KiB): a
// NATS server takes messages of at most 1 MiB by default (max_payload),
// headers included, and the rest is room for the store's envelope and
// headers. Redis could take more, but is held to the same, so that what
// works on one broker works on the other, and because a record is read
// whole on every poll. A larger one is refused before it is sent.
//
// Durability is the broker's: a record is as safe as Redis's persistence
// (append-only file, replicas) or the bucket's stream (file storage, its
// replicas) make it. Through Sentinel, a write is done only once a
// replica has it (redisbus's wait=N), so that a failover does not lose
// it silently. Redis keys live in one database, so replicas must
// name the same db.
//
// OpenTasks fails once ctx ends if the store cannot be reached; later
// losses are reported by the methods' errors, within their context's
// deadline, and the connection is regained on its own. Of the options,
// WithLogger and WithBackoff apply (to NATS).
func OpenTasks(ctx context.Context, rawURL string, opts ...bus.Option) (bus.TaskStore, error) {
	a, err := adapterOf(rawURL)
	if err != nil {
		return nil, err
	}
	return a.tasks(ctx, rawURL, opts...)
}
