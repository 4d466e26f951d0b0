package peers_test

// The test in this file puts three servers built on three other SDKs
// behind one `tidings gateway`, each changing its tools when the test
// asks it to (their -change tool), and follows the gateway with `tidings
// watch`:
//
//   - gosdk: the go-sdk peer over its default, stateful Streamable HTTP
//     handler, where the tidings client falls back to 2025-11-25;
//   - mcpgo: the mcp-go peer, spawned by the gateway over stdio, at
//     2026-07-28;
//   - ts: a TypeScript SDK v1 server (../node/legacy/sdk1-change-server.mjs)
//     over stateful Streamable HTTP at 2025-11-25, which sends its
//     notifications on the session's GET stream.
//
// It needs Node 22 (TIDINGS_NODE) and the SDK v1 installed in
// ../node/node_modules (npm ci in interop/node), and skips without them
// unless TIDINGS_INTEROP=1.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"tidings/client"
	"tidings/interop/peers/internal/peer"
	"tidings/mcp"
)

// gwUpstream is one upstream of the gateway under test.
type gwUpstream struct {
	id string
	// version is the revision the tidings client settles on with it.
	version string
	// url is its endpoint; command, for a stdio upstream, its argv.
	url     string
	command []string
}

// prefixed is the name callers of the gateway see for the upstream's
// tool name: the default prefix, the id and "_".
func (u gwUpstream) prefixed(name string) string { return u.id + "_" + name }

// TestGatewayPeers runs `tidings gateway` in front of a go-sdk, an mcp-go
// and a TypeScript SDK v1 server, and checks through it, with the real
// CLI: that `tidings call ... tools` lists every upstream's tools under
// its prefix and a call of each upstream's echo is answered by it; and
// that `tidings watch` sees each upstream's tool added, its schema
// changed under the same name (changed, not removed and added), and the
// tool removed, each from notifications: every wait is far below the 30s
// the watchers poll at.
func TestGatewayPeers(t *testing.T) {
	node, nodeDir := nodeSetup(t)
	ups := []gwUpstream{
		{id: "gosdk", version: "2025-11-25", url: startPeerArgs(t, "gosdk-server", "-change")},
		{id: "mcpgo", version: "2026-07-28", command: []string{filepath.Join(bin, "mcpgo-server"), "-stdio", "-change"}},
		{id: "ts", version: "2025-11-25", url: startTSChangeServer(t, node, nodeDir)},
	}
	for _, u := range ups {
		checkUpstreamVersion(t, u)
	}
	g := startGateway(t, ups)
	gw := g.url

	// The CLI's runs share one bound; each wait for the watch has its own.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tools := gatewayTools(t, ctx, gw)
	for _, u := range ups {
		for _, name := range []string{"echo", peer.ChangeTool, peer.ShapeTool} {
			if _, ok := tools[u.prefixed(name)]; !ok {
				t.Errorf("tidings call %s tools: no %s; it lists %v", gw, u.prefixed(name), slices.Sorted(maps.Keys(tools)))
			}
		}
	}
	for name := range tools {
		if !slices.ContainsFunc(ups, func(u gwUpstream) bool { return strings.HasPrefix(name, u.id+"_") }) {
			t.Errorf("tidings call %s tools lists %s, which has no upstream's prefix", gw, name)
		}
	}
	for _, u := range ups {
		text := "through the gateway to " + u.id
		if got := callGateway(t, ctx, gw, u.prefixed("echo"), map[string]any{"text": text}); got != text {
			t.Errorf("%s answered %q, want %q", u.prefixed("echo"), got, text)
		}
	}
	if t.Failed() {
		return
	}

	// The watch starts after every upstream's listen is up, and its
	// first read must hold what tools listed.
	w := start(t, "tidings", "watch", "--json", "--poll-interval", "1h", gw)
	connected := waitWatch(t, w, "its listen acknowledged", 0, func(e watchEvent) bool { return e.Event == "connected" })
	if connected.Granted == nil || !connected.Granted.ToolsListChanged {
		t.Fatalf("tidings watch connected with granted %+v, want toolsListChanged", connected.Granted)
	}
	ev := waitWatch(t, w, "its first read of the tools", 0, func(e watchEvent) bool {
		return e.Event == "tools_changed" && len(e.Added) > 0
	})
	if want := slices.Sorted(maps.Keys(tools)); !slices.Equal(ev.Added, want) {
		t.Fatalf("tidings watch first read %v, want %v", ev.Added, want)
	}

	steps := []struct {
		what string
		tool string
		// field is where the watch must name the tool: added, changed
		// or removed.
		field string
	}{
		{peer.ChangeAdd, peer.FlickerTool, "added"},
		{peer.ChangeReshape, peer.ShapeTool, "changed"},
		{peer.ChangeRemove, peer.FlickerTool, "removed"},
		{peer.ChangeReshape, peer.ShapeTool, "changed"},
	}
	for _, u := range ups {
		for i, s := range steps {
			mark := len(w.stdoutSnapshot())
			callGateway(t, ctx, gw, u.prefixed(peer.ChangeTool), map[string]any{"what": s.what})
			name := u.prefixed(s.tool)
			ev := waitWatch(t, w, fmt.Sprintf("%s after %s %s", name, u.prefixed(peer.ChangeTool), s.what), mark, func(e watchEvent) bool {
				return e.Event == "tools_changed" && e.mentions(name)
			})
			if got := ev.fields(); len(got) != 1 || !slices.Equal(got[s.field], []string{name}) {
				t.Fatalf("step %d, %s %s of %s: tidings watch said %+v, want %s=[%s] alone", i+1, peer.ChangeTool, s.what, u.id, got, s.field, name)
			}
			if s.what == peer.ChangeReshape {
				checkShape(t, ctx, gw, u, i == 1)
			}
		}
	}
	if err := w.stop(); err != nil {
		t.Errorf("tidings watch after SIGINT: %v, want exit status 0; stderr:\n%s", err, lastLines(w.stderr.String(), 10))
	}

	t.Run("kept", func(t *testing.T) { checkGatewayKeeps(t, ctx, g, ups) })
}

