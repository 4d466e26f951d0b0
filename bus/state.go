package bus

import (
	"context"
	"maps"
	"sync"
)

// State is what the replicas of one server share besides news: for each
// key, whether the item it names is switched on. The bus says that
// something changed; State holds what it now is, so that a replica that
// hears of a change, or that starts, or that missed events, reads the
// same answer as every other. It lives in the same broker as the bus (a
// Redis hash, a NATS JetStream key-value bucket), so that a deployment
// runs one piece of infrastructure, not two. The server decides what the
// keys mean (see server.WithSharedState); State only stores them.
//
// Its methods are safe for concurrent use. They do I/O, and callers must
// not hold locks across them.
type State interface {
	// Load returns every key the store holds, with its value, as of the
	// moment it is read: a Set that returned before Load was called is in
	// it.
	Load(ctx context.Context) (map[string]bool, error)
	// Set stores on under key. When it returns nil the value is in the
	// store, so that a replica told of it afterwards (over the bus)
	// loads it; when it returns an error the value may or may not be, and
	// the caller should set it again.
	Set(ctx context.Context, key string, on bool) error
	// Close releases the connection to the store (not what it holds).
	Close() error
}

// LocalState is a State within one process, for servers joined by a
// Local group (tests, several servers of one program). Every server given
// the same LocalState shares it; it is kept as long as they keep it. The
// zero value is not usable; call NewLocalState.
type LocalState struct {
	mu sync.Mutex
	m  map[string]bool
}

// NewLocalState returns an empty in-process state.
func NewLocalState() *LocalState { return &LocalState{m: make(map[string]bool)} }

// Load returns a copy of every key.
func (s *LocalState) Load(context.Context) (map[string]bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.m), nil
}

// Set stores on under key.
func (s *LocalState) Set(_ context.Context, key string, on bool) error {
	s.mu.Lock()
	s.m[key] = on
	s.mu.Unlock()
	return nil
}

// Close does nothing: the state belongs to every server that shares it,
// and a server closing its own must not take it from the others.
func (*LocalState) Close() error { return nil }
