// Package testbroker runs real message brokers for tests: a NATS server
// (with JetStream) inside the test process and a redis-server process,
// each on a loopback port, each of which a test can take down and bring
// back on the same address, as an outage would. The tests of the bus, of
// shared state and of the serve command use them, so that they run
// against the brokers a deployment uses, not a stand-in.
package testbroker

import (
	"bufio"
	"bytes"
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
)

// startWait bounds how long a broker may take to start.
const startWait = 10 * time.Second

// Broker is a broker a test can take down and bring back.
type Broker interface {
	// URL is what bus.Open, bus.OpenState and bus.OpenTasks dial to reach it.
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

// Redis is a redis-server process on a loopback port. It appends every
// write to a file in a directory of the test's own before answering, so
// that what it held survives Down (a kill) and Up, as a deployment's
// persistent Redis does.
type Redis struct {
	t    testing.TB
	path string
	dir  string
	mu   sync.Mutex
	port int
	cmd  *exec.Cmd
	out  *bytes.Buffer
	done chan struct{} // closed when cmd has exited
}

// StartRedis starts redis-server, or skips the test when it is not
// installed, unless TIDINGS_REDIS=1 says it must be. It is killed when
// the test ends.
func StartRedis(t testing.TB) *Redis {
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("TIDINGS_REDIS") == "1" {
			t.Fatalf("TIDINGS_REDIS=1 but redis-server is not installed: %v", err)
		}
		t.Skip("redis-server is not installed (apt-get install redis-server); TIDINGS_REDIS=1 makes this a failure")
	}
	b := &Redis{t: t, path: path, dir: t.TempDir()}
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
	t.Cleanup(func() {
		b.Down()
		// After a run of failed dials, go-redis probes the server from a
		// goroutine of its own, which ends within a second of its client's
		// Close (it sleeps a second between probes).
		WaitFor(t, "go-redis's dial probes to end", func() bool {
			buf := make([]byte, 1<<20)
			return !bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("(*ConnPool).tryDial"))
		})
	})
	return b
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
	cmd := exec.Command(b.path, "--port", strconv.Itoa(b.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", b.dir, "--loglevel", "warning")
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
