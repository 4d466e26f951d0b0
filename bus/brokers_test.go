package bus_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"

	"tidings/bus"
)

// broker is a message broker a test can take down and bring back.
type broker interface {
	// conn dials a new connection to it.
	conn(t testing.TB, opts ...bus.Option) bus.Conn
	// down takes it down and up brings it back on the same address; a
	// bus without a broker server (real false) does nothing.
	down()
	up()
	real() bool
}

// kind is one bus implementation the tests run over.
type kind struct {
	name string
	new  func(t testing.TB) broker
}

// kinds are the buses every cross-replica test runs over.
var kinds = []kind{
	{"local", func(testing.TB) broker { return localBroker{bus.NewLocal()} }},
	{"nats", func(t testing.TB) broker { return startNATS(t) }},
	{"redis", func(t testing.TB) broker { return startRedis(t) }},
}

// forEachBus runs fn once per bus kind, each with a broker of its own.
func forEachBus(t *testing.T, fn func(t *testing.T, br broker)) {
	for _, k := range kinds {
		t.Run(k.name, func(t *testing.T) { fn(t, k.new(t)) })
	}
}

type localBroker struct{ l *bus.Local }

func (b localBroker) conn(testing.TB, ...bus.Option) bus.Conn { return b.l.Conn() }
func (localBroker) down()                                     {}
func (localBroker) up()                                       {}
func (localBroker) real() bool                                { return false }

// natsBroker is a NATS server run in the test process on a loopback port.
type natsBroker struct {
	t    testing.TB
	mu   sync.Mutex
	port int
	srv  *natsserver.Server
}

func startNATS(t testing.TB) *natsBroker {
	b := &natsBroker{t: t, port: natsserver.RANDOM_PORT}
	b.up()
	t.Cleanup(b.down)
	return b
}

func (b *natsBroker) up() {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: b.port, NoLog: true, NoSigs: true})
	if err != nil {
		b.t.Fatalf("nats server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		s.WaitForShutdown()
		b.t.Fatalf("nats server on port %d did not start", b.port)
	}
	b.srv, b.port = s, s.Addr().(*net.TCPAddr).Port
}

func (b *natsBroker) down() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
		b.srv = nil
	}
}

func (b *natsBroker) url() string { return fmt.Sprintf("nats://127.0.0.1:%d/tidings.test", b.port) }

func (b *natsBroker) conn(t testing.TB, opts ...bus.Option) bus.Conn { return dial(t, b.url(), opts) }
func (*natsBroker) real() bool                                       { return true }

// redisBroker is a redis-server process on a loopback port, persisting
// nothing.
type redisBroker struct {
	t    testing.TB
	path string
	dir  string
	mu   sync.Mutex
	port int
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan struct{} // closed when cmd has exited
}

// startRedis starts redis-server, or skips the test when it is not
// installed, unless TIDINGS_REDIS=1 says it must be.
func startRedis(t testing.TB) *redisBroker {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("TIDINGS_REDIS") == "1" {
			t.Fatalf("TIDINGS_REDIS=1 but redis-server is not installed: %v", err)
		}
		t.Skip("redis-server is not installed (apt-get install redis-server); TIDINGS_REDIS=1 makes this a failure")
	}
	b := &redisBroker{t: t, path: path, dir: t.TempDir()}
	for try := 0; ; try++ {
		b.port = freePort(t)
		err := b.run()
		if err == nil {
			break
		}
		if try == 2 {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		b.down()
		// After a run of failed dials, go-redis probes the server from a
		// goroutine of its own, which ends within a second of its client's
		// Close (it sleeps a second between probes).
		waitFor(t, "go-redis's dial probes to end", func() bool {
			buf := make([]byte, 1<<20)
			return !bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("(*ConnPool).tryDial"))
		})
	})
	return b
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// run starts the server on b.port and waits until it answers a PING.
func (b *redisBroker) run() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := &bytes.Buffer{}
	cmd := exec.Command(b.path, "--port", strconv.Itoa(b.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", b.dir, "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if pong(b.port) {
			b.cmd, b.out, b.done = cmd, out, done
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited: %s", b.port, out)
		case <-time.After(10 * time.Millisecond):
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

func (b *redisBroker) up() {
	if err := b.run(); err != nil {
		b.t.Fatal(err)
	}
}

// down kills the server, as a crash would.
func (b *redisBroker) down() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.cmd != nil {
		_ = b.cmd.Process.Kill()
		<-b.done
		b.cmd = nil
	}
}

func (b *redisBroker) url() string {
	return fmt.Sprintf("redis://127.0.0.1:%d/0?channel=tidings-test", b.port)
}

func (b *redisBroker) conn(t testing.TB, opts ...bus.Option) bus.Conn { return dial(t, b.url(), opts) }
func (*redisBroker) real() bool                                       { return true }

func dial(t testing.TB, url string, opts []bus.Option) bus.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := bus.Dial(ctx, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
