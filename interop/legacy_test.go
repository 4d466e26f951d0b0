package interop_test

// The tests in this file check the 2025-11-25 era against the TypeScript
// SDK v1 (@modelcontextprotocol/sdk 1.x), which speaks that revision only:
//
//   - its Client and StreamableHTTPClientTransport against the tidings
//     server (node/legacy/sdk1-client.mjs): initialize and a session, ping,
//     logging/setLevel, paginated lists, calls, an elicitation the server
//     asks for in the middle of a call, reads, resources/subscribe with
//     the update arriving on the session's GET stream, a tools/list_changed
//     the Go side causes, and DELETE;
//   - the tidings client against its McpServer (node/legacy/sdk1-server.mjs)
//     over stateful Streamable HTTP and over stdio: the client must detect
//     the older server, fall back to initialize, and keep its API, events
//     and freshness model.
//
// They need Node 22 (TIDINGS_NODE) and the SDK v1 installed in
// node/node_modules (npm ci in interop/node), and skip without them unless
// TIDINGS_INTEROP=1.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/client"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// sdk1Setup returns the Node binary and the folder of the SDK v1 scripts,
// or skips (fails under TIDINGS_INTEROP=1) when either is missing.
func sdk1Setup(t *testing.T) (node, dir string) {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("TIDINGS_INTEROP") == "1" {
			t.Fatalf("TIDINGS_INTEROP=1 but %s", msg)
		}
		t.Skipf("interop with the TypeScript SDK v1 skipped: %s (set TIDINGS_NODE to a Node 22 binary and run npm ci in interop/node; scripts/test-all does both)", msg)
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
	pkg, err := os.ReadFile(filepath.Join("node", "node_modules", "@modelcontextprotocol", "sdk", "package.json"))
	if err != nil {
		unavailable("@modelcontextprotocol/sdk is not installed in interop/node/node_modules")
	}
	var meta struct {
		Version string `json:"version"`
	}
	if json.Unmarshal(pkg, &meta) != nil || !strings.HasPrefix(meta.Version, "1.") {
		unavailable("@modelcontextprotocol/sdk in interop/node/node_modules is %q, want 1.x", meta.Version)
	}
	dir, err = filepath.Abs(filepath.Join("node", "legacy"))
	if err != nil {
		t.Fatal(err)
	}
	return node, dir
}

// getWatch signals when a session's GET stream has been answered with an
// open SSE stream: from then on the server sends it every change.
type getWatch struct {
	next   http.Handler
	mu     sync.Mutex
	opened chan struct{}
	once   sync.Once
	gets   int
}

func (g *getWatch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		g.mu.Lock()
		g.gets++
		g.mu.Unlock()
		w = &headerSpy{ResponseWriter: w, onHeader: func(status int, h http.Header) {
			if status == http.StatusOK && h.Get("Content-Type") == "text/event-stream" {
				g.once.Do(func() { close(g.opened) })
			}
		}}
	}
	g.next.ServeHTTP(w, r)
}

// headerSpy reports the status and headers of a response when written.
type headerSpy struct {
	http.ResponseWriter
	onHeader func(int, http.Header)
}

func (h *headerSpy) WriteHeader(status int) {
	h.onHeader(status, h.Header())
	h.ResponseWriter.WriteHeader(status)
}

