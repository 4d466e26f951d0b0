package server

import (
	"context"
	"errors"
	"sync"
	"time"

	"tidings/jsonrpc"
)

// This file keeps a task's runner answerable for it: the replica running
// a task renews a lease on it in the store, and a task whose lease
// lapsed while it was unfinished — its runner was killed, or cut off
// from the store — is failed by whichever replica reads it next, rather
// than left working until its TTL with a client waiting on it.

// defaultTaskLease is how long a running task's lease lasts: its runner
// renews it every third of that, so two renewals in a row may fail (a
// slow store, a pause) before the task is taken for lost.
const defaultTaskLease = 10 * time.Second

// WithTaskLease sets how long the lease on a running task lasts (default
// ten seconds). The replica running a task renews its lease in the
// store every d/3; once a lease has
// lapsed while the task is unfinished (working or input_required) — the
// replica was killed, or lost the store for longer than d — the next
// replica to read the task (tasks/get, tasks/update, tasks/cancel, a
// listen following it) fails it with -32603 "Internal error: the server
// running the task stopped before it finished", by compare-and-swap so
// that one failure is written however many replicas read it at once,
// and its listeners hear of it as of any change. A listen following the
// task reads it again when its lease ends, so that it hears within
// about d of the runner's death without polling.
//
// A renewal is a write to the store per running task every d/3: a
// shorter lease finds a lost task sooner at the cost of more writes.
// The lease is counted on the replicas' clocks (WithClock), so d must
// be well above how far they disagree. A runner that cannot reach the
// store cannot renew: a store outage longer than d may fail the tasks
// running through it once the store is back, so d also bounds the
// outages a running task rides out. A task recorded without a lease
// (by a replica that keeps none, during a rolling upgrade) never lapses.
// Like every task option, it makes the server offer tasks.
func WithTaskLease(d time.Duration) Option {
	return func(c *config) {
		positive(&c.taskLease, d)
		c.taskOpts = true
	}
}

// TaskObserver is a StreamObserver that also hears of each task failed
// because its lease lapsed (WithTaskLease): the replica running it
// stopped. Package metrics counts them as
// tidings_tasks_lease_lapsed_total.
type TaskObserver interface {
	StreamObserver
	// TaskLeaseLapsed reports one task failed for a lapsed lease, once,
	// by the replica whose write failed it.
	TaskLeaseLapsed()
}

// errRunnerStopped fails a task whose lease lapsed unfinished.
var errRunnerStopped = jsonrpc.NewError(jsonrpc.CodeInternalError,
	"Internal error: the server running the task stopped before it finished", nil)

// leaseRenewal is how often a runner renews its task's lease.
func (s *Server) leaseRenewal() time.Duration { return max(s.cfg.taskLease/3, time.Millisecond) }

// lapsed reports whether rec is unfinished with a lease that has ended
// at now. A record without a lease never lapses.
func (rec *taskRecord) lapsed(now time.Time) bool {
	return !rec.Lease.IsZero() && !rec.Status.Terminal() && !now.Before(rec.Lease)
}

// changeTask changes the task as updateTask does, for a client
// (tasks/update, tasks/cancel, or a read that found the lease lapsed):
// an unfinished task whose lease has lapsed is failed instead, its
// runner being gone, and change is not made. Replicas that find it
// lapsed at once race by compare-and-swap: one write fails the task,
// and the others then read it failed. That one is logged and counted.
func (s *Server) changeTask(ctx context.Context, id, principal string, change func(*taskRecord) bool) (*taskRecord, error) {
	var lapsedAt time.Time
	rec, err := s.updateTask(ctx, id, principal, func(rec *taskRecord) bool {
		lapsedAt = time.Time{}
		if !rec.lapsed(s.cfg.now()) {
			return change(rec)
		}
		lapsedAt = rec.Lease
		rec.Inputs, rec.Answers = nil, nil
		failWith(errRunnerStopped)(rec)
		return true
	})
	if err == nil && !lapsedAt.IsZero() {
		s.log.Warn("mcp: a task's lease lapsed, the server running it having stopped; the task is failed",
			"lapsed", s.cfg.now().Sub(lapsedAt).Round(time.Millisecond))
		if o, ok := s.cfg.observer.(TaskObserver); ok {
			o.TaskLeaseLapsed()
		}
	}
	return rec, err
}

// renew extends the lease on the task, as its runner, within ctx and
// storeCallTimeout, and returns the record as it now is. A finished task
// is left as it is. The renewal is no change a client sees: it is not
// published, and lastUpdatedAt stays. It is made even where the lease
// lapsed, if no one has failed the task yet: the runner is alive.
func (tr *taskRun) renew(ctx context.Context) (*taskRecord, error) {
	ctx, cancel := context.WithTimeout(ctx, storeCallTimeout)
	defer cancel()
	return tr.s.swapTask(ctx, tr.id, tr.principal, func(rec *taskRecord) bool {
		if rec.Status.Terminal() {
			return false
		}
		rec.Lease = tr.s.cfg.now().Add(tr.s.cfg.taskLease)
		return true
	}, false)
}

