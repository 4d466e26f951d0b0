package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// TaskStore holds the tasks of the tasks extension where every replica
// of a server can read them: a task created through one replica is
// polled, answered, cancelled and followed through any other. The server
// decides what a record holds (see server.WithTaskStore); the store keeps
// each one as opaque bytes with a revision, so that concurrent changes
// from several replicas are made by compare-and-swap and none is lost.
//
// A record lives until the expiry given when it was created; from then on
// Get and Update report ErrNoTask, and the store reclaims the space.
//
// Every store takes the same ids and records, so that a server tested
// with LocalTasks meets the limits of the brokers it is deployed on: an
// id is 1 to 256 of the characters RFC 3986 leaves unreserved (letters,
// digits and "-._~"), what the server's random URL-safe ids are made of;
// a record is at most 1 MiB less 4 KiB (see OpenTasks for why). Create
// refuses others with an error; Get and Update report ErrNoTask for an id
// that could never have been created.
//
// Its methods are safe for concurrent use. They do I/O, and callers must
// not hold locks across them.
type TaskStore interface {
	// Create stores rec under id until expires. When it returns nil the
	// record is durable, and a Get on any replica finds it: a server may
	// answer the request that made the task at once, and the client poll
	// it through another replica. It returns ErrTaskExists when id is
	// already taken.
	Create(ctx context.Context, id string, rec []byte, expires time.Time) error
	// Get returns the record under id and its revision, or ErrNoTask. It
	// is linearisable: it sees every Create and Update that returned
	// before it was called, on whichever replica, so that no replica
	// reports a task it was just told of as unknown, or an older state
	// of it than one already reported.
	Get(ctx context.Context, id string) (rec []byte, rev uint64, err error)
	// Update replaces the record under id, keeping its expiry, if its
	// revision is still rev, and returns the new revision. It returns
	// ErrTaskConflict when the record changed since rev was read, and
	// ErrNoTask when it is gone.
	Update(ctx context.Context, id string, rec []byte, rev uint64) (uint64, error)
	// Close releases the connection to the store (not what it holds).
	Close() error
}

