package clustertest_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"tidings/client"
	"tidings/internal/sse"
	"tidings/internal/testrig/clustertest"
	"tidings/internal/testrig/testbroker"
	"tidings/internal/testrig/testlb"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// This file runs `tidings gateway` as a deployment does: three replicas,
// each the real binary in a process of its own, in front of one upstream
// MCP server, joined by a real NATS server and behind a real nginx.
//
// To tell the bus's work from each replica's own, only the first replica
// reaches the upstream directly. The other two reach it through a proxy
// that passes every request but subscriptions/listen, which it answers
// -32601 (method not found): their client.Watcher then falls back to
// polling, every 30 seconds, through a client cache that keeps the
// upstream's tool list for upstreamTTL. So within notifyWithin of a
// change, the second and third replicas can hear of it only from the
// first, over the bus, and a tools/list they answer shows it only if
// what they kept was dropped (the origin's Forget) when they heard.

const (
	// upstreamTTL is the ttlMs of the upstream's tool list: longer than
	// the test, so that no replica re-reads it of its own accord.
	upstreamTTL = time.Minute
	// notifyWithin bounds how long a change may take to reach every
	// listener: well under a polling replica's first poll (30s less the
	// 20% jitter) and the list's TTL.
	notifyWithin = 10 * time.Second
	// gwUpstream is the upstream's id in the gateways' configurations;
	// its tools are served as gwUpstream+"_"+name.
	gwUpstream = "up"
)

// TestGatewayReplicasShareChanges: three gateway replicas behind nginx
// on NATS; a change first seen by one reaches listeners on all. The
// upstream adds a tool; replica 1 hears of it on its listen upstream,
// and replicas 2 and 3, which have none, from replica 1 over the bus.
// Every listen — one opened on each replica, three through nginx — is
// told notifications/tools/list_changed within notifyWithin, and then a
// tools/list through each replica, and through nginx, shows the new
// tool: none serves the list it kept from before.
func TestGatewayReplicasShareChanges(t *testing.T) {
	gc := startGatewayCluster(t)
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	t.Cleanup(tr.CloseIdleConnections)

	var listens []*rawListen
	for i, g := range gc.gateways {
		listens = append(listens, openToolsListen(t, tr, fmt.Sprintf("the listen on replica %d", i+1), g.url+"/mcp"))
	}
	for i := range 3 {
		listens = append(listens, openToolsListen(t, tr, fmt.Sprintf("listen %d through nginx", i+1), gc.lb.URL()+"/mcp"))
	}
	for i, g := range gc.gateways {
		if got := toolNames(t, tr, g.url+"/mcp"); !slices.Equal(got, []string{"up_base"}) {
			t.Fatalf("replica %d serves the tools %v before the change, want [up_base]", i+1, got)
		}
	}
	for _, l := range listens {
		l.drain(t)
	}

	changed := time.Now()
	if err := gc.upstream.AddTool(mcp.Tool{Name: "fresh"}, noop); err != nil {
		t.Fatal(err)
	}
	awaitToolsChanged(t, listens, changed, notifyWithin)

	want := []string{"up_base", "up_fresh"}
	for i, g := range gc.gateways {
		if got := toolNames(t, tr, g.url+"/mcp"); !slices.Equal(got, want) {
			t.Errorf("replica %d serves the tools %v after telling its listener of the change, want %v", i+1, got, want)
		}
	}
	for i := range 3 {
		if got := toolNames(t, tr, gc.lb.URL()+"/mcp"); !slices.Equal(got, want) {
			t.Errorf("tools/list %d through nginx: %v, want %v", i+1, got, want)
		}
	}
	// Replicas 2 and 3 still poll: what they knew came over the bus.
	for i, g := range gc.gateways[1:] {
		if n := g.metric(t, `tidings_gateway_upstream_listens{upstream="up"}`); n != 0 {
			t.Errorf("replica %d holds %v listens upstream, want 0: its proxy refuses them", i+2, n)
		}
		if n := gc.proxies[i].refused.Load(); n != 1 {
			t.Errorf("replica %d's proxy refused %d listens, want the one its gateway asked for at start", i+2, n)
		}
	}
}

