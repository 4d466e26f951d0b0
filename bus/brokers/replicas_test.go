package brokers_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"tidings/client"
	"tidings/hub"
	"tidings/internal/engine"
	"tidings/internal/testrig/testbroker"
	"tidings/mcp"
	"tidings/server"
)

// TestEveryReplicaHearsEveryChange: three replicas, listeners on each; a
// change through any replica — a tool added, disabled, enabled, removed,
// a prompt added, a resource updated — reaches every listener whose
// filter covers it, on every replica, once, and no other.
func TestEveryReplicaHearsEveryChange(t *testing.T) {
	forEachBus(t, func(t *testing.T, br broker) {
		c := newCluster(t, br, 3, clusterOpts{})
		a, b, cc := c.reps[0], c.reps[1], c.reps[2]
		var tools, prompts, docs []*listener
		for _, r := range c.reps {
			// Each also follows res://other, the final check that
			// nothing else was pending.
			tools = append(tools, r.listen(t, "", filter{Tools: true, URIs: []string{"res://other"}}))
			prompts = append(prompts, r.listen(t, "", filter{Prompts: true, URIs: []string{"res://other"}}))
			docs = append(docs, r.listen(t, "", filter{URIs: []string{"res://doc", "res://other"}}))
		}
		steps := []struct {
			what        string
			do          func()
			hear        []*listener
			method, uri string
		}{
			{"a tool added on A", func() { c.addTool(a, "new") }, tools, mcp.NotifyToolsListChanged, ""},
			{"a tool disabled on B", func() {
				if err := b.srv.Disable(t.Context(), server.Tool("toggle")); err != nil {
					t.Fatal(err)
				}
			}, tools, mcp.NotifyToolsListChanged, ""},
			{"a tool enabled on B", func() {
				if err := b.srv.Enable(t.Context(), server.Tool("toggle")); err != nil {
					t.Fatal(err)
				}
			}, tools, mcp.NotifyToolsListChanged, ""},
			{"a tool removed on C", func() { cc.srv.RemoveTools("base") }, tools, mcp.NotifyToolsListChanged, ""},
			{"a prompt added on C", func() {
				if err := cc.srv.AddPrompt(mcp.Prompt{Name: "new"}, func(context.Context, *server.PromptRequest) (*mcp.GetPromptResult, error) {
					return &mcp.GetPromptResult{}, nil
				}); err != nil {
					t.Fatal(err)
				}
			}, prompts, mcp.NotifyPromptsListChanged, ""},
			{"a resource updated on B", func() { b.srv.ResourceUpdated("res://doc") }, docs, mcp.NotifyResourceUpdated, "res://doc"},
		}
		for _, s := range steps {
			t.Log(s.what)
			s.do()
			for _, l := range s.hear {
				l.expect(t, s.method, s.uri)
			}
		}
		a.srv.ResourceUpdated("res://other")
		for _, l := range append(append(tools, prompts...), docs...) {
			l.expect(t, mcp.NotifyResourceUpdated, "res://other")
		}
		for _, r := range c.reps {
			if st := r.bus.Stats(); st.Gaps+st.Resyncs+st.Stale+st.Dropped+st.Invalid != 0 || !st.Connected {
				t.Errorf("replica %s: %+v, want a clean run", r.name, st)
			}
		}
	})
}

// TestAudienceAcrossReplicas: a change for one principal reaches that
// principal's listeners on every replica, and nobody else's.
func TestAudienceAcrossReplicas(t *testing.T) {
	forEachBus(t, func(t *testing.T, br broker) {
		c := newCluster(t, br, 3, clusterOpts{})
		a, b, cc := c.reps[0], c.reps[1], c.reps[2]
		f := filter{Tools: true, URIs: []string{"res://other"}}
		alice := []*listener{a.listen(t, "alice", f), b.listen(t, "alice", f), cc.listen(t, "alice", f)}
		others := []*listener{a.listen(t, "bob", f), b.listen(t, "bob", f), cc.listen(t, "", f)}
		engine.Of(a.srv).Hub().Publish(hub.Event{Kinds: hub.ToolsList, Audience: []string{"alice"}})
		for _, l := range alice {
			l.expect(t, mcp.NotifyToolsListChanged, "")
		}
		// Then a change for everyone: had the others heard alice's, it
		// would come first.
		b.srv.ResourceUpdated("res://other")
		for _, l := range append(alice, others...) {
			l.expect(t, mcp.NotifyResourceUpdated, "res://other")
		}
	})
}

