package clustertest_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"

	"tidings/bus/bustest"
	"tidings/client"
	"tidings/hub"
	"tidings/internal/engine"
	"tidings/internal/testrig/clustertest"
	"tidings/internal/testrig/testlb"
	"tidings/mcp"
	"tidings/server"
)

// balancers are the real load balancers the cluster is tested behind.
func balancers() []struct {
	name  string
	start func(testing.TB, ...string) *testlb.LB
} {
	return []struct {
		name  string
		start func(testing.TB, ...string) *testlb.LB
	}{
		{"nginx", testlb.StartNginx},
		{"goproxy", testlb.StartReverseProxy},
	}
}

// env is three replicas on a real bus behind a real balancer, serving
// res://a, res://b and res://c from one store, as replicas of one
// service serve one database.
type env struct {
	t   *testing.T
	bus busKind
	br  interface {
		Down()
		Up()
	}
	c     *clustertest.Cluster
	lb    *testlb.LB
	url   string // the balancer's /mcp
	store *store
}

// forEachSetUp runs fn over NATS and Redis, behind nginx and behind the
// Go ReverseProxy, each with a cluster of its own.
func forEachSetUp(t *testing.T, fn func(t *testing.T, e *env)) { forEachSetUpOf(t, false, fn) }

// forEachSetUpOf is forEachSetUp, with shared state among the replicas
// when shared is true.
func forEachSetUpOf(t *testing.T, shared bool, fn func(t *testing.T, e *env)) {
	for _, b := range buses() {
		for _, lb := range balancers() {
			t.Run(b.name+"/"+lb.name, func(t *testing.T) {
				br := b.start(t)
				e := &env{t: t, bus: b, br: br.(interface {
					Down()
					Up()
				}), store: newStore()}
				e.c = clustertest.Start(t, clustertest.Options{Bus: br.URL(), SharedState: shared, Setup: func(r *clustertest.Replica) error {
					return e.store.serve(r.Server)
				}})
				e.lb = lb.start(t, e.c.Upstreams()...)
				e.url = e.lb.URL() + "/mcp"
				fn(t, e)
			})
		}
	}
}

// store is the content the replicas share.
type store struct {
	mu sync.Mutex
	m  map[string]string
}

var docs = []string{"res://a", "res://b", "res://c"}

func newStore() *store {
	s := &store{m: map[string]string{}}
	for _, u := range docs {
		s.m[u] = "v0"
	}
	return s
}

func (s *store) get(uri string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[uri]
}

func (s *store) set(uri, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[uri] = v
}

