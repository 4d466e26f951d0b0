//go:build unix

package testlb

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// startTimeout bounds how long nginx may take to answer after start or
	// reload.
	startTimeout = 15 * time.Second
	// pollInterval is how often readiness is checked.
	pollInterval = 20 * time.Millisecond
	// portAttempts is how many free ports are tried when another process
	// takes the one picked before nginx binds it.
	portAttempts = 5
	// quitGrace is how long Stop waits for a graceful shutdown before it
	// kills; the configuration ends open streams after one second.
	quitGrace = 5 * time.Second
	// probePath answers the configuration's generation, without going
	// upstream: it tells that nginx is up, and that a reload took effect.
	probePath = "/.testlb/generation"
)

// errAddrInUse says that the port picked for nginx was taken first.
var errAddrInUse = errors.New("address already in use")

// nginxBinary finds nginx on PATH or where Debian installs it (not on a
// normal user's PATH).
func nginxBinary() (string, error) {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, nil
	}
	const debian = "/usr/sbin/nginx"
	if fi, err := os.Stat(debian); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
		return debian, nil
	}
	return "", errors.New("nginx is not installed (not on PATH, nor in /usr/sbin)")
}

// nginxLB is nginx running as a child process, the master of one worker,
// in a process group of its own so that the worker can be killed with it.
type nginxLB struct {
	bin    string
	dir    string
	ownDir bool   // dir was made by RunNginx and is removed by stop
	listen string // host:port nginx listens on
	nonce  string // tells this nginx's probe answers from anyone else's
	user   string // the user directive, or "" when not running as root

	mu         sync.Mutex
	generation int      // of the configuration last written
	hosts      []string // of the configuration last written
	worker     int      // pid of the worker serving the current generation

	reconfiguring atomic.Bool

	cmd      *exec.Cmd
	exited   chan struct{} // closed once the master has been waited for
	waitErr  error         // valid after exited
	stopOnce sync.Once
}

// RunNginx runs nginx in front of upstreams (http://host:port addresses)
// and returns once it answers. Stop it with [LB.Stop]. It is the
// non-test form of [StartNginx], for commands that run a balancer.
func RunNginx(opts Options, upstreams ...string) (*LB, error) {
	hosts, err := parseUpstreams(upstreams)
	if err != nil {
		return nil, err
	}
	bin, err := nginxBinary()
	if err != nil {
		return nil, fmt.Errorf("testlb: %w", err)
	}
	host, port, err := net.SplitHostPort(opts.addr())
	if err != nil {
		return nil, fmt.Errorf("testlb: nginx address %q: %w", opts.addr(), err)
	}
	n := &nginxLB{bin: bin, dir: opts.Dir, nonce: rand.Text(), generation: 1, hosts: hosts}
	if n.dir == "" {
		if n.dir, err = os.MkdirTemp("", "testlb-nginx-"); err != nil {
			return nil, fmt.Errorf("testlb: nginx directory: %w", err)
		}
		n.ownDir = true
	} else if n.dir, err = filepath.Abs(n.dir); err != nil {
		return nil, fmt.Errorf("testlb: nginx directory: %w", err)
	}
	// nginx makes its temporary directories, but not their parent.
	if err := os.MkdirAll(n.path("tmp"), 0o700); err != nil {
		n.cleanDir()
		return nil, fmt.Errorf("testlb: nginx directory: %w", err)
	}
	if n.user, err = userDirective(); err != nil {
		n.cleanDir()
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		p := port
		if p == "0" {
			if p, err = freePort(host); err != nil {
				n.cleanDir()
				return nil, err
			}
		}
		n.listen = net.JoinHostPort(host, p)
		err = n.start()
		if err == nil {
			break
		}
		// Another process may bind the picked port between our probe and
		// nginx's bind: pick another.
		if !errors.Is(err, errAddrInUse) || port != "0" || attempt == portAttempts {
			n.cleanDir()
			return nil, fmt.Errorf("testlb: nginx on %s: %w", n.listen, err)
		}
	}
	return &LB{kind: "nginx", url: "http://" + n.listen, b: n}, nil
}

// userDirective returns the user directive for the configuration: as root,
// nginx would run its worker as nobody, who cannot write the temporary
// directory, so the worker keeps the current user; otherwise nginx ignores
// the directive (with a warning), so none is written.
func userDirective() (string, error) {
	if os.Geteuid() != 0 {
		return "", nil
	}
	u, err := user.Current()
	if err != nil {
		return "", fmt.Errorf("testlb: nginx user: %w", err)
	}
	g, err := user.LookupGroupId(u.Gid)
	if err != nil {
		return "", fmt.Errorf("testlb: nginx group: %w", err)
	}
	return fmt.Sprintf("user %s %s;\n", u.Username, g.Name), nil
}

