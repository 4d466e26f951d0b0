// Package testbroker runs real message brokers for tests: a NATS server
// (with JetStream) inside the test process and a redis-server process,
// each on a loopback port, each of which a test can take down and bring
// back on the same address, as an outage would; a NATS cluster; and a
// Redis primary with two replicas watched by three Sentinels, whose
// primary a test can kill for them to promote a replica. The tests of the bus, of
// shared state and of the serve command use them, so that they run
// against the brokers a deployment uses, not a stand-in.
package testbroker

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
)

// startWait bounds how long a broker may take to start.
const startWait = 10 * time.Second

// Broker is a broker a test can take down and bring back.
type Broker interface {
	// URL is what brokers.Open, brokers.OpenState and brokers.OpenTasks
	// (and natsbus's or redisbus's own) dial to reach it.
	URL() string
	// Down stops it, as a crash would; Up starts it again on the same
	// address, with what it had stored. Down is also run at the end of
	// the test.
	Down()
	Up()
}

// NATS is a NATS server run in the test process on a loopback port, with
// JetStream enabled and its store in a directory of the test's own, so
// that what the key-value store holds survives Down and Up.
type NATS struct {
	t     testing.TB
	store string
	mu    sync.Mutex
	port  int
	srv   *natsserver.Server
}

// StartNATS starts a NATS server; it is shut down when the test ends.
func StartNATS(t testing.TB) *NATS {
	b := &NATS{t: t, port: natsserver.RANDOM_PORT, store: t.TempDir()}
	b.Up()
	t.Cleanup(b.Down)
	return b
}

// Up starts the server (again) on its port.
func (b *NATS) Up() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.srv != nil {
		return
	}
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: b.port, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: b.store})
	if err != nil {
		b.t.Fatalf("nats server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(startWait) {
		s.Shutdown()
		s.WaitForShutdown()
		b.t.Fatalf("nats server on port %d did not start", b.port)
	}
	b.srv, b.port = s, s.Addr().(*net.TCPAddr).Port
}

// Down shuts the server down.
func (b *NATS) Down() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
		b.srv = nil
	}
}

// URL returns nats://127.0.0.1:PORT/tidings.test.
func (b *NATS) URL() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintf("nats://127.0.0.1:%d/tidings.test", b.port)
}

// NATSCluster is a cluster of NATS servers with JetStream, run in the
// test process on loopback ports, for what only shows across servers: a
// stream with replicas, whose followers apply a write after its leader
// has acknowledged it, and a server cut off from the others.
type NATSCluster struct {
	srvs []*natsserver.Server
	// links[i][j] carries server i's routes to server j.
	links [][]*link
}

// StartNATSCluster starts a cluster of n NATS servers and waits until
// JetStream has a leader that sees them all, so that a stream of n
// replicas can be placed at once. It is shut down when the test ends.
//
// Each server reaches each other one through a link of its own, which
// Partition cuts, and only so: every server lists every route, and
// advertises an address that takes no route, so that none connects to
// another by what a third tells it — a connection no link carries, which
// no partition would cut.
func StartNATSCluster(t testing.TB, n int) *NATSCluster {
	t.Helper()
	c := &NATSCluster{links: make([][]*link, n)}
	t.Cleanup(func() {
		for _, s := range c.srvs {
			s.Shutdown()
		}
		for _, s := range c.srvs {
			s.WaitForShutdown()
		}
		for _, ls := range c.links {
			for _, l := range ls {
				if l != nil {
					l.close()
				}
			}
		}
	})
	nowhere := newLink(t) // takes every connection and drops it
	nowhere.point("")
	t.Cleanup(nowhere.close)
	// The links are made first, on ports they hold, and told where they
	// lead once that server listens on a port of its own choosing: no
	// port is picked free and taken later, which another test could take
	// in between.
	for i := range n {
		c.links[i] = make([]*link, n)
		for j := range n {
			if j != i {
				c.links[i][j] = newLink(t)
			}
		}
	}
	for i := range n {
		var routes []*url.URL
		for _, l := range c.links[i] {
			if l != nil {
				routes = append(routes, &url.URL{Scheme: "nats", Host: l.addr()})
			}
		}
		s, err := natsserver.NewServer(&natsserver.Options{ServerName: fmt.Sprintf("n%d", i),
			Host: "127.0.0.1", Port: natsserver.RANDOM_PORT, NoLog: true, NoSigs: true,
			JetStream: true, StoreDir: t.TempDir(),
			Cluster: natsserver.ClusterOpts{Name: "tidings-test", Host: "127.0.0.1", Port: natsserver.RANDOM_PORT,
				Advertise: nowhere.addr()},
			Routes: routes})
		if err != nil {
			t.Fatalf("nats server %d: %v", i, err)
		}
		s.Start()
		c.srvs = append(c.srvs, s)
		if !s.ReadyForConnections(startWait) {
			t.Fatalf("nats server %d did not start", i)
		}
		for j := range n {
			if j != i {
				c.links[j][i].point(s.ClusterAddr().String())
			}
		}
	}
	WaitFor(t, "the NATS cluster to elect a JetStream leader that sees every server", func() bool {
		for _, s := range c.srvs {
			if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == n {
				return true
			}
		}
		return false
	})
	return c
}

