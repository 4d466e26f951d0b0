//go:build unix

package main

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
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"tidings/client"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/streamhttp"
)

// TestServeUnderHostileClients runs serve in process, with its flags,
// against clients that try to take it from the others: thousands of
// connections from one address that never send a request, hundreds that
// make one and stay open, readers that ask for a large file and never
// read it, and a body that stops after its first byte. Meanwhile a
// listen from another address stays open, and clients at other
// addresses are served; /metrics counts every refusal, eviction and cut.
func TestServeUnderHostileClients(t *testing.T) {
	const (
		hoarders = 3000 // connections from one address that send nothing
		perAddr  = 256  // the default cap
		idlers   = 300  // connections from one address that make a request, then idle
		stalled  = 5    // readers of a large file that never read
	)
	raiseOwnFileLimit(t, 2*hoarders+1024)
	dir := t.TempDir()
	big := filepath.Join(dir, "big.txt")
	if err := os.WriteFile(big, bytes.Repeat([]byte("x"), 8<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "small.txt"), []byte("small"), 0o644); err != nil {
		t.Fatal(err)
	}
	base, stop := serveInProcess(t, dir, "--max-read-bytes", "16MiB", "--write-timeout", "500ms", "--body-timeout", "500ms",
		"--max-followed-uris-per-principal", "3000", "--max-listen-uris", "1000")
	defer stop()
	addr := strings.TrimPrefix(base, "http://")
	good := clientFrom("127.0.0.2")
	defer good.CloseIdleConnections()

	// A listen that must outlive everything below.
	events := make(chan client.Event, 64)
	lc := client.NewHTTP(base+"/mcp", client.WithHTTPClient(clientFrom("127.0.0.6")))
	defer lc.Close()
	w := lc.Watch(context.Background(), client.WatchOptions{Resources: true, OnEvent: func(e client.Event) {
		select {
		case events <- e:
		default:
		}
	}})
	defer w.Close()
	testkit.WaitFor(t, wait, "the listen to be live", func() bool { return w.State() == client.Live })

	// Thousands of connections from one address that never send a byte.
	start := time.Now()
	hoarded := make([]net.Conn, 0, hoarders)
	defer func() {
		for _, c := range hoarded {
			c.Close()
		}
	}()
	for range hoarders {
		hoarded = append(hoarded, dialFrom(t, "127.0.0.1", addr, nil))
	}
	waitMetric(t, good, base, `tidings_http_connections_refused_total{limit="per_address"}`, hoarders-perAddr)
	t.Logf("%d connections from one address: %d refused in %v", hoarders, hoarders-perAddr, time.Since(start).Round(time.Millisecond))
	resp, body := readAll(t, hoarded[hoarders-1])
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "allows 256 at once from one client address") {
		t.Fatalf("a connection beyond the cap: %d %q", resp.StatusCode, body)
	}
	served(t, good, base)

	// Hundreds that make a request and stay open: each beyond the cap
	// closes the one idle longest, and is served.
	for _, c := range hoarded {
		c.Close()
	}
	hoarded = hoarded[:0]
	idle := make([]net.Conn, 0, idlers)
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for i := range idlers {
		c := dialFrom(t, "127.0.0.3", addr, nil)
		idle = append(idle, c)
		if _, err := fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", addr); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("idle connection %d: status %d", i, resp.StatusCode)
		}
	}
	if v := metric(t, good, base, `tidings_http_connections_evicted_total{limit="per_address"}`); v < idlers-perAddr {
		t.Fatalf("%v idle connections evicted, want at least %d", v, idlers-perAddr)
	}

	// Readers of a large file that never read: cut after the write
	// timeout, their answers freed.
	heapBefore := heapAlloc()
	read := request(t, 1, mcp.MethodResourcesRead, map[string]any{"uri": fileURI(t, dir, "big.txt")})
	for range stalled {
		c := dialFrom(t, "127.0.0.4", addr, smallReceiveBuffer)
		defer c.Close()
		writePost(t, c, addr, mcp.MethodResourcesRead, fileURI(t, dir, "big.txt"), read)
	}
	served(t, good, base)
	waitMetric(t, good, base, "tidings_http_write_timeouts_total", stalled)
	t.Logf("%d stalled readers of an 8 MiB file cut; heap %d MB before them, %d MB after", stalled, heapBefore>>20, heapAlloc()>>20)

	// A body that stops after its first byte.
	c := dialFrom(t, "127.0.0.5", addr, nil)
	defer c.Close()
	if _, err := fmt.Fprintf(c, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", addr); err != nil {
		t.Fatal(err)
	}
	resp, body = readAll(t, c)
	if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(body, "did not arrive within 500ms") {
		t.Fatalf("a body that stopped: %d %q", resp.StatusCode, body)
	}
	waitMetric(t, good, base, "tidings_http_body_timeouts_total", 1)

	// Large listens from the anonymous callers, who share one
	// allowance of followed URIs: three of 1,000 URIs are held, a
	// fourth and one over the per-listen URI cap refused, each naming
	// its limit.
	bulk := client.NewHTTP(base+"/mcp", client.WithHTTPClient(clientFrom("127.0.0.7")), client.WithLogger(slog.New(slog.DiscardHandler)))
	defer bulk.Close()
	lctx, endListens := context.WithCancel(context.Background())
	var held sync.WaitGroup
	defer func() {
		endListens()
		held.Wait()
	}()
	uris := func(n int) map[string]any {
		list := make([]string, n)
		for i := range list {
			list[i] = fmt.Sprintf("file:///nowhere/%0380d", i) // about 400 bytes each
		}
		return map[string]any{"notifications": map[string]any{"resourceSubscriptions": list}}
	}
	before := metric(t, good, base, "tidings_listen_uris_followed")
	for range 3 {
		held.Go(func() { _, _ = bulk.Request(lctx, mcp.MethodListen, uris(1000)) })
	}
	waitMetric(t, good, base, "tidings_listen_uris_followed", before+3*1000)
	_, err := bulk.Request(context.Background(), mcp.MethodListen, uris(1000))
	if rpc, ok := errors.AsType[*client.RPCError](err); !ok || !strings.Contains(rpc.Message, "limit 3000") {
		t.Fatalf("a fourth listen of 1000 URIs: %v, want a refusal naming the limit of 3000", err)
	}
	_, err = bulk.Request(context.Background(), mcp.MethodListen, uris(1001))
	if rpc, ok := errors.AsType[*client.RPCError](err); !ok || rpc.Code != -32602 || !strings.Contains(rpc.Message, "1000") {
		t.Fatalf("a listen of 1001 URIs: %v, want -32602 naming the cap of 1000", err)
	}
	waitMetric(t, good, base, `tidings_listen_refusals_total{limit="urisPerPrincipal"}`, 1)
	served(t, good, base)

	// The listen lived through it all, and still hears of changes.
	if err := os.WriteFile(filepath.Join(dir, "late.txt"), []byte("late"), 0o644); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(wait)
	for changed := false; !changed; {
		select {
		case e := <-events:
			changed = e.Kind == client.ResourcesChanged && anyEndsWith(e.Added, "late.txt")
			if e.Kind == client.Disconnected {
				t.Fatalf("the listen dropped: %+v", e)
			}
		case <-deadline:
			t.Fatal("the listen did not hear of a new file")
		}
	}
	if n := w.Stats().Reconnects; n != 0 {
		t.Fatalf("the listen reconnected %d times", n)
	}
}