// leaseWatch reads again, when their lease ends, the unfinished tasks
// that this replica's listens follow, so that a task whose runner died
// is failed (by loadTask) and its listeners told within a lease, though
// nothing else would make anyone read it: a listen reads a task only
// when told of a change, and a dead runner changes nothing. Each task is
// read once per lease whatever the number of listens following it, and
// only while one does. Its goroutine runs while there is a task to
// watch, and Shutdown stops it (close).
type leaseWatch struct {
	s *Server
	// stop ends the goroutine and its reads; kick wakes it to look again
	// at what it watches.
	stop   context.Context
	cancel context.CancelFunc
	kick   chan struct{}
	wg     sync.WaitGroup

	mu      sync.Mutex
	tasks   map[leaseKey]*leaseFollow
	running bool
	closed  bool
}

// leaseKey is a task as a principal follows it.
type leaseKey struct{ id, principal string }

// leaseFollow is a task watched: when to read it again, and the listens
// (their contexts) following it, each with the stop of the hook that
// wakes the watch when it ends.
type leaseFollow struct {
	at time.Time // by the server's clock
	by map[context.Context]func() bool
}

func newLeaseWatch(s *Server) *leaseWatch {
	w := &leaseWatch{s: s, kick: make(chan struct{}, 1), tasks: make(map[leaseKey]*leaseFollow)}
	w.stop, w.cancel = context.WithCancel(context.Background())
	return w
}

// poke wakes the goroutine.
func (w *leaseWatch) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// follow has the watch read task id again at the end of the lease rec
// holds, for as long as the listen whose context is ctx lasts. A
// finished task, or one without a lease, needs no watching.
func (w *leaseWatch) follow(ctx context.Context, id, principal string, rec *taskRecord) {
	if rec.Lease.IsZero() || rec.Status.Terminal() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || ctx.Err() != nil {
		return
	}
	k := leaseKey{id, principal}
	f := w.tasks[k]
	if f == nil {
		f = &leaseFollow{by: make(map[context.Context]func() bool)}
		w.tasks[k] = f
	}
	if rec.Lease.After(f.at) {
		f.at = rec.Lease
	}
	if _, ok := f.by[ctx]; !ok {
		f.by[ctx] = context.AfterFunc(ctx, w.poke)
	}
	if !w.running {
		w.running = true
		w.wg.Add(1)
		go w.run()
		return
	}
	w.poke()
}

// run reads each watched task when its lease ends, until none is left
// to watch or the watch is closed.
func (w *leaseWatch) run() {
	defer w.wg.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, wait, ok := w.next()
		if !ok {
			return
		}
		for _, k := range due {
			w.check(k)
		}
		if len(due) > 0 {
			continue
		}
		timer.Reset(wait)
		select {
		case <-w.stop.Done():
			return
		case <-w.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// next drops the tasks no live listen follows, and returns those due for
// a read and how long until the next is due; ok is false once nothing is
// left to watch (the goroutine then ends) or the watch is closed.
func (w *leaseWatch) next() (due []leaseKey, wait time.Duration, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		w.running = false
		return nil, 0, false
	}
	now := w.s.cfg.now()
	wait = -1
	for k, f := range w.tasks {
		for ctx, stop := range f.by {
			if ctx.Err() != nil {
				stop()
				delete(f.by, ctx)
			}
		}
		if len(f.by) == 0 {
			delete(w.tasks, k)
			continue
		}
		if d := f.at.Sub(now); d <= 0 {
			due = append(due, k)
		} else if wait < 0 || d < wait {
			wait = d
		}
	}
	if len(w.tasks) == 0 {
		w.running = false
		return nil, 0, false
	}
	return due, wait, true
}

// check reads task k, which fails it if its lease has lapsed, and
// watches it on to its lease's new end, or not at all once it is gone
// or finished. A read that fails is tried again a renewal later.
func (w *leaseWatch) check(k leaseKey) {
	ctx, cancel := context.WithTimeout(w.stop, storeCallTimeout)
	rec, err := w.s.loadTask(ctx, k.id, k.principal)
	cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	f := w.tasks[k]
	if f == nil {
		return
	}
	now := w.s.cfg.now()
	switch {
	case err == nil && !rec.Lease.IsZero() && !rec.Status.Terminal():
		// A lease that ended since the read is read again at once (but
		// for a millisecond, lest a clock set back make this spin).
		f.at = rec.Lease
		if soon := now.Add(time.Millisecond); f.at.Before(soon) {
			f.at = soon
		}
	case err != nil && !errors.Is(err, errTaskNotFound):
		f.at = now.Add(w.s.leaseRenewal())
	default: // gone, finished, or without a lease
		w.drop(k, f)
	}
}

// drop stops watching task k. The caller holds w.mu.
func (w *leaseWatch) drop(k leaseKey, f *leaseFollow) {
	for _, stop := range f.by {
		stop()
	}
	delete(w.tasks, k)
}

// close stops the watch for good and waits for its goroutine.
func (w *leaseWatch) close() {
	w.mu.Lock()
	w.closed = true
	for k, f := range w.tasks {
		w.drop(k, f)
	}
	w.mu.Unlock()
	w.cancel()
	w.wg.Wait()
}