// checkGatewayKeeps checks, by the gateway's /metrics, that it keeps
// what its upstreams answer as its documentation says, with these peers:
//
//   - a list an upstream does not offer (mcp-go and the TypeScript SDK
//     declare no prompts or resources, and answer -32601 to their lists)
//     is empty, not a failure: tidings_gateway_upstream_failures_total
//     stays 0 however often callers list prompts, resources and
//     templates;
//   - the tools of a 2025-11-25 upstream, whose session stream is up and
//     announces every change, are kept: a second `tidings call tools` with
//     nothing changed in between asks those upstreams nothing
//     (tidings_gateway_upstream_requests_total stays, cache hits grow).
func checkGatewayKeeps(t *testing.T, ctx context.Context, g *gateway, ups []gwUpstream) {
	read := func(what string) {
		t.Helper()
		if out, stderr, err := runCLI(ctx, []string{"call", g.url, what}); err != nil {
			t.Fatalf("tidings call %s %s: %v; stdout:\n%s\nstderr:\n%s", g.url, what, err, out, lastLines(stderr, 10))
		}
	}
	scrape := func() gatewayMetrics {
		t.Helper()
		m, err := g.metrics()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, what := range []string{"prompts", "resources", "templates", "prompts"} {
		read(what)
	}
	read("tools") // kept from here on, as nothing changes
	before := scrape()
	read("tools")
	after := scrape()
	for _, u := range ups {
		if f := after.of("tidings_gateway_upstream_failures_total", u.id); f != 0 {
			t.Errorf("upstream %s: %v failures, want 0: a list it does not offer is empty, not a failure", u.id, f)
		}
		if u.version != "2025-11-25" {
			continue // mcp-go answers ttlMs 0, private: asked again, rightly
		}
		asked := after.of("tidings_gateway_upstream_requests_total", u.id) - before.of("tidings_gateway_upstream_requests_total", u.id)
		hits := after.of("tidings_gateway_cache_hits_total", u.id) - before.of("tidings_gateway_cache_hits_total", u.id)
		if asked != 0 || hits == 0 {
			t.Errorf("upstream %s (2025-11-25, its stream up): a second tools list asked it %v time(s) and hit what was kept %v time(s); want 0 and at least 1",
				u.id, asked, hits)
		}
	}
}

// nodeSetup returns the Node binary and the folder of the SDK v1 scripts,
// or skips (fails under TIDINGS_INTEROP=1) when either is missing: the
// TypeScript upstream needs both, and a machine without Node must still
// pass the rest of this module's tests.
func nodeSetup(t *testing.T) (node, dir string) {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("TIDINGS_INTEROP") == "1" {
			t.Fatalf("TIDINGS_INTEROP=1 but %s", msg)
		}
		t.Skipf("the gateway test needs the TypeScript SDK v1: %s (set TIDINGS_NODE to a Node 22 binary and run npm ci in interop/node; scripts/test-all does both)", msg)
	}
	node = os.Getenv("TIDINGS_NODE")
	if node == "" {
		unavailable("TIDINGS_NODE is not set")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		unavailable("%s --version: %v", node, err)
	}
	version := strings.TrimSpace(string(out))
	major, _, _ := strings.Cut(strings.TrimPrefix(version, "v"), ".")
	if n, err := strconv.Atoi(major); err != nil || n < 22 {
		unavailable("%s is Node %s, need 22 or newer", node, version)
	}
	pkg, err := os.ReadFile(filepath.Join("..", "node", "node_modules", "@modelcontextprotocol", "sdk", "package.json"))
	if err != nil {
		unavailable("@modelcontextprotocol/sdk is not installed in interop/node/node_modules")
	}
	var meta struct {
		Version string `json:"version"`
	}
	if json.Unmarshal(pkg, &meta) != nil || !strings.HasPrefix(meta.Version, "1.") {
		unavailable("@modelcontextprotocol/sdk in interop/node/node_modules is %q, want 1.x", meta.Version)
	}
	dir, err = filepath.Abs(filepath.Join("..", "node", "legacy"))
	if err != nil {
		t.Fatal(err)
	}
	return node, dir
}

