// Package interop_test checks that tidings and the official TypeScript MCP
// SDK v2 understand each other at protocol revision 2026-07-28, in both
// directions, over real HTTP on loopback:
//
//   - the tidings client against a server built on the SDK
//     (node/ts-server.mjs): lists across pages, calls, mirrored headers,
//     multi round-trip input, resource reads, and a Watcher whose listen
//     stream sees the SDK server's change notifications and invalidates the
//     client's cache;
//   - a client built on the SDK (node/ts-client.mjs) against the tidings
//     server: discovery, listen, paginated lists, calls, mirrored headers,
//     multi round-trip input, reads, and a tools/list_changed that the Go
//     side causes by adding a tool.
//   - a client built on the SDK (node/ts-oauth-client.mjs) that authorizes
//     itself with the SDK's OAuth support (discovery from the challenge,
//     client credentials grant) against a tidings server that requires
//     tokens from a real authorization server (oauth_test.go);
//   - the tidings client, with its OAuth flow, against a server built on
//     the SDK that requires tokens (node/ts-oauth-server.mjs, behind the
//     SDK's requireBearerAuth): discovery from the challenge and the
//     authorization code grant with PKCE against a real authorization
//     server whose login approves at once (oauth_test.go).
//
// The tests need Node 22 (TIDINGS_NODE names the binary) and the SDK
// packages installed in node/node_modules (npm ci in interop/node). Without
// them they skip, unless TIDINGS_INTEROP=1 demands that they run.
package interop_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
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
	"go.uber.org/goleak"

	"tidings/client"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sdkPackages are the npm packages the scripts import.
var sdkPackages = []string{"@modelcontextprotocol/server", "@modelcontextprotocol/node", "@modelcontextprotocol/client", "jose"}

// nodeSetup returns the Node binary and the folder holding the scripts and
// their node_modules, or skips (fails under TIDINGS_INTEROP=1) when either
// is missing.
func nodeSetup(t *testing.T) (node, dir string) {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("TIDINGS_INTEROP") == "1" {
			t.Fatalf("TIDINGS_INTEROP=1 but %s", msg)
		}
		t.Skipf("interop with the TypeScript SDK skipped: %s (set TIDINGS_NODE to a Node 22 binary and run npm ci in interop/node; scripts/test-all does both)", msg)
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
	dir, err = filepath.Abs("node")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range sdkPackages {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", p, "package.json")); err != nil {
			unavailable("%s is not installed in interop/node/node_modules", p)
		}
	}
	return node, dir
}

// lockedBuffer collects a subprocess's stderr for failure reports.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// nodeProc is a running Node script. Its stdout lines arrive on lines,
// which is closed when the script ends; done is closed once it has been
// waited for.
type nodeProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *lockedBuffer
	done   chan struct{}
	err    error // valid after done
}

// startNode runs script with args in dir. Cleanup closes the script's
// stdin (the scripts exit when it closes), kills it if it lingers, and
// waits for it.
func startNode(t *testing.T, node, dir, script string, args ...string) *nodeProc {
	t.Helper()
	cmd := exec.Command(node, append([]string{script}, args...)...)
	cmd.Dir = dir
	p := &nodeProc{cmd: cmd, lines: make(chan string, 256), stderr: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", script, err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.stdin.Close()
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", script, p.stderr.String())
		}
	})
	return p
}

// next returns the script's next stdout line; ok is false when the script
// ended first.
func (p *nodeProc) next(t *testing.T, timeout time.Duration) (line string, ok bool) {
	t.Helper()
	select {
	case line, ok = <-p.lines:
		return line, ok
	case <-time.After(timeout):
		t.Fatalf("no output from %s within %v; stderr:\n%s", p.cmd.Args[1], timeout, p.stderr.String())
		return "", false
	}
}

// quietLogger drops the client's warnings unless the test runs verbosely.
func quietLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