// serveInProcess runs serve on a free loopback port with extra flags
// and returns its base URL; stop ends it and waits.
func serveInProcess(t *testing.T, dir string, extra ...string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errOut := &testkit.SyncBuffer{}
	cmd := newRootCmd()
	cmd.SetArgs(append([]string{"serve", dir, "--addr", "127.0.0.1:0"}, extra...))
	cmd.SetErr(errOut)
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v\n%s", err, errOut.String())
		}
	}
	var url string
	deadline := time.Now().Add(wait)
	for url == "" || !strings.Contains(errOut.String(), "watching directory") {
		if m := listening.FindStringSubmatch(errOut.String()); m != nil {
			url = strings.TrimSuffix(m[1], "/mcp")
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("serve did not come up:\n%s", errOut.String())
		}
		time.Sleep(10 * time.Millisecond) // polling the log, with a deadline
	}
	return url, stop
}

// raiseOwnFileLimit lets the test process hold need descriptors, if its
// hard limit allows, and skips the test otherwise.
func raiseOwnFileLimit(t *testing.T, need uint64) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur >= need {
		return
	}
	if lim.Max < need {
		t.Skipf("needs %d open files; the hard limit is %d", need, lim.Max)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: need, Max: lim.Max}); err != nil {
		t.Skipf("needs %d open files: %v", need, err)
	}
}

// dialFrom connects to addr from the loopback address ip (all of 127/8
// is loopback, so a test can be several clients), with control run on
// the socket before it connects.
func dialFrom(t *testing.T, ip, addr string, control func(string, string, syscall.RawConn) error) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Control: control}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// clientFrom is an HTTP client whose connections come from ip.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}, Timeout: wait}
}

// smallReceiveBuffer shrinks a socket's receive buffer before it
// connects, so that a client that never reads stalls the server's writes
// after a few kilobytes.
func smallReceiveBuffer(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
	}); err != nil {
		return err
	}
	return serr
}

