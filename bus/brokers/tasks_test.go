package brokers_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"tidings/bus"
	"tidings/bus/brokers"
	"tidings/internal/testrig/testbroker"
)

// taskBackend is a TaskStore implementation the contract runs against.
type taskBackend struct {
	name string
	// start starts a broker of the kind, nil for the local store.
	start func(t testing.TB) testbroker.Broker
}

// taskBackends are the stores the contract holds for.
var taskBackends = []taskBackend{
	{name: "local"},
	{name: "nats", start: func(t testing.TB) testbroker.Broker { return testbroker.StartNATS(t) }},
	{name: "redis", start: func(t testing.TB) testbroker.Broker { return testbroker.StartRedis(t) }},
}

// run runs fn with open, which opens a store on one backing store (as
// another replica would, on each call) and closes it when the test ends.
// The local store runs in a synctest bubble, whose clock moves only when
// every goroutine in it waits, so that its expiries pass at once and
// exactly; the brokers run on the real clock.
func (b taskBackend) run(t *testing.T, fn func(t *testing.T, open func() bus.TaskStore)) {
	if b.start == nil {
		synctest.Test(t, func(t *testing.T) {
			s := bus.NewLocalTasks()
			fn(t, func() bus.TaskStore { return s })
		})
		return
	}
	br := b.start(t)
	fn(t, func() bus.TaskStore { return openTasks(t, br.URL()) })
}

