// Package bustest breaks a bus on purpose, for tests that it still loses
// nothing in the end: Faulty wraps a bus.Conn and drops, repeats or
// reorders the messages sent through it, or cuts it off as a broker
// outage would; FaultyState wraps a bus.State and cuts it off or holds
// its loads up.
package bustest

import (
	"context"
	"errors"
	"sync"

	"github.com/go-json-experiment/json"

	"tidings/bus"
)

// ErrCut is what a Faulty connection's Send returns while it is cut off.
var ErrCut = errors.New("bustest: connection cut")

// Faulty is a bus.Conn whose faults a test arranges. Faults apply to
// messages as they are sent, so every peer sees the same loss, as when a
// broker loses a message; a sent message is matched against the pending
// faults in the order they were arranged, and the first that matches
// applies to it.
type Faulty struct {
	inner bus.Conn

	mu     sync.Mutex
	faults []*fault
	held   [][]byte
	cut    bool
	recv   bus.Receiver
}

type action uint8

const (
	drop action = iota + 1
	repeat
	hold
)

type fault struct {
	what  action
	n     int
	match func(msg []byte) bool
}

// Wrap returns c with no faults arranged.
func Wrap(c bus.Conn) *Faulty { return &Faulty{inner: c} }

// Drop loses the next n sent messages that match (nil matches all).
func (f *Faulty) Drop(n int, match func(msg []byte) bool) { f.arrange(drop, n, match) }

// Duplicate sends each of the next n matching messages twice.
func (f *Faulty) Duplicate(n int, match func(msg []byte) bool) { f.arrange(repeat, n, match) }

// Reorder holds the next matching message back and sends it right after
// the message sent after it.
func (f *Faulty) Reorder(match func(msg []byte) bool) { f.arrange(hold, 1, match) }

func (f *Faulty) arrange(a action, n int, match func([]byte) bool) {
	if n <= 0 {
		return
	}
	if match == nil {
		match = func([]byte) bool { return true }
	}
	f.mu.Lock()
	f.faults = append(f.faults, &fault{a, n, match})
	f.mu.Unlock()
}

// Cut cuts the connection off, as a broker outage would: the receiver
// hears that it is down, sends fail and nothing is received until
// Restore.
func (f *Faulty) Cut() {
	if r := f.setCut(true); r != nil {
		r.Down(ErrCut)
	}
}

// Restore ends a Cut: the receiver hears that the connection is back.
func (f *Faulty) Restore() {
	if r := f.setCut(false); r != nil {
		r.Up()
	}
}

// setCut sets whether the connection is cut and, if that changed it,
// returns the receiver to tell (nil if none or unchanged).
func (f *Faulty) setCut(cut bool) bus.Receiver {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cut == cut {
		return nil
	}
	f.cut = cut
	return f.recv
}

// Send applies the first pending fault that matches msg, and sends a
// message held back for reordering after msg.
func (f *Faulty) Send(ctx context.Context, msg []byte) error {
	f.mu.Lock()
	if f.cut {
		f.mu.Unlock()
		return ErrCut
	}
	var a action
	for i, ft := range f.faults {
		if ft.match(msg) {
			a = ft.what
			if ft.n--; ft.n == 0 {
				f.faults = append(f.faults[:i], f.faults[i+1:]...)
			}
			break
		}
	}
	var later [][]byte
	if a == hold {
		f.held = append(f.held, append([]byte(nil), msg...))
	} else {
		later, f.held = f.held, nil
	}
	f.mu.Unlock()
	var err error
	switch a {
	case drop, hold:
	case repeat:
		err = errors.Join(f.inner.Send(ctx, msg), f.inner.Send(ctx, msg))
	default:
		err = f.inner.Send(ctx, msg)
	}
	for _, m := range later {
		err = errors.Join(err, f.inner.Send(ctx, m))
	}
	return err
}

// Run runs the wrapped connection's receiver, discarding what arrives
// while the connection is cut off, and the wrapped connection's own news
// of it meanwhile.
func (f *Faulty) Run(ctx context.Context, r bus.Receiver) error {
	f.mu.Lock()
	f.recv = r
	cut := f.cut
	f.mu.Unlock()
	if cut {
		r.Down(ErrCut)
	}
	return f.inner.Run(ctx, gate{f, r})
}

// Close closes the wrapped connection.
func (f *Faulty) Close() error { return f.inner.Close() }

func (f *Faulty) isCut() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cut
}

// gate passes the wrapped connection's reports on unless it is cut off.
type gate struct {
	f *Faulty
	r bus.Receiver
}

func (g gate) Message(msg []byte) {
	if !g.f.isCut() {
		g.r.Message(msg)
	}
}

func (g gate) Down(err error) {
	if !g.f.isCut() {
		g.r.Down(err)
	}
}

func (g gate) Up() {
	if !g.f.isCut() {
		g.r.Up()
	}
}

// IsChange matches the messages that carry a change, not heartbeats. It
// reads the wire format's type member, in the body of the envelope.
func IsChange(msg []byte) bool {
	var m struct {
		Body struct {
			Type string `json:"type"`
		} `json:"body"`
	}
	return json.Unmarshal(msg, &m) == nil && m.Body.Type == "change"
}

// FaultyState is a bus.State that a test can cut off from its store, as
// a broker outage would, and whose loads a test can hold up, as a slow
// store would.
type FaultyState struct {
	inner bus.State

	mu         sync.Mutex
	cut        bool
	readOnly   bool
	beforeLoad func()
	loads      int
	sets       int
}

// WrapState returns st with no faults arranged.
func WrapState(st bus.State) *FaultyState { return &FaultyState{inner: st} }

// Cut makes every Load and Set fail with ErrCut until Restore.
func (f *FaultyState) Cut() {
	f.mu.Lock()
	f.cut = true
	f.mu.Unlock()
}

// ReadOnly makes every Set fail with ErrCut, and loads go on, as with a
// store that refuses writes (a read-only replica, a full bucket), until
// Restore.
func (f *FaultyState) ReadOnly() {
	f.mu.Lock()
	f.readOnly = true
	f.mu.Unlock()
}

// Restore ends a Cut or ReadOnly.
func (f *FaultyState) Restore() {
	f.mu.Lock()
	f.cut, f.readOnly = false, false
	f.mu.Unlock()
}

// BeforeLoad sets a function each Load calls before it reads the store
// (nil for none): a test holds a load up there, to see what happens
// meanwhile.
func (f *FaultyState) BeforeLoad(fn func()) {
	f.mu.Lock()
	f.beforeLoad = fn
	f.mu.Unlock()
}

// Loads and Sets count the calls made so far, failed ones included.
func (f *FaultyState) Loads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loads
}

// Sets counts the Set calls made so far.
func (f *FaultyState) Sets() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sets
}

// Load calls the BeforeLoad function, then loads unless cut off.
func (f *FaultyState) Load(ctx context.Context) (map[string]bool, error) {
	f.mu.Lock()
	f.loads++
	fn := f.beforeLoad
	f.mu.Unlock()
	if fn != nil {
		fn()
	}
	f.mu.Lock()
	cut := f.cut
	f.mu.Unlock()
	if cut {
		return nil, ErrCut
	}
	return f.inner.Load(ctx)
}

// Set sets unless cut off.
func (f *FaultyState) Set(ctx context.Context, key string, on bool) error {
	f.mu.Lock()
	f.sets++
	cut := f.cut || f.readOnly
	f.mu.Unlock()
	if cut {
		return ErrCut
	}
	return f.inner.Set(ctx, key, on)
}

// Close closes the wrapped state.
func (f *FaultyState) Close() error { return f.inner.Close() }
