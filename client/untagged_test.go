package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"tidings/internal/testrig/testkit"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// These tests cover servers that leave the subscription id out of their
// change notifications (mcp-go, for one): each such notification still
// invalidates what it announces, for every listen it could belong to.

const untaggedWarning = "omits the subscription id"

// loggingStdioClient starts the stdio test server with args and a logger
// that writes to the returned buffer.
func loggingStdioClient(t *testing.T, args ...string) (*Client, *testkit.SyncBuffer) {
	t.Helper()
	logs := &testkit.SyncBuffer{}
	c, err := NewCommand(context.Background(), stdioServerPath(t), args,
		WithLogger(slog.New(slog.NewTextHandler(logs, nil))), WithTimeout(waitTimeout), WithStderr(testWriter{t}))
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c, logs
}

// TestStdioUntaggedNotifications: a real stdio server whose change
// notifications carry no subscription id. Each goes to the listens whose
// filter covers it, and only to those: the watcher of tools re-reads its
// list and reports the change, the one of a resource its content, the
// one of prompts hears nothing. The lists are reported as notified
// untagged, and the server's omission is logged once.
func TestStdioUntaggedNotifications(t *testing.T) {
	c, logs := loggingStdioClient(t, "-untagged")
	ctx := t.Context()
	control(t, c, "set_resource", map[string]any{"uri": "mem://a", "text": "one"})
	control(t, c, "add_prompt", map[string]any{"name": "hello"})
	wt, tools := watch(t, c, withKinds(fastBackoff, true, false, false))
	wp, prompts := watch(t, c, withKinds(fastBackoff, false, true, false))
	_, res := watch(t, c, withKinds(fastBackoff, false, false, false, "mem://a"))
	for _, l := range []*eventLog{tools, prompts, res} {
		l.waitFor(t, "connected", kindIs(Connected))
	}
	tools.waitFor(t, "the first read of tools", kindIs(ToolsChanged))
	prompts.waitFor(t, "the first read of prompts", kindIs(PromptsChanged))
	res.waitFor(t, "the first read of mem://a", kindIs(ResourceUpdated))
	if f := c.Freshness(mcp.MethodToolsList, ""); f.Notice != Notified || !f.Live {
		t.Errorf("tools before any notification: %+v, want notified and live as granted", f)
	}

	control(t, c, "add_tool", map[string]any{"name": "late"})
	ev, _ := tools.waitFor(t, "the untagged tools/list_changed", func(e Event) bool { return e.Kind == ToolsChanged && len(e.Added) > 0 })
	if !slices.Equal(ev.Added, []string{"late"}) {
		t.Errorf("ToolsChanged = %+v, want late added", ev)
	}
	ts, err := c.Tools(ctx)
	must(t, err)
	if !slices.Contains(names(ts), "late") {
		t.Errorf("Tools = %v, want late among them", names(ts))
	}
	if f := c.Freshness(mcp.MethodToolsList, ""); f.Notice != NotifiedUntagged || !f.Live {
		t.Errorf("tools after an untagged notification: %+v, want notified (untagged) and live", f)
	}
	if f := c.Freshness(mcp.MethodPromptsList, ""); f.Notice != Notified {
		t.Errorf("prompts, of which nothing was heard: notice %s, want notified", f.Notice)
	}
	// The reader hands a notification to every listen it covers before
	// it reads the next line, and the tools watcher re-read after that.
	if n := wp.Stats().Notifications; n != 0 {
		t.Errorf("the prompts watcher got %d notifications, want none: tools/list_changed is not its", n)
	}

	control(t, c, "set_resource", map[string]any{"uri": "mem://a", "text": "two"})
	ev, _ = res.waitFor(t, "the untagged resources/updated", func(e Event) bool { return e.Kind == ResourceUpdated && len(e.Changed) > 0 })
	if ev.URI != "mem://a" {
		t.Errorf("ResourceUpdated = %+v", ev)
	}
	if rr, err := c.ReadResource(ctx, "mem://a"); err != nil || contentText(t, rr) != "two" {
		t.Errorf("ReadResource after the update = %v, %v", rr, err)
	}
	if f := c.Freshness(mcp.MethodResourcesRead, "mem://a"); f.Notice != NotifiedUntagged {
		t.Errorf("mem://a: notice %s, want notified (untagged)", f.Notice)
	}

	control(t, c, "add_tool", map[string]any{"name": "later"})
	tools.waitFor(t, "the second untagged notification", func(e Event) bool { return e.Kind == ToolsChanged && slices.Contains(e.Added, "later") })
	if n := strings.Count(logs.String(), untaggedWarning); n != 1 {
		t.Errorf("the omission was logged %d times, want once per connection:\n%s", n, logs.String())
	}
	if wt.Stats().Notifications < 2 {
		t.Errorf("the tools watcher counted %d notifications, want 2", wt.Stats().Notifications)
	}
}

