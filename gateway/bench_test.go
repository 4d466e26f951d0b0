package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"tidings/gateway"
	"tidings/internal/sse"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// The benchmarks of this file compare the gateway with the server behind
// it, over HTTP on loopback in both cases:
//
//	go test -run '^$' -bench Gateway -benchtime 3s -count 3 ./gateway
//
// BenchmarkGatewayToolsList/direct and /gateway/* are one tools/list on
// the same client loop (testkit.PostLoop): direct's ns/op divided by a
// gateway's is the gateway's share of the direct rate. Their cpu-ns/op,
// the process's CPU time per request, compare alike on a machine whose
// cores other processes share, where the wall time also counts waits.
// BenchmarkGatewayFanOut reports, per upstream change, the latency to
// each of 1 and of 1,000 listens, through the gateway and direct, both
// parking their listens as the commands do: over HTTP/1.1 a connection
// per listen, read by one epoll loop where there is one (see
// openListens), over HTTP/2 the listens as streams of one connection
// read by one framer (openListensH2).

var quiet = slog.New(slog.DiscardHandler)

// benchPolicy is the upstream's tools/list hint: public, and longer than
// the gateway keeps anything (MaxTTL, 5 minutes), so that a benchmark
// never sees it expire.
var benchPolicy = server.CachePolicy{TTL: 10 * time.Minute, Scope: mcp.ScopePublic}

// benchUpstream is testkit's 50-tool server over HTTP on loopback, with a
// count of the tools/list requests it answered.
type benchUpstream struct {
	srv   *server.Server
	url   string
	lists atomic.Int64
}

// startBenchUpstream serves the 50-tool server until the benchmark ends.
// The direct benchmark serves it alike, so that the two compare the
// gateway and nothing else.
func startBenchUpstream(b testing.TB, opts ...server.Option) *benchUpstream {
	b.Helper()
	u := &benchUpstream{}
	count := func(next server.MethodHandler) server.MethodHandler {
		return func(ctx context.Context, req *server.Request) error {
			if req.Method == mcp.MethodToolsList {
				u.lists.Add(1)
			}
			return next(ctx, req)
		}
	}
	u.srv = testkit.ToolsServer(b, append([]server.Option{server.WithLogger(quiet),
		server.WithCachePolicy(server.ListTools, benchPolicy), server.WithMiddleware(count)}, opts...)...)
	u.url = serveOnLoopback(b, u.srv, streamhttp.New(u.srv, streamhttp.WithParking()))
	return u
}

// startBenchGateway serves a gateway in front of up over HTTP on
// loopback, with the given server options, once it is settled: its
// listen on the upstream is live and the read that follows the listen's
// ack is done, so that nothing of its start runs during the measurement.
func startBenchGateway(b testing.TB, up *benchUpstream, prefix *string, opts ...server.Option) (*gateway.Gateway, string) {
	b.Helper()
	cfg := gateway.Config{Upstreams: []gateway.Upstream{{ID: "files", URL: up.url, Prefix: prefix}}}
	g, err := gateway.New(context.Background(), cfg, gateway.WithServerOptions(append([]server.Option{server.WithLogger(quiet)}, opts...)...))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(g.Close) // after the server below is shut down
	url := serveOnLoopback(b, g.Server(), streamhttp.New(g.Server(), streamhttp.WithParking()))
	// The gateway read the list once at its start (for clashes) and its
	// Watcher reads it again once the listen is acknowledged.
	testkit.WaitFor(b, waitTimeout, "the gateway's listen on the upstream and the read after it", func() bool {
		st := g.Stats()
		return len(st) == 1 && st[0].Listens == 1 && up.srv.ListenStats().Listens == 1 && up.lists.Load() >= 2
	})
	return g, url
}

// toolsListBody and toolsListHeaders are the request of every tools/list
// benchmark, as a conforming 2026-07-28 client sends it.
var toolsListBody = []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{` +
	`"io.modelcontextprotocol/protocolVersion":"` + mcp.Version + `","io.modelcontextprotocol/clientCapabilities":{}}}}`)

func toolsListHeaders() http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	h.Set(mcp.HeaderProtocolVersion, mcp.Version)
	h.Set(mcp.HeaderMethod, mcp.MethodToolsList)
	return h
}

// checkToolsList makes one tools/list at url and checks that it lists the
// 50 tools on one page, their names prefixed by prefix.
func checkToolsList(b testing.TB, url, prefix string) {
	b.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(toolsListBody))
	if err != nil {
		b.Fatal(err)
	}
	req.Header = toolsListHeaders()
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("tools/list: %d %v %.300s", resp.StatusCode, err, body)
	}
	if n := bytes.Count(body, []byte(`"name":"`+prefix+`search_files_`)); n != 50 || bytes.Contains(body, []byte("nextCursor")) {
		b.Fatalf("tools/list: %d tools named %q..., want the 50 on one page: %.300s", n, prefix, body)
	}
}

