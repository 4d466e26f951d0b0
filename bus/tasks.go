package bus

import (
	"context"
	"errors"
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
// Its methods are safe for concurrent use. They do I/O, and callers must
// not hold locks across them.
type TaskStore interface {
	// Create stores rec under id until expires. When it returns nil the
	// record is durable: a Get on any replica finds it. It returns
	// ErrTaskExists when id is already taken.
	Create(ctx context.Context, id string, rec []byte, expires time.Time) error
	// Get returns the record under id and its revision, or ErrNoTask.
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
// are swept as new ones are created, so it needs no goroutine.
func NewLocalTasks() *LocalTasks {
	return &LocalTasks{now: time.Now, m: make(map[string]localTask)}
}

// Create stores rec under id until expires.
func (s *LocalTasks) Create(_ context.Context, id string, rec []byte, expires time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.sweep(now)
	if t, ok := s.m[id]; ok && now.Before(t.expires) {
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
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.m[id]
	if !ok || !s.now().Before(t.expires) {
		return nil, 0, ErrNoTask
	}
	return clone(t.rec), t.rev, nil
}

// Update replaces the record under id if its revision is still rev.
func (s *LocalTasks) Update(_ context.Context, id string, rec []byte, rev uint64) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.m[id]
	if !ok || !s.now().Before(t.expires) {
		return 0, ErrNoTask
	}
	if t.rev != rev {
		return 0, ErrTaskConflict
	}
	t.rec, t.rev = clone(rec), t.rev+1
	s.m[id] = t
	return t.rev, nil
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
