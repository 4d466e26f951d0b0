package stdio_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/testrig/schematest"
	"tidings/mcp"
	"tidings/server"
	"tidings/stdio"
)

// dualConn is a client end of a stdio connection that speaks both eras:
// requests sent with modern=false carry no _meta and their answers are
// judged by the 2025-11-25 schema; the others by the 2026-07-28 schema.
type dualConn struct {
	t    *testing.T
	in   *io.PipeWriter
	done chan error

	mu     sync.Mutex
	lines  []line
	poke   chan struct{}
	sent   map[string]sentReq // raw id → what was asked
	readEr chan error
}

type sentReq struct {
	method string
	modern bool
}

func startDual(t *testing.T, srv *server.Server) *dualConn {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &dualConn{t: t, in: inW, done: make(chan error, 1), poke: make(chan struct{}, 1), sent: map[string]sentReq{}, readEr: make(chan error, 1)}
	go func() {
		c.done <- stdio.Serve(context.Background(), srv, inR, outW)
		_ = outW.Close()
	}()
	go func() { c.readEr <- c.read(outR) }()
	t.Cleanup(func() {
		_ = inW.Close()
		select {
		case err := <-c.done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(waitLimit):
			t.Errorf("Serve did not return after stdin closed")
		}
		if err := <-c.readEr; err != nil {
			t.Errorf("reading stdout: %v", err)
		}
		_ = inR.Close()
	})
	return c
}