// OpenTasks connects to the task store in the broker rawURL names — the
// URL given to Open and OpenState, so that one setting joins a replica to
// the bus, the shared state and the tasks:
//
//	redis://host:port[/db][?channel=name]  a hash per task, "<channel>:task:<id>" (default channel "tidings"), in db
//	nats://host:port[/subject]             the JetStream key-value bucket "<state bucket>_tasks" (see OpenState),
//	                                       default "tidings_tasks"; the server needs JetStream
//
// (rediss:// and tls:// for TLS, with a user and password in the URL as
// for Dial.) What each guarantees:
//
// Compare-and-swap is linearisable on both, and so is Get. Redis runs
// each Create and Update as one Lua script, which checks the revision and
// writes with nothing in between, and answers every call from the one
// server the URL names; revisions count from 1 for each task (and again
// from 1 for a task created anew under an id that expired, which is why
// ids are not to be reused). NATS has the stream check that the entry's
// revision (its sequence in the stream) is still the one read before it
// takes the write; revisions grow across the bucket. Every Get is
// answered by the stream's leader, which acknowledged the write, and
// which, newly elected, answers only once it holds every write its
// predecessors acknowledged: the bucket allows no direct gets, which any replica or
// mirror answers from what it has applied, perhaps not yet a write the
// leader has acknowledged. When Create or Update fail otherwise (the
// broker went away mid-call), the write may or may not have landed:
// neither store sends it again by itself, since a write sent twice would
// report a conflict with itself.
//
// Limits. A record is at most 1 MiB less 4 KiB: a NATS server takes
// messages of at most 1 MiB by default (max_payload), headers included,
// and the rest is room for the store's envelope and headers. Redis could
// take more, but is held to the same, so that what works on one broker
// works on the other, and because a record is read whole on every poll.
// A larger one is refused before it is sent.
//
// Durability is the broker's: a record is as safe as Redis's persistence
// (append-only file, replicas) or the bucket's stream (file storage, its
// replicas) make it.
//
// Expiry. On Redis the key expires at the expiry, to the millisecond
// (rounded up), by the server's clock, and Redis frees it. On NATS the
// expiry is stored with the record, and Get and Update report ErrNoTask
// once this process's clock passes it; every write of an entry also gives
// it a TTL of what is left, rounded up to the second, plus a second, so
// that the broker drops it by itself shortly after (it leaves a marker
// for a second). That needs a bucket with per-key TTLs, which OpenTasks
// creates; one found without them is refused. Create over a task that has
// expired but is not yet dropped replaces it.
//
// A bucket that does not exist is created with file storage, one replica,
// values of at most 1 MiB and no direct gets; create it beforehand to
// choose otherwise, with a limit marker TTL and allow_direct false on its
// stream (the nats tool and jetstream.CreateKeyValue allow direct gets:
// update the stream after) — it is used as found, a bucket that allows
// direct gets is refused, and a bucket TTL (max age) set on it drops
// tasks that long after their last write, whatever their expiry. A
// bucket scaled to more replicas later keeps reading through its leader.
// Redis keys live in one database, so replicas must name the same db.
//
// OpenTasks fails once ctx ends if the store cannot be reached; later
// losses are reported by the methods' errors, within their context's
// deadline, and the connection is regained on its own. Of the options,
// WithLogger and WithBackoff apply (to NATS).
func OpenTasks(ctx context.Context, rawURL string, opts ...Option) (TaskStore, error) {
	u, b, err := parseBroker(rawURL)
	if err != nil {
		return nil, err
	}
	if b == natsBroker {
		return openNATSTasks(ctx, u, newConfig(opts))
	}
	return openRedisTasks(ctx, u)
}

// The errors of a TaskStore.
var (
	ErrNoTask       = errors.New("bus: no such task")
	ErrTaskExists   = errors.New("bus: the task id is taken")
	ErrTaskConflict = errors.New("bus: the task changed meanwhile")
)

// LocalTasks is a TaskStore within one process: the default of a server
// without replicas, and the store of servers joined by a Local group. The
// zero value is not usable; call NewLocalTasks.
type LocalTasks struct {
	mu   sync.Mutex
	now  func() time.Time
	m    map[string]localTask
	next time.Time // the earliest expiry in m, for sweeping
	last time.Time // the last sweep
}

type localTask struct {
	rec     []byte
	rev     uint64
	expires time.Time
}

// NewLocalTasks returns an empty in-process task store. Expired records
// are swept as the store is used — by Create, Get and Update alike, so
// that a store read and updated for long after its last Create still
// lets go of what expired — and it needs no goroutine.
func NewLocalTasks() *LocalTasks {
	return &LocalTasks{now: time.Now, m: make(map[string]localTask)}
}

// Create stores rec under id until expires.
func (s *LocalTasks) Create(_ context.Context, id string, rec []byte, expires time.Time) error {
	if err := checkTask("create", id, rec); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.live(id); ok {
		return ErrTaskExists
	}
	s.m[id] = localTask{rec: clone(rec), rev: 1, expires: expires}
	if s.next.IsZero() || expires.Before(s.next) {
		s.next = expires
	}
	return nil
}

