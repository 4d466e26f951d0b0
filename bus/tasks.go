package bus

import (
	"context"
	"sync"
	"time"

	"tidings/bus/internal/brokerkit"
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
// digits and "-._~"), what the server's random URL-safe ids are made
// of; a record is at most MaxTaskRecord bytes (see brokers.OpenTasks
// for why). Create refuses others with an error; Get and Update report
// ErrNoTask for an id that could never have been created.
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

// The errors of a TaskStore.
var (
	ErrNoTask       = brokerkit.ErrNoTask
	ErrTaskExists   = brokerkit.ErrTaskExists
	ErrTaskConflict = brokerkit.ErrTaskConflict
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

// MaxTaskRecord is the largest record, in bytes, that every TaskStore
// takes: 1 MiB less 4 KiB, what a NATS server takes by default less room
// for a store's framing, held to on every broker so that what works on
// one works on the others. It is exported so that a server can tell a
// record too large for any store from a store that failed, before it
// writes: the first is never worth another try, the second often is.
const MaxTaskRecord = brokerkit.MaxTaskRecord

// checkTaskID is the check of an id every store makes before it reads
// (see brokerkit.CheckTaskID).
func checkTaskID(id string) error { return brokerkit.CheckTaskID(id) }

// checkTask is the check of a write every store makes before it sends
// anything (see brokerkit.CheckTask).
func checkTask(op, id string, rec []byte) error { return brokerkit.CheckTask(op, id, rec) }