// URL returns nats://127.0.0.1:PORT/tidings.test for the i'th server.
func (c *NATSCluster) URL(i int) string {
	return fmt.Sprintf("nats://127.0.0.1:%d/tidings.test", c.srvs[i].Addr().(*net.TCPAddr).Port)
}

// Name is the i'th server's name, as a stream's cluster info gives its
// leader and replicas.
func (c *NATSCluster) Name(i int) string { return c.srvs[i].Name() }

// Serves reports whether the i'th server has a subscription of its own
// to subject itself — of a client of its own or of its own JetStream, not
// one a route told it of, nor a wildcard such as the "$JS.API.>" every
// server with JetStream has — so that it answers a request there by
// itself: a replica that answers direct gets of a stream, for one.
func (c *NATSCluster) Serves(i int, subject string) bool {
	sz, err := c.srvs[i].Subsz(&natsserver.SubszOptions{Subscriptions: true, Test: subject})
	if err != nil {
		return false
	}
	for _, d := range sz.Subs {
		if d.Subject == subject {
			return true
		}
	}
	return false
}

// Partition cuts the i'th server off from the others, for good: its
// routes are closed, and taken again by no link. Its clients stay
// connected to it, and it answers them with what it has.
func (c *NATSCluster) Partition(i int) {
	for j := range c.links {
		if j != i {
			c.links[i][j].cut()
			c.links[j][i].cut()
		}
	}
}

// link is a TCP proxy on a loopback port, to the address it is pointed
// at (or to nowhere, when that is ""), that can be cut. A connection it
// takes before it is pointed anywhere waits.
type link struct {
	l       net.Listener
	to      string        // set once, before pointed is closed
	pointed chan struct{} // closed once to is set
	closed  chan struct{} // closed by close
	mu      sync.Mutex
	isCut   bool
	conns   map[net.Conn]struct{}
	wg      sync.WaitGroup
}

func newLink(t testing.TB) *link {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &link{l: ln, pointed: make(chan struct{}), closed: make(chan struct{}), conns: make(map[net.Conn]struct{})}
	l.wg.Go(l.accept)
	return l
}

// point sets where the link leads; it is called once.
func (l *link) point(to string) {
	l.to = to
	close(l.pointed)
}

func (l *link) addr() string { return l.l.Addr().String() }

func (l *link) accept() {
	for {
		in, err := l.l.Accept()
		if err != nil {
			return // closed
		}
		select {
		case <-l.pointed:
		case <-l.closed:
			in.Close()
			return
		}
		if l.to == "" {
			in.Close()
			continue
		}
		out, err := net.DialTimeout("tcp", l.to, startWait)
		if err != nil {
			in.Close()
			continue
		}
		if !l.track(in, out) {
			in.Close()
			out.Close()
			continue
		}
		for _, p := range [][2]net.Conn{{in, out}, {out, in}} {
			l.wg.Go(func() {
				_, _ = io.Copy(p[1], p[0])
				// One way ended: so does the connection, both ways.
				p[0].Close()
				p[1].Close()
				l.mu.Lock()
				delete(l.conns, p[0])
				delete(l.conns, p[1])
				l.mu.Unlock()
			})
		}
	}
}

// track records a connection's two ends, unless the link is cut.
func (l *link) track(in, out net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isCut {
		return false
	}
	l.conns[in], l.conns[out] = struct{}{}, struct{}{}
	return true
}

// cut closes what the link carries, and whatever it takes from now on.
func (l *link) cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.isCut = true
	for c := range l.conns {
		c.Close()
	}
}

