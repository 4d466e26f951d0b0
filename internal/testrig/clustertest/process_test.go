package clustertest_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tidings/bus"
	"tidings/bus/brokers"
	"tidings/client"
	"tidings/internal/testrig/clustertest"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// This file runs replicas as processes of their own — this test binary
// started again, told by its environment to be a replica — so that a
// test can kill one with SIGKILL, as an orchestrator or the kernel's
// OOM killer does: no Shutdown runs, nothing is settled, its connections
// to the broker and to the balancer just go.

// The environment of a replica process.
const (
	replicaEnv      = "TIDINGS_CLUSTERTEST_REPLICA" // its name; set only in a replica
	replicaBusEnv   = "TIDINGS_CLUSTERTEST_BUS"     // the broker's URL
	replicaLeaseEnv = "TIDINGS_CLUSTERTEST_LEASE"   // its tasks' lease (server.WithTaskLease)
)

// processSecret is the secret the replica processes share.
const processSecret = "clustertest: the replica processes' shared key, 32 bytes or more"

// processPoll is the poll interval the replica processes suggest, and
// the one their runners re-read tasks at.
const processPoll = 200 * time.Millisecond

// replicaMain is a replica process: a server joined to the bus and the
// task store of the broker its environment names, serving over HTTP on a
// loopback port a tool "job" that runs as a task until it is stopped. It
// prints "listening <url>" once it serves, and "started <task id>" as the
// work of each task starts; it shuts down when its standard input
// closes (the test is done with it, or has died). It returns the exit
// code.
func replicaMain() int {
	name, url := os.Getenv(replicaEnv), os.Getenv(replicaBusEnv)
	lease, err := time.ParseDuration(os.Getenv(replicaLeaseEnv))
	if err != nil {
		fmt.Fprintf(os.Stderr, "replica %s: %s: %v\n", name, replicaLeaseEnv, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("replica", name)
	quiet := bus.WithLogger(slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Wait)
	defer cancel()
	conn, err := brokers.Dial(ctx, url, quiet, bus.WithBackoff(5*time.Millisecond, 100*time.Millisecond))
	if err != nil {
		log.Error("bus", "err", err)
		return 1
	}
	b := bus.New(conn, quiet)
	ts, err := brokers.OpenTasks(ctx, url, quiet)
	if err != nil {
		_ = b.Close()
		log.Error("task store", "err", err)
		return 1
	}
	srv := server.New(mcp.Implementation{Name: "replica-" + name, Version: "1"}, server.WithBus(b), server.WithTaskStore(ts),
		server.WithSecret([]byte(processSecret)), server.WithTaskLease(lease), server.WithTaskPollInterval(processPoll),
		server.WithLogger(log))
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	err = srv.AddTool(mcp.Tool{Name: "job"}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return req.RunAsTask(ctx, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			say("started %s", req.TaskID())
			<-ctx.Done()
			return nil, context.Cause(ctx)
		})
	})
	if err != nil {
		log.Error("tool", "err", err)
		return 1
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Error("listen", "err", err)
		return 1
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", streamhttp.New(srv, streamhttp.WithLogger(log),
		streamhttp.WithPrincipal(func(req *http.Request) string { return req.Header.Get(clustertest.PrincipalHeader) })))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: clustertest.Wait}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()
	say("listening http://%s", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	ctx, cancel = context.WithTimeout(context.Background(), clustertest.Wait)
	defer cancel()
	code := 0
	if err := srv.Shutdown(ctx); err != nil {
		log.Error("shutdown", "err", err)
		code = 1
	}
	if err := hs.Shutdown(ctx); err != nil {
		log.Error("http shutdown", "err", err)
		code = 1
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		log.Error("serve", "err", err)
		code = 1
	}
	return code
}

// process is a replica running as a process of its own.
type process struct {
	name   string
	url    string // http://host:port, serving at /mcp
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *syncBuffer
	exited chan struct{} // closed once its output is read and it has been waited for
}

// startProcess starts replica name on the broker at busURL, with tasks
// leased for lease, and returns once it serves. Each task whose work
// starts there is told on started, as the task's id and the replica.
// The process is stopped when t ends, gently (its standard input
// closed) unless it was killed first.
func startProcess(t *testing.T, name, busURL string, lease time.Duration, started chan<- [2]string) *process {
	t.Helper()
	p := &process{name: name, stderr: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(), replicaEnv+"="+name, replicaBusEnv+"="+busURL, replicaLeaseEnv+"="+lease.String())
	p.cmd.Stderr = p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("replica %s: %v", name, err)
	}
	listening := make(chan string, 1)
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			switch line := sc.Text(); {
			case strings.HasPrefix(line, "listening "):
				listening <- strings.TrimPrefix(line, "listening ")
			case strings.HasPrefix(line, "started "):
				select {
				case started <- [2]string{strings.TrimPrefix(line, "started "), name}:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		_ = p.cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = p.stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(clustertest.Wait):
			t.Errorf("replica %s did not stop when told to; killed", name)
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		if log := p.stderr.String(); t.Failed() && log != "" {
			t.Logf("replica %s's log:\n%s", name, log)
		}
	})
	select {
	case p.url = <-listening:
	case <-p.exited:
		t.Fatalf("replica %s exited before it served: %s", name, p.stderr)
	case <-time.After(clustertest.Wait):
		t.Fatalf("replica %s did not serve within %v: %s", name, clustertest.Wait, p.stderr)
	}
	return p
}

