package brokers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"tidings/bus"
	"tidings/bus/bustest"
	"tidings/internal/sse"
	"tidings/internal/testrig/clustertest"
	"tidings/internal/testrig/testbroker"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// wait bounds every wait of these tests; nothing takes this long unless
// something is broken.
const wait = testbroker.Wait

// replica is one server with its bus, behind a real loopback HTTP server.
type replica struct {
	name   string
	srv    *server.Server
	bus    bus.Bus
	faults *bustest.Faulty
	ts     *httptest.Server
}

// cluster is a few replicas of one server on one bus. The replicas share
// the content of res://shared, as replicas serving one store would.
// shutdown shuts a replica's server down and closes its listener.
func shutdown(t testing.TB, name string, srv *server.Server, ts *httptest.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Errorf("replica %s: %v", name, err)
	}
	ts.CloseClientConnections()
	ts.Close()
}

type cluster struct {
	t      testing.TB
	br     broker
	reps   []*replica
	shared atomic.Pointer[string]
}

type clusterOpts struct {
	server []server.Option
	bus    []bus.Option
}

// newCluster starts n replicas on br's bus and waits until each has heard
// from every other. Heartbeats are rare unless opts say otherwise, so
// that the messages on the bus are the tests' own.
func newCluster(t testing.TB, br broker, n int, opts clusterOpts) *cluster {
	t.Helper()
	c := &cluster{t: t, br: br}
	v := "v1"
	c.shared.Store(&v)
	bopts := append([]bus.Option{bus.WithHeartbeat(time.Hour), bus.WithBackoff(5*time.Millisecond, 50*time.Millisecond),
		bus.WithLogger(slog.New(slog.DiscardHandler))}, opts.bus...)
	for i := range n {
		r := &replica{name: string(rune('A' + i))}
		r.faults = bustest.Wrap(br.conn(t, bopts...))
		r.bus = bus.New(r.faults, bopts...)
		r.srv = server.New(mcp.Implementation{Name: "replica-" + r.name, Version: "1"},
			append([]server.Option{server.WithBus(r.bus), server.WithLogger(slog.New(slog.DiscardHandler))}, opts.server...)...)
		c.populate(r.srv)
		r.ts = httptest.NewServer(streamhttp.New(r.srv,
			streamhttp.WithPrincipal(func(req *http.Request) string { return req.Header.Get("X-User") })))
		t.Cleanup(func() { shutdown(t, r.name, r.srv, r.ts) })
		c.reps = append(c.reps, r)
	}
	c.settle()
	c.waitPeers()
	return c
}

// settle waits until what the replicas published while starting has
// reached every other, so that tests start from quiet.
func (c *cluster) settle() {
	c.t.Helper()
	srvs := make([]*server.Server, len(c.reps))
	for i, r := range c.reps {
		srvs[i] = r.srv
	}
	clustertest.Settle(c.t, srvs...)
}

// waitPeers waits until every replica has heard from every other.
func (c *cluster) waitPeers() {
	c.t.Helper()
	for _, r := range c.reps {
		testbroker.WaitFor(c.t, "replica "+r.name+" to hear its peers", func() bool { return r.bus.Stats().Peers == len(c.reps)-1 })
	}
}

// populate registers what every replica serves.
func (c *cluster) populate(s *server.Server) {
	c.t.Helper()
	tool := func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("ok")}}, nil
	}
	text := func(body func() string) server.ResourceHandler {
		return func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "text/plain", body())}}, nil
		}
	}
	fixed := text(func() string { return "body" })
	for _, err := range []error{
		s.AddTool(mcp.Tool{Name: "base"}, tool),
		s.AddTool(mcp.Tool{Name: "toggle"}, tool),
		s.AddPrompt(mcp.Prompt{Name: "greet"}, func(context.Context, *server.PromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{}, nil
		}),
		s.AddResource(mcp.Resource{URI: "res://doc"}, fixed),
		s.AddResource(mcp.Resource{URI: "res://other"}, fixed),
		s.AddResource(mcp.Resource{URI: "res://private"}, fixed),
		s.AddResource(mcp.Resource{URI: "res://shared"}, text(func() string { return *c.shared.Load() })),
	} {
		if err != nil {
			c.t.Fatal(err)
		}
	}
}

