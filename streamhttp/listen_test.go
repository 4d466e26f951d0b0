package streamhttp_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"tidings/mcp"
	"tidings/server"
)

// TestListenOverHTTP walks a listen stream through its life: the ack comes
// first, changes arrive tagged with the listen id, and a server shutdown
// ends it with the complete result before the stream closes.
func TestListenOverHTTP(t *testing.T) {
	for _, m := range parkModes() {
		t.Run(m.name, func(t *testing.T) { testListenOverHTTP(t, m) })
	}
}

func testListenOverHTTP(t *testing.T, m parkMode) {
	f := newFixture(t, nil, m.opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := f.open(t, ctx, listenBody(11, `{"toolsListChanged":true,"promptsListChanged":true,"resourceSubscriptions":["res://doc"]}`),
		headers(mcp.MethodListen, ""))

	ack := s.next(t)
	if ack.Method != mcp.NotifyAcknowledged || ack.ID != nil {
		t.Fatalf("first event is %q (id %s), want the %s notification", ack.Method, ack.ID, mcp.NotifyAcknowledged)
	}
	if id := subscriptionID(t, ack.Params); id != "11" {
		t.Fatalf("ack subscriptionId = %s, want 11", id)
	}
	var granted struct {
		Notifications mcp.SubscriptionFilter `json:"notifications"`
	}
	if err := json.Unmarshal(ack.Params, &granted); err != nil {
		t.Fatal(err)
	}
	g := granted.Notifications
	if !g.ToolsListChanged || !g.PromptsListChanged || g.ResourcesListChanged ||
		len(g.ResourceSubscriptions) != 1 || g.ResourceSubscriptions[0] != "res://doc" {
		t.Fatalf("granted filter = %+v", g)
	}
	m.want(t, f, 1)

	if f.srv.RemoveTools("coffee") != 1 {
		t.Fatal("RemoveTools found nothing")
	}
	if ev := s.next(t); ev.Method != mcp.NotifyToolsListChanged || subscriptionID(t, ev.Params) != "11" {
		t.Fatalf("after a tool change got %q %s", ev.Method, ev.Params)
	}
	f.srv.ResourceUpdated("res://other") // not subscribed: must not arrive
	f.srv.ResourceUpdated("res://doc")
	ev := s.next(t)
	var upd struct {
		URI string `json:"uri"`
	}
	if err := json.Unmarshal(ev.Params, &upd); err != nil {
		t.Fatal(err)
	}
	if ev.Method != mcp.NotifyResourceUpdated || upd.URI != "res://doc" || subscriptionID(t, ev.Params) != "11" {
		t.Fatalf("after a resource update got %q %s", ev.Method, ev.Params)
	}

	shCtx, shCancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer shCancel()
	if err := f.srv.Shutdown(shCtx); err != nil {
		t.Fatal(err)
	}
	end := s.next(t)
	if string(end.ID) != "11" || end.Result == nil {
		t.Fatalf("after shutdown got %+v, want the result of request 11", end)
	}
	var res struct {
		ResultType string `json:"resultType"`
	}
	if err := json.Unmarshal(end.Result, &res); err != nil || res.ResultType != "complete" {
		t.Fatalf("listen result = %s", end.Result)
	}
	if id := subscriptionID(t, end.Result); id != "11" {
		t.Fatalf("result subscriptionId = %s, want 11", id)
	}
	if _, err := s.r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the complete result: %v, want EOF", err)
	}

	// A listen opened after shutdown is acknowledged and ended at once.
	s2 := f.open(t, ctx, listenBody(12, `{"toolsListChanged":true}`), headers(mcp.MethodListen, ""))
	if ev := s2.next(t); ev.Method != mcp.NotifyAcknowledged {
		t.Fatalf("first event after shutdown is %q", ev.Method)
	}
	if ev := s2.next(t); string(ev.ID) != "12" || ev.Result == nil {
		t.Fatalf("second event after shutdown is %+v, want the result", ev)
	}
	if _, err := s2.r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("stream after shutdown: %v, want EOF", err)
	}
}

// TestListenKeepAlive reads an idle listen stream line by line and checks
// that keep-alive comments arrive after the ack.
func TestListenKeepAlive(t *testing.T) {
	for _, m := range parkModes() {
		t.Run(m.name, func(t *testing.T) { testListenKeepAlive(t, m) })
	}
}

func testListenKeepAlive(t *testing.T, m parkMode) {
	f := newFixture(t, []server.Option{server.WithKeepAlive(20 * time.Millisecond)}, m.opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s := f.open(t, ctx, listenBody(3, `{"toolsListChanged":true}`), headers(mcp.MethodListen, ""))
	br := bufio.NewReader(s.resp.Body)
	line := func() string {
		t.Helper()
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading stream: %v", err)
		}
		return strings.TrimRight(l, "\r\n")
	}
	// The ack: event line, data line(s), blank line. No comment before it.
	var data []string
	for l := line(); l != ""; l = line() {
		if strings.HasPrefix(l, ":") {
			t.Fatalf("comment %q before the ack", l)
		}
		if v, ok := strings.CutPrefix(l, "data:"); ok {
			data = append(data, strings.TrimPrefix(v, " "))
		}
	}
	if ev := decodeEnvelope(t, []byte(strings.Join(data, "\n"))); ev.Method != mcp.NotifyAcknowledged {
		t.Fatalf("first event is %q, want the ack", ev.Method)
	}
	m.want(t, f, 1)
	for i := 0; i < 3; i++ {
		l := line()
		if !strings.HasPrefix(l, ":") {
			t.Fatalf("idle stream sent %q, want a keep-alive comment", l)
		}
		if blank := line(); blank != "" {
			t.Fatalf("comment not followed by a blank line: %q", blank)
		}
	}
}

// TestShutdownWaitsForFinalWrite: once Shutdown returns, every listen's
// complete result has been written, so a server that then closes all its
// connections at once cuts none of them short.
func TestShutdownWaitsForFinalWrite(t *testing.T) {
	for _, m := range parkModes() {
		t.Run(m.name, func(t *testing.T) { testShutdownWaitsForFinalWrite(t, m) })
	}
}

func testShutdownWaitsForFinalWrite(t *testing.T, m parkMode) {
	f := newFixture(t, nil, m.opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var streams []*stream
	for i := range 20 {
		s := f.open(t, ctx, listenBody(100+i, `{"toolsListChanged":true}`), headers(mcp.MethodListen, ""))
		if ack := s.next(t); ack.Method != mcp.NotifyAcknowledged {
			t.Fatalf("first event %q, want the acknowledgement", ack.Method)
		}
		streams = append(streams, s)
	}
	m.want(t, f, len(streams))
	if err := f.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	f.ts.CloseClientConnections()
	for i, s := range streams {
		if end := s.next(t); string(end.ID) != fmt.Sprint(100+i) || end.Result == nil {
			t.Fatalf("listen %d ended with %+v, want its complete result", 100+i, end)
		}
	}
}