// freePort returns a port on host that was free a moment ago.
func freePort(host string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("testlb: picking a port: %w", err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	if err := ln.Close(); err != nil {
		return "", fmt.Errorf("testlb: picking a port: %w", err)
	}
	return port, nil
}

func (n *nginxLB) path(name string) string { return filepath.Join(n.dir, name) }

// start writes the configuration, starts nginx and waits until it
// answers. When nginx exits first, its logs tell why; a port taken before
// nginx could bind it is errAddrInUse.
func (n *nginxLB) start() error {
	n.mu.Lock()
	conf := n.config(n.generation, n.hosts)
	gen := n.generation
	n.mu.Unlock()
	if err := n.writeConfig(conf); err != nil {
		return err
	}
	// Logs of an earlier attempt would make its failure this one's.
	for _, f := range []string{"error.log", "stderr.log"} {
		if err := os.Remove(n.path(f)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing the old %s: %w", f, err)
		}
	}
	out, err := os.Create(n.path("stderr.log"))
	if err != nil {
		return fmt.Errorf("creating stderr.log: %w", err)
	}
	cmd := exec.Command(n.bin, "-p", n.dir+"/", "-c", n.path("nginx.conf"), "-g", "daemon off;")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	_ = out.Close() // the child has its own copy
	if err != nil {
		return fmt.Errorf("starting %s: %w", n.bin, err)
	}
	n.cmd, n.exited = cmd, make(chan struct{})
	go func() {
		n.waitErr = cmd.Wait()
		close(n.exited)
	}()
	worker, err := n.await(gen)
	if err != nil {
		n.terminate(true)
		log := n.errorLog()
		if strings.Contains(log, "Address already in use") {
			return errAddrInUse
		}
		return fmt.Errorf("%w; nginx logged:\n%s", err, log)
	}
	n.mu.Lock()
	n.worker = worker
	n.mu.Unlock()
	return nil
}

// writeConfig replaces nginx.conf in one step, so that a reload never
// reads half a file.
func (n *nginxLB) writeConfig(conf string) error {
	tmp, err := os.CreateTemp(n.dir, "nginx.conf.*")
	if err != nil {
		return fmt.Errorf("writing the configuration: %w", err)
	}
	_, err = io.WriteString(tmp, conf)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), n.path("nginx.conf"))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing the configuration: %w", err)
	}
	return nil
}

// config renders the configuration of generation gen with upstreams hosts.
// Every path is in n.dir, so nginx needs nothing of the system's set-up.
func (n *nginxLB) config(gen int, hosts []string) string {
	var servers strings.Builder
	for _, h := range hosts {
		fmt.Fprintf(&servers, "\t\tserver %s;\n", h)
	}
	tmp := n.path("tmp")
	return fmt.Sprintf(`# Written by tidings/internal/testrig/testlb.
%[1]sworker_processes 1;
# Graceful shutdowns and reloads end open streams after a second.
worker_shutdown_timeout 1s;
pid %[2]s;
error_log %[3]s notice;

events {
	worker_connections 1024;
}

http {
	access_log %[4]s;
	default_type text/plain;
	client_body_temp_path %[5]s/client_body;
	proxy_temp_path %[5]s/proxy;
	fastcgi_temp_path %[5]s/fastcgi;
	uwsgi_temp_path %[5]s/uwsgi;
	scgi_temp_path %[5]s/scgi;

	# Round robin (nginx's default) over the replicas, with keep-alive
	# connections to them. A replica that refuses a connection is
	# skipped for the request (proxy_next_upstream error, the default)
	# and left out for ten seconds (max_fails=1 fail_timeout=10s).
	upstream replicas {
%[6]s		keepalive 16;
	}

	server {
		listen %[7]s;

		location = %[8]s {
			return 200 "%[9]s %[10]d $pid\n";
		}

		location / {
			proxy_pass http://replicas;
			# HTTP/1.1 with an empty Connection header keeps upstream
			# connections alive.
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_set_header Host $host;
			# Events pass on as they come.
			proxy_buffering off;
			# The whole request body is read before it goes upstream
			# (the default, written out since streamhttp relies on it).
			proxy_request_buffering on;
			client_max_body_size 4m;
			# Listens last; an idle one hears a keep-alive within twice
			# the server's interval.
			proxy_read_timeout 1h;
			proxy_send_timeout 1h;
		}
	}
}
`, n.user, n.path("nginx.pid"), n.path("error.log"), n.path("access.log"), tmp,
		servers.String(), n.listen, probePath, n.nonce, gen)
}