// startPeerArgs starts a peer server from bin on HTTP with args and
// returns its endpoint's URL, which it prints once it listens.
func startPeerArgs(t *testing.T, server string, args ...string) string {
	t.Helper()
	url, _ := startPeerProc(t, server, args...)
	return url
}

// startPeerProc is startPeerArgs that also returns the process, whose
// output a test reads.
func startPeerProc(t *testing.T, server string, args ...string) (string, *proc) {
	t.Helper()
	p := start(t, server, append(slices.Clone(args), "-addr", "127.0.0.1:0")...)
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	var url string
	if !p.stdout.waitFor(ctx, p.exited, func(all []string) bool {
		var ok bool
		url, ok = lineAfter(all, peer.URLPrefix)
		return ok
	}) {
		t.Fatalf("%s printed no %q line within %v; stdout:\n%s\nstderr:\n%s", server, peer.URLPrefix, checkTimeout, p.stdout, p.stderr)
	}
	return url, p
}

// startTSChangeServer runs sdk1-change-server.mjs and returns its URL,
// which it prints as {"url":...} once it listens. Node gets a stdin pipe:
// the script exits when its stdin ends.
func startTSChangeServer(t *testing.T, node, dir string) string {
	t.Helper()
	const script = "sdk1-change-server.mjs"
	p := startCmd(t, script, exec.Command(node, filepath.Join(dir, script), "0"), true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var url string
	if !p.stdout.waitFor(ctx, p.exited, func(all []string) bool {
		for _, l := range all {
			var hello struct {
				URL string `json:"url"`
			}
			if json.Unmarshal([]byte(l), &hello) == nil && hello.URL != "" {
				url = hello.URL
				return true
			}
		}
		return false
	}) {
		t.Fatalf("%s printed no {\"url\":...} line; stdout:\n%s\nstderr:\n%s", script, p.stdout, p.stderr)
	}
	return url
}

// checkUpstreamVersion asks the upstream directly, with the tidings
// client, which revision it settles on: the gateway's own client does the
// same, so this is the mix of eras the gateway serves from.
func checkUpstreamVersion(t *testing.T, u gwUpstream) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	var c *client.Client
	if u.url != "" {
		c = client.NewHTTP(u.url)
	} else {
		var err error
		if c, err = client.NewCommand(ctx, u.command[0], u.command[1:], client.WithStderr(io.Discard)); err != nil {
			t.Fatalf("starting %s: %v", strings.Join(u.command, " "), err)
		}
	}
	defer c.Close()
	v, err := c.ProtocolVersion(ctx)
	if err != nil || v != u.version {
		t.Fatalf("upstream %s: ProtocolVersion = %q, %v; want %s", u.id, v, err, u.version)
	}
	t.Logf("upstream %s speaks %s", u.id, v)
}