// TestStdioUntaggedRouting: on one stdio connection, a change
// notification without a subscription id goes to each open listen whose
// filter covers it (a resource or a part of one, a list), and one that
// no listen covers goes to the connection's general handler.
func TestStdioUntaggedRouting(t *testing.T) {
	w := make(lineWriter, 8)
	r, rw := io.Pipe()
	others := make(chan string, 8)
	st := newStdioConn(r, w, r, 1<<20, func(m *jsonrpc.Message) { others <- m.Method }, nil)
	t.Cleanup(func() { _ = rw.Close(); _ = st.close() })

	var mu sync.Mutex
	heard := map[string][]string{} // listen → methods (and URIs) it got
	listen := func(id int64, name, filter string) {
		body := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"subscriptions/listen","params":{"notifications":%s}}`, id, filter)
		go func() {
			_, _ = st.roundTrip(t.Context(), &outbound{id: jsonrpc.IntID(id), method: mcp.MethodListen, body: body}, func(m *jsonrpc.Message) {
				what := m.Method
				if uri, ok := updatedURI(m); ok {
					what += " " + uri
				}
				mu.Lock()
				heard[name] = append(heard[name], what)
				mu.Unlock()
			})
		}()
		<-w // pending once written
	}
	listen(1, "tools", `{"toolsListChanged":true}`)
	listen(2, "both", `{"toolsListChanged":true,"resourceSubscriptions":["file:///d"]}`)
	listen(3, "prompts", `{"promptsListChanged":true}`)
	note := func(s string) {
		m, err := jsonrpc.Decode([]byte(s), 0)
		must(t, err)
		st.route(m)
	}
	note(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
	note(`{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///d/a.txt"}}`)
	note(`{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"file:///dx"}}`)
	note(`{"jsonrpc":"2.0","method":"notifications/resources/list_changed"}`)
	// Tagged, it goes to its own listen only, whatever the filters say.
	note(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":3}}}`)

	mu.Lock()
	defer mu.Unlock()
	want := map[string][]string{
		"tools":   {mcp.NotifyToolsListChanged},
		"both":    {mcp.NotifyToolsListChanged, mcp.NotifyResourceUpdated + " file:///d/a.txt"},
		"prompts": {mcp.NotifyToolsListChanged},
	}
	for name, w := range want {
		if !slices.Equal(heard[name], w) {
			t.Errorf("listen %s got %q, want %q", name, heard[name], w)
		}
	}
	var rest []string
	for len(others) > 0 {
		rest = append(rest, <-others)
	}
	if !slices.Equal(rest, []string{mcp.NotifyResourceUpdated, mcp.NotifyResourcesListChanged}) {
		t.Errorf("the general handler got %q, want what no listen covers", rest)
	}
}

// untaggedHTTP is a 2026-07-28 server whose listen stream sends its
// change notifications without the subscription id. Its tool list has
// a TTL of an hour: only a notification can make the client read it
// again.
type untaggedHTTP struct {
	mu     sync.Mutex
	tools  []string
	listen chan struct{} // closed when the first listen is acknowledged
	once   sync.Once
	change chan struct{} // each receive sends one tools/list_changed
}

func (s *untaggedHTTP) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req rawRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	switch req.Method {
	case mcp.MethodDiscover:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, req.ID, rawDiscover)
	case mcp.MethodToolsList:
		s.mu.Lock()
		var tools []string
		for _, n := range s.tools {
			tools = append(tools, fmt.Sprintf(`{"name":%q,"inputSchema":{"type":"object"}}`, n))
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[%s],"resultType":"complete","ttlMs":3600000,"cacheScope":"public"}}`, req.ID, strings.Join(tools, ","))
	case mcp.MethodListen:
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(msg string) bool {
			_, err := fmt.Fprintf(w, "data: %s\n\n", msg)
			w.(http.Flusher).Flush()
			return err == nil
		}
		send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":%s},"notifications":{"toolsListChanged":true}}}`, req.ID))
		s.once.Do(func() { close(s.listen) })
		for {
			select {
			case <-s.change:
				if !send(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{}}`) {
					return
				}
			case <-r.Context().Done():
				return
			}
		}
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`, req.ID)
	}
}

