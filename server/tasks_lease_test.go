package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"tidings/bus"
	"tidings/mcp"
	"tidings/server"
)

// leaseCounter is a server.TaskObserver that counts the tasks failed for
// a lapsed lease.
type leaseCounter struct{ lapsed atomic.Int64 }

func (*leaseCounter) Notified(int, int)  {}
func (*leaseCounter) CutOff()            {}
func (c *leaseCounter) TaskLeaseLapsed() { c.lapsed.Add(1) }
func (c *leaseCounter) count() int64     { return c.lapsed.Load() }
func sum(cs ...*leaseCounter) (n int64) {
	for _, c := range cs {
		n += c.count()
	}
	return n
}

// testLease is the lease of the lease tests: renewed every second.
const testLease = 3 * time.Second

// leaseReplicas returns a replica runner whose task store can be cut
// off (its store, set down, is a runner killed: nothing it does reaches
// the store any more) and n others sharing the store, each counting
// what it fails for a lapsed lease. All run the tools of replicaTools
// and re-read a running task only once an hour, but renew its lease
// every second.
func leaseReplicas(t *testing.T, blk *blocker, n int, opts ...server.Option) (runner *harness, dead *outageStore, others []*harness, counts []*leaseCounter) {
	t.Helper()
	store := bus.NewLocalTasks()
	dead = &outageStore{TaskStore: store, refused: make(chan string, 1)}
	common := append([]server.Option{server.WithSecret(replicaSecret), server.WithTaskLease(testLease),
		server.WithTaskPollInterval(time.Hour), server.WithLogger(slog.New(slog.DiscardHandler))}, opts...)
	runner = taskServer(t, append([]server.Option{server.WithTaskStore(dead)}, common...)...)
	replicaTools(t, blk)(runner.srv)
	for range n {
		c := &leaseCounter{}
		h := taskServer(t, append([]server.Option{server.WithTaskStore(store), server.WithStreamObserver(c)}, common...)...)
		replicaTools(t, blk)(h.srv)
		others, counts = append(others, h), append(counts, c)
	}
	return runner, dead, others, counts
}

// stoppedRunner reports whether task is failed with the error that says
// the server running it stopped.
func stoppedRunner(task map[string]any) bool {
	e, _ := task["error"].(map[string]any)
	msg, _ := e["message"].(string)
	return task["status"] == string(mcp.TaskFailed) && strings.Contains(msg, "the server running the task stopped") &&
		task["statusMessage"] == msg
}

// TestTaskLeaseLapsed: the runner of a task renews its lease while it
// lives, without a change anyone is told of; once it stops (its store
// cut off, as a killed replica's is), another replica's listen following
// the task hears it failed, with an error saying the server running it
// stopped, one lease after the last renewal and not before, and
// tasks/get there reports the same. Exactly one failure is counted. The
// runner, back, finds its task failed and stops the work, leaving the
// failure as it is.
func TestTaskLeaseLapsed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		blk := newBlocker()
		a, dead, others, counts := leaseReplicas(t, blk, 1)
		b := others[0]
		id := a.create(t, "job", nil)
		blk.waitStart(t)
		created := b.task(t, id)

		time.Sleep(10 * time.Second) // ten renewals, the last one now
		synctest.Wait()
		task := b.task(t, id)
		if task["status"] != string(mcp.TaskWorking) {
			t.Fatalf("renewed for ten seconds on a lease of %v: %v", testLease, task)
		}
		if task["lastUpdatedAt"] != created["lastUpdatedAt"] {
			t.Errorf("renewals moved lastUpdatedAt from %v to %v", created["lastUpdatedAt"], task["lastUpdatedAt"])
		}
		l := b.startListen("L", tasked(P{"notifications": P{"taskIds": []string{id}}}))
		l.ack(t)
		l.rec.waitUntil(t, "the task's state", func(ns []notif) bool { return countMethod(ns, mcp.NotifyTasks) == 1 })

		dead.setDown(true) // the runner is gone
		time.Sleep(testLease - time.Millisecond)
		synctest.Wait()
		if n := countMethod(decodeNotifs(t, l.rec.messages()), mcp.NotifyTasks); n != 1 {
			t.Fatalf("before the lease's end the listen heard %d states of the task, want only the first:\n%s", n, dump(decodeNotifs(t, l.rec.messages())))
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		ns := decodeNotifs(t, l.rec.messages())
		if countMethod(ns, mcp.NotifyTasks) != 2 || !stoppedRunner(ns[len(ns)-1].Params) {
			t.Fatalf("at the lease's end the listen heard:\n%s\nwant the task failed, the server running it stopped", dump(ns))
		}
		l.checkTag(t, ns[len(ns)-1])
		if task := b.task(t, id); !stoppedRunner(task) {
			t.Fatalf("tasks/get: %v", task)
		}
		if n := counts[0].count(); n != 1 {
			t.Errorf("%d tasks counted failed for a lapsed lease, want 1", n)
		}

		dead.setDown(false) // the runner comes back, renews, and finds its task failed
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case err := <-blk.ended:
			if err == nil {
				t.Error("the work was released, not stopped")
			}
		default:
			t.Error("the work runs on, its task failed")
		}
		if task := a.task(t, id); !stoppedRunner(task) {
			t.Errorf("once the runner is back: %v", task)
		}
		l.stop(t)
	})
}