// TestGatewayResyncForgets: the bus loses a change — NATS is down when
// replica 1 hears of it and publishes it — and when NATS is back, the
// bus re-notifies every listener on replicas 2 and 3 that everything it
// follows may have changed (busHandler.Resync). Their tools/list must
// then show the change: what each replica kept from before the loss is
// stale, as after a change told over the bus, and is forgotten before
// the listeners are told.
func TestGatewayResyncForgets(t *testing.T) {
	gc := startGatewayCluster(t)
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	t.Cleanup(tr.CloseIdleConnections)
	var listens []*rawListen
	for i, g := range gc.gateways {
		listens = append(listens, openToolsListen(t, tr, fmt.Sprintf("the listen on replica %d", i+1), g.url+"/mcp"))
	}
	for _, l := range listens {
		l.drain(t)
	}

	gc.nats.Down()
	for i, g := range gc.gateways {
		clustertest.WaitFor(t, fmt.Sprintf("replica %d to see the bus down", i+1), func() bool {
			return g.metric(t, "tidings_bus_connected") == 0
		})
	}
	dropped := gc.gateways[0].metric(t, "tidings_bus_events_dropped_total")
	changed := time.Now()
	if err := gc.upstream.AddTool(mcp.Tool{Name: "fresh"}, noop); err != nil {
		t.Fatal(err)
	}
	awaitToolsChanged(t, listens[:1], changed, notifyWithin)
	clustertest.WaitFor(t, "replica 1 to drop the change it could not publish", func() bool {
		return gc.gateways[0].metric(t, "tidings_bus_events_dropped_total") > dropped
	})
	gc.nats.Up()
	awaitToolsChanged(t, listens[1:], time.Now(), clustertest.Wait)

	want := []string{"up_base", "up_fresh"}
	for i, g := range gc.gateways[1:] {
		if got := toolNames(t, tr, g.url+"/mcp"); !slices.Equal(got, want) {
			t.Errorf("replica %d serves the tools %v after its listener was re-notified, want %v: it re-read what it kept before the bus lost the change",
				i+2, got, want)
		}
	}
}

// TestGatewayListsAnUpstreamLacks: the upstream offers tools only, and
// answers prompts/list and resources/list with method not found. A
// gateway replica serves those lists empty, and keeps that answer as it
// keeps any other, so that the callers' lists do not each go upstream,
// and the upstream is not counted as failing.
func TestGatewayListsAnUpstreamLacks(t *testing.T) {
	gc := startGatewayCluster(t)
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	t.Cleanup(tr.CloseIdleConnections)
	g := gc.gateways[0]
	const failures = `tidings_gateway_upstream_failures_total{upstream="up"}`
	before := g.metric(t, failures)
	for range 3 {
		c := client.NewHTTP(g.url+"/mcp", client.WithHTTPClient(&http.Client{Transport: tr}), client.WithLogger(slog.New(slog.DiscardHandler)))
		ctx, cancel := context.WithTimeout(context.Background(), clustertest.Wait)
		ps, perr := c.Prompts(ctx)
		rs, rerr := c.Resources(ctx)
		cancel()
		c.Close()
		if perr != nil || rerr != nil || len(ps) != 0 || len(rs) != 0 {
			t.Fatalf("prompts %v, %v; resources %v, %v; want both empty", ps, perr, rs, rerr)
		}
	}
	if n := g.metric(t, failures) - before; n != 0 {
		t.Errorf("three prompts/list and resources/list made %v upstream failures, want none: a list the upstream does not have is empty, not failed", n)
	}
	if log := g.stderr.String(); strings.Contains(log, "left out") {
		t.Errorf("the gateway warns that the upstream's items are left out:\n%s", log)
	}
}

// gatewayCluster is one upstream, a NATS server, three gateway replicas
// on it and nginx in front of them.
type gatewayCluster struct {
	upstream *server.Server
	nats     *testbroker.NATS
	proxies  []*listenRefuser // in front of the upstream for replicas 2 and 3
	gateways []*gatewayProcess
	lb       *testlb.LB
}