// Unwrap lets http.ResponseController flush through the spy.
func (h *headerSpy) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// TestSDK1ClientWithGoServer drives a client built on the TypeScript SDK v1
// against the tidings server, on the endpoint modern clients use.
func TestSDK1ClientWithGoServer(t *testing.T) {
	node, dir := sdk1Setup(t)
	srv := newGoServer(t)
	h := streamhttp.New(srv)
	gw := &getWatch{next: h, opened: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle("/mcp", gw)
	hs := httptest.NewServer(mux)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		hs.CloseClientConnections()
		hs.Close()
	})

	steps, order := runSteps(t, node, dir, "sdk1-client.mjs", hs.URL+"/mcp", func(step string) {
		if step != "ready" {
			return
		}
		if n := h.SessionCount(); n != 1 {
			t.Errorf("SessionCount = %d while the SDK client is connected, want 1", n)
		}
		// The SDK opens its GET stream on its own after
		// notifications/initialized; announce only once it is up.
		select {
		case <-gw.opened:
		case <-time.After(20 * time.Second):
			t.Fatal("the SDK client never opened its GET stream")
		}
		srv.ResourceUpdated("config://other") // not subscribed: never sent
		srv.ResourceUpdated("config://app")
		if err := srv.AddTool(mcp.Tool{Name: "late_tool", InputSchema: jsontext.Value(`{"type":"object"}`)},
			func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
			}); err != nil {
			t.Fatal(err)
		}
	})
	// updated and changed may come in either order.
	wantOrder := []string{"connected", "ping", "loglevel", "tools", "greet", "elicitation", "confirm", "read", "subscribed", "ready", "updated", "changed", "tools_after", "unsubscribed", "terminated"}
	got := slices.Clone(order)
	if i := slices.Index(got, "changed"); i >= 0 && i+1 < len(got) && got[i+1] == "updated" {
		got[i], got[i+1] = got[i+1], got[i]
	}
	if !slices.Equal(got, wantOrder) {
		t.Fatalf("steps = %v, want %v", order, wantOrder)
	}
	get := func(step string, v any) {
		t.Helper()
		if err := json.Unmarshal(steps[step], v); err != nil {
			t.Fatalf("step %s: %v", step, err)
		}
	}

	var connected struct {
		ProtocolVersion string             `json:"protocolVersion"`
		ServerInfo      mcp.Implementation `json:"serverInfo"`
		Capabilities    mcp.ServerCaps     `json:"capabilities"`
		SessionID       string             `json:"sessionId"`
	}
	get("connected", &connected)
	if connected.ProtocolVersion != mcp.LegacyVersion || connected.ServerInfo.Name != "tidings-interop" {
		t.Errorf("connected = %+v, want tidings-interop at %s", connected, mcp.LegacyVersion)
	}
	if c := connected.Capabilities; c.Tools == nil || !c.Tools.ListChanged || c.Resources == nil || !c.Resources.Subscribe {
		t.Errorf("capabilities = %+v, want tools.listChanged and resources.subscribe", c)
	}
	if connected.SessionID == "" {
		t.Error("the SDK client got no session id")
	}
	for _, step := range []string{"ping", "loglevel", "subscribed", "unsubscribed"} {
		var r struct {
			Result map[string]any `json:"result"`
		}
		get(step, &r)
		if len(r.Result) != 0 {
			t.Errorf("%s result = %v, want {}", step, r.Result)
		}
	}
	var tools struct {
		Names []string `json:"names"`
	}
	get("tools", &tools)
	if want := []string{"confirm", "greet", "regional", "t_a", "t_b"}; !slices.Equal(tools.Names, want) {
		t.Errorf("tools = %v, want %v (three pages of two)", tools.Names, want)
	}
	var call struct {
		Text    []string `json:"text"`
		IsError bool     `json:"isError"`
	}
	get("greet", &call)
	if want := []string{"Hello, sdk1!"}; !slices.Equal(call.Text, want) || call.IsError {
		t.Errorf("greet = %q (isError %v), want %q", call.Text, call.IsError, want)
	}
	var elicitation struct {
		Message string `json:"message"`
	}
	get("elicitation", &elicitation)
	if elicitation.Message != "Proceed?" {
		t.Errorf("elicitation message = %q, want Proceed?", elicitation.Message)
	}
	get("confirm", &call)
	if want := []string{"action=accept proceed=true state=s1"}; !slices.Equal(call.Text, want) {
		t.Errorf("confirm = %q, want %q", call.Text, want)
	}
	var read struct {
		Text []string `json:"text"`
	}
	get("read", &read)
	if !slices.Equal(read.Text, []string{"debug=false"}) {
		t.Errorf("read = %q, want debug=false", read.Text)
	}
	var upd struct {
		URI string `json:"uri"`
	}
	get("updated", &upd)
	if upd.URI != "config://app" {
		t.Errorf("updated uri = %q, want config://app", upd.URI)
	}
	get("tools_after", &tools)
	if want := []string{"confirm", "greet", "late_tool", "regional", "t_a", "t_b"}; !slices.Equal(tools.Names, want) {
		t.Errorf("tools after the change = %v, want %v", tools.Names, want)
	}
	if n := h.SessionCount(); n != 0 {
		t.Errorf("SessionCount = %d after the SDK's DELETE, want 0", n)
	}
	gw.mu.Lock()
	gets := gw.gets
	gw.mu.Unlock()
	if gets < 1 {
		t.Error("the SDK client opened no GET stream")
	}
}