// await polls the probe until this nginx answers generation gen, or
// nginx exits, or startTimeout passes, and returns the pid of the worker
// that answered. Each probe uses a new connection, which after a reload
// the new worker may accept (the old one does too, until it is told to
// shut down).
func (n *nginxLB) await(gen int) (worker int, err error) {
	want := fmt.Sprintf("%s %d ", n.nonce, gen)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: time.Second}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		got, err := probe(ctx, client, "http://"+n.listen+probePath)
		if err == nil {
			pid, ok := strings.CutPrefix(strings.TrimSuffix(got, "\n"), want)
			if worker, perr := strconv.Atoi(pid); ok && perr == nil {
				return worker, nil
			}
			err = fmt.Errorf("probe answered %q, want %q and a pid", got, want)
		}
		select {
		case <-n.exited:
			return 0, fmt.Errorf("nginx exited: %v", n.waitErr)
		case <-ctx.Done():
			return 0, fmt.Errorf("nginx did not answer generation %d within %v: %w", gen, startTimeout, err)
		case <-tick.C:
		}
	}
}

// awaitExit polls until process pid, an old worker, is gone, so that no
// connection reaches the old configuration any more: after a reload an
// old worker accepts connections until it is told to shut down, and then
// ends within worker_shutdown_timeout.
func (n *nginxLB) awaitExit(pid int) error {
	deadline := time.Now().Add(startTimeout)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		// Signal 0 only asks whether the process exists; the master reaps
		// its workers at once.
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the old worker %d still runs after %v", pid, startTimeout)
		}
		select {
		case <-n.exited:
			return fmt.Errorf("nginx exited: %v", n.waitErr)
		case <-tick.C:
		}
	}
}

// probe GETs url and returns the body of a 200 answer.
func probe(ctx context.Context, client *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("probe: status %d", resp.StatusCode)
	}
	return string(body), nil
}

// setUpstreams writes the next generation of the configuration, has nginx
// reload it (SIGHUP), and waits until the new worker answers and the old
// one is gone, so that every new connection is served by the new set.
func (n *nginxLB) setUpstreams(hosts []string) error {
	if !n.reconfiguring.CompareAndSwap(false, true) {
		return errors.New("another SetUpstreams is under way")
	}
	defer n.reconfiguring.Store(false)
	n.mu.Lock()
	n.generation++
	n.hosts = hosts
	gen, conf := n.generation, n.config(n.generation, hosts)
	n.mu.Unlock()
	if err := n.writeConfig(conf); err != nil {
		return err
	}
	if err := n.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	worker, err := n.await(gen)
	if err != nil {
		return fmt.Errorf("reload: %w", err)
	}
	n.mu.Lock()
	old := n.worker
	n.worker = worker
	n.mu.Unlock()
	if old != worker {
		if err := n.awaitExit(old); err != nil {
			return fmt.Errorf("reload: %w", err)
		}
	}
	return nil
}

// stop ends nginx once and for all, and removes the directory if
// RunNginx made it.
func (n *nginxLB) stop(kill bool) {
	n.stopOnce.Do(func() {
		n.terminate(kill)
		n.cleanDir()
	})
}

// terminate ends the running nginx: SIGQUIT and a grace period unless
// kill, then SIGKILL to the whole process group (the worker outlives a
// killed master); it returns once the master has been waited for.
func (n *nginxLB) terminate(kill bool) {
	if !kill {
		_ = n.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-n.exited:
		case <-time.After(quitGrace):
		}
	}
	select {
	case <-n.exited:
		// A master that quit took its worker with it.
	default:
		// The group is nginx's alone while its leader, the master, is not
		// yet waited for.
		if err := syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL); err != nil {
			_ = n.cmd.Process.Kill()
		}
	}
	<-n.exited
}

// cleanDir removes the directory if RunNginx made it.
func (n *nginxLB) cleanDir() {
	if n.ownDir {
		_ = os.RemoveAll(n.dir)
	}
}

func (n *nginxLB) done() <-chan struct{} { return n.exited }

// errorLog returns nginx's standard error and error log. Once Stop has
// removed a directory of RunNginx's own, nothing is left to read.
func (n *nginxLB) errorLog() string {
	var b strings.Builder
	for _, f := range []string{"stderr.log", "error.log"} {
		data, err := os.ReadFile(n.path(f))
		if err != nil || len(data) == 0 {
			continue
		}
		fmt.Fprintf(&b, "== %s\n%s", f, data)
		if data[len(data)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	return b.String()
}