func (c *dualConn) read(r io.Reader) error {
	br := bufio.NewReader(r)
	for {
		b, err := br.ReadBytes('\n')
		if len(b) > 0 {
			b = bytes.TrimSuffix(b, []byte("\n"))
			var l line
			if err := json.Unmarshal(b, &l); err != nil {
				c.t.Errorf("stdout line is not one JSON message: %q", b)
				continue
			}
			l.raw = bytes.Clone(b)
			c.check(l)
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

// check validates a line against the schema of its era.
func (c *dualConn) check(l line) {
	switch {
	case l.Method != "" && l.subID() != "":
		schematest.ValidateNotification(c.t, l.raw)
	case l.Method != "":
		schematest.ValidateLegacyServerMessage(c.t, l.raw)
	default:
		c.mu.Lock()
		s, ok := c.sent[string(l.ID)]
		c.mu.Unlock()
		switch {
		case !ok:
			c.t.Errorf("response to no request: %s", l.raw)
		case s.modern:
			schematest.ValidateResponse(c.t, s.method, l.raw)
		default:
			schematest.ValidateLegacyResponse(c.t, s.method, l.raw)
		}
	}
}

// send writes a request (id != nil) or notification. A modern request gets
// the standard _meta.
func (c *dualConn) send(id any, method string, params P, modern bool) {
	c.t.Helper()
	if params == nil {
		params = P{}
	}
	if modern {
		params["_meta"] = P{mcp.MetaProtocolVersion: mcp.Version, mcp.MetaClientCapabilities: P{}}
	}
	msg := map[string]any{"jsonrpc": "2.0", "method": method, "params": params}
	if id != nil {
		msg["id"] = id
		raw, _ := json.Marshal(id)
		c.mu.Lock()
		c.sent[string(raw)] = sentReq{method, modern}
		c.mu.Unlock()
	}
	b, err := json.Marshal(msg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.write(b)
}

func (c *dualConn) write(b []byte) {
	c.t.Helper()
	if _, err := c.in.Write(append(bytes.Clone(b), '\n')); err != nil {
		c.t.Fatalf("write to stdin: %v", err)
	}
}

func (c *dualConn) snapshot() []line {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]line(nil), c.lines...)
}

func (c *dualConn) waitFor(what string, match func(line) bool) line {
	c.t.Helper()
	deadline := time.NewTimer(waitLimit)
	defer deadline.Stop()
	for {
		for _, l := range c.snapshot() {
			if match(l) {
				return l
			}
		}
		select {
		case <-c.poke:
		case <-deadline.C:
			var sb strings.Builder
			for _, l := range c.snapshot() {
				sb.Write(l.raw)
				sb.WriteByte('\n')
			}
			c.t.Fatalf("timed out waiting for %s; stdout so far:\n%s", what, sb.String())
		}
	}
}

// response waits for the answer to id.
func (c *dualConn) response(id any) line {
	c.t.Helper()
	want, _ := json.Marshal(id)
	return c.waitFor(fmt.Sprintf("response %s", want), func(l line) bool { return l.Method == "" && string(l.ID) == string(want) })
}

func (c *dualConn) count(match func(line) bool) int {
	n := 0
	for _, l := range c.snapshot() {
		if match(l) {
			n++
		}
	}
	return n
}

// untaggedUpdate matches a session notification of uri's update.
func untaggedUpdate(uri string) func(line) bool {
	return func(l line) bool {
		return l.Method == mcp.NotifyResourceUpdated && l.subID() == "" && l.Params["uri"] == uri
	}
}

func taggedUpdate(id, uri string) func(line) bool {
	return func(l line) bool {
		return l.Method == mcp.NotifyResourceUpdated && l.subID() == id && l.Params["uri"] == uri
	}
}

// TestLegacyStdio walks a 2025-11-25 client through a stdio connection
// that also serves 2026-07-28 requests.
func TestLegacyStdio(t *testing.T) {
	srv := newServer(t)
	for _, u := range []string{"mem://x", "mem://y", "mem://z"} {
		if err := srv.AddResource(mcp.Resource{URI: u}, func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "", req.URI)}}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	c := startDual(t, srv)

	c.send(0, mcp.MethodInitialize, P{"protocolVersion": mcp.LegacyVersion, "capabilities": P{}, "clientInfo": P{"name": "stdio-legacy", "version": "1"}}, false)
	init := c.response(0)
	if init.Result["protocolVersion"] != mcp.LegacyVersion || init.Result["serverInfo"] == nil {
		t.Fatalf("initialize = %s", init.raw)
	}
	c.send(nil, mcp.NotifyInitialized, nil, false)

	// Plain requests of the session.
	c.send(1, mcp.MethodToolsList, nil, false)
	tl := c.response(1)
	if _, has := tl.Result["resultType"]; has || tl.Result["tools"] == nil {
		t.Errorf("legacy tools/list = %s, want tools and no resultType", tl.raw)
	}
	c.send(2, mcp.MethodPing, nil, false)
	if p := c.response(2); !bytes.Contains(p.raw, []byte(`"result":{}`)) {
		t.Errorf("ping = %s, want result {}", p.raw)
	}
	c.send(3, mcp.MethodResourcesSubscribe, P{"uri": "mem://x"}, false)
	c.response(3)
	c.send(4, mcp.MethodResourcesSubscribe, P{"uri": "mem://z"}, false)
	c.response(4)

	// A modern request on the same connection is served statelessly, and
	// a modern listen lives beside the session.
	c.send(10, mcp.MethodToolsList, nil, true)
	if r := c.response(10); r.Result["resultType"] != mcp.ResultComplete {
		t.Errorf("modern tools/list on a legacy connection = %s", r.raw)
	}
	c.send("L", mcp.MethodListen, P{"notifications": P{"resourceSubscriptions": []string{"mem://y"}}}, true)
	c.waitFor("the listen's ack", func(l line) bool { return l.Method == mcp.NotifyAcknowledged })

	addTool(t, srv, "late")
	lc := c.waitFor("tools/list_changed", func(l line) bool { return l.Method == mcp.NotifyToolsListChanged })
	if lc.subID() != "" || len(lc.Params) != 0 {
		t.Errorf("session list_changed = %s, want bare and untagged", lc.raw)
	}
	srv.ResourceUpdated("mem://x") // the session asked
	srv.ResourceUpdated("mem://y") // the listen asked
	srv.ResourceUpdated("mem://z") // the session's marker
	c.waitFor("the session's update of mem://z", untaggedUpdate("mem://z"))
	c.waitFor("the listen's update of mem://y", taggedUpdate(`"L"`, "mem://y"))
	// One more round each, so earlier writes are all out.
	srv.ResourceUpdated("mem://y")
	srv.ResourceUpdated("mem://z")
	c.waitFor("the second mem://z", func(line) bool { return c.count(untaggedUpdate("mem://z")) >= 2 })
	c.waitFor("the second mem://y", func(line) bool { return c.count(taggedUpdate(`"L"`, "mem://y")) >= 2 })
	if n := c.count(untaggedUpdate("mem://x")); n != 1 {
		t.Errorf("session updates of mem://x = %d, want 1", n)
	}
	if n := c.count(untaggedUpdate("mem://y")); n != 0 {
		t.Errorf("the session got %d updates of the listen's mem://y", n)
	}
	if n := c.count(func(l line) bool { return l.subID() != "" && l.Params["uri"] != nil && l.Params["uri"] != "mem://y" }); n != 0 {
		t.Errorf("the listen got %d updates it did not ask for", n)
	}
	if n := c.count(func(l line) bool { return l.subID() != "" && l.Method == mcp.NotifyToolsListChanged }); n != 0 {
		t.Errorf("the listen, which asked for no lists, got %d list changes", n)
	}

	// After unsubscribe, silence for that URI.
	c.send(5, mcp.MethodResourcesUnsubscribe, P{"uri": "mem://x"}, false)
	c.response(5)
	srv.ResourceUpdated("mem://x")
	srv.ResourceUpdated("mem://z")
	c.waitFor("the third mem://z", func(line) bool { return c.count(untaggedUpdate("mem://z")) >= 3 })
	if n := c.count(untaggedUpdate("mem://x")); n != 1 {
		t.Errorf("mem://x updates = %d after unsubscribe, want still 1", n)
	}

	// One initialize per connection.
	c.send(6, mcp.MethodInitialize, P{"protocolVersion": mcp.LegacyVersion, "capabilities": P{}, "clientInfo": P{"name": "again", "version": "1"}}, false)
	if r := c.response(6); r.Error == nil || r.Error.Code != -32600 {
		t.Errorf("second initialize = %s, want -32600", r.raw)
	}
	c.send(nil, mcp.NotifyCancelled, P{"requestId": "L"}, true)
}

// TestLegacyStdioInput checks the server asking a stdio session's client
// for input with a request of its own.
func TestLegacyStdioInput(t *testing.T) {
	srv := newServer(t)
	if err := srv.AddTool(mcp.Tool{Name: "ask"}, func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		answer, ok := req.InputResponses["who"]
		if !ok {
			return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"who": {
				Method: mcp.MethodElicit,
				Params: jsontext.Value(`{"mode":"form","message":"Who?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}}}}`),
			}}}
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("got " + string(answer))}}, nil
	}); err != nil {
		t.Fatal(err)
	}
	c := startDual(t, srv)
	c.send(0, mcp.MethodInitialize, P{"protocolVersion": mcp.LegacyVersion, "capabilities": P{"elicitation": P{}}, "clientInfo": P{"name": "stdio-legacy", "version": "1"}}, false)
	c.response(0)
	c.send(1, mcp.MethodToolsCall, P{"name": "ask", "arguments": P{}}, false)
	req := c.waitFor("elicitation/create", func(l line) bool { return l.Method == mcp.MethodElicit })
	if req.ID == nil {
		t.Fatalf("elicitation/create without an id: %s", req.raw)
	}
	c.write(fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{"action":"accept","content":{"name":"Ada"}}}`, req.ID))
	r := c.response(1)
	if !bytes.Contains(r.raw, []byte(`Ada`)) {
		t.Errorf("tools/call = %s, want the answer in it", r.raw)
	}
}

// TestEraOfMalformedMeta: an initialize whose _meta declares 2026-07-28
// but is otherwise malformed is a 2026-07-28 request on stdio as on
// Streamable HTTP (the version it declares wins), refused for its _meta,
// and opens no session.
func TestEraOfMalformedMeta(t *testing.T) {
	srv := newServer(t)
	c := start(t, srv)
	c.writeLine([]byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"_meta":{"` + mcp.MetaProtocolVersion +
		`":"` + mcp.Version + `","` + mcp.MetaClientCapabilities + `":7},"protocolVersion":"` + mcp.LegacyVersion +
		`","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`))
	r, _ := c.response(1)
	if r.Error == nil || r.Error.Code != -32602 {
		t.Fatalf("initialize with malformed 2026-07-28 _meta: got %s, want a -32602 refusal", r.raw)
	}
}