func text(t *testing.T, r *mcp.CallToolResult) string {
	t.Helper()
	var parts []string
	for _, c := range r.Content {
		if c.Text != nil {
			parts = append(parts, *c.Text)
		}
	}
	return strings.Join(parts, "\n")
}

func toolNames(ts []mcp.Tool) []string {
	var out []string
	for _, t := range ts {
		out = append(out, t.Name)
	}
	slices.Sort(out)
	return out
}

// waitEvents reads watcher events until every predicate has matched one
// event (in any order), and returns the matching events in predicate
// order. Other events are logged and dropped.
func waitEvents(t *testing.T, events <-chan client.Event, timeout time.Duration, preds ...func(client.Event) bool) []client.Event {
	t.Helper()
	got := make([]client.Event, len(preds))
	matched := make([]bool, len(preds))
	left := len(preds)
	deadline := time.After(timeout)
	for left > 0 {
		select {
		case e := <-events:
			hit := false
			for i, p := range preds {
				if !matched[i] && p(e) {
					got[i], matched[i], hit = e, true, true
					left--
					break
				}
			}
			if !hit {
				t.Logf("event (not waited for): %v added=%v removed=%v changed=%v uri=%q err=%v", e.Kind, e.Added, e.Removed, e.Changed, e.URI, e.Err)
			}
		case <-deadline:
			t.Fatalf("watcher events: %d of %d expected events did not arrive within %v", left, len(preds), timeout)
		}
	}
	return got
}