// gatedStore holds every Update back until n Gets have been made: n
// replicas reading a task at once all read it before any writes.
type gatedStore struct {
	bus.TaskStore
	mu    sync.Mutex
	n     int
	all   chan struct{}
	armed bool
}

func (s *gatedStore) arm(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n, s.all, s.armed = n, make(chan struct{}), true
}

func (s *gatedStore) Get(ctx context.Context, id string) ([]byte, uint64, error) {
	b, rev, err := s.TaskStore.Get(ctx, id)
	s.mu.Lock()
	if s.armed {
		if s.n--; s.n == 0 {
			close(s.all)
			s.armed = false
		}
	}
	s.mu.Unlock()
	return b, rev, err
}

func (s *gatedStore) Update(ctx context.Context, id string, rec []byte, rev uint64) (uint64, error) {
	s.mu.Lock()
	all := s.all
	s.mu.Unlock()
	if all != nil {
		select {
		case <-all:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return s.TaskStore.Update(ctx, id, rec, rev)
}

// TestTaskLeaseLapsedOnce: replicas that read a lapsed task at the same
// moment, each through its own tasks/get, all find it lapsed before any
// writes; compare-and-swap lets one failure land, the others read it
// failed, and one failure is counted among them.
func TestTaskLeaseLapsedOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		blk := newBlocker()
		store := &gatedStore{TaskStore: bus.NewLocalTasks()}
		dead := &outageStore{TaskStore: store, refused: make(chan string, 1)}
		common := []server.Option{server.WithSecret(replicaSecret), server.WithTaskLease(testLease),
			server.WithTaskPollInterval(time.Hour), server.WithLogger(slog.New(slog.DiscardHandler))}
		a := taskServer(t, append([]server.Option{server.WithTaskStore(dead)}, common...)...)
		replicaTools(t, blk)(a.srv)
		const n = 3
		var replicas []*harness
		var counts []*leaseCounter
		for range n {
			c := &leaseCounter{}
			h := taskServer(t, append([]server.Option{server.WithTaskStore(store), server.WithStreamObserver(c)}, common...)...)
			replicas, counts = append(replicas, h), append(counts, c)
		}
		id := a.create(t, "job", nil)
		blk.waitStart(t)
		dead.setDown(true)
		time.Sleep(testLease)
		synctest.Wait()

		store.arm(2 * n) // each reads the task, then again to write it
		var wg sync.WaitGroup
		tasks := make([]map[string]any, n)
		for i, h := range replicas {
			wg.Go(func() { tasks[i] = h.task(t, id) })
		}
		wg.Wait()
		for i, task := range tasks {
			if !stoppedRunner(task) {
				t.Errorf("tasks/get through replica %d: %v", i, task)
			}
		}
		if got := sum(counts...); got != 1 {
			t.Errorf("%d failures counted among %d replicas, want 1", got, n)
		}
		dead.setDown(false)
	})
}

