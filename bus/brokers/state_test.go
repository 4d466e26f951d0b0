package brokers_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"tidings/bus"
	"tidings/bus/brokers"
	"tidings/bus/bustest"
	"tidings/client"
	"tidings/hub"
	"tidings/internal/engine"
	"tidings/internal/testrig/testbroker"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// state opens the shared state of br's replicas: the broker's own for a
// real one, the group's LocalState for the local bus.
func state(t testing.TB, br broker) bus.State {
	t.Helper()
	if lb, ok := br.(localBroker); ok {
		return lb.st
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	st, err := brokers.OpenState(ctx, br.(realBroker).URL())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// stateReplica is one server on the bus and the shared state, behind a
// real HTTP server, with a client watching its tools.
type stateReplica struct {
	name   string
	srv    *server.Server
	bus    bus.Bus
	faults *bustest.Faulty
	state  *bustest.FaultyState
	ts     *httptest.Server
	lists  atomic.Int64 // tools/list requests served to the end
	// early is set when the first load held by holdLoads was let go by a
	// tools/list served meanwhile: the replica told its listeners before
	// it loaded.
	early  atomic.Bool
	events chan client.Event
	w      *client.Watcher
	cl     *client.Client
	down   bool
}

// stateCluster is replicas of one server sharing a bus and a state.
type stateCluster struct {
	t    *testing.T
	br   broker
	reps []*stateReplica
}

func newStateCluster(t *testing.T, br broker, n int) *stateCluster {
	t.Helper()
	c := &stateCluster{t: t, br: br}
	for i := range n {
		c.reps = append(c.reps, c.start(string(rune('A'+i)), true))
	}
	for _, r := range c.reps {
		testbroker.WaitFor(t, "replica "+r.name+" to hear its peers", func() bool { return r.bus.Stats().Peers == n-1 })
	}
	c.settle()
	for _, r := range c.reps {
		r.watch(t)
	}
	return c
}

// start starts a replica, which registers what every replica does; sync
// has it load the shared state before it serves.
func (c *stateCluster) start(name string, sync bool) *stateReplica {
	t := c.t
	t.Helper()
	quiet := slog.New(slog.DiscardHandler)
	bopts := []bus.Option{bus.WithHeartbeat(time.Hour), bus.WithBackoff(5*time.Millisecond, 50*time.Millisecond), bus.WithLogger(quiet)}
	r := &stateReplica{name: name, events: make(chan client.Event, 64)}
	r.faults = bustest.Wrap(c.br.conn(t, bopts...))
	r.bus = bus.New(r.faults, bopts...)
	r.state = bustest.WrapState(state(t, c.br))
	count := func(next server.MethodHandler) server.MethodHandler {
		return func(ctx context.Context, req *server.Request) error {
			err := next(ctx, req)
			if req.Method == mcp.MethodToolsList {
				r.lists.Add(1)
			}
			return err
		}
	}
	r.srv = server.New(mcp.Implementation{Name: "replica-" + name, Version: "1"},
		server.WithBus(r.bus), server.WithSharedState(r.state), server.WithLogger(quiet), server.WithMiddleware(count))
	for _, err := range []error{
		r.srv.AddTool(mcp.Tool{Name: "base"}, tool),
		r.srv.AddTool(mcp.Tool{Name: "toggle"}, tool),
		r.srv.AddPrompt(mcp.Prompt{Name: "greet"}, func(context.Context, *server.PromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{}, nil
		}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if sync {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := r.srv.SyncState(ctx); err != nil {
			t.Fatal(err)
		}
	}
	r.ts = httptest.NewServer(streamhttp.New(r.srv))
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop shuts the replica down (once).
func (r *stateReplica) stop(t *testing.T) {
	if r.down {
		return
	}
	r.down = true
	if r.w != nil {
		r.w.Close()
		r.cl.Close()
	}
	shutdown(t, r.name, r.srv, r.ts)
}

// settle waits until what the replicas published while starting has been
// told on every other: each sends a marker nobody else does, and once a
// replica has heard every other's it has queued all they sent before (a
// bus keeps each sender's order); a SyncState then loads and tells what
// was queued.
func (c *stateCluster) settle() {
	c.t.Helper()
	subs := make([]*hub.Subscription, len(c.reps))
	for i, r := range c.reps {
		var uris []string
		for _, o := range c.reps {
			if o != r {
				uris = append(uris, "sync://"+o.name)
			}
		}
		s, err := engine.Of(r.srv).Hub().Subscribe(hub.Filter{URIs: uris})
		if err != nil {
			c.t.Fatal(err)
		}
		defer s.Close()
		subs[i] = s
	}
	for _, r := range c.reps {
		r.srv.ResourceUpdated("sync://" + r.name)
	}
	for i, s := range subs {
		heard := map[string]bool{}
		for len(heard) < len(c.reps)-1 {
			select {
			case <-s.Wake():
			case <-timeout():
				c.t.Fatalf("replica %s heard only %v of its peers' markers", c.reps[i].name, heard)
			}
			_, uris := s.Take(nil)
			for _, u := range uris {
				heard[u] = true
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for _, r := range c.reps {
		if err := r.srv.SyncState(ctx); err != nil {
			c.t.Fatal(err)
		}
	}
}

// watch starts a client Watcher of the replica's tools and waits for its
// first read.
func (r *stateReplica) watch(t *testing.T) {
	t.Helper()
	r.cl = client.NewHTTP(r.ts.URL)
	r.w = r.cl.Watch(context.Background(), client.WatchOptions{Tools: true, OnEvent: func(e client.Event) {
		if e.Kind != client.ToolsChanged {
			return
		}
		select {
		case r.events <- e:
		default:
			t.Errorf("replica %s: watch event %+v not taken", r.name, e)
		}
	}})
	if e := next(t, r.events); len(e.Added) == 0 {
		t.Fatalf("replica %s: the watcher's first read: %+v", r.name, e)
	}
}

// rewatch replaces the replica's watcher with a new one, which has heard
// nothing yet, and waits for its first read.
func (r *stateReplica) rewatch(t *testing.T) {
	t.Helper()
	r.w.Close()
	r.cl.Close()
	for len(r.events) > 0 {
		<-r.events
	}
	r.watch(t)
}

// tools is what a fresh client reads from tools/list on the replica.
func (r *stateReplica) tools(t *testing.T) []string {
	t.Helper()
	cl := client.NewHTTP(r.ts.URL)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ts, err := cl.Tools(ctx)
	if err != nil {
		t.Fatalf("replica %s: tools/list: %v", r.name, err)
	}
	var names []string
	for _, tl := range ts {
		names = append(names, tl.Name)
	}
	slices.Sort(names)
	return names
}

// holdLoads holds each load of r's shared state up until r has served a
// tools/list since, or a while has passed: a replica that told its
// listeners before loading would be re-read while the load is held, and
// show the old list. Whether the first load was let go by such a re-read
// is kept in early; later loads may be (the other replicas tell the
// listeners again once they have applied a change, after this replica
// has).
func (r *stateReplica) holdLoads() {
	r.early.Store(false)
	var first atomic.Bool
	first.Store(true)
	r.state.BeforeLoad(func() {
		base := r.lists.Load()
		deadline := time.NewTimer(300 * time.Millisecond)
		defer deadline.Stop()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for r.lists.Load() == base {
			select {
			case <-deadline.C:
				first.Store(false)
				return
			case <-tick.C:
			}
		}
		if first.Swap(false) {
			r.early.Store(true)
		}
	})
}

// TestSharedStateAcrossReplicas: a tool disabled through one replica is
// gone from every replica's tools/list, and the watchers on the others
// are told and find it gone on their first re-read, however slow the
// store is to load; enabled again, it is back the same way.
func TestSharedStateAcrossReplicas(t *testing.T) {
	forEachBus(t, func(t *testing.T, br broker) {
		c := newStateCluster(t, br, 3)
		a := c.reps[0]
		others := c.reps[1:]
		for _, step := range []struct {
			on   bool
			want []string
		}{{false, []string{"base"}}, {true, []string{"base", "toggle"}}} {
			// Every replica that applied the last step told the others
			// again (see load in server/state.go); once that is told,
			// fresh watchers hear first of this step's change.
			c.settle()
			for _, r := range others {
				r.rewatch(t)
				r.holdLoads()
			}
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			turn := a.srv.Disable
			if step.on {
				turn = a.srv.Enable
			}
			err := turn(ctx, server.Tool("toggle"))
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			if got := a.tools(t); !slices.Equal(got, step.want) {
				t.Fatalf("A lists %v at once, want %v", got, step.want)
			}
			for _, r := range others {
				e := next(t, r.events)
				if step.on && !slices.Equal(e.Added, []string{"toggle"}) || !step.on && !slices.Equal(e.Removed, []string{"toggle"}) ||
					len(e.Changed) != 0 || len(e.Added)+len(e.Removed) != 1 {
					t.Fatalf("replica %s's watcher reported %+v, want toggle switched %v", r.name, e, step.on)
				}
				if r.early.Load() {
					t.Errorf("replica %s served a tools/list before it loaded the change: the first re-read must show it", r.name)
				}
				r.state.BeforeLoad(nil)
				if got := r.tools(t); !slices.Equal(got, step.want) {
					t.Errorf("replica %s lists %v, want %v", r.name, got, step.want)
				}
			}
		}
	})
}

// TestSharedStateSurvivesRestart: a replica that starts after a tool was
// disabled serves it disabled, from the state alone, with no event.
func TestSharedStateSurvivesRestart(t *testing.T) {
	forEachBus(t, func(t *testing.T, br broker) {
		c := newStateCluster(t, br, 3)
		a, cc := c.reps[0], c.reps[2]
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		if err := a.srv.Disable(ctx, server.Tool("toggle")); err != nil {
			t.Fatal(err)
		}
		next(t, cc.events)
		cc.stop(t)
		for _, sync := range []bool{true, false} {
			d := c.start("D", sync)
			if sync {
				if got := d.tools(t); !slices.Equal(got, []string{"base"}) {
					t.Errorf("a new replica lists %v once synced, want [base]", got)
				}
			} else {
				testbroker.WaitFor(t, "a new replica to load the state by itself", func() bool {
					return slices.Equal(d.tools(t), []string{"base"})
				})
			}
			if st := d.srv.StateStats(); !st.Loaded || st.Unwritten != 0 {
				t.Errorf("the new replica's stats %+v", st)
			}
			d.stop(t)
		}
	})
}

// TestSharedStateOutage: a tool disabled while the broker is down stays
// disabled on the replica that did it, which says the write failed; once
// the broker is back the write lands by itself and every replica, and
// every watcher, agrees.
func TestSharedStateOutage(t *testing.T) {
	forEachBus(t, func(t *testing.T, br broker) {
		c := newStateCluster(t, br, 3)
		a := c.reps[0]
		if br.real() {
			br.down()
		} else {
			for _, r := range c.reps {
				r.faults.Cut()
				r.state.Cut()
			}
		}
		for _, r := range c.reps {
			testbroker.WaitFor(t, "replica "+r.name+" to see the bus down", func() bool { return !r.bus.Stats().Connected })
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := a.srv.Disable(ctx, server.Tool("toggle"))
		cancel()
		if err == nil {
			t.Fatal("Disable succeeded with the broker down")
		}
		if got := a.tools(t); !slices.Equal(got, []string{"base"}) {
			t.Fatalf("A lists %v, want [base]: the change applies there at once", got)
		}
		if st := a.srv.StateStats(); st.Unwritten != 1 {
			t.Errorf("A's stats %+v, want the change unwritten", st)
		}
		// The failed write is counted once the store's client gives up on
		// it, which may be after Disable's own deadline.
		testbroker.WaitFor(t, "A to count its failed write", func() bool { return a.srv.StateStats().WriteFailures > 0 })
		if br.real() {
			br.up()
		} else {
			for _, r := range c.reps {
				r.state.Restore()
				r.faults.Restore()
			}
		}
		testbroker.WaitFor(t, "A to write its change", func() bool { return a.srv.StateStats().Unwritten == 0 })
		for _, r := range c.reps[1:] {
			var e client.Event
			for !slices.Contains(e.Removed, "toggle") {
				e = next(t, r.events)
			}
			if got := r.tools(t); !slices.Equal(got, []string{"base"}) {
				t.Errorf("replica %s lists %v, want [base]", r.name, got)
			}
		}
	})
}