// Get returns the record under id.
func (s *LocalTasks) Get(_ context.Context, id string) ([]byte, uint64, error) {
	if err := checkTaskID(id); err != nil {
		return nil, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.live(id)
	if !ok {
		return nil, 0, ErrNoTask
	}
	return clone(t.rec), t.rev, nil
}

// Update replaces the record under id if its revision is still rev.
func (s *LocalTasks) Update(_ context.Context, id string, rec []byte, rev uint64) (uint64, error) {
	if err := checkTask("update", id, rec); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.live(id)
	if !ok {
		return 0, ErrNoTask
	}
	if t.rev != rev {
		return 0, ErrTaskConflict
	}
	t.rec, t.rev = clone(rec), t.rev+1
	s.m[id] = t
	return t.rev, nil
}

// live sweeps the store and returns the record under id, if it has not
// expired. The caller holds s.mu.
func (s *LocalTasks) live(id string) (localTask, bool) {
	now := s.now()
	s.sweep(now)
	t, ok := s.m[id]
	return t, ok && now.Before(t.expires)
}

// Close does nothing: the records stay for whoever else holds the store.
func (s *LocalTasks) Close() error { return nil }

// sweepEvery bounds how often LocalTasks sweeps: a sweep is one pass over
// every record, so many tasks expiring one after another cost one pass a
// second, not one per expiry.
const sweepEvery = time.Second

// sweep drops expired records once the earliest expiry has passed.
func (s *LocalTasks) sweep(now time.Time) {
	if s.next.IsZero() || now.Before(s.next) || now.Sub(s.last) < sweepEvery {
		return
	}
	s.next, s.last = time.Time{}, now
	for id, t := range s.m {
		if !now.Before(t.expires) {
			delete(s.m, id)
			continue
		}
		if s.next.IsZero() || t.expires.Before(s.next) {
			s.next = t.expires
		}
	}
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

// maxTaskRecord bounds a record. A NATS server takes messages of at most
// 1 MiB by default (max_payload), headers included; 4 KiB of it are left
// for the store's own framing and headers, so that every record a store
// accepts fits there. Redis takes far more, but a server tested on Redis
// must not store what a NATS deployment would refuse, and a record is
// read whole on every poll of the task: results larger than this belong
// elsewhere.
const maxTaskRecord = MaxTaskRecord

// MaxTaskRecord is the largest record, in bytes, that every TaskStore
// takes (see maxTaskRecord for why it is 1 MiB less 4 KiB). It is
// exported so that a server can tell a record too large for any store
// from a store that failed, before it writes: the first is never worth
// another try, the second often is.
const MaxTaskRecord = 1<<20 - 4<<10

// badTaskID says what is wrong with id, or "" when a store accepts it:
// 1 to maxTaskID bytes (the bound an event's task id has on the wire) of
// RFC 3986's unreserved characters. Every backend
// stores the same ids, and none needs quoting in a Redis key or, but for
// '.' and '~', in a NATS subject.
func badTaskID(id string) string {
	switch {
	case id == "":
		return "the id is empty"
	case len(id) > maxTaskID:
		return fmt.Sprintf("the id is %d bytes long, more than %d", len(id), maxTaskID)
	case strings.ContainsFunc(id, func(r rune) bool { return !unreserved(r) }):
		return fmt.Sprintf("id %.40q holds a character other than letters, digits and \"-._~\"", id)
	}
	return ""
}

// unreserved reports whether r is one of RFC 3986's unreserved characters.
func unreserved(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
		r == '-' || r == '.' || r == '_' || r == '~'
}

// checkTaskID is ErrNoTask, with the reason, for an id no store accepts:
// no task can have it.
func checkTaskID(id string) error {
	if why := badTaskID(id); why != "" {
		return fmt.Errorf("%w: %s", ErrNoTask, why)
	}
	return nil
}

// checkTask checks what is about to be written before anything is sent.
// Create refuses a bad id with an error of its own, not ErrNoTask; Update
// reports ErrNoTask for it, as Get does.
func checkTask(op, id string, rec []byte) error {
	if why := badTaskID(id); why != "" {
		if op == "create" {
			return fmt.Errorf("bus: create task: %s", why)
		}
		return fmt.Errorf("%w: %s", ErrNoTask, why)
	}
	if len(rec) > maxTaskRecord {
		return fmt.Errorf("bus: %s task %q: the record is %d bytes, more than the limit of %d", op, id, len(rec), maxTaskRecord)
	}
	return nil
}
