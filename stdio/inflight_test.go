package stdio_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"tidings/mcp"
	"tidings/server"
	"tidings/stdio"
)

// addBlockingTool adds a tool that runs until its request is cancelled,
// reporting on started each time a call begins.
func addBlockingTool(t *testing.T, srv *server.Server, started chan<- struct{}) {
	t.Helper()
	if err := srv.AddTool(mcp.Tool{Name: "block"}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}); err != nil {
		t.Fatal(err)
	}
}

// TestFullConnectionStillReadsCancel: with every in-flight slot taken, a
// further request waits without stopping the reader, so the
// notifications/cancelled that frees the slot is read and the waiting
// request is then answered.
func TestFullConnectionStillReadsCancel(t *testing.T) {
	srv := newServer(t)
	started := make(chan struct{}, 1)
	addBlockingTool(t, srv, started)
	c := start(t, srv, stdio.WithMaxInFlight(1))
	c.send("slow", mcp.MethodToolsCall, P{"name": "block"})
	<-started
	c.send("next", mcp.MethodToolsList, nil)
	c.send(nil, mcp.NotifyCancelled, P{"requestId": "slow"})
	r, _ := c.response("next")
	if r.Error != nil || r.Result["tools"] == nil {
		t.Errorf("waiting request: %s, want a tools/list result", r.raw)
	}
}

// TestBusyBeyondWaitingBound: once four times the in-flight bound are
// waiting for a slot, a further request is refused at once as busy; the
// waiting ones are all answered once the slot frees up.
func TestBusyBeyondWaitingBound(t *testing.T) {
	srv := newServer(t)
	started := make(chan struct{}, 1)
	addBlockingTool(t, srv, started)
	c := start(t, srv, stdio.WithMaxInFlight(1))
	c.send("slow", mcp.MethodToolsCall, P{"name": "block"})
	<-started
	for i := range 4 {
		c.send(fmt.Sprint("wait", i), mcp.MethodToolsList, nil)
	}
	c.send("over", mcp.MethodToolsList, nil)
	r, _ := c.response("over")
	if r.Error == nil || r.Error.Code != -32603 || !strings.Contains(r.Error.Message, "busy") {
		t.Errorf("request beyond the waiting bound: %s, want -32603 saying busy", r.raw)
	}
	for i := range 4 {
		if _, ok := c.responseNow(fmt.Sprint("wait", i)); ok {
			t.Errorf("wait%d answered while the slot was still taken", i)
		}
	}
	c.send(nil, mcp.NotifyCancelled, P{"requestId": "slow"})
	for i := range 4 {
		if r, _ := c.response(fmt.Sprint("wait", i)); r.Error != nil {
			t.Errorf("wait%d: %s, want a result", i, r.raw)
		}
	}
}

// TestNonPositiveLimitsIgnored: limits ≤ 0 keep the defaults instead of
// refusing every request or line.
func TestNonPositiveLimitsIgnored(t *testing.T) {
	srv := newServer(t)
	c := start(t, srv, stdio.WithMaxInFlight(0), stdio.WithMaxLineBytes(-1), stdio.WithMaxListens(0))
	c.send(1, mcp.MethodListen, P{"notifications": P{"toolsListChanged": true}})
	c.waitUntil("ack", func(ls []line) bool { return count(ls, mcp.NotifyAcknowledged) == 1 })
	c.send(2, mcp.MethodToolsList, nil)
	if r, _ := c.response(2); r.Error != nil {
		t.Errorf("tools/list with non-positive limits: %s", r.raw)
	}
}

// responseNow returns the response with the given id if it has already
// been read.
func (c *conn) responseNow(id string) (line, bool) {
	want := `"` + id + `"`
	for _, l := range c.snapshot() {
		if l.Method == "" && string(l.ID) == want {
			return l, true
		}
	}
	return line{}, false
}