// startSDK1Server runs sdk1-server.mjs over HTTP and returns its URL.
func startSDK1Server(t *testing.T, node, dir string) string {
	t.Helper()
	p := startNode(t, node, dir, "sdk1-server.mjs", "http", "0")
	line, ok := p.next(t, 30*time.Second)
	if !ok {
		t.Fatalf("sdk1-server.mjs exited before listening; stderr:\n%s", p.stderr.String())
	}
	var hello struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(line), &hello); err != nil || hello.URL == "" {
		t.Fatalf("sdk1-server.mjs printed %q, want {\"url\":...}", line)
	}
	return hello.URL
}

// sdk1Client is a tidings client for the SDK v1 server that answers
// elicitations with proceed=true and reports their messages.
func sdk1Client(t *testing.T, newClient func(...client.Option) (*client.Client, error)) (*client.Client, chan string) {
	t.Helper()
	elicited := make(chan string, 8)
	c, err := newClient(
		client.WithClientInfo(mcp.Implementation{Name: "tidings-interop", Version: "1.0.0"}),
		client.WithLogger(quietLogger(t)),
		client.WithTimeout(20*time.Second),
		client.WithElicitation(func(_ context.Context, params jsontext.Value) (*mcp.ElicitResult, error) {
			var p struct {
				Message string `json:"message"`
			}
			if err := json.Unmarshal(params, &p); err != nil {
				return nil, err
			}
			elicited <- p.Message
			return &mcp.ElicitResult{Action: "accept", Content: map[string]jsontext.Value{"proceed": jsontext.Value("true")}}, nil
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, elicited
}

// exerciseSDK1Server runs the checks shared by the HTTP and stdio
// variants.
func exerciseSDK1Server(t *testing.T, c *client.Client, elicited chan string) {
	ctx := t.Context()
	if era, err := c.Era(ctx); err != nil || era != client.EraLegacy {
		t.Fatalf("Era = %q, %v; want %s", era, err, client.EraLegacy)
	}
	d, err := c.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.ServerInfo == nil || d.ServerInfo.Name != "sdk1-interop-server" || !slices.Equal(d.SupportedVersions, []string{mcp.LegacyVersion}) {
		t.Errorf("Discover = %+v (serverInfo %+v)", d, d.ServerInfo)
	}
	tools, err := c.Tools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"add_tool", "bump", "confirm", "confirm_later", "echo"}; !slices.Equal(toolNames(tools), want) {
		t.Errorf("tools = %v, want %v", toolNames(tools), want)
	}
	r, err := c.CallTool(ctx, "echo", map[string]any{"text": "hi there"})
	if err != nil || text(t, r) != "hi there" || r.IsError {
		t.Fatalf("echo = %+v, %v", r, err)
	}
	r, err = c.CallTool(ctx, "confirm", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text(t, r), `accept: {"proceed":true}`; got != want {
		t.Errorf("confirm = %q, want %q", got, want)
	}
	select {
	case m := <-elicited:
		if m != "Proceed?" {
			t.Errorf("elicitation message = %q", m)
		}
	default:
		t.Error("the elicitation handler was not called")
	}
	rr, err := c.ReadResource(ctx, "interop://counter")
	if err != nil || len(rr.Contents) != 1 || rr.Contents[0].Text == nil || *rr.Contents[0].Text != "count=0" {
		t.Fatalf("read interop://counter = %+v, %v", rr, err)
	}
	if f := c.Freshness(mcp.MethodToolsList, ""); f.State != client.Stale {
		t.Errorf("tools/list freshness without a watcher = %v, want stale (a 2025-11-25 answer has no TTL)", f.State)
	}

	events := make(chan client.Event, 64)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := c.Watch(wctx, client.WatchOptions{Tools: true, URIs: []string{"interop://counter"}, OnEvent: func(e client.Event) { events <- e }})
	defer w.Close()
	got := waitEvents(t, events, 20*time.Second,
		func(e client.Event) bool { return e.Kind == client.Connected },
		func(e client.Event) bool { return e.Kind == client.ToolsChanged },
		func(e client.Event) bool { return e.Kind == client.ResourceUpdated && e.URI == "interop://counter" },
	)
	if g := got[0].Granted; !g.ToolsListChanged || !slices.Equal(g.ResourceSubscriptions, []string{"interop://counter"}) {
		t.Errorf("granted = %+v, want toolsListChanged and interop://counter", g)
	}
	if w.State() != client.Live {
		t.Errorf("watcher state = %v, want live", w.State())
	}
	if _, err := c.Tools(ctx); err != nil {
		t.Fatal(err)
	}
	if f := c.Freshness(mcp.MethodToolsList, ""); f.State != client.Fresh {
		t.Errorf("tools/list freshness with a live watcher = %v, want fresh", f.State)
	}

	// The SDK server registers a tool and announces it.
	r, err = c.CallTool(ctx, "add_tool", map[string]any{"name": "late_tool"})
	if err != nil || text(t, r) != "added late_tool" {
		t.Fatalf("add_tool = %+v, %v", r, err)
	}
	e := waitEvents(t, events, 20*time.Second, func(e client.Event) bool {
		return e.Kind == client.ToolsChanged && len(e.Added)+len(e.Removed)+len(e.Changed) > 0
	})[0]
	if !slices.Equal(e.Added, []string{"late_tool"}) || len(e.Removed)+len(e.Changed) != 0 {
		t.Errorf("tools changed: added %v removed %v changed %v, want added [late_tool]", e.Added, e.Removed, e.Changed)
	}
	if r, err := c.CallTool(ctx, "late_tool", nil); err != nil || text(t, r) != "I am late_tool" {
		t.Errorf("late_tool = %+v, %v", r, err)
	}

	// The SDK server changes a resource and announces it to subscribers.
	if r, err := c.CallTool(ctx, "bump", map[string]any{}); err != nil || text(t, r) != "count=1" {
		t.Fatalf("bump = %+v, %v", r, err)
	}
	e = waitEvents(t, events, 20*time.Second, func(e client.Event) bool {
		return e.Kind == client.ResourceUpdated && len(e.Changed) > 0
	})[0]
	if e.URI != "interop://counter" {
		t.Errorf("resource updated: %+v", e)
	}
	if rr, err := c.ReadResource(ctx, "interop://counter"); err != nil || *rr.Contents[0].Text != "count=1" {
		t.Errorf("read after bump = %+v, %v", rr, err)
	}

	// An elicitation that belongs to no request comes on the session's
	// stream, which the watcher holds, and is answered from there.
	r, err = c.CallTool(ctx, "confirm_later", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := text(t, r), `accept: {"proceed":true}`; got != want {
		t.Errorf("confirm_later = %q, want %q", got, want)
	}
	select {
	case m := <-elicited:
		if m != "Proceed later?" {
			t.Errorf("elicitation message = %q", m)
		}
	default:
		t.Error("the elicitation handler was not called for confirm_later")
	}
}

// TestGoClientWithSDK1Server drives the tidings client against an SDK v1
// server over stateful Streamable HTTP.
func TestGoClientWithSDK1Server(t *testing.T) {
	node, dir := sdk1Setup(t)
	url := startSDK1Server(t, node, dir)
	c, elicited := sdk1Client(t, func(opts ...client.Option) (*client.Client, error) {
		var hopts []client.HTTPOption
		for _, o := range opts {
			hopts = append(hopts, o)
		}
		return client.NewHTTP(url, hopts...), nil
	})
	exerciseSDK1Server(t, c, elicited)
}

// TestGoClientWithSDK1StdioServer drives the tidings client against the
// same SDK v1 server run as a subprocess on stdio.
func TestGoClientWithSDK1StdioServer(t *testing.T) {
	node, dir := sdk1Setup(t)
	var stderr lockedBuffer
	c, elicited := sdk1Client(t, func(opts ...client.Option) (*client.Client, error) {
		copts := []client.CommandOption{client.WithStderr(&stderr)}
		for _, o := range opts {
			copts = append(copts, o)
		}
		return client.NewCommand(t.Context(), node, []string{filepath.Join(dir, "sdk1-server.mjs"), "stdio"}, copts...)
	})
	exerciseSDK1Server(t, c, elicited)
	if t.Failed() {
		t.Logf("sdk1-server.mjs stderr:\n%s", stderr.String())
	}
}
