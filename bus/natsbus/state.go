package natsbus

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"tidings/bus"
	"tidings/bus/internal/brokerkit"
)

// natsState is a bus.State in a JetStream key-value bucket: an entry per
// key, "1" or "0". Keys are stored base64url-encoded, since a bucket's
// keys allow fewer characters than tool names and resource URIs hold.
type natsState struct {
	nc     *nats.Conn
	kv     jetstream.KeyValue
	log    *slog.Logger
	closed chan struct{} // closed by the client's closed callback
	once   sync.Once
}

// OpenState connects to the shared state of the replicas that Dial joins
// with the same URL: the JetStream key-value bucket named after the
// subject (default "tidings"), '.' and '_' escaped as "_2E" and "_5F".
// The server needs JetStream. A bucket that does not exist is created
// with the server's defaults (file storage, one value kept per key) and
// the replicas the URL asks (replicas=N), or by default as many as the
// cluster has servers, up to 3 (one on a server in no cluster): the
// servers the client knows of, its seeds and those the server
// advertises. When the cluster cannot hold them, OpenState fails saying
// so, with the count and the cluster's size. Create the bucket
// beforehand to choose otherwise — it is used as found, but one with
// fewer replicas than replicas=N asks is refused, and one with fewer than
// the default is used and a warning logged; neither is scaled here,
// which would move its data between servers. OpenState fails once ctx
// ends if the store cannot be reached (if ctx has no deadline: within
// 5s for the connection, and 30s for JetStream to answer, which a
// cluster still electing its leaders may not do at once); later losses
// are reported by the methods' errors, and the connection is regained
// on its own. A write that no stream hears, as while the bucket's stream
// elects a leader, is written again until it is heard or its context
// ends (5s without a deadline). Of the options, WithLogger and
// WithBackoff apply.
func OpenState(ctx context.Context, rawURL string, opts ...bus.Option) (bus.State, error) {
	ep, err := parse(rawURL)
	if err != nil {
		return nil, err
	}
	bucket, err := bucketName(ep.subject)
	if err != nil {
		return nil, err
	}
	cfg := settings(opts)
	s := &natsState{log: cfg.Logger}
	if s.nc, s.closed, err = ep.dial(ctx, cfg, "state"); err != nil {
		return nil, err
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		err = fmt.Errorf("jetstream: %w", err)
	} else {
		p := ep.plan(s.nc)
		err = openPatiently(ctx, cfg, askWait, func(ctx context.Context) (err error) {
			s.kv, err = bucketOf(ctx, js, p, cfg.Logger, jetstream.KeyValueConfig{Bucket: bucket, Replicas: p.n,
				Description: "tidings: what the replicas of a server have switched on and off"})
			return err
		})
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("natsbus: state at %s: %w", ep.redacted, err)
	}
	return s, nil
}

// bucketName names the key-value bucket of a subject. Bucket names
// allow no '.', so '.' and '_' are escaped ("_2E", "_5F"): two subjects
// never share a bucket, as "a.b" and "a_b" would if '.' simply became
// '_'.
func bucketName(subject string) (string, error) {
	if strings.ContainsFunc(subject, func(r rune) bool {
		return !(r == '.' || r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) {
		return "", fmt.Errorf("natsbus: subject %q cannot name a key-value bucket (letters, digits, '-', '_' and '.' only)", subject)
	}
	return strings.NewReplacer("_", "_5F", ".", "_2E").Replace(subject), nil
}

// bucketOf opens the bucket want names, creating it with want if it is
// not there; one that is there is used as found, but for its replicas,
// which p checks.
func bucketOf(ctx context.Context, js jetstream.JetStream, p replicaPlan, log *slog.Logger, want jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, want.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, want)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, want.Bucket) // another replica made it first
		} else if err != nil {
			return nil, p.refused(want.Bucket, err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %q: %w", want.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %q: %w", want.Bucket, err)
	}
	if have, ok := replicasOf(st); ok {
		if err := p.check(want.Bucket, have, log); err != nil {
			return nil, err
		}
	}
	return kv, nil
}

func (s *natsState) Load(ctx context.Context) (map[string]bool, error) {
	// A watcher of every key delivers the latest value of each, then nil;
	// it reads the stream as it is when the watcher starts, every
	// acknowledged Put included.
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("natsbus: load state from bucket %q: %w", s.kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	m := make(map[string]bool)
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("natsbus: load state from bucket %q: %w", s.kv.Bucket(), ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("natsbus: load state from bucket %q: the watcher ended", s.kv.Bucket())
			}
			if e == nil {
				return m, nil
			}
			key, err := base64.RawURLEncoding.DecodeString(e.Key())
			if err != nil {
				continue // not one of ours
			}
			if on, ok := brokerkit.ParseStateValue(string(e.Value())); ok {
				m[string(key)] = on
			}
		}
	}
}

func (s *natsState) Set(ctx context.Context, key string, on bool) error {
	if err := untilHeard(ctx, s.log, func(ctx context.Context) error {
		_, err := s.kv.Put(ctx, base64.RawURLEncoding.EncodeToString([]byte(key)), []byte(brokerkit.StateValue(on)))
		return err
	}); err != nil {
		return fmt.Errorf("natsbus: set %q in bucket %q: %w", key, s.kv.Bucket(), err)
	}
	return nil
}

func (s *natsState) Close() error {
	s.once.Do(func() {
		s.nc.Close()
		<-s.closed // the client's callbacks have run; its goroutines are ending
	})
	return nil
}