// tool is a do-nothing tool handler.
func tool(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{}, nil
}

func (c *cluster) addTool(r *replica, name string) {
	c.t.Helper()
	if err := r.srv.AddTool(mcp.Tool{Name: name}, tool); err != nil {
		c.t.Fatal(err)
	}
}

// outage takes the bus down for every replica — the broker, or for the
// local bus every connection — and returns what brings it back.
func (c *cluster) outage() (restore func()) {
	c.t.Helper()
	if c.br.real() {
		c.br.down()
	} else {
		for _, r := range c.reps {
			r.faults.Cut()
		}
	}
	for _, r := range c.reps {
		testbroker.WaitFor(c.t, "replica "+r.name+" to see the bus down", func() bool { return !r.bus.Stats().Connected })
	}
	return func() {
		c.t.Helper()
		if c.br.real() {
			c.br.up()
		} else {
			for _, r := range c.reps {
				r.faults.Restore()
			}
		}
	}
}

// envelope is a JSON-RPC message read loosely.
type envelope struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
}

// uri returns the uri parameter of a resources/updated notification.
func (e envelope) uri() string {
	var p struct {
		URI string `json:"uri"`
	}
	_ = json.Unmarshal(e.Params, &p)
	return p.URI
}

func (e envelope) String() string {
	if e.Method == mcp.NotifyResourceUpdated {
		return e.Method + " " + e.uri()
	}
	return e.Method
}

// listener is one raw subscriptions/listen stream over HTTP.
type listener struct {
	name   string
	events chan envelope
}

// filter is a listen's notifications filter.
type filter struct {
	Tools     bool     `json:"toolsListChanged,omitempty"`
	Prompts   bool     `json:"promptsListChanged,omitempty"`
	Resources bool     `json:"resourcesListChanged,omitempty"`
	URIs      []string `json:"resourceSubscriptions,omitempty"`
}

// listen opens a listen on r as user and waits for its acknowledgement.
// The stream is closed at the end of the test.
func (r *replica) listen(t *testing.T, user string, f filter) *listener {
	t.Helper()
	params := map[string]any{
		"_meta": map[string]any{
			"io.modelcontextprotocol/protocolVersion":    mcp.Version,
			"io.modelcontextprotocol/clientCapabilities": map[string]any{},
		},
		"notifications": f,
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": mcp.MethodListen, "params": params})
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.ts.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version)
	req.Header.Set(mcp.HeaderMethod, mcp.MethodListen)
	if user != "" {
		req.Header.Set("X-User", user)
	}
	resp, err := r.ts.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		t.Fatalf("listen on %s: status %d", r.name, resp.StatusCode)
	}
	l := &listener{name: fmt.Sprintf("%s's listen on %s", orAnonymous(user), r.name), events: make(chan envelope, 64)}
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
			var e envelope
			if json.Unmarshal(ev.Data, &e) != nil {
				continue
			}
			select {
			case l.events <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	l.expect(t, mcp.NotifyAcknowledged, "")
	return l
}

func orAnonymous(user string) string {
	if user == "" {
		return "anonymous"
	}
	return user
}

// next returns the listener's next message.
func (l *listener) next(t *testing.T) envelope {
	t.Helper()
	select {
	case e := <-l.events:
		return e
	case <-timeout():
		t.Fatalf("%s heard nothing in %v", l.name, wait)
	}
	return envelope{}
}

// expect checks that the next message is method (for resources/updated,
// of uri).
func (l *listener) expect(t *testing.T, method, uri string) {
	t.Helper()
	e := l.next(t)
	if e.Method != method || (method == mcp.NotifyResourceUpdated && e.uri() != uri) {
		want := method
		if uri != "" {
			want += " " + uri
		}
		t.Fatalf("%s got %v, want %s", l.name, e, want)
	}
}

// timeout fires when a wait has lasted too long.
func timeout() <-chan time.Time { return time.After(wait) }