// startGatewayCluster starts a gatewayCluster and returns once every
// replica hears the other two on the bus, replica 1 listens upstream and
// replicas 2 and 3 have been refused their listens.
func startGatewayCluster(t *testing.T) *gatewayCluster {
	t.Helper()
	bin := buildTidings(t)
	gc := &gatewayCluster{nats: testbroker.StartNATS(t)}
	gc.upstream = server.New(mcp.Implementation{Name: "upstream", Version: "1"}, server.WithLogger(slog.New(slog.DiscardHandler)),
		server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: upstreamTTL, Scope: mcp.ScopePublic}))
	if err := gc.upstream.AddTool(mcp.Tool{Name: "base"}, noop); err != nil {
		t.Fatal(err)
	}
	up := httptest.NewServer(mcpMux(gc.upstream))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), clustertest.Wait)
		defer cancel()
		if err := gc.upstream.Shutdown(ctx); err != nil {
			t.Errorf("upstream: %v", err)
		}
		up.Close()
	})
	for range 2 {
		gc.proxies = append(gc.proxies, startListenRefuser(t, up.URL))
	}

	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("clustertest: the gateway replicas' shared key, 32 bytes or more\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	urls := []string{up.URL, gc.proxies[0].hs.URL, gc.proxies[1].hs.URL}
	var bases []string
	for i, u := range urls {
		g := startGatewayProcess(t, bin, fmt.Sprintf("replica %d", i+1), filepath.Join(dir, fmt.Sprintf("gateway-%d.yaml", i+1)),
			u+"/mcp", gc.nats.URL(), secret)
		gc.gateways = append(gc.gateways, g)
		bases = append(bases, g.url)
	}
	for i, g := range gc.gateways {
		clustertest.WaitFor(t, fmt.Sprintf("replica %d to hear the other two on the bus", i+1), func() bool {
			return g.metric(t, "tidings_bus_peers") >= 2
		})
	}
	clustertest.WaitFor(t, "replica 1 to listen upstream", func() bool {
		return gc.gateways[0].metric(t, `tidings_gateway_upstream_listens{upstream="up"}`) == 1
	})
	for i, p := range gc.proxies {
		clustertest.WaitFor(t, fmt.Sprintf("replica %d to be refused its listen upstream", i+2), func() bool { return p.refused.Load() > 0 })
	}
	gc.lb = testlb.StartNginx(t, bases...)
	return gc
}

func noop(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{}, nil
}

// buildTidings builds the tidings command into a directory of t's.
func buildTidings(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to build tidings: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "tidings")
	if out, err := exec.Command(goTool, "build", "-o", bin, "tidings/cmd/tidings").CombinedOutput(); err != nil {
		t.Fatalf("go build tidings/cmd/tidings: %v\n%s", err, out)
	}
	return bin
}

// listenRefuser is a reverse proxy in front of an upstream MCP server
// that passes every request but subscriptions/listen, which it answers
// with JSON-RPC's method not found, as a server without listens does.
type listenRefuser struct {
	hs      *httptest.Server
	refused atomic.Int64
}

// startListenRefuser serves a listenRefuser in front of target (its
// base URL) until t ends.
func startListenRefuser(t *testing.T, target string) *listenRefuser {
	t.Helper()
	to, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 8}
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(to) },
		Transport:     tr,
		FlushInterval: -1,
		ErrorLog:      log.New(io.Discard, "", 0),
	}
	p := &listenRefuser{}
	p.hs = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			rp.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(body, &m) == nil && m.Method == mcp.MethodListen {
			p.refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":"Method not found"}}`, m.ID, jsonrpc.CodeMethodNotFound)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		p.hs.CloseClientConnections()
		p.hs.Close()
		tr.CloseIdleConnections()
	})
	return p
}

// gatewayProcess is one `tidings gateway` running as a process.
type gatewayProcess struct {
	name   string
	url    string // http://host:port, serving at /mcp and /metrics
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{}
	tr     *http.Transport // for /metrics
}

var gatewayListening = regexp.MustCompile(`listening on (http://[^\s"/]+)/mcp`)

// startGatewayProcess writes a configuration to file naming upstreamURL
// (as gwUpstream), and runs bin's gateway on it, on the bus at busURL
// with the key in secret; it returns once the gateway serves and stops
// it (SIGTERM) when t ends.
func startGatewayProcess(t *testing.T, bin, name, file, upstreamURL, busURL, secret string) *gatewayProcess {
	t.Helper()
	cfg := fmt.Sprintf("upstreams:\n  - id: %s\n    url: %s\n", gwUpstream, upstreamURL)
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	g := &gatewayProcess{name: name, stderr: &syncBuffer{}, exited: make(chan struct{}), tr: &http.Transport{}}
	g.cmd = exec.Command(bin, "gateway", "--config", file, "--addr", "127.0.0.1:0", "--bus", busURL, "--secret-file", secret)
	g.cmd.Env = append(os.Environ(), "TIDINGS_BUS=", "TIDINGS_SECRET=")
	g.cmd.Stderr = g.stderr
	if err := g.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() {
		defer close(g.exited)
		_ = g.cmd.Wait()
	}()
	t.Cleanup(func() {
		g.tr.CloseIdleConnections()
		_ = g.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-g.exited:
		case <-time.After(clustertest.Wait):
			t.Errorf("%s did not stop on SIGTERM; killed", name)
			_ = g.cmd.Process.Kill()
			<-g.exited
		}
		if t.Failed() {
			t.Logf("%s's log:\n%s", name, g.stderr)
		}
	})
	clustertest.WaitFor(t, name+" to serve", func() bool {
		select {
		case <-g.exited:
			t.Fatalf("%s exited before it served:\n%s", name, g.stderr)
		default:
		}
		m := gatewayListening.FindStringSubmatch(g.stderr.String())
		if m != nil {
			g.url = m[1]
		}
		return m != nil
	})
	return g
}