// TestTaskLeaseLapsedByAnyRead: whichever request of a client first
// reads a task whose lease lapsed — tasks/get, tasks/update (whose
// answers are then not taken), tasks/cancel (which then does not cancel
// it) or a listen — fails it as its runner stopped, and answers as it
// would for any task in that state.
func TestTaskLeaseLapsedByAnyRead(t *testing.T) {
	for _, method := range []string{mcp.MethodTasksGet, mcp.MethodTasksUpdate, mcp.MethodTasksCancel, mcp.MethodListen} {
		t.Run(method, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				blk := newBlocker()
				a, dead, others, counts := leaseReplicas(t, blk, 1)
				b := others[0]
				id := a.create(t, "ask", nil)
				synctest.Wait()
				if task := b.task(t, id); task["status"] != string(mcp.TaskInputRequired) {
					t.Fatalf("the task is %v", task)
				}
				dead.setDown(true)
				time.Sleep(testLease)
				synctest.Wait()
				if method == mcp.MethodListen {
					l := b.startListen("L", tasked(P{"notifications": P{"taskIds": []string{id}}}))
					if g := l.ack(t); fmt.Sprint(g["taskIds"]) != "["+id+"]" {
						t.Fatalf("granted %v", g)
					}
					// The listen hears the failure it wrote too, as it does
					// any change landing after it subscribed.
					l.rec.waitUntil(t, "the task's state", func(ns []notif) bool { return countMethod(ns, mcp.NotifyTasks) >= 1 })
					for _, n := range l.stop(t) {
						if n.Method == mcp.NotifyTasks && !stoppedRunner(n.Params) {
							t.Errorf("the listen told: %s", n.raw)
						}
					}
				} else {
					r, _ := b.call(1, method, tasked(P{"taskId": id, "inputResponses": P{"q.1": accept("late")}}))
					r.ok(t)
				}
				if task := b.task(t, id); !stoppedRunner(task) || task["inputRequests"] != nil {
					t.Errorf("after %s: %v", method, task)
				}
				if n := counts[0].count(); n != 1 {
					t.Errorf("%d failures counted, want 1", n)
				}
				dead.setDown(false)
			})
		})
	}
}

// TestTaskLeaseWatchEnds: a listen reads the tasks it follows at the end
// of each lease only while it lasts: once it ends, the replica reads the
// task no more, though the task runs on, renewed.
func TestTaskLeaseWatchEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		blk := newBlocker()
		store := bus.NewLocalTasks()
		common := []server.Option{server.WithSecret(replicaSecret), server.WithTaskLease(testLease),
			server.WithTaskPollInterval(time.Hour), server.WithLogger(slog.New(slog.DiscardHandler))}
		a := taskServer(t, append([]server.Option{server.WithTaskStore(store)}, common...)...)
		replicaTools(t, blk)(a.srv)
		counted := &countStore{TaskStore: store}
		b := taskServer(t, append([]server.Option{server.WithTaskStore(counted)}, common...)...)
		id := a.create(t, "job", nil)
		blk.waitStart(t)
		l := b.startListen("L", tasked(P{"notifications": P{"taskIds": []string{id}}}))
		l.ack(t)
		l.rec.waitUntil(t, "the task's state", func(ns []notif) bool { return countMethod(ns, mcp.NotifyTasks) == 1 })
		start := counted.count()
		time.Sleep(10 * testLease)
		synctest.Wait()
		during := counted.count() - start
		if during < 5 || during > 20 {
			t.Errorf("the listen's replica read the task %d times in ten leases, want about one a lease", during)
		}
		if n := countMethod(l.stop(t), mcp.NotifyTasks); n != 1 {
			t.Errorf("the listen heard %d states of a task that did not change", n)
		}
		synctest.Wait()
		after := counted.count()
		time.Sleep(10 * testLease)
		synctest.Wait()
		if n := counted.count() - after; n != 0 {
			t.Errorf("%d reads in ten leases after the listen ended", n)
		}
	})
}

// TestTaskLeaseRenewalRetried: a renewal the store refuses is tried
// again within moments, not a renewal later, so that a blip of the store
// does not shorten the lease: the runner, cut off for good just after
// the blip, has its task lapse a lease after the retried renewal.
func TestTaskLeaseRenewalRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		blk := newBlocker()
		a, dead, others, _ := leaseReplicas(t, blk, 1)
		b := others[0]
		id := a.create(t, "job", nil) // leased until 3s
		blk.waitStart(t)
		time.Sleep(500 * time.Millisecond)
		dead.setDown(true) // the renewal at 1s fails, and its retry at 1.02s
		time.Sleep(530 * time.Millisecond)
		synctest.Wait()
		dead.setDown(false) // the retry at 1.06s renews until 4.06s
		time.Sleep(40 * time.Millisecond)
		synctest.Wait()
		dead.setDown(true) // and the runner is cut off for good
		time.Sleep(2400 * time.Millisecond)
		synctest.Wait()
		if task := b.task(t, id); task["status"] != string(mcp.TaskWorking) {
			t.Fatalf("at 3.47s, the lease renewed at 1.06s: %v", task)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if task := b.task(t, id); !stoppedRunner(task) {
			t.Fatalf("at 4.47s: %v", task)
		}
		dead.setDown(false)
	})
}