// openTasks opens the task store at url; it is closed when the test ends.
func openTasks(t testing.TB, url string) bus.TaskStore {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s, err := brokers.OpenTasks(ctx, url, bus.WithLogger(slog.New(slog.DiscardHandler)),
		bus.WithBackoff(5*time.Millisecond, 50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

// ctxFor is a context for one call to a store, which must not take long.
func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

// mustGet reads id, which must be there with rec.
func mustGet(t *testing.T, s bus.TaskStore, id string, rec []byte) uint64 {
	t.Helper()
	got, rev, err := s.Get(ctxFor(t), id)
	if err != nil {
		t.Fatalf("get %q: %v", id, err)
	}
	if !bytes.Equal(got, rec) || rev == 0 {
		t.Fatalf("get %q: %.40q at revision %d, want %.40q", id, got, rev, rec)
	}
	return rev
}

// is fails the test unless err is want.
func is(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: %v, want %v", what, err, want)
	}
}

// later is an expiry no test reaches.
func later() time.Time { return time.Now().Add(time.Hour) }

// taskContract is what every TaskStore does. Each case has a backing
// store of its own, and a and b are two replicas' stores on it.
var taskContract = []struct {
	name string
	run  func(t *testing.T, a, b bus.TaskStore)
}{
	{"CreateThenGetOnAnotherReplica", func(t *testing.T, a, b bus.TaskStore) {
		rec := []byte(`{"status":"working"}`)
		if err := a.Create(ctxFor(t), "t1", rec, later()); err != nil {
			t.Fatal(err)
		}
		mustGet(t, b, "t1", rec)
		mustGet(t, a, "t1", rec)
		if err := b.Create(ctxFor(t), "t2", nil, later()); err != nil {
			t.Fatal(err)
		}
		mustGet(t, a, "t2", nil)
	}},
	{"CreateTwice", func(t *testing.T, a, b bus.TaskStore) {
		if err := a.Create(ctxFor(t), "t1", []byte("first"), later()); err != nil {
			t.Fatal(err)
		}
		is(t, "create again", b.Create(ctxFor(t), "t1", []byte("second"), later()), bus.ErrTaskExists)
		is(t, "create again", a.Create(ctxFor(t), "t1", []byte("second"), later()), bus.ErrTaskExists)
		mustGet(t, a, "t1", []byte("first"))
	}},
	{"Unknown", func(t *testing.T, a, _ bus.TaskStore) {
		_, _, err := a.Get(ctxFor(t), "nope")
		is(t, "get", err, bus.ErrNoTask)
		_, err = a.Update(ctxFor(t), "nope", []byte("x"), 1)
		is(t, "update", err, bus.ErrNoTask)
	}},
	{"UpdateAtTheRevision", func(t *testing.T, a, b bus.TaskStore) {
		if err := a.Create(ctxFor(t), "t1", []byte("v1"), later()); err != nil {
			t.Fatal(err)
		}
		rev := mustGet(t, b, "t1", []byte("v1"))
		rev2, err := b.Update(ctxFor(t), "t1", []byte("v2"), rev)
		if err != nil {
			t.Fatal(err)
		}
		if rev2 == rev {
			t.Fatalf("the revision stayed %d", rev)
		}
		if got := mustGet(t, a, "t1", []byte("v2")); got != rev2 {
			t.Fatalf("read revision %d, Update said %d", got, rev2)
		}
		rev3, err := a.Update(ctxFor(t), "t1", nil, rev2)
		if err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, b, "t1", nil); got != rev3 {
			t.Fatalf("read revision %d, Update said %d", got, rev3)
		}
	}},
	{"UpdateAtAStaleRevision", func(t *testing.T, a, b bus.TaskStore) {
		if err := a.Create(ctxFor(t), "t1", []byte("v1"), later()); err != nil {
			t.Fatal(err)
		}
		stale := mustGet(t, b, "t1", []byte("v1"))
		rev, err := a.Update(ctxFor(t), "t1", []byte("v2"), stale)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []uint64{stale, 0, rev + 1, rev + 1000} {
			_, err := b.Update(ctxFor(t), "t1", []byte("lost"), r)
			is(t, "update at revision "+strconv.FormatUint(r, 10), err, bus.ErrTaskConflict)
		}
		if got := mustGet(t, b, "t1", []byte("v2")); got != rev {
			t.Fatalf("the revision moved from %d to %d", rev, got)
		}
	}},
	{"NoIncrementLost", func(t *testing.T, a, b bus.TaskStore) {
		const workers, each = 6, 15 // per store
		if err := a.Create(ctxFor(t), "n", []byte("0"), later()); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		var wg sync.WaitGroup
		errs := make(chan error, 2*workers)
		for _, s := range []bus.TaskStore{a, b} {
			for range workers {
				wg.Go(func() {
					for range each {
						if err := increment(ctx, s, "n"); err != nil {
							errs <- err
							return
						}
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		mustGet(t, b, "n", []byte(strconv.Itoa(2*workers*each)))
	}},
	{"Expiry", func(t *testing.T, a, b bus.TaskStore) {
		created := time.Now()
		exp := created.Add(2 * time.Second)
		if err := a.Create(ctxFor(t), "t1", []byte("v1"), exp); err != nil {
			t.Fatal(err)
		}
		rev := mustGet(t, b, "t1", []byte("v1"))
		// Halfway, an update, which keeps the expiry: it does not start
		// it again, nor drop it. (The sleep lets the clock move on, which
		// is what is tested; it orders nothing.)
		time.Sleep(time.Until(created.Add(time.Second)))
		rev, err := b.Update(ctxFor(t), "t1", []byte("v2"), rev)
		if err != nil {
			t.Fatal(err)
		}
		gone := pollGone(t, b, "t1", exp)
		if gone.Before(exp) {
			t.Fatalf("the task was gone %v before its expiry", exp.Sub(gone))
		}
		if late := gone.Sub(exp); late > 800*time.Millisecond {
			t.Fatalf("the task was there %v after its expiry", late)
		}
		_, _, err = a.Get(ctxFor(t), "t1")
		is(t, "get after the expiry", err, bus.ErrNoTask)
		_, err = a.Update(ctxFor(t), "t1", []byte("v3"), rev)
		is(t, "update after the expiry", err, bus.ErrNoTask)
		// The id is free again.
		if err := a.Create(ctxFor(t), "t1", []byte("again"), later()); err != nil {
			t.Fatalf("create after the expiry: %v", err)
		}
		mustGet(t, b, "t1", []byte("again"))
		// An expiry already past: the task is never seen.
		if err := a.Create(ctxFor(t), "t2", []byte("x"), time.Now().Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
		_, _, err = b.Get(ctxFor(t), "t2")
		is(t, "get of a task created expired", err, bus.ErrNoTask)
	}},
	{"Ids", func(t *testing.T, a, b bus.TaskStore) {
		// NATS keys allow no '~' and '.' only between tokens; none of
		// these may end up under another's key.
		good := []string{".", "..", ".a", "a.", "a.b", "a..b", "a~b", "~", "a_2Eb", "a_7Eb", "a-b",
			"A-z_0.9~", strings.Repeat("x", 256)}
		for i, id := range good {
			if err := a.Create(ctxFor(t), id, []byte(strconv.Itoa(i)), later()); err != nil {
				t.Fatalf("create %q: %v", id, err)
			}
		}
		for i, id := range good {
			rev := mustGet(t, b, id, []byte(strconv.Itoa(i)))
			if _, err := b.Update(ctxFor(t), id, []byte("u"+strconv.Itoa(i)), rev); err != nil {
				t.Fatalf("update %q: %v", id, err)
			}
		}
		for i, id := range good {
			mustGet(t, a, id, []byte("u"+strconv.Itoa(i)))
		}
		for _, id := range []string{"", "a b", "a/b", "a:b", "ü", "a=2Eb", "a*", "a>", "a\x00", strings.Repeat("x", 257)} {
			err := a.Create(ctxFor(t), id, []byte("x"), later())
			if err == nil || errors.Is(err, bus.ErrNoTask) || !strings.Contains(err.Error(), "id") {
				t.Errorf("create %q: %v, want it refused", id, err)
			}
			_, _, err = a.Get(ctxFor(t), id)
			is(t, "get "+strconv.Quote(id), err, bus.ErrNoTask)
			_, err = a.Update(ctxFor(t), id, []byte("x"), 1)
			is(t, "update "+strconv.Quote(id), err, bus.ErrNoTask)
		}
	}},
	{"RecordLimit", func(t *testing.T, a, b bus.TaskStore) {
		const limit = 1<<20 - 4<<10
		big := bytes.Repeat([]byte("r"), limit)
		if err := a.Create(ctxFor(t), "big", big, later()); err != nil {
			t.Fatalf("create a record of %d bytes: %v", len(big), err)
		}
		rev := mustGet(t, b, "big", big)
		over := append(big, 'x')
		err := a.Create(ctxFor(t), "over", over, later())
		if err == nil || !strings.Contains(err.Error(), "limit") {
			t.Fatalf("create over the limit: %v", err)
		}
		if _, err := b.Update(ctxFor(t), "big", over, rev); err == nil || !strings.Contains(err.Error(), "limit") {
			t.Fatalf("update over the limit: %v", err)
		}
		if got := mustGet(t, a, "big", big); got != rev {
			t.Fatalf("the revision moved from %d to %d", rev, got)
		}
		_, _, err = a.Get(ctxFor(t), "over")
		is(t, "get of the refused record", err, bus.ErrNoTask)
	}},
	{"Close", func(t *testing.T, a, b bus.TaskStore) {
		if err := a.Create(ctxFor(t), "t1", []byte("kept"), later()); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := a.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
		}
		// What the store holds outlives one replica's connection.
		mustGet(t, b, "t1", []byte("kept"))
	}},
}

// increment adds one to the number under id, reading and writing again
// when another write came between.
func increment(ctx context.Context, s bus.TaskStore, id string) error {
	for {
		rec, rev, err := s.Get(ctx, id)
		if err != nil {
			return err
		}
		n, err := strconv.Atoi(string(rec))
		if err != nil {
			return err
		}
		_, err = s.Update(ctx, id, []byte(strconv.Itoa(n+1)), rev)
		if !errors.Is(err, bus.ErrTaskConflict) {
			return err
		}
	}
}

// pollGone polls id until Get reports ErrNoTask, and returns when it did.
// It gives up a while after exp. In the local store's bubble each poll
// advances the clock by the tick, exactly.
func pollGone(t *testing.T, s bus.TaskStore, id string, exp time.Time) time.Time {
	t.Helper()
	deadline := time.NewTimer(time.Until(exp) + testbroker.Wait)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		_, _, err := s.Get(ctxFor(t), id)
		now := time.Now()
		switch {
		case errors.Is(err, bus.ErrNoTask):
			return now
		case err != nil:
			t.Fatalf("get %q: %v", id, err)
		}
		select {
		case <-deadline.C:
			t.Fatalf("task %q still there %v after its expiry", id, time.Since(exp))
		case <-tick.C:
		}
	}
}

// TestTaskStoreContract: every TaskStore — the local one, Redis's, NATS's —
// creates, reads, updates by compare-and-swap, expires and limits the same
// way, seen from two replicas.
func TestTaskStoreContract(t *testing.T) {
	for _, be := range taskBackends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range taskContract {
				t.Run(c.name, func(t *testing.T) {
					if be.start != nil {
						t.Parallel()
					}
					be.run(t, func(t *testing.T, open func() bus.TaskStore) { c.run(t, open(), open()) })
				})
			}
		})
	}
}

// TestTaskStoreOutage: with the broker gone, every call fails within its
// context's deadline instead of hanging; once the broker is back, the
// same stores work again and find what was stored before.
func TestTaskStoreOutage(t *testing.T) {
	for _, be := range taskBackends {
		if be.start == nil {
			continue
		}
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			br := be.start(t)
			a, b := openTasks(t, br.URL()), openTasks(t, br.URL())
			if err := a.Create(ctxFor(t), "t1", []byte("v1"), later()); err != nil {
				t.Fatal(err)
			}
			rev := mustGet(t, b, "t1", []byte("v1"))
			br.Down()
			const deadline = time.Second
			for name, call := range map[string]func(context.Context) error{
				"create": func(ctx context.Context) error { return a.Create(ctx, "t2", []byte("x"), later()) },
				"get":    func(ctx context.Context) error { _, _, err := b.Get(ctx, "t1"); return err },
				"update": func(ctx context.Context) error { _, err := a.Update(ctx, "t1", []byte("x"), rev); return err },
			} {
				ctx, cancel := context.WithTimeout(context.Background(), deadline)
				start := time.Now()
				err := call(ctx)
				took := time.Since(start)
				cancel()
				t.Logf("%s with the broker down: %v", name, err)
				switch {
				case err == nil:
					t.Errorf("%s with the broker down succeeded", name)
				case errors.Is(err, bus.ErrNoTask) || errors.Is(err, bus.ErrTaskConflict) || errors.Is(err, bus.ErrTaskExists):
					t.Errorf("%s with the broker down: %v, which says something of the task", name, err)
				}
				if took > deadline+500*time.Millisecond {
					t.Errorf("%s with the broker down took %v, past its deadline of %v", name, took, deadline)
				}
			}
			br.Up()
			testbroker.WaitFor(t, "the store to read again", func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_, _, err := b.Get(ctx, "t1")
				return err == nil
			})
			rev = mustGet(t, b, "t1", []byte("v1"))
			testbroker.WaitFor(t, "the store to write again", func() bool {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_, err := a.Update(ctx, "t1", []byte("v2"), rev)
				return err == nil
			})
			mustGet(t, b, "t1", []byte("v2"))
		})
	}
}