// startGateway writes a configuration naming ups, each with the default
// prefix, runs `tidings gateway` on it and returns the gateway once every
// upstream's listen is up (its /metrics says so), so that no change the
// test makes after can happen before the gateway hears of changes.
func startGateway(t *testing.T, ups []gwUpstream) *gateway {
	t.Helper()
	var cfg strings.Builder
	cfg.WriteString("upstreams:\n")
	for _, u := range ups {
		fmt.Fprintf(&cfg, "  - id: %s\n", u.id)
		if u.url != "" {
			fmt.Fprintf(&cfg, "    url: %s\n", u.url)
			continue
		}
		argv, _ := json.Marshal(u.command) // a JSON array is YAML too
		fmt.Fprintf(&cfg, "    command: %s\n", argv)
	}
	file := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(file, []byte(cfg.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	p := start(t, "tidings", "gateway", "--config", file, "--addr", "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	var url string
	if !p.stderr.waitFor(ctx, p.exited, func(all []string) bool {
		for _, l := range all {
			if _, rest, ok := strings.Cut(l, `msg="listening on `); ok {
				url, _, _ = strings.Cut(rest, `"`)
				return true
			}
		}
		return false
	}) {
		t.Fatalf("tidings gateway logged no listening address within %v; config:\n%s\nstderr:\n%s", checkTimeout, cfg.String(), p.stderr)
	}

	g := &gateway{url: url, proc: p}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		m, err := g.metrics()
		if err == nil && !slices.ContainsFunc(ups, func(u gwUpstream) bool { return m.of("tidings_gateway_upstream_listens", u.id) != 1 }) {
			return g
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the gateway's upstream listens were not all up within %v: %v %v\nstderr:\n%s", checkTimeout, m, err, p.stderr)
		case <-tick.C:
		}
	}
}

// gateway is a running `tidings gateway`.
type gateway struct {
	url  string // its MCP endpoint
	proc *proc
}

// gatewayMetrics are the tidings_gateway_* series of a gateway's
// /metrics, by name and upstream.
type gatewayMetrics map[string]float64

// of returns the value of the series name for the upstream id.
func (m gatewayMetrics) of(name, id string) float64 {
	return m[name+`{upstream="`+id+`"}`]
}

// metrics reads the gateway's /metrics, on a connection of its own that
// is closed after: the Go HTTP client keeps none open past the read.
func (g *gateway) metrics() (gatewayMetrics, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true
	resp, err := (&http.Client{Transport: tr}).Get(strings.TrimSuffix(g.url, "/mcp") + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	m := gatewayMetrics{}
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(l, "tidings_gateway_") {
			continue
		}
		k, v, ok := strings.Cut(l, " ")
		if f, err := strconv.ParseFloat(v, 64); ok && err == nil {
			m[k] = f
		}
	}
	return m, nil
}

// gatewayTool is what the test reads of a tool the gateway lists.
type gatewayTool struct {
	Name        string `json:"name"`
	InputSchema struct {
		Properties map[string]json.RawMessage `json:"properties"`
	} `json:"inputSchema"`
}

// gatewayTools runs `tidings call URL tools` and returns the tools by name.
func gatewayTools(t *testing.T, ctx context.Context, url string) map[string]gatewayTool {
	t.Helper()
	out, stderr, err := runCLI(ctx, []string{"call", url, "tools"})
	if err != nil {
		t.Fatalf("tidings call %s tools: %v; stderr:\n%s", url, err, lastLines(stderr, 15))
	}
	var list []gatewayTool
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("tidings call %s tools printed\n%s\nnot a JSON array of tools: %v", url, out, err)
	}
	tools := map[string]gatewayTool{}
	for _, tl := range list {
		tools[tl.Name] = tl
	}
	return tools
}

// callGateway runs `tidings call URL call TOOL ARGS` and returns the text
// of its result, failing the test on anything but one text content.
func callGateway(t *testing.T, ctx context.Context, url, tool string, args map[string]any) string {
	t.Helper()
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	out, stderr, err := runCLI(ctx, []string{"call", url, "call", tool, string(b)})
	if err != nil {
		t.Fatalf("tidings call %s call %s %s: %v; stdout:\n%s\nstderr:\n%s", url, tool, b, err, out, lastLines(stderr, 15))
	}
	text, ok := resultText(out)
	if !ok {
		t.Fatalf("tidings call %s call %s %s printed\n%s\nwant one text content", url, tool, b, out)
	}
	return text
}

// checkShape checks what the gateway serves of u's shape tool after a
// reshape: its listed schema has "times" exactly when wide, and a call
// of it, routed to u, answers with the form u has now.
func checkShape(t *testing.T, ctx context.Context, gw string, u gwUpstream, wide bool) {
	t.Helper()
	name := u.prefixed(peer.ShapeTool)
	want := peer.Narrow
	if wide {
		want = peer.Wide
	}
	tl, ok := gatewayTools(t, ctx, gw)[name]
	if _, hasTimes := tl.InputSchema.Properties["times"]; !ok || hasTimes != wide {
		t.Fatalf("after a reshape to %s, the gateway lists %s as %+v", want, name, tl)
	}
	if got := callGateway(t, ctx, gw, name, map[string]any{"text": "x"}); got != string(want) {
		t.Fatalf("%s answered %q, want %q", name, got, want)
	}
}

// watchEvent is one line of `tidings watch --json`.
type watchEvent struct {
	Event   string   `json:"event"`
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
	Changed []string `json:"changed"`
	Granted *struct {
		ToolsListChanged bool `json:"toolsListChanged"`
	} `json:"granted"`
}

// mentions reports whether the event names name in any of its lists.
func (e watchEvent) mentions(name string) bool {
	return slices.Contains(e.Added, name) || slices.Contains(e.Removed, name) || slices.Contains(e.Changed, name)
}

// fields returns the event's non-empty lists by their names.
func (e watchEvent) fields() map[string][]string {
	m := map[string][]string{}
	for k, v := range map[string][]string{"added": e.Added, "removed": e.Removed, "changed": e.Changed} {
		if len(v) > 0 {
			m[k] = v
		}
	}
	return m
}

// stdoutSnapshot returns the complete lines the process printed so far.
func (p *proc) stdoutSnapshot() []string {
	all, _ := p.stdout.snapshot()
	return all
}

// waitWatch waits, up to checkTimeout, for a line of the watch's output
// after its first skip lines that match accepts, and returns it. Lines
// that are not JSON fail the test: --json prints nothing else to stdout.
func waitWatch(t *testing.T, w *proc, what string, skip int, match func(watchEvent) bool) watchEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	var found watchEvent
	var bad string
	ok := w.stdout.waitFor(ctx, w.exited, func(all []string) bool {
		for _, l := range all[min(skip, len(all)):] {
			var e watchEvent
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				bad = l
				return true
			}
			if match(e) {
				found = e
				return true
			}
		}
		return false
	})
	switch {
	case bad != "":
		t.Fatalf("tidings watch --json printed %q, not a JSON event", bad)
	case !ok:
		t.Fatalf("tidings watch did not show %s within %v; its last lines after the change:\n%s\nstderr:\n%s",
			what, checkTimeout, strings.Join(w.stdoutSnapshot()[min(skip, len(w.stdoutSnapshot())):], "\n"), lastLines(w.stderr.String(), 10))
	}
	return found
}