// postLoop is testkit.PostLoop of a tools/list at url, which also
// reports the CPU time the process used per request (cpu-ns/op), client
// and server together.
func postLoop(b *testing.B, url string) {
	b.Helper()
	cpu0, ok := processCPU()
	testkit.PostLoop(b, url, toolsListBody, toolsListHeaders())
	if cpu1, _ := processCPU(); ok {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
}

// BenchmarkGatewayToolsList is one tools/list of 50 tools over HTTP on
// loopback, on one keep-alive connection: answered by the server itself
// (direct), and by a gateway in front of it that keeps the upstream's
// public answer (a cache hit), with the upstream's names kept as they are
// (prefix=none) and with the default prefix (files_). The gateway is
// held to asking the upstream nothing during the loop.
func BenchmarkGatewayToolsList(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		up := startBenchUpstream(b)
		checkToolsList(b, up.url, "")
		postLoop(b, up.url)
	})
	none := ""
	for _, c := range []struct {
		name   string
		prefix *string
		names  string // the prefix of the names served
	}{
		{"gateway/prefix=none", &none, ""},
		{"gateway/prefix=default", nil, "files_"},
	} {
		b.Run(c.name, func(b *testing.B) {
			up := startBenchUpstream(b)
			g, url := startBenchGateway(b, up, c.prefix)
			checkToolsList(b, url, c.names)
			lists, misses := up.lists.Load(), g.Stats()[0].Misses
			postLoop(b, url)
			if d, m := up.lists.Load()-lists, g.Stats()[0].Misses-misses; d != 0 || m != 0 {
				b.Fatalf("the loop cost %d upstream tools/list requests and %d misses: not a cache hit", d, m)
			}
		})
	}
}

// BenchmarkGatewayFanOut measures one upstream change reaching n listens
// (1 and 1,000), each its own HTTP request on its own loopback
// connection: on the gateway, the upstream itself over HTTP on loopback
// too (gateway), and, for reference, on the upstream server itself
// (direct). An op is one AddTool or RemoveTools on the upstream server,
// and ends when every listen has read its notifications/tools/list_changed;
// through the gateway, the upstream tells the gateway's one listen, the
// gateway re-reads the list (its client compares the tools by content)
// and tells its own listens. Each listen's latency, from the change to
// its read of the notification, is a sample: p50-ms, p99-ms and max-ms
// are over every sample of the run, all-ms is the median time until the
// last listen of a change had it. The listens are read in this process,
// on the same cores as the servers: with 1,000 of them, their reads
// cost as much as the servers' writes.
func BenchmarkGatewayFanOut(b *testing.B) {
	for _, n := range []int{1, 1000} {
		// Every listen is the one anonymous caller's: its allowance, and
		// the server's, must hold them all with room to spare.
		room := server.Allowance{Listens: 2 * n}
		limits := server.WithListenLimits(server.ListenLimits{PerPrincipal: room, Total: room})
		b.Run(fmt.Sprintf("direct/listens=%d", n), func(b *testing.B) {
			up := startBenchUpstream(b, limits)
			fanOut(b, up, openListens(b, strings.TrimPrefix(up.url, "http://"), n), true)
		})
		b.Run(fmt.Sprintf("gateway/listens=%d", n), func(b *testing.B) {
			up := startBenchUpstream(b)
			_, url := startBenchGateway(b, up, nil, limits)
			fanOut(b, up, openListens(b, strings.TrimPrefix(url, "http://"), n), false)
		})
		// The same listens as streams of one HTTP/2 connection, served as
		// tidings serve has it: parked on their streams, a change to all
		// of them leaving in a write or a few.
		b.Run(fmt.Sprintf("direct-h2/listens=%d", n), func(b *testing.B) {
			up := startBenchUpstream(b, limits)
			url := serveH2OnLoopback(b, streamhttp.New(up.srv, streamhttp.WithParking()))
			fanOut(b, up, openListensH2(b, url, n), true)
		})
		b.Run(fmt.Sprintf("gateway-h2/listens=%d", n), func(b *testing.B) {
			up := startBenchUpstream(b)
			g, _ := startBenchGateway(b, up, nil, limits)
			url := serveH2OnLoopback(b, streamhttp.New(g.Server(), streamhttp.WithParking()))
			fanOut(b, up, openListensH2(b, url, n), false)
		})
	}
}

