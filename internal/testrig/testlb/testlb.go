// Package testlb runs real load balancers in front of several upstream
// servers on loopback, round robin, so that tests can run many replicas of
// a server the way a deployment does: every request may reach another
// replica, and one replica may go away while clients keep working through
// the others.
//
// Two balancers are offered, set up as the streamhttp package documents
// ("Behind a proxy"):
//
//   - nginx ([StartNginx], [RunNginx]), run as a subprocess with a
//     configuration of its own in a temporary directory: no daemon, one
//     worker, upstream keep-alive, proxy_buffering off so that events pass
//     at once, the request body read whole before it goes upstream, and a
//     read timeout of an hour so that listens last.
//   - Go's [httputil.ReverseProxy] ([StartReverseProxy],
//     [RunReverseProxy]), run from a handler that enables full duplex,
//     with FlushInterval -1 and a Transport that keeps enough idle
//     connections per upstream.
//
// Both pass a request on to the next upstream when one refuses the
// connection (nginx by its proxy_next_upstream default; the Go proxy
// buffers request bodies up to 4 MiB so that it can send them again), so
// a test can kill a replica and go on. [LB.SetUpstreams] changes the set
// while the balancer runs.
package testlb

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"
)

// LB is a running load balancer. Its methods are safe for concurrent use,
// except that calls of SetUpstreams must not overlap one another.
type LB struct {
	kind string // "nginx" or "goproxy", for messages
	url  string
	b    balancer
}

// balancer is what each kind of LB implements.
type balancer interface {
	// setUpstreams replaces the upstream set (host:port addresses, at
	// least one) and returns once new requests use it.
	setUpstreams(hosts []string) error
	// stop ends the balancer and waits until it has ended: gracefully
	// first, unless kill, then by force. It may be called more than once.
	stop(kill bool)
	// done is closed once the balancer has ended.
	done() <-chan struct{}
	// errorLog is what the balancer logged so far.
	errorLog() string
}

// Options configure a balancer started outside a test (see [RunNginx] and
// [RunReverseProxy]); the zero value serves on a free loopback port.
type Options struct {
	// Addr is the host:port to listen on, "127.0.0.1:0" when empty. Port 0
	// picks a free port.
	Addr string
	// Dir is where nginx keeps its configuration, pid file, logs and
	// temporary files, so that they can be read after a run. When empty,
	// a new temporary directory is used and removed by Stop. The Go proxy
	// keeps no files.
	Dir string
}

// addr returns o.Addr or its default.
func (o Options) addr() string {
	if o.Addr == "" {
		return "127.0.0.1:0"
	}
	return o.Addr
}

// URL returns the balancer's base URL, http://host:port without a path:
// requests keep their path on the way upstream, so a server at /mcp on
// every upstream is reached at URL()+"/mcp".
func (lb *LB) URL() string { return lb.url }

// SetUpstreams replaces the set of upstreams (at least one), so that a
// test can take a replica out of rotation, or add one, while clients run.
// It returns once new requests are spread over the new set. nginx
// reloads its configuration for it: requests and streams open through
// the old set are ended within a second (worker_shutdown_timeout). The
// Go proxy leaves them open.
func (lb *LB) SetUpstreams(upstreams ...string) error {
	hosts, err := parseUpstreams(upstreams)
	if err != nil {
		return err
	}
	if err := lb.b.setUpstreams(hosts); err != nil {
		return fmt.Errorf("testlb: %s: set upstreams: %w", lb.kind, err)
	}
	return nil
}

// Stop ends the balancer and waits for it: nginx gets SIGQUIT (a graceful
// shutdown, which ends open streams within a second) and SIGKILL if it
// lingers; the Go proxy closes its listener and every client connection.
// Stop may be called more than once, and after Kill.
func (lb *LB) Stop() { lb.b.stop(false) }

// Kill ends the balancer at once, as a crash would, so that a test can see
// what its clients do when the balancer itself fails: nginx's processes
// get SIGKILL; the Go proxy (which cannot crash on its own) closes its
// listener and every client connection, as Stop does.
func (lb *LB) Kill() { lb.b.stop(true) }

// Done is closed once the balancer has ended: after Stop or Kill, or when
// nginx exited on its own.
func (lb *LB) Done() <-chan struct{} { return lb.b.done() }

// ErrorLog returns what the balancer logged so far: nginx's error log and
// standard error, or the Go proxy's errors (including the upstreams it
// skipped because they refused the connection). Tests print it when they
// fail.
func (lb *LB) ErrorLog() string { return lb.b.errorLog() }

// StartNginx runs nginx in front of upstreams (http://host:port
// addresses), with its files in a temporary directory of t, and stops it
// when t ends, printing its error log if t failed. Without an nginx
// binary (on PATH or in /usr/sbin) the test is skipped, unless
// TIDINGS_NGINX=1 demands that it runs: then it fails.
func StartNginx(t testing.TB, upstreams ...string) *LB {
	t.Helper()
	if _, err := nginxBinary(); err != nil {
		if os.Getenv("TIDINGS_NGINX") == "1" {
			t.Fatalf("TIDINGS_NGINX=1 but %v", err)
		}
		t.Skipf("nginx tests skipped: %v (install Debian's nginx package; scripts/test-all does)", err)
	}
	lb, err := RunNginx(Options{Dir: t.TempDir()}, upstreams...)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, lb)
	return lb
}

// StartReverseProxy runs a Go httputil.ReverseProxy in front of upstreams
// (http://host:port addresses) on a loopback httptest server, and stops
// it when t ends, printing its error log if t failed.
func StartReverseProxy(t testing.TB, upstreams ...string) *LB {
	t.Helper()
	lb, err := RunReverseProxy(Options{}, upstreams...)
	if err != nil {
		t.Fatal(err)
	}
	stopAtCleanup(t, lb)
	return lb
}

// stopAtCleanup stops lb when t ends and shows its log if t failed.
func stopAtCleanup(t testing.TB, lb *LB) {
	t.Cleanup(func() {
		lb.Stop()
		if t.Failed() {
			if l := lb.ErrorLog(); l != "" {
				t.Logf("%s error log:\n%s", lb.kind, l)
			}
		}
	})
}

// parseUpstreams turns http://host:port URLs into host:port addresses.
// Paths are refused rather than dropped: the balancers pass the request
// path on as it is.
func parseUpstreams(upstreams []string) ([]string, error) {
	if len(upstreams) == 0 {
		return nil, fmt.Errorf("testlb: no upstreams")
	}
	hosts := make([]string, 0, len(upstreams))
	for _, s := range upstreams {
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("testlb: upstream %q: %w", s, err)
		}
		if u.Scheme != "http" || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return nil, fmt.Errorf("testlb: upstream %q: want http://host:port without a path", s)
		}
		if _, _, err := net.SplitHostPort(u.Host); err != nil {
			return nil, fmt.Errorf("testlb: upstream %q: want an explicit port: %w", s, err)
		}
		hosts = append(hosts, u.Host)
	}
	return hosts, nil
}