// close cuts the link and stops it taking connections.
func (l *link) close() {
	close(l.closed)
	l.l.Close()
	l.cut()
	l.wg.Wait()
}

// Redis is a redis-server process on a loopback port. It appends every
// write to a file in a directory of the test's own before answering, so
// that what it held survives Down (a kill) and Up, as a deployment's
// persistent Redis does.
type Redis struct {
	t    testing.TB
	path string
	dir  string
	// conf, when not "", is a Sentinel's config file: the server runs as
	// a Sentinel, which keeps nothing but its config.
	conf string
	// extra are more arguments for redis-server (--replicaof, say).
	extra []string
	mu    sync.Mutex
	port  int
	cmd   *exec.Cmd
	out   *bytes.Buffer
	done  chan struct{} // closed when cmd has exited
}

// StartRedis starts redis-server, or skips the test when it is not
// installed, unless TIDINGS_REDIS=1 says it must be. It is killed when
// the test ends.
func StartRedis(t testing.TB) *Redis {
	path := redisServer(t)
	t.Cleanup(func() { waitDialProbes(t) })
	b := startRedis(t, path, t.TempDir(), "")
	t.Cleanup(b.Down)
	return b
}

// redisServer returns the path of redis-server, or skips the test when
// it is not installed, unless TIDINGS_REDIS=1 says it must be.
func redisServer(t testing.TB) string {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("TIDINGS_REDIS") == "1" {
			t.Fatalf("TIDINGS_REDIS=1 but redis-server is not installed: %v", err)
		}
		t.Skip("redis-server is not installed (apt-get install redis-server); TIDINGS_REDIS=1 makes this a failure")
	}
	return path
}

// startRedis starts redis-server at path on a free port, in dir, as a
// Sentinel with conf when that is not "", with extra arguments; the
// caller stops it, before dir is removed: a server still running may
// write there.
func startRedis(t testing.TB, path, dir, conf string, extra ...string) *Redis {
	b := &Redis{t: t, path: path, dir: dir, conf: conf, extra: extra}
	for try := 0; ; try++ {
		b.port = FreePort(t)
		err := b.run()
		if err == nil {
			break
		}
		if try == 2 {
			t.Fatal(err)
		}
	}
	return b
}

// waitDialProbes waits for go-redis's dial probes to end. After a run of
// failed dials, go-redis probes the server from a goroutine of its own,
// which ends within a second of its client's Close (it sleeps a second
// between probes).
func waitDialProbes(t testing.TB) {
	WaitFor(t, "go-redis's dial probes to end", func() bool {
		buf := make([]byte, 1<<20)
		return !bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("(*ConnPool).tryDial"))
	})
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// run starts the server on b.port and waits until it answers a PING.
func (b *Redis) run() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := &bytes.Buffer{}
	var args []string
	if b.conf != "" {
		args = append(args, b.conf, "--sentinel")
	}
	args = append(args, "--port", strconv.Itoa(b.port), "--bind", "127.0.0.1", "--dir", b.dir, "--loglevel", "warning")
	if b.conf == "" {
		args = append(args, "--save", "", "--appendonly", "yes", "--appendfsync", "always")
	}
	cmd := exec.Command(b.path, append(args, b.extra...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(startWait)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		if pong(b.port) {
			b.cmd, b.out, b.done = cmd, out, done
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited: %s", b.port, out)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("redis-server on port %d did not answer: %s", b.port, out)
		}
	}
}

// pong reports whether a Redis server on port answers PING.
func pong(port int) bool {
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "+PONG\r\n"
}

// Up starts the server again on its port.
func (b *Redis) Up() {
	b.mu.Lock()
	running := b.cmd != nil
	b.mu.Unlock()
	if running {
		return
	}
	if err := b.run(); err != nil {
		b.t.Fatal(err)
	}
}

// Down kills the server, as a crash would.
func (b *Redis) Down() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		_ = b.cmd.Process.Kill()
		<-b.done
		b.cmd = nil
	}
}

// URL returns redis://127.0.0.1:PORT/0?channel=tidings-test.
func (b *Redis) URL() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintf("redis://127.0.0.1:%d/0?channel=tidings-test", b.port)
}

// Wait bounds WaitFor; nothing takes this long unless something is broken.
const Wait = 15 * time.Second

// WaitFor polls cond every millisecond until it holds, or fails the test
// after Wait.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(Wait)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", Wait, what)
		case <-tick.C:
		}
	}
}