func (s *untaggedHTTP) setTools(names ...string) {
	s.mu.Lock()
	s.tools = names
	s.mu.Unlock()
}

// TestHTTPUntaggedNotifications: over HTTP a listen's stream is its own,
// so an untagged notification on it is the listen's: the cached list,
// fresh for an hour by its TTL, is read again at once; the list is
// reported as notified untagged, and the omission logged once.
func TestHTTPUntaggedNotifications(t *testing.T) {
	s := &untaggedHTTP{tools: []string{"a"}, listen: make(chan struct{}), change: make(chan struct{})}
	ts := httptest.NewServer(s)
	t.Cleanup(func() { closeServer(ts) })
	logs := &testkit.SyncBuffer{}
	c := rawClient(t, ts.URL, WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	_, log := watch(t, c, withKinds(fastBackoff, true, false, false))
	log.waitFor(t, "connected", kindIs(Connected))
	log.waitFor(t, "the first read", kindIs(ToolsChanged))
	<-s.listen
	if f := c.Freshness(mcp.MethodToolsList, ""); f.State != Fresh || f.Notice != Notified || !f.Live {
		t.Fatalf("tools after the first read: %+v, want fresh, notified, live", f)
	}

	s.setTools("a", "b")
	s.change <- struct{}{}
	ev, _ := log.waitFor(t, "the untagged notification's re-read", func(e Event) bool { return e.Kind == ToolsChanged && len(e.Added) > 0 })
	if !slices.Equal(ev.Added, []string{"b"}) {
		t.Errorf("ToolsChanged = %+v, want b added", ev)
	}
	got, err := c.Tools(t.Context())
	must(t, err)
	if !slices.Equal(names(got), []string{"a", "b"}) {
		t.Errorf("Tools = %v, want a, b", names(got))
	}
	if f := c.Freshness(mcp.MethodToolsList, ""); f.Notice != NotifiedUntagged || !f.Live {
		t.Errorf("tools after an untagged notification: %+v, want notified (untagged) and live", f)
	}

	s.setTools("a", "b", "c")
	s.change <- struct{}{}
	log.waitFor(t, "the second re-read", func(e Event) bool { return e.Kind == ToolsChanged && slices.Contains(e.Added, "c") })
	if n := strings.Count(logs.String(), untaggedWarning); n != 1 {
		t.Errorf("the omission was logged %d times, want once:\n%s", n, logs.String())
	}
}

// legacyPeer is a 2025-11-25 server on a pair of pipes, made by hand
// the way Python's FastMCP behaves: lists without a TTL, capabilities
// that may or may not declare listChanged, and tools/list_changed sent
// whenever the test says.
type legacyPeer struct {
	declare bool
	w       *io.PipeWriter

	mu    sync.Mutex
	tools []string
}

// newLegacyPeer serves a client until the client closes its end; the
// test waits for the server to stop.
func newLegacyPeer(t *testing.T, declare bool, opts ...Option) (*Client, *legacyPeer) {
	t.Helper()
	cr, cw := io.Pipe() // client → server
	sr, sw := io.Pipe() // server → client
	p := &legacyPeer{declare: declare, w: sw, tools: []string{"a"}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer sw.Close()
		dec := json.NewDecoder(cr)
		for {
			var req rawRequest
			if err := dec.Decode(&req); err != nil {
				_ = cr.CloseWithError(err)
				return
			}
			if req.ID != nil {
				p.answer(req)
			}
		}
	}()
	c := New(NewStreamTransport(sr, cw), append([]Option{WithLogger(quietLogger()), WithTimeout(waitTimeout)}, opts...)...)
	t.Cleanup(func() {
		_ = c.Close()
		<-done
	})
	return c, p
}

func (p *legacyPeer) answer(req rawRequest) {
	var result string
	switch req.Method {
	case mcp.MethodInitialize:
		result = fmt.Sprintf(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":%v}},"serverInfo":{"name":"fastish","version":"1"}}`, p.declare)
	case mcp.MethodToolsList:
		p.mu.Lock()
		var tools []string
		for _, n := range p.tools {
			tools = append(tools, fmt.Sprintf(`{"name":%q,"inputSchema":{"type":"object"}}`, n))
		}
		p.mu.Unlock()
		result = `{"tools":[` + strings.Join(tools, ",") + `]}`
	case mcp.MethodPing:
		result = `{}`
	default:
		p.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"Method not found"}}`, req.ID))
		return
	}
	p.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, req.ID, result))
}

func (p *legacyPeer) send(line string) { _, _ = io.WriteString(p.w, line+"\n") }

// change replaces the tool list and announces it.
func (p *legacyPeer) change(names ...string) {
	p.mu.Lock()
	p.tools = names
	p.mu.Unlock()
	p.send(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
}

// TestLegacyFreshnessDeclared: a 2025-11-25 server that declares
// listChanged announces its tool list on the session's stream: while a
// Watcher holds the stream the list is notified and live, without any
// TTL; once the stream is gone it is neither.
func TestLegacyFreshnessDeclared(t *testing.T) {
	c, p := newLegacyPeer(t, true)
	if era, err := c.Era(t.Context()); err != nil || era != EraLegacy {
		t.Fatalf("era = %q, %v; want the legacy one", era, err)
	}
	w, log := watch(t, c, withKinds(fastBackoff, true, false, false))
	ev, _ := log.waitFor(t, "the stream", kindIs(Connected))
	if !ev.Granted.ToolsListChanged {
		t.Errorf("granted = %+v, want the declared tools", ev.Granted)
	}
	log.waitFor(t, "the first read", kindIs(ToolsChanged))
	if f := c.Freshness(mcp.MethodToolsList, ""); f.Notice != Notified || !f.Live {
		t.Errorf("tools with the stream up: %+v, want notified and live", f)
	}
	p.change("a", "b")
	log.waitFor(t, "the change", func(e Event) bool { return e.Kind == ToolsChanged && slices.Equal(e.Added, []string{"b"}) })
	if f := c.Freshness(mcp.MethodToolsList, ""); f.Notice != Notified || !f.Live {
		t.Errorf("tools after a declared notification: %+v, want notified (not untagged) and live", f)
	}
	w.Close()
	if f := c.Freshness(mcp.MethodToolsList, ""); f.Notice != Unnotified || f.Live {
		t.Errorf("tools once the watcher is gone: %+v, want unnotified, not live", f)
	}
}

// TestLegacyFreshnessUndeclared: a 2025-11-25 server that declares no
// listChanged and no TTL is polled, and its lists are stale and not live,
// until it sends a tools/list_changed all the same: from then on the list
// is notified untagged and live (its TTL state still stale), and the
// undeclared notifications are logged once.
func TestLegacyFreshnessUndeclared(t *testing.T) {
	logs := &testkit.SyncBuffer{}
	c, p := newLegacyPeer(t, false, WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	_, log := watch(t, c, withKinds(fastBackoff, true, false, false))
	ev, _ := log.waitFor(t, "the stream", kindIs(Connected))
	if ev.Granted.ToolsListChanged {
		t.Errorf("granted = %+v, want nothing: listChanged is not declared", ev.Granted)
	}
	log.waitFor(t, "the first read", kindIs(ToolsChanged))
	if f := c.Freshness(mcp.MethodToolsList, ""); f.State != Stale || f.Notice != Unnotified || f.Live {
		t.Errorf("tools before any notification: %+v, want stale, unnotified, not live", f)
	}
	p.change("a", "b")
	log.waitFor(t, "the change", func(e Event) bool { return e.Kind == ToolsChanged && slices.Equal(e.Added, []string{"b"}) })
	if f := c.Freshness(mcp.MethodToolsList, ""); f.State != Stale || f.Notice != NotifiedUntagged || !f.Live {
		t.Errorf("tools after an undeclared notification: %+v, want stale, notified (untagged), live", f)
	}
	p.change("a", "b", "c")
	log.waitFor(t, "the second change", func(e Event) bool { return e.Kind == ToolsChanged && slices.Equal(e.Added, []string{"c"}) })
	if n := strings.Count(logs.String(), "capabilities do not declare"); n != 1 {
		t.Errorf("the undeclared notifications were logged %d times, want once:\n%s", n, logs.String())
	}
}