// serveH2OnLoopback serves h on loopback with streamhttp.Serve, as
// tidings serve does: HTTP/1.1 and, without TLS, HTTP/2 with tidings'
// own HTTP/2 server. Ending the benchmark ends the server's listens, then
// the server.
func serveH2OnLoopback(b testing.TB, h http.Handler) string {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- streamhttp.Serve(ctx, ln, h, streamhttp.WithHTTP2(1<<16, streamhttp.DefaultHTTP2WriteBuffer),
			streamhttp.WithShutdownTimeout(waitTimeout), streamhttp.WithServeLogger(quiet))
	}()
	b.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			b.Error(err)
		}
	})
	return "http://" + ln.Addr().String()
}

// fanOut changes up's tools list b.N times, each once the change before
// reached every listen of ls, and reports the latencies. With exact, a
// notification that answers no change, or a change told twice, fails the
// benchmark; without it, such notifications are counted (extra/op).
func fanOut(b *testing.B, up *benchUpstream, ls *listens, exact bool) {
	tool := mcp.Tool{Name: "churn", Description: "Added and removed to make tools list changes."}
	noop := func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{}, nil
	}
	var lat, all []time.Duration
	i := 0
	for b.Loop() {
		r := ls.arm()
		if i%2 == 0 {
			if err := up.srv.AddTool(tool, noop); err != nil {
				b.Fatal(err)
			}
		} else if up.srv.RemoveTools(tool.Name) != 1 {
			b.Fatal("the churn tool was not registered")
		}
		select {
		case <-r.done:
		case <-time.After(waitTimeout):
			b.Fatalf("change %d reached %d of %d listens in %v", i, r.count.Load(), ls.n, waitTimeout)
		}
		lat = append(lat, r.lat...)
		all = append(all, slices.Max(r.lat))
		i++
	}
	// The server tells each change once. Through the gateway a change
	// passed on as the upstream announced it is now and then told again
	// when the watcher's re-read reports it under another date: a
	// notification is a signal to re-read, so a second one costs the
	// listener a read, not a wrong answer; it is counted (extra/op).
	if extra := ls.extra.Load(); exact && extra > 0 {
		b.Fatalf("%d notifications came outside a change, or twice for one", extra)
	} else {
		b.ReportMetric(float64(extra)/float64(b.N), "extra/op")
	}
	slices.Sort(lat)
	slices.Sort(all)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(percentile(lat, 50)), "p50-ms")
	b.ReportMetric(ms(percentile(lat, 99)), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
	b.ReportMetric(ms(percentile(all, 50)), "all-ms")
}

// percentile is the nearest-rank percentile p of sorted values.
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100
	return sorted[max(i, 1)-1]
}

// listens are raw listens for tools list changes, each on its own TCP
// connection (see openListens), or streams of one (openListensH2).
type listens struct {
	n     int
	cur   atomic.Pointer[round]
	seq   int
	extra atomic.Int64

	mu    sync.Mutex
	conns []io.Closer
	wg    sync.WaitGroup
	// poll, when set, reads every listen opened by openListens.
	poll poller
}

// poller reads many HTTP/1.1 listens from one goroutine.
type poller interface {
	// add has the poller read listen i on conn from now on, rest (bytes
	// read from it already) first.
	add(i int, conn net.Conn, rest []byte) error
	// stop ends the reading and waits for it.
	stop()
}

// round is one change being fanned out: lat[i] is when listen i read it,
// counted from t0; the reader that brings count to n closes done.
type round struct {
	seq   int
	t0    time.Time
	lat   []time.Duration
	count atomic.Int64
	done  chan struct{}
}

// arm starts the next round: the change must follow.
func (l *listens) arm() *round {
	l.seq++
	r := &round{seq: l.seq, lat: make([]time.Duration, l.n), done: make(chan struct{})}
	r.t0 = time.Now()
	l.cur.Store(r)
	return r
}

