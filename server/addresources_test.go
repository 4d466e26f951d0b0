package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// batchStream collects a listen's messages.
type batchStream chan []byte

func (s batchStream) Send(msg []byte) error { s <- append([]byte(nil), msg...); return nil }
func (s batchStream) KeepAlive() error      { return nil }

func batchCall(t *testing.T, srv *server.Server, id int, method string, params string) *engine.Call {
	t.Helper()
	raw := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}%s}}`, id, method, params)
	msg, err := jsonrpc.Decode([]byte(raw), jsonrpc.DefaultMaxDepth)
	if err != nil {
		t.Fatal(err)
	}
	c, rep := engine.Parse(msg)
	if rep != nil {
		t.Fatalf("%s", rep.Body)
	}
	return c
}

func TestAddResourcesIsOneChange(t *testing.T) {
	srv := server.New(mcp.Implementation{Name: "t", Version: "1"}, server.WithCapabilities(server.Resources), server.WithKeepAlive(0))
	read := func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "", req.URI)}}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := make(batchStream, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		engine.Of(srv).Serve(ctx, batchCall(t, srv, 1, mcp.MethodListen, `,"notifications":{"resourcesListChanged":true}`), "", nil, out)
	}()
	defer func() {
		cancel()
		<-done
	}()
	next := func() string {
		t.Helper()
		select {
		case b := <-out:
			var m struct{ Method string }
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			return m.Method
		case <-time.After(10 * time.Second):
			t.Fatal("no notification")
		}
		return ""
	}
	if m := next(); m != mcp.NotifyAcknowledged {
		t.Fatalf("got %s", m)
	}

	list := func(id int) []mcp.Resource {
		t.Helper()
		rep := engine.Of(srv).Serve(context.Background(), batchCall(t, srv, id, mcp.MethodResourcesList, ""), "", nil, batchStream(nil))
		var res struct {
			Result struct {
				Resources []mcp.Resource `json:"resources"`
			} `json:"result"`
		}
		if err := json.Unmarshal(rep.Body, &res); err != nil {
			t.Fatal(err)
		}
		return res.Result.Resources
	}

	// An invalid batch registers nothing.
	if err := srv.AddResources([]mcp.Resource{{URI: "a://1"}, {URI: ""}}, read); err == nil {
		t.Fatal("a resource without URI was accepted")
	}
	if err := srv.AddResources([]mcp.Resource{{URI: "a://1"}}, nil); err == nil {
		t.Fatal("a nil handler was accepted")
	}
	if got := list(2); len(got) != 0 {
		t.Fatalf("invalid batches registered %v", got)
	}

	rs := make([]mcp.Resource, 250)
	for i := range rs {
		rs[i] = mcp.Resource{URI: fmt.Sprintf("a://%03d", i)}
	}
	if err := srv.AddResources(rs, read); err != nil {
		t.Fatal(err)
	}
	if m := next(); m != mcp.NotifyResourcesListChanged {
		t.Fatalf("got %s", m)
	}
	// One change, so one notification: a sentinel change comes next.
	srv.RemoveResources("a://000")
	if m := next(); m != mcp.NotifyResourcesListChanged {
		t.Fatalf("got %s", m)
	}
	select {
	case b := <-out:
		t.Fatalf("extra message %s", b)
	default:
	}

	if got := list(3); len(got) != 100 || got[0].URI != "a://001" || got[0].Name != "a://001" {
		t.Fatalf("first page: %d items, %+v", len(got), got)
	}
	rep := engine.Of(srv).Serve(context.Background(), batchCall(t, srv, 4, mcp.MethodResourcesRead, `,"uri":"a://249"`), "", nil, batchStream(nil))
	var read2 struct {
		Result struct {
			Contents []struct{ Text string } `json:"contents"`
		} `json:"result"`
	}
	if err := json.Unmarshal(rep.Body, &read2); err != nil || len(read2.Result.Contents) != 1 || read2.Result.Contents[0].Text != "a://249" {
		t.Fatalf("read: %s", rep.Body)
	}
}