// TestGoClientWithTSServer drives the tidings client against a server built
// on the TypeScript SDK.
func TestGoClientWithTSServer(t *testing.T) {
	node, dir := nodeSetup(t)
	p := startNode(t, node, dir, "ts-server.mjs", "0")
	line, ok := p.next(t, 30*time.Second)
	if !ok {
		t.Fatalf("ts-server.mjs exited before listening; stderr:\n%s", p.stderr.String())
	}
	var hello struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(line), &hello); err != nil || hello.URL == "" {
		t.Fatalf("ts-server.mjs printed %q, want {\"url\":...}", line)
	}

	ctx := t.Context()
	elicited := make(chan string, 4)
	c := client.NewHTTP(hello.URL,
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
	t.Cleanup(func() { _ = c.Close() })

	t.Run("discover", func(t *testing.T) {
		d, err := c.Discover(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(d.SupportedVersions, mcp.Version) {
			t.Errorf("supportedVersions = %v, want it to contain %s", d.SupportedVersions, mcp.Version)
		}
		if d.ServerInfo == nil || d.ServerInfo.Name != "ts-interop-server" {
			t.Errorf("serverInfo = %+v, want name ts-interop-server", d.ServerInfo)
		}
		if d.Capabilities.Tools == nil {
			t.Errorf("capabilities = %+v, want tools", d.Capabilities)
		}
	})

	t.Run("tools", func(t *testing.T) {
		tools, err := c.Tools(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"add", "add_tool", "bump", "confirm", "echo", "regional"}
		if got := toolNames(tools); !slices.Equal(got, want) {
			t.Errorf("tools = %v, want %v", got, want)
		}
		// The list expires ttlMs after its page was received, which is a
		// moment before the walk (and so the entry) was complete.
		if f := c.Freshness(mcp.MethodToolsList, ""); f.State != client.Fresh || f.Scope != mcp.ScopePublic ||
			f.Expires.Sub(f.ObservedAt) > time.Minute || f.Expires.Sub(f.ObservedAt) < time.Minute-5*time.Second {
			t.Errorf("tools/list freshness = %+v, want fresh, public, for the server's ttlMs 60000", f)
		}
	})

	t.Run("call", func(t *testing.T) {
		r, err := c.CallTool(ctx, "echo", map[string]any{"text": "hi there"})
		if err != nil {
			t.Fatal(err)
		}
		if got := text(t, r); got != "hi there" || r.IsError {
			t.Errorf("echo = %q (isError %v), want %q", got, r.IsError, "hi there")
		}
		r, err = c.CallTool(ctx, "add", map[string]any{"a": 2, "b": 3.5})
		if err != nil {
			t.Fatal(err)
		}
		if got := text(t, r); got != "5.5" {
			t.Errorf("add text = %q, want 5.5", got)
		}
		var sc struct {
			Sum float64 `json:"sum"`
		}
		if err := json.Unmarshal(r.StructuredContent, &sc); err != nil || sc.Sum != 5.5 {
			t.Errorf("add structuredContent = %s, want {\"sum\":5.5}", r.StructuredContent)
		}
		// Invalid arguments are a tool error the model can read.
		r, err = c.CallTool(ctx, "add", map[string]any{"a": "two"})
		if err != nil {
			t.Fatal(err)
		}
		if !r.IsError {
			t.Errorf("add with a string argument: isError = false, want true (%s)", text(t, r))
		}
	})

	t.Run("mirrored header", func(t *testing.T) {
		// The SDK server checks Mcp-Param-Region against the argument and
		// reports the header as it arrived.
		for region, header := range map[string]string{
			"eu-west": "eu-west",
			"Zürich":  "=?base64?WsO8cmljaA==?=",
			" padded": "=?base64?IHBhZGRlZA==?=",
		} {
			r, err := c.CallTool(ctx, "regional", map[string]any{"region": region})
			if err != nil {
				t.Fatalf("regional %q: %v", region, err)
			}
			if got := text(t, r); got != header || r.IsError {
				t.Errorf("regional %q: server saw Mcp-Param-Region %q (isError %v), want %q", region, got, r.IsError, header)
			}
		}
	})

	t.Run("input required", func(t *testing.T) {
		r, err := c.CallTool(ctx, "confirm", map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := text(t, r), `confirmed: {"proceed":true} state: opaque-state-1`; got != want {
			t.Errorf("confirm = %q, want %q", got, want)
		}
		select {
		case m := <-elicited:
			if m != "Proceed?" {
				t.Errorf("elicitation message = %q, want Proceed?", m)
			}
		default:
			t.Error("the elicitation handler was not called")
		}
	})

	t.Run("resources across pages", func(t *testing.T) {
		rs, err := c.Resources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var uris []string
		for _, r := range rs {
			uris = append(uris, r.URI)
		}
		want := []string{"interop://readme", "interop://counter", "interop://r/1", "interop://r/2", "interop://r/3"}
		if !slices.Equal(uris, want) {
			t.Errorf("resources = %v, want %v (three pages of two)", uris, want)
		}
		rr, err := c.ReadResource(ctx, "interop://readme")
		if err != nil {
			t.Fatal(err)
		}
		if len(rr.Contents) != 1 || rr.Contents[0].Text == nil || *rr.Contents[0].Text != "hello from the TypeScript SDK" {
			t.Errorf("read interop://readme = %+v", rr.Contents)
		}
		if _, err := c.ReadResource(ctx, "interop://nothing"); err == nil {
			t.Error("read of an unknown resource succeeded")
		}
	})

	t.Run("watch", func(t *testing.T) {
		const counter = "interop://counter"
		readCounter := func(c *client.Client) string {
			t.Helper()
			rr, err := c.ReadResource(ctx, counter)
			if err != nil {
				t.Fatal(err)
			}
			if len(rr.Contents) != 1 || rr.Contents[0].Text == nil {
				t.Fatalf("read %s = %+v", counter, rr.Contents)
			}
			return *rr.Contents[0].Text
		}
		// A second client without a watcher shows what the cache would
		// serve without change notifications: the answer it holds stays
		// fresh for the server's 60s TTL.
		plain := client.NewHTTP(hello.URL, client.WithLogger(quietLogger(t)))
		defer plain.Close()
		if tools, err := plain.Tools(ctx); err != nil || slices.Contains(toolNames(tools), "late_tool") {
			t.Fatalf("plain client tools = %v, %v", toolNames(tools), err)
		}
		if got := readCounter(plain); got != "count=0" {
			t.Fatalf("plain client: counter = %q, want count=0", got)
		}

		events := make(chan client.Event, 64)
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		w := c.Watch(wctx, client.WatchOptions{Tools: true, URIs: []string{counter}, OnEvent: func(e client.Event) { events <- e }})
		defer w.Close()

		got := waitEvents(t, events, 20*time.Second,
			func(e client.Event) bool { return e.Kind == client.Connected },
			func(e client.Event) bool { return e.Kind == client.ToolsChanged },
			func(e client.Event) bool { return e.Kind == client.ResourceUpdated && e.URI == counter },
		)
		if g := got[0].Granted; !g.ToolsListChanged || !slices.Contains(g.ResourceSubscriptions, counter) {
			t.Errorf("granted = %+v, want toolsListChanged and %s", g, counter)
		}
		if added := got[1].Added; !slices.Contains(added, "echo") || !slices.Contains(added, "add_tool") {
			t.Errorf("first tools event added %v, want the whole list", added)
		}
		if w.State() != client.Live {
			t.Errorf("watcher state = %v, want live", w.State())
		}
		if got := readCounter(c); got != "count=0" {
			t.Fatalf("counter = %q, want count=0", got)
		}

		// The SDK server registers a tool and announces it on the listen.
		r, err := c.CallTool(ctx, "add_tool", map[string]any{"name": "late_tool"})
		if err != nil || text(t, r) != "added late_tool" {
			t.Fatalf("add_tool = %v, %v", r, err)
		}
		e := waitEvents(t, events, 20*time.Second, func(e client.Event) bool {
			return e.Kind == client.ToolsChanged && len(e.Added)+len(e.Removed)+len(e.Changed) > 0
		})[0]
		if !slices.Equal(e.Added, []string{"late_tool"}) || len(e.Removed) != 0 || len(e.Changed) != 0 {
			t.Errorf("tools changed: added %v removed %v changed %v, want added [late_tool] only", e.Added, e.Removed, e.Changed)
		}
		// The notification invalidated the cached list despite its TTL.
		tools, err := c.Tools(ctx)
		if err != nil || !slices.Contains(toolNames(tools), "late_tool") {
			t.Fatalf("tools after the change = %v, %v; want late_tool listed", toolNames(tools), err)
		}
		if r, err := c.CallTool(ctx, "late_tool", map[string]any{}); err != nil || text(t, r) != "I am late_tool" {
			t.Fatalf("late_tool = %v, %v", r, err)
		}
		if tools, err := plain.Tools(ctx); err != nil || slices.Contains(toolNames(tools), "late_tool") {
			t.Errorf("plain client tools = %v, %v; want the cached list without late_tool", toolNames(tools), err)
		}

		// The SDK server changes a resource and announces the update.
		if r, err := c.CallTool(ctx, "bump", map[string]any{}); err != nil || text(t, r) != "count=1" {
			t.Fatalf("bump = %v, %v", r, err)
		}
		e = waitEvents(t, events, 20*time.Second, func(e client.Event) bool {
			return e.Kind == client.ResourceUpdated && e.URI == counter && len(e.Changed) > 0
		})[0]
		if !slices.Equal(e.Changed, []string{counter}) {
			t.Errorf("resource updated: changed %v, want [%s]", e.Changed, counter)
		}
		if got := readCounter(c); got != "count=1" {
			t.Errorf("counter after bump = %q, want count=1", got)
		}
		if got := readCounter(plain); got != "count=0" {
			t.Errorf("plain client: counter = %q, want the cached count=0", got)
		}
		if s := w.Stats(); s.Notifications < 2 {
			t.Errorf("watcher stats = %+v, want at least 2 notifications", s)
		}
	})
}

// headerLog records the Mcp-Param-Region header of every tools/call for
// the regional tool.
type headerLog struct {
	mu   sync.Mutex
	seen []string
}

func (h *headerLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Method") == mcp.MethodToolsCall && r.Header.Get("Mcp-Name") == "regional" {
			h.mu.Lock()
			h.seen = append(h.seen, r.Header.Get("Mcp-Param-Region"))
			h.mu.Unlock()
		}
		next.ServeHTTP(w, r)
	})
}