// kill sends the replica SIGKILL and waits until it is gone.
func (p *process) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("replica %s: %v", p.name, err)
	}
	select {
	case <-p.exited:
	case <-time.After(clustertest.Wait):
		t.Fatalf("replica %s still runs after SIGKILL", p.name)
	}
}

// syncBuffer is a bytes.Buffer safe for a process's output and a test's
// reading at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// processLease is the task lease of TestTaskRunnerProcessKilled's
// replicas, and lapsedWithin the bound on how long after the runner's
// death its client hears the task failed: the lease, then a read by
// another replica (a listen's at the lease's end, or a poll), on a
// machine that may be busy.
const (
	processLease = time.Second
	lapsedWithin = processLease + 5*time.Second
)

// TestTaskRunnerProcessKilled: the replica running a task is killed with
// SIGKILL, on NATS and on Redis, behind nginx and the Go ReverseProxy.
// Nothing of it settles the task; its lease lapses, and a client's
// CallTool following the task through the balancer — over a listen on
// whichever replica, or polling — returns the task's failure, an error
// saying that the server running it stopped, within lapsedWithin of the
// kill, rather than waiting for the TTL of an hour.
func TestTaskRunnerProcessKilled(t *testing.T) {
	for _, b := range buses() {
		for _, lb := range balancers() {
			t.Run(b.name+"/"+lb.name, func(t *testing.T) {
				br := b.start(t)
				started := make(chan [2]string, 1)
				var procs []*process
				var upstreams []string
				for _, name := range []string{"A", "B", "C"} {
					p := startProcess(t, name, br.URL(), processLease, started)
					procs, upstreams = append(procs, p), append(upstreams, p.url)
				}
				balancer := lb.start(t, upstreams...)
				tr := &http.Transport{MaxIdleConnsPerHost: 4}
				defer tr.CloseIdleConnections()
				c := client.NewHTTP(balancer.URL()+"/mcp", client.WithHTTPClient(&http.Client{Transport: tr}),
					client.WithHeader(clustertest.PrincipalHeader, "alice"), client.WithLogger(slog.New(slog.DiscardHandler)))
				defer c.Close()

				type outcome struct {
					res *mcp.CallToolResult
					err error
				}
				ended := make(chan outcome, 1)
				ctx, cancel := context.WithTimeout(context.Background(), 2*clustertest.Wait)
				defer cancel()
				go func() {
					res, err := c.CallTool(ctx, "job", nil)
					ended <- outcome{res, err}
				}()
				var task [2]string
				select {
				case task = <-started:
				case o := <-ended:
					t.Fatalf("the call ended before its work started: %v, %v", o.res, o.err)
				case <-time.After(clustertest.Wait):
					t.Fatal("no replica started the work")
				}
				// Let the client follow the task a while first: a listen
				// granted, polls answered, leases renewed.
				time.Sleep(2 * processLease)
				select {
				case o := <-ended:
					t.Fatalf("the call ended while its runner lived: %v, %v", o.res, o.err)
				default:
				}
				var runner *process
				for _, p := range procs {
					if p.name == task[1] {
						runner = p
					}
				}
				runner.kill(t)
				killed := time.Now()
				select {
				case o := <-ended:
					took := time.Since(killed)
					t.Logf("task %s ran on %s; its call ended %v after the kill: %v", task[0], task[1], took.Round(time.Millisecond), o.err)
					var rpc *jsonrpc.Error
					if !errors.As(o.err, &rpc) || !strings.Contains(rpc.Message, "the server running the task stopped") {
						t.Errorf("the call ended with %v, %v; want the task's failure, its server having stopped", o.res, o.err)
					}
					if took > lapsedWithin {
						t.Errorf("the call ended %v after the kill, more than %v", took, lapsedWithin)
					}
				case <-time.After(lapsedWithin):
					t.Fatalf("the call still waits on task %s %v after its runner %s was killed", task[0], lapsedWithin, task[1])
				}
			})
		}
	}
}