// TestVisibilityAcrossReplicas: a change of an item only some may see is
// told, on every replica, to those who may see it, by that replica's own
// WithVisibility over the item's key.
func TestVisibilityAcrossReplicas(t *testing.T) {
	visible := func(p string, l server.List, key string) bool {
		return l != server.ListTools || key != "secret" || p == "alice"
	}
	forEachBus(t, func(t *testing.T, br broker) {
		c := newCluster(t, br, 3, clusterOpts{server: []server.Option{server.WithVisibility(visible)}})
		a, b, cc := c.reps[0], c.reps[1], c.reps[2]
		f := filter{Tools: true, URIs: []string{"res://other"}}
		alice := []*listener{b.listen(t, "alice", f), cc.listen(t, "alice", f)}
		bob := []*listener{b.listen(t, "bob", f), cc.listen(t, "bob", f), a.listen(t, "bob", f)}
		// Each replica holds what was done through it (their state is
		// not shared), so each change is made where the tool is.
		for _, change := range []struct {
			what string
			do   func()
		}{
			{"added on A", func() { c.addTool(a, "secret") }},
			{"added on B", func() { c.addTool(b, "secret") }},
			{"disabled on A", func() {
				if err := a.srv.Disable(t.Context(), server.Tool("secret")); err != nil {
					t.Fatal(err)
				}
			}},
			{"enabled on A", func() {
				if err := a.srv.Enable(t.Context(), server.Tool("secret")); err != nil {
					t.Fatal(err)
				}
			}},
			{"removed on B", func() { b.srv.RemoveTools("secret") }},
		} {
			t.Log("the secret tool " + change.what)
			change.do()
			for _, l := range alice {
				l.expect(t, mcp.NotifyToolsListChanged, "")
			}
			a.srv.ResourceUpdated("res://other")
			for _, l := range append(alice, bob...) {
				l.expect(t, mcp.NotifyResourceUpdated, "res://other")
			}
		}
		// A tool everyone may see is told to everyone.
		c.addTool(b, "public")
		for _, l := range append(alice, bob...) {
			l.expect(t, mcp.NotifyToolsListChanged, "")
		}
	})
}

// TestBusOutage: with the bus down, local changes still reach local
// listeners; once it is back, the replicas reconnect and re-notify, so
// the listeners of another replica hear of what changed meanwhile, and a
// watcher there reads the new content.
func TestBusOutage(t *testing.T) {
	forEachBus(t, func(t *testing.T, br broker) {
		c := newCluster(t, br, 2, clusterOpts{})
		a, b := c.reps[0], c.reps[1]
		la := a.listen(t, "", filter{Tools: true})
		lb := b.listen(t, "", filter{Tools: true})
		cl := client.NewHTTP(b.ts.URL)
		defer cl.Close()
		watched := make(chan client.Event, 64)
		w := cl.Watch(context.Background(), client.WatchOptions{URIs: []string{"res://shared"}, OnEvent: func(e client.Event) {
			if e.Kind == client.ResourceUpdated {
				select {
				case watched <- e:
				default:
					t.Errorf("watch event %+v not taken", e)
				}
			}
		}})
		defer w.Close()
		if e := next(t, watched); len(e.Added) != 1 {
			t.Fatalf("the watcher's first read: %+v", e)
		}

		restore := c.outage()
		c.addTool(a, "during")
		la.expect(t, mcp.NotifyToolsListChanged, "") // local delivery does not wait on the bus
		v2 := "v2"
		c.shared.Store(&v2)
		a.srv.ResourceUpdated("res://shared")
		testbroker.WaitFor(t, "A to drop the two events it could not send", func() bool { return a.bus.Stats().Dropped == 2 })
		restore()
		for _, r := range c.reps {
			testbroker.WaitFor(t, "replica "+r.name+" to reconnect", func() bool {
				st := r.bus.Stats()
				return st.Connected && st.Reconnects == 1
			})
		}
		lb.expect(t, mcp.NotifyToolsListChanged, "")
		if e := next(t, watched); len(e.Changed) != 1 || e.URI != "res://shared" {
			t.Fatalf("the watcher after the outage: %+v, want res://shared changed", e)
		}
		// And the bus carries changes again. A change sent in the moment
		// after a reconnect may still be lost (the broker may not yet
		// have B's subscription again; heartbeats, which would reveal
		// the gap, are an hour apart here), so A keeps making changes,
		// one every 50 ms, until B receives one.
		before := b.bus.Stats().Received
		var sent int
		last := time.Time{}
		testbroker.WaitFor(t, "B to receive a change A made", func() bool {
			if b.bus.Stats().Received > before {
				return true
			}
			if time.Since(last) >= 50*time.Millisecond {
				sent++
				c.addTool(a, fmt.Sprintf("after-%d", sent))
				last = time.Now()
			}
			return false
		})
	})
}

func next(t *testing.T, ch <-chan client.Event) client.Event {
	t.Helper()
	select {
	case e := <-ch:
		return e
	case <-timeout():
		t.Fatalf("no watch event in %v", wait)
	}
	return client.Event{}
}
