// Package brokertest runs real message brokers on loopback for tests of
// several replicas: a NATS server inside the test process and a
// redis-server subprocess. Each can be taken down and brought back on
// the same port, as a broker outage would, and each is stopped when its
// test ends.
package brokertest

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

// wait bounds how long a broker may take to start or a wait may last;
// nothing takes this long unless something is broken.
const wait = 10 * time.Second

// NATS is a NATS server run in the test process on a loopback port.
type NATS struct {
	t    testing.TB
	mu   sync.Mutex
	port int
	srv  *natsserver.Server
}

// StartNATS starts a NATS server on a free loopback port and shuts it
// down when t ends.
func StartNATS(t testing.TB) *NATS {
	t.Helper()
	b := &NATS{t: t, port: natsserver.RANDOM_PORT}
	b.Up()
	t.Cleanup(b.Down)
	return b
}

// Up starts the server again on the port it had (a no-op while it runs).
func (b *NATS) Up() {
	b.t.Helper()
	b.mu.Lock()
	running, port := b.srv != nil, b.port
	b.mu.Unlock()
	if running {
		return
	}
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true})
	if err != nil {
		b.t.Fatalf("brokertest: nats server: %v", err)
	}
	s.Start()
	if !s.ReadyForConnections(wait) {
		s.Shutdown()
		s.WaitForShutdown()
		b.t.Fatalf("brokertest: nats server on port %d did not start", port)
	}
	b.mu.Lock()
	b.srv, b.port = s, s.Addr().(*net.TCPAddr).Port
	b.mu.Unlock()
}

// Down shuts the server down and waits until it has ended.
func (b *NATS) Down() {
	b.mu.Lock()
	s := b.srv
	b.srv = nil
	b.mu.Unlock()
	if s != nil {
		s.Shutdown()
		s.WaitForShutdown()
	}
}

// URL is the bus URL of the server, with a subject of its own.
func (b *NATS) URL() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return fmt.Sprintf("nats://127.0.0.1:%d/tidings.test", b.port)
}

// Redis is a redis-server process on a loopback port that persists
// nothing.
type Redis struct {
	t    testing.TB
	path string
	dir  string
	mu   sync.Mutex
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// StartRedis starts redis-server on a free loopback port and kills it
// when t ends. Without redis-server the test is skipped, unless
// TIDINGS_REDIS=1 says it must run: then it fails.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
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
		// Close (it sleeps a second between probes). The clients of the
		// test were closed before this cleanup, registered first, runs.
		deadline := time.Now().Add(wait)
		for probing() {
			if time.Now().After(deadline) {
				t.Errorf("brokertest: go-redis's dial probes still run %v after the test", wait)
				return
			}
			time.Sleep(5 * time.Millisecond) // polling a condition, with a deadline
		}
	})
	return b
}

// probing reports whether a go-redis dial probe is still running.
func probing() bool {
	buf := make([]byte, 1<<20)
	return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("(*ConnPool).tryDial"))
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// run starts the server on b.port and waits until it answers a PING.
// Only Up and StartRedis call it, one at a time.
func (b *Redis) run() error {
	out := &bytes.Buffer{}
	cmd := exec.Command(b.path, "--port", strconv.Itoa(b.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", b.dir, "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("brokertest: redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	deadline := time.Now().Add(wait)
	for {
		if pong(b.port) {
			b.mu.Lock()
			b.cmd, b.done = cmd, done
			b.mu.Unlock()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("brokertest: redis-server on port %d exited: %s", b.port, out)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			return fmt.Errorf("brokertest: redis-server on port %d did not answer: %s", b.port, out)
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

// Up starts the server again on the port it had (a no-op while it runs).
func (b *Redis) Up() {
	b.t.Helper()
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

// Down kills the server, as a crash would, and waits until it has exited.
// What it held is lost.
func (b *Redis) Down() {
	b.mu.Lock()
	cmd, done := b.cmd, b.done
	b.cmd = nil
	b.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		<-done
	}
}

// Addr is the server's host:port.
func (b *Redis) Addr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return "127.0.0.1:" + strconv.Itoa(b.port)
}

// URL is the bus URL of the server, database 0, with a channel of its
// own.
func (b *Redis) URL() string { return "redis://" + b.Addr() + "/0?channel=tidings-test" }
