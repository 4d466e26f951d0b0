package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tidings/client"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
)

// These tests run the live view's model against hand-made servers on a
// pair of pipes, to check that its labels tell how a change really
// reaches the client: a 2025-11-25 server with or without listChanged
// and without a TTL (as Python's FastMCP serves), and a 2026-07-28 one
// that leaves the subscription id out of its notifications (as mcp-go
// does).

// notePeer is such a server, with one tool list.
type notePeer struct {
	legacy  bool // speak 2025-11-25: initialize, no server/discover
	declare bool // declare tools.listChanged
	untag   bool // 2026-07-28: no subscription id on change notifications
	w       *io.PipeWriter

	mu     sync.Mutex
	tools  []string
	listen json.RawMessage // the id of the open listen
}

// start serves a client until the client closes its end, and returns
// the client, watching the tool list into a watch state.
func (p *notePeer) start(t *testing.T) (*client.Client, *client.Watcher, *watchState) {
	t.Helper()
	cr, cw := io.Pipe() // client → server
	sr, sw := io.Pipe() // server → client
	p.w, p.tools = sw, []string{"a"}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer sw.Close()
		dec := json.NewDecoder(cr)
		for {
			var req struct {
				ID     json.RawMessage `json:"id"`
				Method string          `json:"method"`
			}
			if err := dec.Decode(&req); err != nil {
				_ = cr.CloseWithError(err)
				return
			}
			if req.ID != nil {
				p.answer(req.ID, req.Method)
			}
		}
	}()
	c := client.New(client.NewStreamTransport(sr, cw),
		client.WithLogger(slog.New(slog.DiscardHandler)), client.WithTimeout(wait))
	ctx := t.Context()
	d, err := c.Discover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	era, err := c.Era(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, err := c.ProtocolVersion(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := newWatchState(nil)
	st.discovered(d, era, v, nil)
	opts := client.WatchOptions{Tools: true, OnEvent: st.apply, PollInterval: time.Hour, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	st.follow(opts)
	w := c.Watch(ctx, opts)
	t.Cleanup(func() {
		w.Close()
		_ = c.Close()
		<-done
	})
	return c, w, st
}

func (p *notePeer) answer(id json.RawMessage, method string) {
	var result string
	switch {
	case method == mcp.MethodInitialize && p.legacy:
		result = fmt.Sprintf(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":%v}},"serverInfo":{"name":"peer","version":"1"}}`, p.declare)
	case method == mcp.MethodDiscover && !p.legacy:
		result = fmt.Sprintf(`{"supportedVersions":["2026-07-28"],"capabilities":{"tools":{"listChanged":%v}},"resultType":"complete"}`, p.declare)
	case method == mcp.MethodListen && !p.legacy:
		p.mu.Lock()
		p.listen = id
		p.mu.Unlock()
		p.send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":%s},"notifications":{"toolsListChanged":%v}}}`, id, p.declare))
		return // open until the client ends it
	case method == mcp.MethodToolsList:
		p.mu.Lock()
		var tools []string
		for _, n := range p.tools {
			tools = append(tools, fmt.Sprintf(`{"name":%q,"inputSchema":{"type":"object"}}`, n))
		}
		p.mu.Unlock()
		result = `{"tools":[` + strings.Join(tools, ",") + `]}` // no TTL
	default:
		p.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"Method not found"}}`, id))
		return
	}
	p.send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, id, result))
}

func (p *notePeer) send(line string) { _, _ = io.WriteString(p.w, line+"\n") }

// change replaces the tool list and announces it as the server would.
func (p *notePeer) change(names ...string) {
	p.mu.Lock()
	p.tools = names
	meta := ""
	if !p.legacy && !p.untag {
		meta = fmt.Sprintf(`"params":{"_meta":{"io.modelcontextprotocol/subscriptionId":%s}},`, p.listen)
	}
	p.mu.Unlock()
	p.send(`{"jsonrpc":"2.0",` + meta + `"method":"notifications/tools/list_changed"}`)
}

// viewOf waits until the watch state holds exactly the tools named, and
// renders the view. It returns the header's grant line and the tools line.
func viewOf(t *testing.T, c *client.Client, w *client.Watcher, st *watchState, tools ...string) (grant, list string) {
	t.Helper()
	testkit.WaitFor(t, wait, "tools "+strings.Join(tools, ", "), func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		set := st.lists[client.ToolsChanged]
		return set != nil && len(set) == len(tools) && !slices.ContainsFunc(tools, func(n string) bool { return !set[n] })
	})
	out := renderView(st.snapshot(time.Now(), c, w.State(), w.Stats(), "peer"))
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "granted ") || strings.HasPrefix(l, "announces "):
			grant = l
		case strings.HasPrefix(l, "tools "):
			list = l
		}
	}
	if grant == "" || list == "" {
		t.Fatalf("no grant or tools line in:\n%s", out)
	}
	return grant, list
}

// TestViewLegacyDeclared: a 2025-11-25 server that declares listChanged
// and gives no TTL. Its session stream announces the tool list, so the
// list is live and notified, not "stale polled", and the header says the
// stream announces it.
func TestViewLegacyDeclared(t *testing.T) {
	p := &notePeer{legacy: true, declare: true}
	c, w, st := p.start(t)
	grant, list := viewOf(t, c, w, st, "a")
	if want := "announces tools"; grant != want {
		t.Errorf("grant line %q, want %q", grant, want)
	}
	if want := "tools        1  live      notified  a"; list != want {
		t.Errorf("tools line %q, want %q", list, want)
	}
	p.change("a", "b")
	if _, list := viewOf(t, c, w, st, "a", "b"); list != "tools        2  live      notified  a, b" {
		t.Errorf("after a change, tools line %q, want it live and notified still", list)
	}
}

// TestViewLegacyUndeclared: a 2025-11-25 server that declares no
// listChanged and gives no TTL. Until it sends a notification nothing
// says a change would reach us: the list is stale (its TTL state) and
// polled. Once it sends tools/list_changed all the same, the list is
// live and notified (untagged), and the header says so.
func TestViewLegacyUndeclared(t *testing.T) {
	p := &notePeer{legacy: true}
	c, w, st := p.start(t)
	grant, list := viewOf(t, c, w, st, "a")
	if want := "announces nothing (everything is polled)"; grant != want {
		t.Errorf("grant line %q, want %q", grant, want)
	}
	if want := "tools        1  stale     polled    a"; list != want {
		t.Errorf("tools line %q, want %q", list, want)
	}
	p.change("a", "b")
	grant, list = viewOf(t, c, w, st, "a", "b")
	if want := "announces nothing; notified (untagged): tools"; grant != want {
		t.Errorf("after a notification, grant line %q, want %q", grant, want)
	}
	if want := "tools        2  live      notified (untagged)  a, b"; list != want {
		t.Errorf("after a notification, tools line %q, want %q", list, want)
	}
}

// TestViewModernUntagged: a 2026-07-28 server that grants the tool list
// and sends its notifications without the subscription id. The changes
// are followed, and the list is shown notified (untagged).
func TestViewModernUntagged(t *testing.T) {
	p := &notePeer{declare: true, untag: true}
	c, w, st := p.start(t)
	grant, list := viewOf(t, c, w, st, "a")
	if want := "granted   tools"; grant != want {
		t.Errorf("grant line %q, want %q", grant, want)
	}
	if want := "tools        1  live      notified  a"; list != want {
		t.Errorf("tools line %q, want %q", list, want)
	}
	p.change("a", "b")
	grant, list = viewOf(t, c, w, st, "a", "b")
	if want := "granted   tools; notified (untagged): tools"; grant != want {
		t.Errorf("after an untagged notification, grant line %q, want %q", grant, want)
	}
	if want := "tools        2  live      notified (untagged)  a, b"; list != want {
		t.Errorf("after an untagged notification, tools line %q, want %q", list, want)
	}
}
