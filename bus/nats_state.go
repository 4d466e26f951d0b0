package bus

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsState is a State in a JetStream key-value bucket: an entry per key,
// "1" or "0". Keys are stored base64url-encoded, since a bucket's keys
// allow fewer characters than tool names and resource URIs hold.
type natsState struct {
	nc     *nats.Conn
	kv     jetstream.KeyValue
	closed chan struct{} // closed by the client's closed callback
	once   sync.Once
}

func openNATSState(ctx context.Context, u *url.URL, cfg config) (*natsState, error) {
	subject, err := natsSubject(u)
	if err != nil {
		return nil, err
	}
	bucket, err := bucketName(subject)
	if err != nil {
		return nil, err
	}
	ctx, cancel := boundDial(ctx)
	defer cancel()
	timeout, err := dialTimeout(ctx, u)
	if err != nil {
		return nil, err
	}
	s := &natsState{}
	if s.nc, s.closed, err = dialNATSStore(u, timeout, cfg, "tidings state"); err != nil {
		return nil, fmt.Errorf("bus: state at %s: %w", u.Redacted(), err)
	}
	js, err := jetstream.New(s.nc)
	if err != nil {
		err = fmt.Errorf("jetstream: %w", err)
	} else {
		s.kv, err = bucketOf(ctx, js, jetstream.KeyValueConfig{Bucket: bucket,
			Description: "tidings: what the replicas of a server have switched on and off"})
	}
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("bus: state at %s: %w", u.Redacted(), err)
	}
	return s, nil
}

// dialNATSStore connects a client for a store in JetStream (the state,
// the tasks), and returns it with the channel its closed callback closes.
// The client reconnects on its own, for ever, with the bus's backoff. Its
// error does not show the URL; the callers say what they dialled,
// redacted.
func dialNATSStore(u *url.URL, timeout time.Duration, cfg config, name string) (*nats.Conn, chan struct{}, error) {
	closed := make(chan struct{})
	server := (&url.URL{Scheme: u.Scheme, User: u.User, Host: u.Host}).String()
	nc, err := nats.Connect(server,
		nats.Name(name),
		nats.Timeout(timeout),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(cfg.backoff),
		// A write made while disconnected fails at once instead of waiting
		// in a buffer, to land later over whatever was written meanwhile:
		// the caller is told, and writes again if it still means to.
		nats.ReconnectBufSize(-1),
		nats.ClosedHandler(func(*nats.Conn) { close(closed) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			cfg.logger.Debug("bus: NATS reports an error on a store connection", "name", name, "err", err)
		}),
	)
	if err != nil {
		return nil, nil, err
	}
	return nc, closed, nil
}

// bucketName names the key-value bucket of a subject. Bucket names
// allow no '.', so '.' and '_' are escaped ("_2E", "_5F"): two subjects
// never share a bucket, as "a.b" and "a_b" would if '.' simply became
// '_'.
func bucketName(subject string) (string, error) {
	if strings.ContainsFunc(subject, func(r rune) bool {
		return !(r == '.' || r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) {
		return "", fmt.Errorf("bus: subject %q cannot name a key-value bucket (letters, digits, '-', '_' and '.' only)", subject)
	}
	return strings.NewReplacer("_", "_5F", ".", "_2E").Replace(subject), nil
}

// bucketOf opens the bucket want names, creating it with want if it is
// not there; one that is there is used as found.
func bucketOf(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, want.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, want)
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, want.Bucket) // another replica made it first
		}
	}
	if err != nil {
		return nil, fmt.Errorf("key-value bucket %q: %w", want.Bucket, err)
	}
	return kv, nil
}

func (s *natsState) Load(ctx context.Context) (map[string]bool, error) {
	// A watcher of every key delivers the latest value of each, then nil;
	// it reads the stream as it is when the watcher starts, every
	// acknowledged Put included.
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("bus: load state from bucket %q: %w", s.kv.Bucket(), err)
	}
	defer func() { _ = w.Stop() }()
	m := make(map[string]bool)
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bus: load state from bucket %q: %w", s.kv.Bucket(), ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("bus: load state from bucket %q: the watcher ended", s.kv.Bucket())
			}
			if e == nil {
				return m, nil
			}
			key, err := base64.RawURLEncoding.DecodeString(e.Key())
			if err != nil {
				continue // not one of ours
			}
			if on, ok := parseStateValue(string(e.Value())); ok {
				m[string(key)] = on
			}
		}
	}
}

func (s *natsState) Set(ctx context.Context, key string, on bool) error {
	if _, err := s.kv.Put(ctx, base64.RawURLEncoding.EncodeToString([]byte(key)), []byte(stateValue(on))); err != nil {
		return fmt.Errorf("bus: set %q in bucket %q: %w", key, s.kv.Bucket(), err)
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
