package stdio_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"tidings/internal/testrig/schematest"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
	"tidings/stdio"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitLimit bounds every wait; reaching it is a failure, never a way to
// let something happen.
const waitLimit = 10 * time.Second

// line is one decoded message the server wrote.
type line struct {
	raw    []byte
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params map[string]any  `json:"params"`
	Result map[string]any  `json:"result"`
	Error  *struct {
		Code    jsonrpc.Code `json:"code"`
		Message string       `json:"message"`
	} `json:"error"`
}

// subID returns the raw subscriptionId of a notification.
func (l line) subID() string {
	var p struct {
		Params struct {
			Meta map[string]json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
	_ = json.Unmarshal(l.raw, &p)
	return string(p.Params.Meta[mcp.MetaSubscriptionID])
}

// requestID returns the raw requestId of a notifications/cancelled.
func (l line) requestID() string {
	var p struct {
		Params struct {
			RequestID json.RawMessage `json:"requestId"`
		} `json:"params"`
	}
	_ = json.Unmarshal(l.raw, &p)
	return string(p.Params.RequestID)
}

// conn is a client end of a stdio connection served over two pipes.
type conn struct {
	t    *testing.T
	srv  *server.Server
	in   *io.PipeWriter // the server's stdin
	out  *io.PipeWriter // the server's stdout, closed once Serve returns
	done chan error     // Serve's result

	mu      sync.Mutex
	lines   []line
	poke    chan struct{}
	methods map[string]string // request id → method, to pick the schema
	readErr chan error
}

func start(t *testing.T, srv *server.Server, opts ...stdio.Option) *conn {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &conn{
		t: t, srv: srv, in: inW, out: outW,
		done: make(chan error, 1), poke: make(chan struct{}, 1),
		methods: map[string]string{}, readErr: make(chan error, 1),
	}
	go func() {
		c.done <- stdio.Serve(context.Background(), srv, inR, outW, opts...)
		_ = outW.Close()
	}()
	go func() { c.readErr <- c.read(outR) }()
	t.Cleanup(func() {
		_ = inW.Close()
		select {
		case <-c.done:
		case <-time.After(waitLimit):
			t.Errorf("Serve did not return after stdin closed")
		}
		_ = outW.Close()
		if err := <-c.readErr; err != nil {
			t.Errorf("reading stdout: %v", err)
		}
		_ = inR.Close()
	})
	return c
}

// read checks every line the server writes: one JSON message per line
// (STDIO-2) that matches the schema, then records it.
func (c *conn) read(r io.Reader) error {
	br := bufio.NewReader(r)
	for {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 {
			if b[len(b)-1] != '\n' {
				c.t.Errorf("unterminated line: %s", b)
			}
			b = bytes.TrimSuffix(b, []byte("\n"))
			var l line
			d := json.NewDecoder(bytes.NewReader(b))
			d.UseNumber()
			if err := d.Decode(&l); err != nil || d.More() {
				c.t.Errorf("stdout line is not exactly one JSON message (STDIO-3): %q", b)
				continue
			}
			l.raw = b
			c.mu.Lock()
			method := c.methods[string(l.ID)]
			c.mu.Unlock()
			switch {
			case l.Method != "":
				schematest.ValidateNotification(c.t, b)
			default:
				schematest.ValidateResponse(c.t, method, b)
			}
			c.mu.Lock()
			c.lines = append(c.lines, l)
			c.mu.Unlock()
			select {
			case c.poke <- struct{}{}:
			default:
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// P is a params object.
type P map[string]any

// send writes a request (id != nil) or notification. Requests get the
// standard _meta unless params bring their own.
func (c *conn) send(id any, method string, params P) {
	c.t.Helper()
	if params == nil {
		params = P{}
	}
	if _, ok := params["_meta"]; !ok && id != nil {
		params["_meta"] = P{mcp.MetaProtocolVersion: mcp.Version, mcp.MetaClientCapabilities: P{}}
	}
	msg := map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
	if id != nil {
		msg["id"] = id
		raw, _ := json.Marshal(id)
		c.mu.Lock()
		c.methods[string(raw)] = method
		c.mu.Unlock()
	}
	b, err := json.Marshal(msg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.writeLine(b)
}

func (c *conn) writeLine(b []byte) {
	c.t.Helper()
	if _, err := c.in.Write(append(bytes.Clone(b), '\n')); err != nil {
		c.t.Fatalf("write to stdin: %v", err)
	}
}

func (c *conn) snapshot() []line {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]line(nil), c.lines...)
}

// waitUntil waits until cond holds for the lines read so far.
func (c *conn) waitUntil(what string, cond func([]line) bool) []line {
	c.t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		ls := c.snapshot()
		if cond(ls) {
			return ls
		}
		select {
		case <-c.poke:
		case <-deadline.C:
			var sb strings.Builder
			for _, l := range ls {
				sb.Write(l.raw)
				sb.WriteByte('\n')
			}
			c.t.Fatalf("timed out waiting for %s; stdout so far:\n%s", what, sb.String())
		}
	}
}

// response waits for the response with the given id and returns it and
// its position in the output.
func (c *conn) response(id any) (line, int) {
	c.t.Helper()
	want, _ := json.Marshal(id)
	var got line
	pos := -1
	c.waitUntil(fmt.Sprintf("response %s", want), func(ls []line) bool {
		for i, l := range ls {
			if l.Method == "" && string(l.ID) == string(want) {
				got, pos = l, i
				return true
			}
		}
		return false
	})
	return got, pos
}

// tagged returns the notifications tagged with the listen id.
func tagged(ls []line, id any) []line {
	want, _ := json.Marshal(id)
	var out []line
	for _, l := range ls {
		if l.Method != "" && l.subID() == string(want) {
			out = append(out, l)
		}
	}
	return out
}

func count(ls []line, method string) int {
	n := 0
	for _, l := range ls {
		if l.Method == method {
			n++
		}
	}
	return n
}

func newServer(t *testing.T) *server.Server {
	srv := server.New(mcp.Implementation{Name: "tidings-stdio-test", Version: "0.0.1"},
		server.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
	if err := srv.AddTool(mcp.Tool{Name: "echo"}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("echo")}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := srv.AddResource(mcp.Resource{URI: "mem://a"}, func(ctx context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "", "a")}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	return srv
}

func addTool(t *testing.T, srv *server.Server, name string) {
	t.Helper()
	if err := srv.AddTool(mcp.Tool{Name: name}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// TestListensShareOneConnection covers SUB-3/6/8, STDIO-6/8/14 and
// SUB-13/14 on stdio: several listens on one connection are each acked
// first and tagged with their own id; notifications/cancelled ends
// exactly the named listen with nothing more sent for it; server shutdown
// gives every remaining listen notifications/cancelled, then its complete
// result.
func TestListensShareOneConnection(t *testing.T) {
	srv := newServer(t)
	c := start(t, srv)
	listens := []struct {
		id     any
		filter P
	}{
		{1, P{"toolsListChanged": true}},
		{"a", P{"toolsListChanged": true, "resourceSubscriptions": []string{"mem://a"}}},
		{"1", P{"resourceSubscriptions": []string{"mem://b"}}},
	}
	for _, l := range listens {
		c.send(l.id, mcp.MethodListen, P{"notifications": l.filter})
	}
	c.waitUntil("three acks", func(ls []line) bool { return count(ls, mcp.NotifyAcknowledged) == 3 })

	addTool(t, srv, "t1")
	srv.ResourceUpdated("mem://a")
	srv.ResourceUpdated("mem://b")
	c.waitUntil("first round of notifications", func(ls []line) bool {
		return count(tagged(ls, 1), mcp.NotifyToolsListChanged) == 1 &&
			count(tagged(ls, "a"), mcp.NotifyToolsListChanged) == 1 &&
			count(tagged(ls, "a"), mcp.NotifyResourceUpdated) == 1 &&
			count(tagged(ls, "1"), mcp.NotifyResourceUpdated) == 1
	})

	// Cancel "a", then use a request as a barrier: lines are handled in
	// order, so once its response is out, the cancel is in force.
	c.send(nil, mcp.NotifyCancelled, P{"requestId": "a", "reason": "done"})
	c.send(100, mcp.MethodDiscover, nil)
	_, barrier := c.response(100)

	addTool(t, srv, "t2")
	srv.ResourceUpdated("mem://a")
	srv.ResourceUpdated("mem://b")
	c.waitUntil("second round", func(ls []line) bool {
		return count(tagged(ls, 1), mcp.NotifyToolsListChanged) == 2 &&
			count(tagged(ls, "1"), mcp.NotifyResourceUpdated) == 2
	})

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	_, end1 := c.response(1)
	_, end2 := c.response("1")
	ls := c.snapshot()

	// Each listen: the ack first, every notification tagged with its id.
	for _, l := range listens {
		mine := tagged(ls, l.id)
		if len(mine) == 0 || mine[0].Method != mcp.NotifyAcknowledged {
			t.Errorf("listen %v: first tagged message is not the ack (SUB-3)", l.id)
		}
		for _, m := range mine {
			if m.Method == mcp.NotifyResourceUpdated {
				want := "mem://a"
				if l.id == "1" {
					want = "mem://b"
				}
				if m.Params["uri"] != want {
					t.Errorf("listen %v got update for %v", l.id, m.Params["uri"])
				}
			}
			if m.Method == mcp.NotifyToolsListChanged && l.id == "1" {
				t.Errorf("listen \"1\" got a tools change it did not ask for (the integer listen 1 did)")
			}
		}
	}
	// Nothing for "a" after the cancel took effect, and no response.
	for i, l := range ls {
		if i > barrier && l.subID() == `"a"` {
			t.Errorf("message for cancelled listen \"a\": %s", l.raw)
		}
		if l.Method == "" && string(l.ID) == `"a"` {
			t.Errorf("cancelled listen \"a\" got a response: %s", l.raw)
		}
		if l.Method == mcp.NotifyCancelled && l.requestID() == `"a"` {
			t.Errorf("server cancelled the listen the client cancelled: %s", l.raw)
		}
	}
	// Shutdown: notifications/cancelled for the listen, then its result.
	for _, e := range []struct {
		id  string
		end int
	}{{"1", end1}, {`"1"`, end2}} {
		cancelAt := -1
		for i, l := range ls {
			if l.Method == mcp.NotifyCancelled && l.requestID() == e.id {
				if cancelAt >= 0 {
					t.Errorf("listen %s cancelled twice", e.id)
				}
				cancelAt = i
			}
		}
		if cancelAt < 0 || cancelAt > e.end {
			t.Errorf("listen %s: notifications/cancelled at %d, complete result at %d; want the cancel first", e.id, cancelAt, e.end)
		}
		res := ls[e.end].Result
		if res["resultType"] != mcp.ResultComplete {
			t.Errorf("listen %s ended with %s", e.id, ls[e.end].raw)
		}
		if got, _ := json.Marshal(res["_meta"].(map[string]any)[mcp.MetaSubscriptionID]); string(got) != e.id {
			t.Errorf("listen %s: result subscriptionId %s", e.id, got)
		}
	}
}

// TestShutdownWithoutCancel: WithoutCancelOnListenEnd ends listens with
// the complete result alone.
func TestShutdownWithoutCancel(t *testing.T) {
	srv := newServer(t)
	c := start(t, srv, stdio.WithoutCancelOnListenEnd())
	c.send(7, mcp.MethodListen, P{"notifications": P{"toolsListChanged": true}})
	c.waitUntil("ack", func(ls []line) bool { return count(ls, mcp.NotifyAcknowledged) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	c.response(7)
	if n := count(c.snapshot(), mcp.NotifyCancelled); n != 0 {
		t.Errorf("%d notifications/cancelled with the option off", n)
	}
}

// TestMalformedLines covers ENV-3 for unreadable input: each bad line is
// answered with an error (no id when none could be read) and the next
// line is still served.
func TestMalformedLines(t *testing.T) {
	srv := newServer(t)
	c := start(t, srv)
	for i, bad := range []struct {
		line string
		code jsonrpc.Code
		id   string
	}{
		{`{"jsonrpc":`, -32700, ""},
		{`not json at all`, -32700, ""},
		{`[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]`, -32600, ""},
		{`"a string"`, -32600, ""},
		{`{"jsonrpc":"1.0","id":3,"method":"tools/list"}`, -32600, "3"},
		{`{"jsonrpc":"2.0","id":4,"method":"tools/list","Method":"x"}`, -32600, "4"},
		{`{"jsonrpc":"2.0","id":{"x":1},"method":"tools/list"}`, -32600, ""},
		{`{"jsonrpc":"2.0","id":5,"method":"tools/list","params":[1]}`, -32600, "5"},
	} {
		before := len(c.snapshot())
		c.writeLine([]byte(bad.line))
		ls := c.waitUntil(fmt.Sprintf("error for %q", bad.line), func(ls []line) bool { return len(ls) > before })
		e := ls[before]
		if e.Error == nil || e.Error.Code != bad.code {
			t.Errorf("%q: got %s, want error %d", bad.line, e.raw, bad.code)
		}
		if string(e.ID) != bad.id {
			t.Errorf("%q: id %s, want %q", bad.line, e.ID, bad.id)
		}
		id := fmt.Sprintf("after-%d", i)
		c.send(id, mcp.MethodToolsList, nil)
		if r, _ := c.response(id); r.Result == nil {
			t.Errorf("request after %q: %s", bad.line, r.raw)
		}
	}
}

// TestOverlongLine: a line over the limit is refused with a parse error
// without being buffered whole, and the connection stays usable, whether
// the line is a little or far over (past the reader's buffer).
func TestOverlongLine(t *testing.T) {
	srv := newServer(t)
	c := start(t, srv, stdio.WithMaxLineBytes(512))
	for i, size := range []int{600, 300 << 10} {
		big := fmt.Sprintf(`{"jsonrpc":"2.0","id":"big","method":"tools/list","params":{"pad":%q}}`, strings.Repeat("x", size))
		before := len(c.snapshot())
		c.writeLine([]byte(big))
		ls := c.waitUntil("error for the long line", func(ls []line) bool { return len(ls) > before })
		if e := ls[before]; e.Error == nil || e.Error.Code != -32700 || e.ID != nil {
			t.Errorf("long line of %d bytes: got %s, want -32700 without id", size, e.raw)
		}
		id := fmt.Sprint("next-", i)
		c.send(id, mcp.MethodToolsList, nil)
		if r, _ := c.response(id); r.Result == nil {
			t.Errorf("request after long line: %s", r.raw)
		}
	}
	// A line within the limit works.
	c.send("small", mcp.MethodDiscover, nil)
	c.response("small")
}

// TestEOFEndsServe covers STDIO-10: stdin EOF makes Serve return promptly
// even with a listen open and a call in flight, neither of which is
// answered afterwards.
func TestEOFEndsServe(t *testing.T) {
	srv := newServer(t)
	started := make(chan struct{})
	if err := srv.AddTool(mcp.Tool{Name: "block"}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
	c := start(t, srv, stdio.WithDrainTimeout(50*time.Millisecond))
	c.send(1, mcp.MethodListen, P{"notifications": P{"toolsListChanged": true}})
	c.send(2, mcp.MethodToolsCall, P{"name": "block"})
	c.waitUntil("ack", func(ls []line) bool { return count(ls, mcp.NotifyAcknowledged) == 1 })
	<-started
	if err := c.in.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-c.done:
		if err != nil {
			t.Errorf("Serve = %v, want nil on EOF", err)
		}
		c.done <- err // for the cleanup
	case <-time.After(waitLimit):
		t.Fatal("Serve did not return after stdin EOF")
	}
	for _, l := range c.snapshot() {
		if l.Method == "" {
			t.Errorf("response after EOF: %s", l.raw)
		}
	}
}

// TestEOFStillAnswers: requests already read when stdin closes are still
// answered (as in "echo request | server"), within the drain timeout.
func TestEOFStillAnswers(t *testing.T) {
	srv := newServer(t)
	release := make(chan struct{})
	if err := srv.AddTool(mcp.Tool{Name: "slow"}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		<-release
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("done")}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	c := start(t, srv)
	c.send(1, mcp.MethodToolsCall, P{"name": "slow"})
	if err := c.in.Close(); err != nil {
		t.Fatal(err)
	}
	close(release)
	if r, _ := c.response(1); r.Result == nil {
		t.Fatalf("no result for a request read before EOF: %s", r.raw)
	}
}

// TestCancelCall covers CAN-2 and STDIO-8 for an ordinary request: the
// handler's context ends and no response follows.
func TestCancelCall(t *testing.T) {
	srv := newServer(t)
	started := make(chan struct{})
	ended := make(chan struct{})
	if err := srv.AddTool(mcp.Tool{Name: "block"}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		close(started)
		<-ctx.Done()
		close(ended)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("too late")}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	c := start(t, srv)
	c.send("slow", mcp.MethodToolsCall, P{"name": "block"})
	<-started
	c.send(nil, mcp.NotifyCancelled, P{"requestId": "slow"})
	<-ended
	// Unknown ids are ignored.
	c.send(nil, mcp.NotifyCancelled, P{"requestId": "never-sent"})
	c.send("after", mcp.MethodToolsList, nil)
	c.response("after")
	// The cancelled call's goroutine may still be finishing; Serve waits
	// for it, so check the output once Serve has returned.
	if err := c.in.Close(); err != nil {
		t.Fatal(err)
	}
	err := <-c.done
	c.done <- err
	for _, l := range c.snapshot() {
		if l.Method == "" && string(l.ID) == `"slow"` {
			t.Errorf("cancelled call answered: %s", l.raw)
		}
	}
}

// TestProgressOverStdio covers PROG-1 on stdio: progress for the request
// goes out before its response.
func TestProgressOverStdio(t *testing.T) {
	srv := newServer(t)
	if err := srv.AddTool(mcp.Tool{Name: "work"}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		for i := 1; i <= 3; i++ {
			if err := req.Progress(float64(i), nil, ""); err != nil {
				return nil, err
			}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	c := start(t, srv)
	c.send(1, mcp.MethodToolsCall, P{"name": "work", "_meta": P{
		mcp.MetaProtocolVersion: mcp.Version, mcp.MetaClientCapabilities: P{}, mcp.MetaProgressToken: 99,
	}})
	_, pos := c.response(1)
	ls := c.snapshot()
	if n := count(ls[:pos], mcp.NotifyProgress); n != 3 {
		t.Errorf("%d progress notifications before the response, want 3", n)
	}
	if n := count(ls[pos:], mcp.NotifyProgress); n != 0 {
		t.Errorf("%d progress notifications after the response", n)
	}
}

// TestDuplicateID: a request reusing the id of one still in flight is
// refused with -32600 and the first is unaffected.
func TestDuplicateID(t *testing.T) {
	srv := newServer(t)
	c := start(t, srv)
	c.send(1, mcp.MethodListen, P{"notifications": P{"toolsListChanged": true}})
	c.waitUntil("ack", func(ls []line) bool { return count(ls, mcp.NotifyAcknowledged) == 1 })
	c.send(1, mcp.MethodToolsList, nil)
	r, _ := c.response(1)
	if r.Error == nil || r.Error.Code != -32600 {
		t.Errorf("duplicate id: %s, want -32600", r.raw)
	}
	addTool(t, srv, "x")
	c.waitUntil("the listen still works", func(ls []line) bool { return count(tagged(ls, 1), mcp.NotifyToolsListChanged) == 1 })
}