func (h *headerLog) values() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.seen)
}

// newGoServer builds the tidings server the SDK client talks to: lists of
// two items a page, a tool with a mirrored header, a tool that needs input
// first, and one resource.
func newGoServer(t *testing.T) *server.Server {
	t.Helper()
	srv := server.New(mcp.Implementation{Name: "tidings-interop", Version: "1.0.0"}, server.WithPageSize(2))
	textResult := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(s)}}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(srv.AddTool(mcp.Tool{Name: "greet", InputSchema: jsontext.Value(`{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`)},
		func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			var a struct {
				Name string `json:"name"`
			}
			if err := json.Unmarshal(req.Arguments, &a); err != nil {
				return nil, err
			}
			return textResult("Hello, " + a.Name + "!"), nil
		}))
	must(srv.AddTool(mcp.Tool{Name: "regional", InputSchema: jsontext.Value(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}},"required":["region"]}`)},
		func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			var a struct {
				Region string `json:"region"`
			}
			if err := json.Unmarshal(req.Arguments, &a); err != nil {
				return nil, err
			}
			return textResult("region=" + a.Region), nil
		}))
	must(srv.AddTool(mcp.Tool{Name: "confirm", InputSchema: jsontext.Value(`{"type":"object"}`)},
		func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			answer, ok := req.InputResponses["ok"]
			if !ok {
				return nil, &server.InputRequired{
					Requests: map[string]mcp.InputRequest{"ok": {
						Method: mcp.MethodElicit,
						Params: jsontext.Value(`{"mode":"form","message":"Proceed?","requestedSchema":{"type":"object","properties":{"proceed":{"type":"boolean"}}}}`),
					}},
					State: []byte("s1"),
				}
			}
			var r struct {
				Action  string `json:"action"`
				Content struct {
					Proceed bool `json:"proceed"`
				} `json:"content"`
			}
			if err := json.Unmarshal(answer, &r); err != nil {
				return nil, err
			}
			return textResult(fmt.Sprintf("action=%s proceed=%v state=%s", r.Action, r.Content.Proceed, req.State())), nil
		}))
	for _, name := range []string{"t_a", "t_b"} {
		must(srv.AddTool(mcp.Tool{Name: name, InputSchema: jsontext.Value(`{"type":"object"}`)},
			func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) { return textResult(name), nil }))
	}
	must(srv.AddResource(mcp.Resource{URI: "config://app", MimeType: "text/plain"},
		func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "text/plain", "debug=false")}}, nil
		}))
	return srv
}

// TestTSClientWithGoServer drives a client built on the TypeScript SDK
// against the tidings server.
func TestTSClientWithGoServer(t *testing.T) {
	node, dir := nodeSetup(t)
	srv := newGoServer(t)
	var hdrs headerLog
	mux := http.NewServeMux()
	mux.Handle("/mcp", hdrs.wrap(streamhttp.New(srv)))
	hs := httptest.NewServer(mux)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		hs.Close()
	})

	steps, order := runSteps(t, node, dir, "ts-client.mjs", hs.URL+"/mcp", func(step string) {
		if step != "ready" {
			return
		}
		err := srv.AddTool(mcp.Tool{Name: "late_tool", InputSchema: jsontext.Value(`{"type":"object"}`)},
			func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
			})
		if err != nil {
			t.Fatal(err)
		}
	})
	wantOrder := []string{"connected", "listen", "tools", "greet", "regional", "elicitation", "confirm", "resources", "read", "ready", "changed", "tools_after", "closed"}
	if !slices.Equal(order, wantOrder) {
		t.Fatalf("steps = %v, want %v", order, wantOrder)
	}
	get := func(step string, v any) {
		t.Helper()
		if err := json.Unmarshal(steps[step], v); err != nil {
			t.Fatalf("step %s: %v", step, err)
		}
	}

	var connected struct {
		ServerInfo      mcp.Implementation `json:"serverInfo"`
		ProtocolVersion string             `json:"protocolVersion"`
	}
	get("connected", &connected)
	if connected.ServerInfo.Name != "tidings-interop" || connected.ProtocolVersion != mcp.Version {
		t.Errorf("connected = %+v, want server tidings-interop at %s", connected, mcp.Version)
	}

	var listen struct {
		Honored mcp.SubscriptionFilter `json:"honored"`
	}
	get("listen", &listen)
	if !listen.Honored.ToolsListChanged {
		t.Errorf("acknowledged filter = %+v, want toolsListChanged", listen.Honored)
	}

	var tools struct {
		Names []string `json:"names"`
	}
	get("tools", &tools)
	if want := []string{"confirm", "greet", "regional", "t_a", "t_b"}; !slices.Equal(tools.Names, want) {
		t.Errorf("tools = %v, want %v (three pages of two)", tools.Names, want)
	}

	var call struct {
		Text []string `json:"text"`
	}
	get("greet", &call)
	if want := []string{"Hello, interop!"}; !slices.Equal(call.Text, want) {
		t.Errorf("greet = %q, want %q", call.Text, want)
	}
	get("regional", &call)
	if want := []string{"region=eu-west"}; !slices.Equal(call.Text, want) {
		t.Errorf("regional = %q, want %q", call.Text, want)
	}
	if got := hdrs.values(); !slices.Equal(got, []string{"eu-west"}) {
		t.Errorf("Mcp-Param-Region headers seen = %q, want [eu-west]", got)
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

	var resources struct {
		URIs []string `json:"uris"`
	}
	get("resources", &resources)
	if want := []string{"config://app"}; !slices.Equal(resources.URIs, want) {
		t.Errorf("resources = %v, want %v", resources.URIs, want)
	}
	var read struct {
		Contents []struct {
			URI  string `json:"uri"`
			Text string `json:"text"`
		} `json:"contents"`
	}
	get("read", &read)
	if len(read.Contents) != 1 || read.Contents[0].URI != "config://app" || read.Contents[0].Text != "debug=false" {
		t.Errorf("read = %+v, want config://app debug=false", read.Contents)
	}

	get("tools_after", &tools)
	if want := []string{"confirm", "greet", "late_tool", "regional", "t_a", "t_b"}; !slices.Equal(tools.Names, want) {
		t.Errorf("tools after the change = %v, want %v", tools.Names, want)
	}
	var closed struct {
		How string `json:"how"`
	}
	get("closed", &closed)
	if closed.How != "local" {
		t.Errorf("subscription ended %q, want local", closed.How)
	}
}

// runSteps runs a Node client script, given url and args, that prints one
// JSON object per step ({"step": ...}), hands each step to onStep as it
// arrives (the test acts on the server there), and returns every step's
// line and their order once the script has exited successfully.
func runSteps(t *testing.T, node, dir, script, url string, onStep func(step string), args ...string) (map[string]json.RawMessage, []string) {
	t.Helper()
	p := startNode(t, node, dir, script, append([]string{url}, args...)...)
	steps := map[string]json.RawMessage{}
	var order []string
	for {
		line, ok := p.next(t, 60*time.Second)
		if !ok {
			break
		}
		var s struct {
			Step string `json:"step"`
		}
		if err := json.Unmarshal([]byte(line), &s); err != nil || s.Step == "" {
			t.Fatalf("%s printed %q", script, line)
		}
		steps[s.Step] = json.RawMessage(line)
		order = append(order, s.Step)
		if s.Step == "error" {
			t.Fatalf("%s: %s", script, line)
		}
		onStep(s.Step)
	}
	<-p.done
	if p.err != nil {
		t.Fatalf("%s: %v (steps %v)", script, p.err, order)
	}
	return steps, order
}
