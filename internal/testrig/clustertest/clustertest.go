// Package clustertest runs several replicas of one server for tests, the
// way a deployment behind a load balancer does: each replica is a
// *server.Server joined to the others through a real bus (NATS, Redis, or
// the local bus of one process), served over its own loopback HTTP server
// at /mcp, with one shared secret. A test puts a balancer in front of
// Upstreams (internal/testlb) and its clients never know which replica
// answers.
//
// Each replica's bus connection is wrapped in a bustest.Faulty, so that a
// test can lose, repeat or reorder what one replica sends, and each
// replica can be killed: its connections cut and its server gone, as when
// the process dies.
//
// The tests of this package are the cluster's own: replicas behind nginx
// and Go's ReverseProxy over NATS and Redis, watched by tidings clients,
// and tasks (Options.Tasks) started, followed, polled, answered and
// cancelled through different replicas; and `tidings gateway` replicas,
// each the built command in a process of its own, in front of one
// upstream on NATS behind nginx, where a change only one of them hears
// of upstream reaches the others' listeners over the bus.
package clustertest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"tidings/bus"
	"tidings/bus/brokers"
	"tidings/bus/bustest"
	"tidings/hub"
	"tidings/internal/engine"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// Wait bounds every wait of a cluster test: nothing takes this long unless
// something is broken.
const Wait = 20 * time.Second

// PrincipalHeader names the caller to every replica (streamhttp's
// WithPrincipal reads it), so that tests can act as several principals
// without an authorization server.
const PrincipalHeader = "X-User"

// Options say what a cluster is made of.
type Options struct {
	// Replicas is how many (default 3).
	Replicas int
	// Bus is the URL of the broker the replicas join (brokers.Dial); empty
	// joins them through one bus.Local.
	Bus string
	// BusOptions apply to every replica's bus, after the defaults: quick
	// reconnects, and no log.
	BusOptions []bus.Option
	// SharedState gives the replicas one server.WithSharedState: each
	// opens the state of the Bus URL (brokers.OpenState), or all share one
	// bus.LocalState, so that what is switched on and off agrees.
	SharedState bool
	// Tasks gives every replica a server.WithTaskStore that all of them
	// reach, as replicas behind a balancer need: a task created through
	// one is polled, answered, cancelled and followed through any other.
	// Each opens the task store of the Bus URL (brokers.OpenTasks), or all
	// share one bus.LocalTasks when Bus is empty.
	Tasks bool
	// Secret is the key every replica shares (default a fixed test key).
	Secret []byte
	// Server options apply to every replica, after WithBus, WithSecret
	// and a discarding logger (and the shared state and task store).
	Server []server.Option
	// ReplicaServer, when set, gives options for one replica alone, after
	// Server: a middleware that knows which replica it runs on, say. It
	// is called before the replica's server exists; r has its Name, Bus
	// and Faults.
	ReplicaServer func(r *Replica) []server.Option
	// Setup registers what a replica serves, before it serves anything.
	Setup func(r *Replica) error
}

// Cluster is a set of running replicas.
type Cluster struct {
	t        testing.TB
	Replicas []*Replica
}

// Replica is one server of a cluster.
type Replica struct {
	// Name is "A", "B", ... in the order of Cluster.Replicas.
	Name   string
	Server *server.Server
	Bus    bus.Bus
	// Faults breaks what this replica sends on the bus, on purpose.
	Faults *bustest.Faulty

	hs       *httptest.Server
	killOnce sync.Once
	killErr  error
}

// Start runs a cluster and stops it when t ends. It returns once every
// replica has heard from every other, and has received everything the
// others published while they started: tests begin from quiet.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Replicas <= 0 {
		opts.Replicas = 3
	}
	if opts.Secret == nil {
		opts.Secret = []byte("clustertest: the replicas' shared key, 32 bytes or more")
	}
	bopts := append([]bus.Option{bus.WithBackoff(5*time.Millisecond, 100*time.Millisecond),
		bus.WithLogger(slog.New(slog.DiscardHandler)), bus.WithSecret(opts.Secret)}, opts.BusOptions...)
	var local *bus.Local
	var localState *bus.LocalState
	var localTasks *bus.LocalTasks
	if opts.Bus == "" {
		local, localState, localTasks = bus.NewLocal(), bus.NewLocalState(), bus.NewLocalTasks()
	}
	c := &Cluster{t: t}
	for i := range opts.Replicas {
		var conn bus.Conn
		if local != nil {
			conn = local.Conn()
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), Wait)
			var err error
			conn, err = brokers.Dial(ctx, opts.Bus, bopts...)
			cancel()
			if err != nil {
				t.Fatalf("clustertest: replica %d: %v", i, err)
			}
		}
		r := &Replica{Name: string(rune('A' + i)), Faults: bustest.Wrap(conn)}
		r.Bus = bus.New(r.Faults, bopts...)
		sopts := []server.Option{server.WithBus(r.Bus), server.WithSecret(opts.Secret), server.WithLogger(slog.New(slog.DiscardHandler))}
		// Until the server takes them (and closes them at Shutdown), what
		// is opened for the replica is closed here if it cannot start.
		opened := []io.Closer{r.Bus}
		fail := func(err error) {
			t.Helper()
			for _, c := range slices.Backward(opened) {
				_ = c.Close()
			}
			t.Fatalf("clustertest: replica %s: %v", r.Name, err)
		}
		if opts.SharedState {
			st, err := openState(opts.Bus, localState)
			if err != nil {
				fail(err)
			}
			opened = append(opened, st)
			sopts = append(sopts, server.WithSharedState(st))
		}
		if opts.Tasks {
			ts, err := openTasks(opts.Bus, localTasks)
			if err != nil {
				fail(err)
			}
			// A shared LocalTasks closes to nothing, so when one replica
			// is killed (its server closes its store) the others keep
			// their tasks.
			sopts = append(sopts, server.WithTaskStore(ts))
		}
		sopts = append(sopts, opts.Server...)
		if opts.ReplicaServer != nil {
			sopts = append(sopts, opts.ReplicaServer(r)...)
		}
		r.Server = server.New(mcp.Implementation{Name: "replica-" + r.Name, Version: "1"}, sopts...)
		t.Cleanup(func() {
			if err := r.Kill(); err != nil {
				t.Errorf("clustertest: replica %s: %v", r.Name, err)
			}
		})
		if opts.Setup != nil {
			if err := opts.Setup(r); err != nil {
				t.Fatalf("clustertest: replica %s: setup: %v", r.Name, err)
			}
		}
		if opts.SharedState {
			ctx, cancel := context.WithTimeout(context.Background(), Wait)
			err := r.Server.SyncState(ctx)
			cancel()
			if err != nil {
				t.Fatalf("clustertest: replica %s: %v", r.Name, err)
			}
		}
		mux := http.NewServeMux()
		mux.Handle("/mcp", streamhttp.New(r.Server, streamhttp.WithLogger(slog.New(slog.DiscardHandler)),
			streamhttp.WithPrincipal(func(req *http.Request) string { return req.Header.Get(PrincipalHeader) })))
		r.hs = httptest.NewServer(mux)
		c.Replicas = append(c.Replicas, r)
	}
	c.WaitPeers()
	Settle(t, c.servers()...)
	return c
}