// serve registers the store's resources on srv, and two tools, base
// and toggle, that never change but may be switched off.
func (s *store) serve(srv *server.Server) error {
	for _, name := range []string{"base", "toggle"} {
		err := srv.AddTool(mcp.Tool{Name: name}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
		if err != nil {
			return err
		}
	}
	for _, u := range docs {
		err := srv.AddResource(mcp.Resource{URI: u, Name: u}, func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "text/plain", s.get(req.URI))}}, nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// change writes a new version of uri and tells r's server, which is
// where the change is made.
func (e *env) change(r *clustertest.Replica, uri, v string) {
	e.store.set(uri, v)
	r.Server.ResourceUpdated(uri)
}

// placed is a watcher and the replica its listen landed on.
type placed struct {
	*clustertest.Watch
	replica int
}

// spread starts watchers of uris acting as user through the balancer,
// one at a time, until there are at least min of them and every replica
// holds at least one of their listens. Round robin decides where each
// listen lands; when one lands on a replica that already has one, a
// request that goes nowhere shifts the rotation for the next.
func (e *env) spread(user string, min int, uris ...string) []placed {
	return e.spreadOf(user, min, client.WatchOptions{URIs: uris})
}

// spreadOf is spread with watchers of opts; with shared state they follow
// the tool list too.
func (e *env) spreadOf(user string, min int, opts client.WatchOptions) []placed {
	t := e.t
	t.Helper()
	var ws []placed
	covered := make([]bool, len(e.c.Replicas))
	all := func() bool { return !slices.Contains(covered, false) }
	for i := 0; len(ws) < min || !all(); i++ {
		if i == min+4*len(e.c.Replicas) {
			t.Fatalf("the listens of %d watchers landed on %v of the replicas only", i, covered)
		}
		before := e.c.ListenCounts()
		name := fmt.Sprintf("%s's watcher %d", orAnonymous(user), i)
		w := clustertest.NewWatch(t, name, e.url, user, opts)
		topics := len(opts.URIs)
		if opts.Tools {
			topics++
		}
		w.Ready(t, topics)
		at := -1
		clustertest.WaitFor(t, name+"'s listen to be counted", func() bool {
			for r, n := range e.c.ListenCounts() {
				if n > before[r] {
					at = r
					return true
				}
			}
			return false
		})
		if covered[at] {
			e.nudge()
		}
		covered[at] = true
		ws = append(ws, placed{w, at})
	}
	t.Logf("listens per replica with %s's watchers: %v", orAnonymous(user), e.c.ListenCounts())
	return ws
}

// nudge sends the balancer a request that a replica refuses at once,
// which moves the round robin on by one.
func (e *env) nudge() {
	e.t.Helper()
	resp, err := http.Post(e.url, "application/json", bytes.NewReader([]byte("{}")))
	if err != nil {
		e.t.Fatal(err)
	}
	resp.Body.Close()
}

func orAnonymous(user string) string {
	if user == "" {
		return "anonymous"
	}
	return user
}

// sentinel changes uri once more through the first replica and checks
// that it is the next change every watcher reports: nothing else was
// pending, nothing was reported twice.
func (e *env) sentinel(ws []placed, uri string) {
	e.t.Helper()
	e.change(e.c.Replicas[0], uri, "sentinel")
	for _, w := range ws {
		w.ExpectUpdated(e.t, uri)
	}
}

// clean checks that no replica's bus saw a loss.
func (e *env) clean() {
	e.t.Helper()
	for _, r := range e.c.Replicas {
		if st := r.Bus.Stats(); st.Gaps+st.Resyncs+st.Stale+st.Dropped+st.Invalid != 0 || !st.Connected {
			e.t.Errorf("replica %s: %+v, want a clean run", r.Name, st)
		}
	}
}

// TestChangesReachEveryReplica: watchers spread by the balancer over
// every replica hear a change made through any replica, once, and read
// the new content through the balancer.
func TestChangesReachEveryReplica(t *testing.T) {
	forEachSetUp(t, func(t *testing.T, e *env) {
		ws := e.spread("", 4, "res://a", "res://b")
		for _, r := range e.c.Replicas {
			t.Logf("res://a changed through %s", r.Name)
			e.change(r, "res://a", "from "+r.Name)
			for _, w := range ws {
				w.ExpectUpdated(t, "res://a")
			}
		}
		e.sentinel(ws, "res://b")
		e.clean()
	})
}

// TestAudienceAcrossTheBalancer: a change for one principal reaches that
// principal's watchers on every replica, and nobody else's: had another
// heard it, it would have read the new content and reported it before
// the change for everyone that follows.
func TestAudienceAcrossTheBalancer(t *testing.T) {
	forEachSetUp(t, func(t *testing.T, e *env) {
		alice := e.spread("alice", 3, "res://a", "res://b")
		bob := e.spread("bob", 3, "res://a", "res://b")
		nobody := e.spread("", 1, "res://a", "res://b")
		for i, r := range e.c.Replicas {
			t.Logf("a change for alice through %s", r.Name)
			e.store.set("res://a", fmt.Sprintf("alice's %d", i))
			engine.Of(r.Server).Hub().Publish(hub.Event{URI: "res://a", Audience: []string{"alice"}})
			for _, w := range alice {
				w.ExpectUpdated(t, "res://a")
			}
			e.change(r, "res://b", fmt.Sprintf("everyone's %d", i))
			for _, w := range slices.Concat(alice, bob, nobody) {
				w.ExpectUpdated(t, "res://b")
			}
		}
		e.clean()
	})
}

// TestBrokerOutage: the broker stops while changes are made through every
// replica, and starts again. Each watcher hears at once of the change
// made on its own replica; once the bus is back, the replicas re-notify
// and every watcher reports every change made meanwhile, each once.
func TestBrokerOutage(t *testing.T) {
	forEachSetUp(t, func(t *testing.T, e *env) {
		ws := e.spread("", 4, docs...)
		e.br.Down()
		for _, r := range e.c.Replicas {
			clustertest.WaitFor(t, "replica "+r.Name+" to see the bus down", func() bool { return !r.Bus.Stats().Connected })
		}
		for i, r := range e.c.Replicas {
			e.change(r, docs[i], "during the outage")
		}
		// The change made on its own replica reaches each watcher now.
		for _, w := range ws {
			w.ExpectUpdated(t, docs[w.replica])
		}
		e.br.Up()
		for _, w := range ws {
			heard := map[string]bool{docs[w.replica]: true}
			for len(heard) < len(docs) {
				ev := w.Change(t)
				if ev.Kind != client.ResourceUpdated || len(ev.Changed) != 1 || heard[ev.URI] {
					t.Fatalf("%s after the outage: %s, having heard of %v", w.Name, clustertest.Describe(ev), heard)
				}
				heard[ev.URI] = true
			}
		}
		for _, r := range e.c.Replicas {
			clustertest.WaitFor(t, "replica "+r.Name+" to reconnect", func() bool { return r.Bus.Stats().Connected })
		}
		e.sentinel(ws, "res://a")
	})
}

// TestKilledReplica: one replica dies. Its watchers reconnect through the
// balancer to the others and reconcile: they report the one change made
// while they were away, and nothing for what did not change.
func TestKilledReplica(t *testing.T) {
	forEachSetUp(t, func(t *testing.T, e *env) {
		ws := e.spread("", 4, "res://a", "res://b")
		const victim = 1
		if err := e.c.Replicas[victim].Kill(); err != nil {
			t.Fatal(err)
		}
		e.change(e.c.Replicas[0], "res://a", "while B was gone")
		for _, w := range ws {
			if w.replica != victim {
				w.ExpectUpdated(t, "res://a")
				continue
			}
			// The stream broke, and the watcher connected again through
			// the balancer, to another replica.
			var dropped, connected bool
			for !connected {
				switch ev := w.Next(t); ev.Kind {
				case client.Disconnected:
					if ev.Graceful {
						t.Errorf("%s: the killed replica ended its listen gracefully", w.Name)
					}
					dropped = true
				case client.Connected:
					connected = dropped
				case client.ReadFailed:
					t.Logf("%s: a read failed: %v", w.Name, ev.Err)
				default:
					t.Fatalf("%s reported %s before it connected again", w.Name, clustertest.Describe(ev))
				}
			}
			// Then it found what changed, whether it reconnected before
			// the change (and heard of it) or after (and read it).
			w.ExpectUpdated(t, "res://a")
		}
		clustertest.WaitFor(t, "every watcher to listen on the living replicas", func() bool {
			n := e.c.ListenCounts()
			return n[0]+n[2] == len(ws) && n[victim] == 0
		})
		t.Logf("listens per replica after the kill: %v", e.c.ListenCounts())
		// Nothing else changed, and nothing else is reported.
		e.sentinel(ws, "res://b")
	})
}

// TestLostAndReorderedMessages: the bus loses one change, then delivers
// two out of order. The replicas that missed a change see the gap in its
// sender's numbering at its next message and re-notify, so every watcher
// reports every change, each once.
func TestLostAndReorderedMessages(t *testing.T) {
	forEachSetUp(t, func(t *testing.T, e *env) {
		ws := e.spread("", 4, "res://a", "res://b")
		a := e.c.Replicas[0]
		for _, fault := range []struct {
			what    string
			arrange func()
		}{
			{"lost", func() { a.Faults.Drop(1, bustest.IsChange) }},
			{"reordered", func() { a.Faults.Reorder(bustest.IsChange) }},
		} {
			t.Log("A's change of res://a is " + fault.what)
			gaps := make([]int64, len(e.c.Replicas))
			for i, r := range e.c.Replicas {
				gaps[i] = r.Bus.Stats().Gaps
			}
			fault.arrange()
			e.change(a, "res://a", fault.what)
			e.change(a, "res://b", "after the "+fault.what+" change")
			for _, w := range ws {
				heard := map[string]bool{}
				for len(heard) < 2 {
					ev := w.Change(t)
					if ev.Kind != client.ResourceUpdated || len(ev.Changed) != 1 || heard[ev.URI] {
						t.Fatalf("%s: %s, having heard of %v", w.Name, clustertest.Describe(ev), heard)
					}
					heard[ev.URI] = true
				}
			}
			for i, r := range e.c.Replicas[1:] {
				if st := r.Bus.Stats(); st.Gaps == gaps[i+1] {
					t.Errorf("replica %s saw no gap: %+v", r.Name, st)
				}
			}
		}
		e.sentinel(ws, "res://a")
	})
}

// TestListChangesAgree: with shared state, a tool switched off or on
// through any replica is gone from, or back in, the list of every
// replica, and every watcher, re-reading through the balancer wherever it
// sends it, ends up knowing it. A watcher may see a replica that has not
// applied the change yet after one that has (reads through a balancer go
// to replicas that apply the change one after another), so it may report
// the tool back and gone again on the way; what it reported last is the
// change.
func TestListChangesAgree(t *testing.T) {
	forEachSetUpOf(t, true, func(t *testing.T, e *env) {
		ws := e.spreadOf("", 4, client.WatchOptions{Tools: true, URIs: []string{"res://a"}})
		ctx := context.Background()
		direct := make([]*client.Client, len(e.c.Replicas))
		for i, r := range e.c.Replicas {
			direct[i] = client.NewHTTP(r.URL() + "/mcp")
			defer direct[i].Close()
		}
		// agree waits until every replica lists toggle, or none does.
		agree := func(on bool) {
			t.Helper()
			for i, r := range e.c.Replicas {
				clustertest.WaitFor(t, fmt.Sprintf("replica %s to list toggle: %v", r.Name, on), func() bool {
					raw, err := direct[i].Request(ctx, mcp.MethodToolsList, map[string]any{})
					if err != nil {
						t.Fatal(err)
					}
					return bytes.Contains(raw, []byte(`"name":"toggle"`)) == on
				})
			}
		}
		// listed is what each watcher last reported of toggle; learned
		// folds its reports into it until it is on, then until it has
		// reported two sentinel changes of res://a made once every replica
		// agreed (the watcher re-reads what is dirty in batches, res://a
		// before the tool list, so reports of stale lists read before the
		// agreement come before the second), and then until it is on again.
		listed := make([]bool, len(ws))
		for i := range listed {
			listed[i] = true
		}
		fold := func(w placed, i int, ev client.Event) {
			t.Helper()
			switch {
			case ev.Kind == client.ToolsChanged && slices.Equal(ev.Added, []string{"toggle"}) && len(ev.Removed)+len(ev.Changed) == 0:
				listed[i] = true
			case ev.Kind == client.ToolsChanged && slices.Equal(ev.Removed, []string{"toggle"}) && len(ev.Added)+len(ev.Changed) == 0:
				listed[i] = false
			default:
				t.Fatalf("%s: %s, want toggle added or removed", w.Name, clustertest.Describe(ev))
			}
		}
		learned := func(on bool, round int) {
			t.Helper()
			for i, w := range ws {
				for told := 0; listed[i] != on; told++ {
					fold(w, i, w.Change(t))
					if told > 0 {
						t.Logf("%s: %d reports on the way", w.Name, told+1)
					}
				}
			}
			for sentinel := range 2 {
				e.change(e.c.Replicas[0], "res://a", fmt.Sprintf("sentinel %d.%d", round, sentinel))
				for i, w := range ws {
					for {
						ev := w.Change(t)
						if ev.Kind == client.ResourceUpdated && ev.URI == "res://a" && slices.Equal(ev.Changed, []string{"res://a"}) {
							break
						}
						fold(w, i, ev)
					}
				}
			}
			// A replica that applied the change last tells the others
			// again, but its news may reach a watcher's replica after the
			// sentinels (it is told once that replica has loaded the
			// state): a watcher that read a replica not yet changed hears
			// again, and reads the change, in the end.
			for i, w := range ws {
				for listed[i] != on {
					t.Logf("%s: toggle listed %v after the sentinels, waiting for the last news", w.Name, listed[i])
					fold(w, i, w.Change(t))
				}
			}
		}
		for i, r := range e.c.Replicas {
			t.Logf("toggle switched off through %s", r.Name)
			if err := r.Server.Disable(ctx, server.Tool("toggle")); err != nil {
				t.Fatal(err)
			}
			agree(false)
			learned(false, 2*i)
			// On again through the next, without waiting for the store:
			// a ctx that has ended stops only the wait.
			next := e.c.Replicas[(i+1)%len(e.c.Replicas)]
			t.Logf("toggle switched on through %s", next.Name)
			ended, end := context.WithCancel(ctx)
			end()
			if err := next.Server.Enable(ended, server.Tool("toggle")); errors.Is(err, server.ErrNotRegistered) {
				t.Fatal(err)
			}
			agree(true)
			learned(true, 2*i+1)
		}
	})
}
