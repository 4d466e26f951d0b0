package hub

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// subscribe subscribes to h with f; the subscription is closed when the
// test ends.
func subscribe(t *testing.T, h *Hub, f Filter) *Subscription {
	t.Helper()
	s, err := h.Subscribe(f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// woken reports whether s's wake channel holds a value, and drains it.
func woken(s *Subscription) bool {
	select {
	case <-s.Wake():
		return true
	default:
		return false
	}
}

// taken is what TakeTasks returns, sorted.
func taken(s *Subscription) []string {
	got := s.TakeTasks(nil)
	slices.Sort(got)
	return got
}

func TestSubscribeFoldsDuplicateTasks(t *testing.T) {
	h := New()
	s := subscribe(t, h, Filter{Tasks: []string{"a", "b", "a", "a", "b"}})
	if len(h.byTask["a"]) != 1 || len(h.byTask["b"]) != 1 {
		t.Fatalf("indexed %d times under a and %d under b, want once each", len(h.byTask["a"]), len(h.byTask["b"]))
	}
	h.Publish(Event{Task: "a"})
	if got := s.TakeTasks(nil); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("a change of a task followed three times is taken as %q, want it once", got)
	}
	h.MarkAllDirty()
	if got := s.TakeTasks(nil); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("marked, the tasks are taken as %q, want a and b once each, in the filter's order", got)
	}
}

func TestCloseUnindexesTasks(t *testing.T) {
	h := New()
	var subs []*Subscription
	for i := range 6 {
		subs = append(subs, subscribe(t, h, Filter{
			URIs:  []string{"res://shared", fmt.Sprintf("res://%d", i)},
			Tasks: []string{"shared", fmt.Sprintf("own-%d", i), "shared"},
		}))
	}
	// Closed from the middle out, so that what is kept moves down.
	for _, i := range []int{2, 3, 1, 4, 0, 5} {
		subs[i].Close()
		subs[i].Close() // a second Close is nothing
		uriRefs := map[string][]ref{}
		for u, fl := range h.byURI {
			uriRefs[u] = fl.refs
		}
		for _, index := range []map[string][]ref{h.byTask, uriRefs} {
			for key, refs := range index {
				for _, r := range refs {
					if r.sub == subs[i] {
						t.Fatalf("key %q still refers to a closed subscription", key)
					}
				}
				// What the slice no longer holds must not keep a closed
				// subscription alive either.
				for _, r := range refs[len(refs):cap(refs)] {
					if r.sub != nil {
						t.Fatalf("key %q keeps a subscription past its refs", key)
					}
				}
			}
		}
		if _, ok := h.byTask[fmt.Sprintf("own-%d", i)]; ok {
			t.Fatalf("the task only subscription %d followed is still indexed", i)
		}
	}
	if len(h.byTask) != 0 || len(h.byURI) != 0 || h.Len() != 0 {
		t.Fatalf("with every subscription closed, %d task ids and %d URIs are indexed, and %d subscriptions counted",
			len(h.byTask), len(h.byURI), h.Len())
	}
}

func TestCloseKeepsTheOthers(t *testing.T) {
	h := New()
	a := subscribe(t, h, Filter{Tasks: []string{"t"}})
	b := subscribe(t, h, Filter{Tasks: []string{"t"}})
	c := subscribe(t, h, Filter{Tasks: []string{"t"}})
	b.Close()
	h.Publish(Event{Task: "t"})
	for name, s := range map[string]*Subscription{"first": a, "last": c} {
		if got := s.TakeTasks(nil); !slices.Equal(got, []string{"t"}) {
			t.Errorf("after another closed, the %s subscription takes %q", name, got)
		}
	}
	if got := b.TakeTasks(nil); len(got) != 0 {
		t.Errorf("a closed subscription took %q", got)
	}
}

func TestTaskEventAudience(t *testing.T) {
	h := New()
	subs := map[string]*Subscription{}
	for _, p := range []string{"alice", "bob", ""} {
		subs[p] = subscribe(t, h, Filter{Tasks: []string{"t"}, Principal: p})
	}
	for _, c := range []struct {
		name string
		ev   Event
		want []string // the principals who hear of it
	}{
		{"everyone", Event{Task: "t"}, []string{"", "alice", "bob"}},
		{"audience", Event{Task: "t", Audience: []string{"alice"}}, []string{"alice"}},
		{"empty audience", Event{Task: "t", Audience: []string{}}, nil},
		{"sees", Event{Task: "t", Sees: func(p string) bool { return p == "bob" }}, []string{"bob"}},
		{"audience and sees", Event{Task: "t", Audience: []string{"alice", "bob"},
			Sees: func(p string) bool { return p != "bob" }}, []string{"alice"}},
		{"another task", Event{Task: "u"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			h.Publish(c.ev)
			var heard []string
			for p, s := range subs {
				w := woken(s)
				got := s.TakeTasks(nil)
				if len(got) > 0 {
					heard = append(heard, p)
				}
				if w != (len(got) > 0) {
					t.Errorf("%q was woken %v, but takes %q", p, w, got)
				}
			}
			slices.Sort(heard)
			if !slices.Equal(heard, c.want) {
				t.Fatalf("heard by %q, want %q", heard, c.want)
			}
		})
	}
}