// openListens opens n listens at addr, 32 at a time, and returns once
// every one has its ack. Where the system has a poller for it (epoll),
// one goroutine reads them all as their bytes arrive, as an event loop
// would, so that the listens' own reading weighs little on the server
// measured on the same cores; elsewhere each has a reading goroutine.
// They are closed, and their readers waited for, when the benchmark
// ends.
func openListens(b testing.TB, addr string, n int) *listens {
	b.Helper()
	l := &listens{n: n, conns: make([]io.Closer, 0, n)}
	poll, err := newPoller(l)
	if err != nil {
		b.Fatal(err)
	}
	l.poll = poll
	b.Cleanup(func() {
		if l.poll != nil {
			l.poll.stop() // before the connections close, and their descriptors go
		}
		l.mu.Lock()
		for _, c := range l.conns {
			c.Close()
		}
		l.mu.Unlock()
		l.wg.Wait()
	})
	jobs := make(chan int)
	errs := make(chan error, n)
	var openers sync.WaitGroup
	for range 32 {
		openers.Go(func() {
			for i := range jobs {
				if err := l.open(addr, i); err != nil {
					errs <- fmt.Errorf("listen %d: %w", i, err)
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	openers.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	return l
}

var toolsChanged = []byte(`"method":"` + mcp.NotifyToolsListChanged + `"`)

// open opens listen i and reads its ack; the poller, or else a
// goroutine of its own, then reads the rest.
func (l *listens) open(addr string, i int) error {
	conn, err := net.DialTimeout("tcp", addr, waitTimeout)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.conns = append(l.conns, conn)
	l.mu.Unlock()
	_ = conn.SetDeadline(time.Now().Add(waitTimeout))
	body := listenBody(i)
	var req bytes.Buffer
	fmt.Fprintf(&req, "POST / HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n", addr, len(body))
	_ = listenHeaders().Write(&req)
	req.WriteString("\r\n")
	req.Write(body)
	if _, err := conn.Write(req.Bytes()); err != nil {
		return err
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("refused: %s: %s", resp.Status, msg)
	}
	if l.poll != nil {
		ack, err := firstEvent(resp.Body)
		if err != nil {
			return fmt.Errorf("reading the ack: %w", err)
		}
		if !bytes.Contains(ack, []byte(mcp.NotifyAcknowledged)) {
			return fmt.Errorf("the first message is not the ack: %.300s", ack)
		}
		_ = conn.SetDeadline(time.Time{})
		// What came after the ack, read already, is the poller's to
		// look at first.
		rest, _ := br.Peek(br.Buffered())
		return l.poll.add(i, conn, bytes.Clone(rest))
	}
	r := sse.NewReader(resp.Body, 0)
	ev, err := r.Next()
	if err != nil {
		return fmt.Errorf("reading the ack: %w", err)
	}
	if !bytes.Contains(ev.Data, []byte(mcp.NotifyAcknowledged)) {
		return fmt.Errorf("the first message is not the ack: %.300s", ev.Data)
	}
	_ = conn.SetDeadline(time.Time{})
	l.wg.Go(func() { l.read(i, r) })
	return nil
}

// listenHeaders are the headers of every listen's request.
func listenHeaders() http.Header {
	h := toolsListHeaders()
	h.Set(mcp.HeaderMethod, mcp.MethodListen)
	return h
}

// listenBody is listen i's request: a listen for tools list changes,
// with id i+1.
func listenBody(i int) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"_meta":{%q:%q,%q:{}},"notifications":{"toolsListChanged":true}}}`,
		i+1, mcp.MethodListen, mcp.MetaProtocolVersion, mcp.Version, mcp.MetaClientCapabilities)
}

// firstEvent reads a stream's first event, up to the blank line that
// ends it, and not a byte further: the bytes after it, left in the
// connection's reader, are the poller's.
func firstEvent(body io.Reader) ([]byte, error) {
	var ev []byte
	one := make([]byte, 1)
	for !bytes.HasSuffix(ev, []byte("\n\n")) {
		if len(ev) > 64<<10 {
			return nil, fmt.Errorf("no event in the first %d bytes", len(ev))
		}
		if _, err := io.ReadFull(body, one); err != nil {
			return nil, err
		}
		ev = append(ev, one[0])
	}
	return ev, nil
}

// read records when each change reaches listen i, until its connection
// closes. The time is taken before the message is looked at.
func (l *listens) read(i int, r *sse.Reader) {
	last := 0
	for {
		ev, err := r.Next()
		if err != nil {
			return
		}
		l.saw(i, &last, ev.Data, time.Now())
	}
}

// saw records that listen i read data at now, a change if data tells
// one; last is the round the listen saw before, and becomes this one's.
func (l *listens) saw(i int, last *int, data []byte, now time.Time) {
	if !bytes.Contains(data, toolsChanged) {
		return // the listen's ack, or its result at the end
	}
	rd := l.cur.Load()
	if rd == nil || rd.seq == *last {
		l.extra.Add(1)
		return
	}
	*last = rd.seq
	rd.lat[i] = now.Sub(rd.t0)
	if rd.count.Add(1) == int64(l.n) {
		close(rd.done)
	}
}

// TestGatewayFanOutReachesEveryListen runs what BenchmarkGatewayFanOut
// measures, briefly: two changes of the upstream each reach every one
// of 200 listens on the gateway exactly once, over HTTP/1.1 and as
// streams of one HTTP/2 connection, while the upstream holds the
// gateway's one listen.
func TestGatewayFanOutReachesEveryListen(t *testing.T) {
	const n = 200
	for _, tc := range []struct {
		name string
		open func(t *testing.T, g *gateway.Gateway, url string) *listens
	}{
		{"http1", func(t *testing.T, _ *gateway.Gateway, url string) *listens {
			return openListens(t, strings.TrimPrefix(url, "http://"), n)
		}},
		{"h2", func(t *testing.T, g *gateway.Gateway, _ string) *listens {
			return openListensH2(t, serveH2OnLoopback(t, streamhttp.New(g.Server(), streamhttp.WithParking())), n)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := startBenchUpstream(t)
			g, url := startBenchGateway(t, up, nil)
			ls := tc.open(t, g, url)
			tool := mcp.Tool{Name: "churn"}
			for i, change := range []func(){
				func() {
					if err := up.srv.AddTool(tool, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
						return &mcp.CallToolResult{}, nil
					}); err != nil {
						t.Fatal(err)
					}
				},
				func() {
					if up.srv.RemoveTools(tool.Name) != 1 {
						t.Fatal("the churn tool was not registered")
					}
				},
			} {
				r := ls.arm()
				change()
				select {
				case <-r.done:
				case <-time.After(waitTimeout):
					t.Fatalf("change %d reached %d of %d listens", i, r.count.Load(), n)
				}
			}
			if extra := ls.extra.Load(); extra > 0 {
				t.Fatalf("%d notifications came outside a change, or twice for one", extra)
			}
			if got := up.srv.ListenStats().Listens; got != 1 {
				t.Fatalf("the upstream holds %d listens, want 1", got)
			}
		})
	}
}

// toolsCallBody calls name with arguments the bench tools accept, as a
// conforming 2026-07-28 client does.
func toolsCallBody(name string) []byte {
	return []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + name + `","arguments":{"path":"src","query":"TODO","limit":10},"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"` + mcp.Version + `","io.modelcontextprotocol/clientCapabilities":{}}}}`)
}

func toolsCallHeaders(name string) http.Header {
	h := toolsListHeaders()
	h.Set(mcp.HeaderMethod, mcp.MethodToolsCall)
	h.Set(mcp.HeaderName, name)
	return h
}

// BenchmarkGatewayToolsCall is one tools/call over HTTP on loopback, on
// one keep-alive connection, through a gateway in front of a tidings
// server, paired (testkit.PostPair) with the same call made of the server
// directly: x-ceiling is the gateway's rate as a share of the direct one,
// both timed in the same moments.
func BenchmarkGatewayToolsCall(b *testing.B) {
	up := startBenchUpstream(b)
	none := "" // the same request, byte for byte, goes to both
	_, url := startBenchGateway(b, up, &none)
	body, hdr := toolsCallBody("search_files_00"), toolsCallHeaders("search_files_00")
	for _, u := range []string{url, up.url} {
		checkCall(b, u, body, hdr)
	}
	testkit.PostPair(b, url, up.url, body, hdr)
}

// BenchmarkReverseProxyToolsCall is BenchmarkGatewayToolsCall with
// net/http's httputil.ReverseProxy in the gateway's place: a hop that
// parses nothing of MCP, checks nothing and keeps nothing. Its x-ceiling
// is what a second HTTP exchange on loopback costs by itself, the bound
// of any gateway's.
func BenchmarkReverseProxyToolsCall(b *testing.B) {
	up := startBenchUpstream(b)
	target, err := url.Parse(up.url)
	if err != nil {
		b.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 4}
	hs := httptest.NewServer(rp)
	b.Cleanup(hs.Close)
	body, hdr := toolsCallBody("search_files_00"), toolsCallHeaders("search_files_00")
	checkCall(b, hs.URL, body, hdr)
	testkit.PostPair(b, hs.URL, up.url, body, hdr)
}

// checkCall makes the call once at url and checks that it succeeds.
func checkCall(b testing.TB, url string, body []byte, hdr http.Header) {
	b.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header = hdr.Clone()
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || !bytes.Contains(got, []byte(`"result"`)) || bytes.Contains(got, []byte(`"isError":true`)) {
		b.Fatalf("tools/call at %s: %d %v %.300s", url, resp.StatusCode, err, got)
	}
}