// metric returns the value of the series named in full (with its labels
// as /metrics writes them) in the gateway's /metrics, -1 when it has none.
func (g *gatewayProcess) metric(t *testing.T, series string) float64 {
	t.Helper()
	resp, err := (&http.Client{Transport: g.tr}).Get(g.url + "/metrics")
	if err != nil {
		t.Fatalf("%s: /metrics: %v", g.name, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: /metrics: %s %q: %v", g.name, series, v, err)
			}
			return f
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: /metrics: %v", g.name, err)
	}
	return -1
}

// rawListen is one subscriptions/listen over HTTP, its messages read
// straight off the stream.
type rawListen struct {
	name    string
	methods chan told
}

// told is one message a listen was told, and when it arrived.
type told struct {
	method string
	at     time.Time
}

// openToolsListen opens a listen for toolsListChanged at endpoint and
// waits for its acknowledgement. It is closed when t ends.
func openToolsListen(t *testing.T, tr *http.Transport, name, endpoint string) *rawListen {
	t.Helper()
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": mcp.MethodListen, "params": map[string]any{
		"_meta":         map[string]any{mcp.MetaProtocolVersion: mcp.Version, mcp.MetaClientCapabilities: map[string]any{}},
		"notifications": map[string]any{"toolsListChanged": true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version)
	req.Header.Set(mcp.HeaderMethod, mcp.MethodListen)
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		cancel()
		t.Fatalf("%s: %v", name, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		t.Fatalf("%s: status %d: %s", name, resp.StatusCode, b)
	}
	l := &rawListen{name: name, methods: make(chan told, 64)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer resp.Body.Close()
		rd := sse.NewReader(resp.Body, 0)
		for {
			ev, err := rd.Next()
			if err != nil {
				return
			}
			var m struct {
				Method string `json:"method"`
			}
			if json.Unmarshal(ev.Data, &m) != nil || m.Method == "" {
				continue
			}
			select {
			case l.methods <- told{m.Method, time.Now()}:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case m := <-l.methods:
		if m.method != mcp.NotifyAcknowledged {
			t.Fatalf("%s: first message %s, want %s", name, m.method, mcp.NotifyAcknowledged)
		}
	case <-time.After(clustertest.Wait):
		t.Fatalf("%s: no acknowledgement in %v", name, clustertest.Wait)
	}
	return l
}

// drain takes what the listen was told so far, so that what it is told
// next is told after now.
func (l *rawListen) drain(t *testing.T) {
	t.Helper()
	for {
		select {
		case m := <-l.methods:
			t.Logf("%s was told %s before the change", l.name, m.method)
		default:
			return
		}
	}
}

// awaitToolsChanged waits until every listen is told the tool list
// changed, and fails the test naming those that were not within d of
// since.
func awaitToolsChanged(t *testing.T, listens []*rawListen, since time.Time, d time.Duration) {
	t.Helper()
	deadline := time.NewTimer(time.Until(since.Add(d)))
	defer deadline.Stop()
	expired := false
	var missed []string
	for _, l := range listens {
		done := false
		for !done {
			var m told
			if expired {
				// Past the deadline: only what the listen was told already.
				select {
				case m = <-l.methods:
				default:
				}
			} else {
				select {
				case m = <-l.methods:
				case <-deadline.C:
					expired = true
					continue
				}
			}
			switch {
			case m.method == "":
				missed = append(missed, l.name)
				done = true
			case m.method == mcp.NotifyToolsListChanged && !m.at.After(since.Add(d)):
				t.Logf("%s was told %s %v after the change", l.name, m.method, m.at.Sub(since).Round(time.Millisecond))
				done = true
			default:
				t.Logf("%s was told %s %v after the change", l.name, m.method, m.at.Sub(since).Round(time.Millisecond))
			}
		}
	}
	if len(missed) > 0 {
		t.Fatalf("not told %s within %v: %s", mcp.NotifyToolsListChanged, d, strings.Join(missed, ", "))
	}
}

// toolNames reads the tool list at endpoint with a new client, whose
// cache holds nothing yet.
func toolNames(t *testing.T, tr *http.Transport, endpoint string) []string {
	t.Helper()
	c := client.NewHTTP(endpoint, client.WithHTTPClient(&http.Client{Transport: tr}), client.WithLogger(slog.New(slog.DiscardHandler)))
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), clustertest.Wait)
	defer cancel()
	tools, err := c.Tools(ctx)
	if err != nil {
		t.Fatalf("tools/list at %s: %v", endpoint, err)
	}
	var names []string
	for _, tool := range tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}
