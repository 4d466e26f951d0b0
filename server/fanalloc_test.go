package server_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// countStream is the engine.Stream of every listen of one fan-out: it
// counts the notifications that carry want and closes the round's done
// channel when the last listen has its one. It allocates nothing per
// message, so that what a test measures is the server's own cost.
type countStream struct {
	want    []byte
	listens int64
	acks    atomic.Int64
	acked   chan struct{}
	round   atomic.Pointer[countRound]
	// bad keeps the first message that was neither an acknowledgement
	// nor a notification carrying want: a refusal, or a notification
	// the listen should not have had.
	bad atomic.Pointer[[]byte]
}

type countRound struct {
	n    atomic.Int64
	done chan struct{}
}

var acknowledged = []byte(mcp.NotifyAcknowledged)

func (s *countStream) Send(msg []byte) error {
	switch {
	case bytes.Contains(msg, acknowledged):
		if s.acks.Add(1) == s.listens {
			close(s.acked)
		}
	case bytes.Contains(msg, s.want):
		if r := s.round.Load(); r.n.Add(1) == s.listens {
			close(r.done)
		}
	default:
		kept := bytes.Clone(msg)
		s.bad.CompareAndSwap(nil, &kept)
	}
	return nil
}

func (*countStream) KeepAlive() error { return nil }

// fanOutAllocs opens listens listens on a fresh server, each with the
// filter filter and as the principal principal(i), and returns the
// allocations of one change (change, alternating with undo) reaching all
// of them, each tagged with its own listen's id.
func fanOutAllocs(t *testing.T, listens int, opts []server.Option, setup func(*server.Server), filter string,
	principal func(i int) string, want string, change, undo func(*server.Server)) float64 {
	t.Helper()
	room := server.Allowance{Listens: listens, URIs: listens}
	opts = append(opts, server.WithListenLimits(server.ListenLimits{PerPrincipal: room, Total: room}))
	srv := server.New(testInfo, opts...)
	setup(srv)
	out := &countStream{want: []byte(want), listens: int64(listens), acked: make(chan struct{})}
	out.round.Store(&countRound{done: make(chan struct{})})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	for i := range listens {
		raw := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"subscriptions/listen","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":%q,"io.modelcontextprotocol/clientCapabilities":{}},"notifications":%s}}`,
			i+1, mcp.Version, filter)
		msg, err := jsonrpc.Decode(raw, 0)
		if err != nil {
			t.Fatal(err)
		}
		c, rep := engine.Parse(msg)
		if rep != nil {
			t.Fatalf("listen refused: %s", rep.Body)
		}
		wg.Go(func() { engine.Of(srv).Serve(ctx, c, principal(i), nil, out) })
	}
	<-out.acked
	n := 0
	allocs := testing.AllocsPerRun(20, func() {
		r := &countRound{done: make(chan struct{})}
		out.round.Store(r)
		if n%2 == 0 {
			change(srv)
		} else {
			undo(srv)
		}
		n++
		<-r.done
	})
	if bad := out.bad.Load(); bad != nil {
		t.Fatalf("a listen was sent %s", *bad)
	}
	return allocs
}

// TestFanOutAllocsConstant checks that what a change costs the heap does
// not grow with the listens it reaches: ten times the listens may cost a
// few allocations more per change (slack for the runtime's own), not
// one per listen. A listen that encoded its notification anew, or let a
// variable escape in its writer's loop, would cost at least one per
// listen; a map of principals built per change, one per few hundred.
func TestFanOutAllocsConstant(t *testing.T) {
	const small, large = 100, 1000
	anyone := func(int) string { return "" }
	// Every listen is its own principal, as callers with a token each
	// are: visibility is asked of each.
	own := func(i int) string { return fmt.Sprintf("p%d", i) }
	toggleTool := func(srv *server.Server) {
		if err := srv.AddTool(textTool("churn"), echoHandler("churn")); err != nil {
			t.Error(err)
		}
	}
	dropTool := func(srv *server.Server) { srv.RemoveTools("churn") }
	update := func(srv *server.Server) { srv.ResourceUpdated("mem://watched") }
	cases := []struct {
		name      string
		opts      []server.Option
		setup     func(*server.Server)
		filter    string
		principal func(int) string
		want      string
		change    func(*server.Server)
		undo      func(*server.Server)
	}{
		{name: "tools", filter: `{"toolsListChanged":true}`, principal: anyone,
			want: mcp.NotifyToolsListChanged, change: toggleTool, undo: dropTool},
		{name: "tools per principal",
			opts: []server.Option{server.WithVisibility(func(p string, l server.List, key string) bool {
				return p != "" // the anonymous caller sees nothing
			})},
			filter: `{"toolsListChanged":true}`, principal: own,
			want: mcp.NotifyToolsListChanged, change: toggleTool, undo: dropTool},
		{name: "resource", filter: `{"resourceSubscriptions":["mem://watched"]}`, principal: anyone,
			want: mcp.NotifyResourceUpdated, change: update, undo: update},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			setup := func(srv *server.Server) {
				mustAddTool(t, srv, textTool("base"), echoHandler("base"))
				mustAddResource(t, srv, "mem://watched", textResource("mem://watched", "w"))
			}
			per := func(n int) float64 {
				return fanOutAllocs(t, n, c.opts, setup, c.filter, c.principal, c.want, c.change, c.undo)
			}
			a, b := per(small), per(large)
			t.Logf("allocations per change: %.0f for %d listens, %.0f for %d", a, small, b, large)
			if b-a > 5 {
				t.Errorf("a change costs %.0f allocations for %d listens and %.0f for %d: they grow with the listens",
					a, small, b, large)
			}
		})
	}
}