// TestGatewaySharesAGoSDKList: 100 callers list the tools of a go-sdk
// server through `tidings gateway`, which asks it with its own
// credential: the answer is the same for every caller, so the go-sdk
// server is read at most once for them all (counted at the server, which
// prints a line for each tools/list it answers), though it gives no
// caching hint and speaks 2025-11-25.
func TestGatewaySharesAGoSDKList(t *testing.T) {
	url, p := startPeerProc(t, "gosdk-server", "-log-lists", "-flicker", "0")
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	g := startGateway(t, []gwUpstream{{id: "gosdk", version: "2025-11-25", url: url}})
	reads := func() int {
		all, _ := p.stdout.snapshot()
		return len(slices.DeleteFunc(slices.Clone(all), func(l string) bool { return l != peer.ListsLine }))
	}
	before := reads()
	const callers = 100
	for i := range callers {
		c := client.NewHTTP(g.url)
		tools, err := c.Tools(ctx)
		c.Close()
		if err != nil {
			t.Fatalf("caller %d: tools/list through the gateway: %v", i, err)
		}
		if !slices.ContainsFunc(tools, func(tl mcp.Tool) bool { return tl.Name == "gosdk_echo" }) {
			t.Fatalf("caller %d: the gateway listed %d tools, none gosdk_echo", i, len(tools))
		}
	}
	if n := reads() - before; n > 1 {
		t.Fatalf("the go-sdk server answered %d tools/list for %d callers of the gateway; want at most one (before them: %d)", n, callers, before)
	}
	t.Logf("the go-sdk server answered %d tools/list before the callers and %d for %d callers", before, reads()-before, callers)
}