func TestTakeLeavesTasks(t *testing.T) {
	h := New()
	s := subscribe(t, h, Filter{Kinds: ToolsList, URIs: []string{"res://a"}, Tasks: []string{"t"}})
	h.Publish(Event{Task: "t"})
	if k, uris := s.Take(nil); k != 0 || len(uris) != 0 {
		t.Fatalf("with only a task changed, Take returns %v and %q", k, uris)
	}
	if got := s.TakeTasks(nil); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("after Take, TakeTasks returns %q", got)
	}
	h.Publish(Event{Kinds: ToolsList, URI: "res://a", Task: "t"})
	if k, uris := s.Take(nil); k != ToolsList || !slices.Equal(uris, []string{"res://a"}) {
		t.Fatalf("Take returns %v and %q", k, uris)
	}
	if k, uris := s.Take(nil); k != 0 || len(uris) != 0 {
		t.Fatalf("a second Take returns %v and %q", k, uris)
	}
	if got := s.TakeTasks(nil); !slices.Equal(got, []string{"t"}) {
		t.Fatalf("after two Takes, TakeTasks returns %q", got)
	}
	if got := s.TakeTasks(nil); len(got) != 0 {
		t.Fatalf("a second TakeTasks returns %q", got)
	}
	// TakeTasks leaves the rest for Take.
	h.Publish(Event{Kinds: ToolsList, URI: "res://a", Task: "t"})
	s.TakeTasks(nil)
	if k, uris := s.Take(nil); k != ToolsList || !slices.Equal(uris, []string{"res://a"}) {
		t.Fatalf("after TakeTasks, Take returns %v and %q", k, uris)
	}
}

func TestMarkAllDirtyMarksTasks(t *testing.T) {
	h := New()
	a := subscribe(t, h, Filter{Tasks: []string{"x", "y"}})
	b := subscribe(t, h, Filter{Kinds: PromptsList, Tasks: []string{"y"}})
	h.MarkAllDirty()
	for name, c := range map[string]struct {
		s     *Subscription
		tasks []string
		kinds Kind
	}{"a": {a, []string{"x", "y"}, 0}, "b": {b, []string{"y"}, PromptsList}} {
		if !woken(c.s) {
			t.Errorf("%s was not woken", name)
		}
		if got := taken(c.s); !slices.Equal(got, c.tasks) {
			t.Errorf("%s: after MarkAllDirty, TakeTasks returns %q, want %q", name, got, c.tasks)
		}
		if k, _ := c.s.Take(nil); k != c.kinds {
			t.Errorf("%s: after MarkAllDirty, Take returns %v, want %v", name, k, c.kinds)
		}
	}
}

// TestTakeTasksRacesDeliver: tasks change while their subscription's
// owner drains them, as a listen does, round after round. Each round
// changes two tasks once each, so each must be taken exactly once: by a
// TakeTasks that raced its change, or by the last one, once the publisher
// is done. A change lost between a task's flag and the bit that says a
// flag is set would be taken by neither (unless a later change set the
// bit again: hence the last change of a round is the one to watch); one
// taken twice would be told twice.
//
// The task changed last comes first in the subscription, so that a
// TakeTasks looks at its flag as soon as it has cleared the bit. After
// the two come tasks that never change: few, so that TakeTasks runs as
// often as it can, or many, so that one that has passed the flag is busy
// for long before it is done.
func TestTakeTasksRacesDeliver(t *testing.T) {
	for _, c := range []struct{ idle, rounds int }{{0, 20000}, {256, 5000}} {
		t.Run(fmt.Sprint(c.idle, " idle tasks"), func(t *testing.T) { raceTakeTasks(t, c.idle, c.rounds) })
	}
}

func raceTakeTasks(t *testing.T, idle, rounds int) {
	h := New()
	tasks := []string{"last", "first"}
	for i := range idle {
		tasks = append(tasks, fmt.Sprint("idle-", i))
	}
	s := subscribe(t, h, Filter{Kinds: ToolsList, Tasks: tasks})
	start, taken := make(chan struct{}), make(chan []string)
	var draining, stop atomic.Bool
	var owner sync.WaitGroup
	owner.Go(func() {
		for range start {
			var got []string
			for !stop.Load() {
				s.Take(nil) // as the owner does first, which must leave the tasks
				got = s.TakeTasks(got)
				draining.Store(true)
				runtime.Gosched() // so as not to hold up the publisher, should they share a thread
			}
			taken <- got
		}
	})
	defer func() {
		close(start)
		owner.Wait()
	}()
	for r := range rounds {
		draining.Store(false)
		stop.Store(false)
		start <- struct{}{}
		for !draining.Load() {
			runtime.Gosched() // the owner is on its way; the changes must race its drain
		}
		h.ListChanged(ToolsList)
		h.Publish(Event{Task: "first"})
		h.Publish(Event{Task: "last"})
		stop.Store(true)
		got := s.TakeTasks(<-taken)
		slices.Sort(got)
		if !slices.Equal(got, []string{"first", "last"}) {
			t.Fatalf("round %d: two tasks changed once each, and %q were taken", r, got)
		}
	}
}