// openState opens the shared state of the broker at url, or returns
// local when url is empty.
func openState(url string, local *bus.LocalState) (bus.State, error) {
	if url == "" {
		return local, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	st, err := brokers.OpenState(ctx, url, bus.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, fmt.Errorf("shared state: %w", err)
	}
	return st, nil
}

// openTasks opens the task store of the broker at url, or returns local
// when url is empty.
func openTasks(url string, local *bus.LocalTasks) (bus.TaskStore, error) {
	if url == "" {
		return local, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), Wait)
	defer cancel()
	ts, err := brokers.OpenTasks(ctx, url, bus.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, fmt.Errorf("task store: %w", err)
	}
	return ts, nil
}

func (c *Cluster) servers() []*server.Server {
	s := make([]*server.Server, len(c.Replicas))
	for i, r := range c.Replicas {
		s[i] = r.Server
	}
	return s
}

// Upstreams returns the replicas' base URLs, http://host:port, for a
// balancer; each serves at /mcp.
func (c *Cluster) Upstreams() []string {
	u := make([]string, len(c.Replicas))
	for i, r := range c.Replicas {
		u[i] = r.URL()
	}
	return u
}

// WaitPeers waits until every replica has heard from every other.
func (c *Cluster) WaitPeers() {
	c.t.Helper()
	for _, r := range c.Replicas {
		WaitFor(c.t, "replica "+r.Name+" to hear its peers", func() bool { return r.Bus.Stats().Peers >= len(c.Replicas)-1 })
	}
}

// ListenCounts returns how many listens each replica has open.
func (c *Cluster) ListenCounts() []int {
	n := make([]int, len(c.Replicas))
	for i, r := range c.Replicas {
		n[i] = r.Listens()
	}
	return n
}

// URL is the replica's base URL, http://host:port; it serves at /mcp.
func (r *Replica) URL() string { return r.hs.URL }

// Listens returns how many listens the replica has open.
func (r *Replica) Listens() int { return engine.Of(r.Server).Hub().Len() }

// Kill ends the replica as a crash would: every connection to it is cut
// at once, so its clients see their streams break rather than end, and
// new connections are refused; then its server and bus are shut down,
// so that nothing of it is left running. Kill may be called more than
// once; the cluster's cleanup calls it for every replica.
func (r *Replica) Kill() error {
	r.killOnce.Do(func() {
		if r.hs != nil {
			r.hs.CloseClientConnections()
			r.hs.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), Wait)
		defer cancel()
		if err := r.Server.Shutdown(ctx); err != nil {
			r.killErr = fmt.Errorf("shutdown: %w", err)
		}
	})
	return r.killErr
}

// Settle waits until what the given servers published on their bus so
// far has reached every other: each publishes a change nobody else does,
// and a server that has received every other's has received all they
// published before it (a bus keeps each sender's order, and a loss is
// re-notified to listeners not yet open). Tests that count notifications
// then start from quiet.
func Settle(t testing.TB, srvs ...*server.Server) {
	t.Helper()
	marker := func(i int) string { return fmt.Sprintf("settle://%d", i) }
	subs := make([]*hub.Subscription, len(srvs))
	for i, s := range srvs {
		var uris []string
		for j := range srvs {
			if j != i {
				uris = append(uris, marker(j))
			}
		}
		sub, err := engine.Of(s).Hub().Subscribe(hub.Filter{URIs: uris})
		if err != nil {
			t.Fatalf("clustertest: settle: %v", err)
		}
		defer sub.Close()
		subs[i] = sub
	}
	for i, s := range srvs {
		s.ResourceUpdated(marker(i))
	}
	deadline := time.NewTimer(Wait)
	defer deadline.Stop()
	for i, sub := range subs {
		heard := map[string]bool{}
		for len(heard) < len(srvs)-1 {
			select {
			case <-sub.Wake():
			case <-deadline.C:
				t.Fatalf("clustertest: server %d heard only %v of its peers' changes in %v", i, heard, Wait)
			}
			_, uris := sub.Take(nil)
			for _, u := range uris {
				heard[u] = true
			}
		}
	}
}

// WaitFor polls cond until it holds, or fails the test after Wait.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, Wait, what, cond)
}