// writePost sends one 2026-07-28 POST to /mcp on c.
func writePost(t *testing.T, c net.Conn, addr, method, name string, body []byte) {
	t.Helper()
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST /mcp HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n", addr)
	fmt.Fprintf(&req, "%s: %s\r\n%s: %s\r\n%s: %s\r\n", mcp.HeaderProtocolVersion, mcp.Version, mcp.HeaderMethod, method, mcp.HeaderName, name)
	fmt.Fprintf(&req, "Content-Length: %d\r\n\r\n", len(body))
	req.Write(body)
	if _, err := c.Write(req.Bytes()); err != nil {
		t.Fatal(err)
	}
}

// readAll reads one response from c, whole.
func readAll(t *testing.T, c net.Conn) (*http.Response, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading a response: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading a response body: %v", err)
	}
	return resp, string(b)
}

// served checks that c gets answers: /healthz and an MCP request.
func served(t *testing.T, c *http.Client, base string) {
	t.Helper()
	resp, err := c.Get(base + "/healthz")
	if err != nil {
		t.Fatalf("/healthz: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz: %d", resp.StatusCode)
	}
	mc := client.NewHTTP(base+"/mcp", client.WithHTTPClient(c))
	defer mc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	rs, err := mc.Resources(ctx)
	if err != nil || len(rs) == 0 {
		t.Fatalf("resources/list: %d resources, %v", len(rs), err)
	}
}

// metric scrapes one series from /metrics. A scrape that fails is made
// once more on a new connection: the server may have just closed the
// kept-alive one as the connection idle longest, which it does on
// purpose here, and a request that meets that close gets EOF.
func metric(t *testing.T, c *http.Client, base, series string) float64 {
	t.Helper()
	resp, err := c.Get(base + "/metrics")
	if err != nil {
		c.CloseIdleConnections()
		resp, err = c.Get(base + "/metrics")
	}
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("/metrics has no %s", series)
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitMetric polls /metrics until series reaches at least want.
func waitMetric(t *testing.T, c *http.Client, base, series string, want float64) {
	t.Helper()
	var v float64
	testkit.WaitFor(t, wait, fmt.Sprintf("%s to reach %v", series, want), func() bool {
		v = metric(t, c, base, series)
		return v >= want
	})
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// anyEndsWith reports whether one of names ends with suffix.
func anyEndsWith(names []string, suffix string) bool {
	for _, n := range names {
		if strings.HasSuffix(n, suffix) {
			return true
		}
	}
	return false
}

// TestConnLimitFlags: the cap in all is --max-conns, or derived from the
// open-file limit below it; nonsense values are refused by flag name,
// and a timeout of 0 is its default.
func TestConnLimitFlags(t *testing.T) {
	w := watcherFiles(1000)
	for _, c := range []struct {
		maxConns  int
		fileLimit uint64
		want      int
		err       string
	}{
		{0, 0, maxDerivedConns, ""},
		{0, 20000, int(20000 - 2500 - w), ""},
		{0, 1 << 24, maxDerivedConns, ""},
		{0, 1024 + w, int(1024 + w - 128 - w), ""},
		{0, 40, 16, ""},
		{500, 20000, 500, ""},
		{500, 0, 500, ""},
		{30000, 20000, 0, "--max-conns 30000 is above the open-file limit of 20000"},
		{-1, 20000, 0, "--max-conns must be positive"},
	} {
		l := connLimits{maxConns: c.maxConns}
		got, err := l.total(c.fileLimit, 1000)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("--max-conns %d, file limit %d: %d, %v; want an error with %q", c.maxConns, c.fileLimit, got, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("--max-conns %d, file limit %d: %d, %v; want %d", c.maxConns, c.fileLimit, got, err, c.want)
		}
		if c.fileLimit > 0 && uint64(got) >= c.fileLimit {
			t.Errorf("file limit %d: a cap of %d leaves no descriptor to refuse a connection with", c.fileLimit, got)
		}
	}

	l := connLimits{maxConnsPerAddr: -1}
	if err := l.check(); err == nil || !strings.Contains(err.Error(), "--max-conns-per-addr") {
		t.Errorf("--max-conns-per-addr -1: %v", err)
	}
	l = connLimits{maxRefusing: -1}
	if err := l.check(); err == nil || !strings.Contains(err.Error(), "--max-refusing must be positive") {
		t.Errorf("--max-refusing -1: %v", err)
	}
	l = connLimits{bodyTimeout: -time.Second}
	if err := l.check(); err == nil || !strings.Contains(err.Error(), "--body-timeout must be positive") {
		t.Errorf("--body-timeout -1s: %v", err)
	}
	l = connLimits{}
	if err := l.check(); err != nil || l.idleTimeout != defaultIdleTimeout || l.headerTimeout != defaultHeaderTimeout ||
		l.bodyTimeout != defaultBodyTimeout || l.writeTimeout != defaultWriteTimeout || l.maxRefusing != streamhttp.DefaultMaxRefusing {
		t.Errorf("timeouts and --max-refusing of 0: %+v, %v; want the defaults", l, err)
	}
}
