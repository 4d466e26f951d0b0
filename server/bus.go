package server

import (
	"context"
	"tidings/bus"
	"tidings/hub"
	"tidings/internal/tracectx"
)

// WithBus joins the server to its other replicas through b, so that a
// listener on any replica hears of a change made through any of them:
// every change published here is also published on b, and every change b
// brings from another replica is told to this server's listeners as if
// it were local — with its audience, and with visibility decided by this
// server's WithVisibility over the keys of the items that changed (every
// replica runs the same code, so the same rules). When b may have lost
// changes, every listener here is told everything it follows. Local
// listeners never wait on b. The server owns b from then on: Shutdown
// closes it. One bus serves one server. It is bus.New over a bus.Local
// in one process, or over a broker's connection: brokers.Open by URL, or
// natsbus.Dial or redisbus.Dial, which this package does not import, so
// that a server links no broker's client unless its program asks for one.
//
// A deployment of several replicas needs three things besides the bus:
// the same items registered in code on every replica (the bus says what
// changed, each replica answers from its own registries); the same
// WithSecret key on every replica, or a cursor or requestState issued by
// one is refused by the others; and, for what is switched on and off at
// run time (Enable and Disable), WithSharedState on the same
// broker, or a switch reaches only the replica it was made on while the
// others are told a list changed that, for them, did not.
//
// The bus is opened before the server, so it does not take the secret
// from here: open it with bus.WithSecret and the same key, and it signs
// what it sends and believes only what the other replicas signed —
// without that, anyone who can publish on the broker can tell this
// server's listeners of changes and set its bus metrics.
func WithBus(b bus.Bus) Option { return func(c *config) { c.bus = b } }

// joinBus forwards the hub's local events to b and hands b's to the hub.
// A change the server publishes itself goes to b through publish, with
// the keys of the items it changed; the hub's observer forwards what is
// published straight to the hub, which names none.
func (s *Server) joinBus(b bus.Bus) {
	s.hub.SetObserver(func(e hub.Event) { b.Publish(change{Event: e}.onBus()) })
	for _, r := range []interface{ joinBus(bus.Bus) }{s.tools, s.prompts, s.resources, s.templates} {
		r.joinBus(b)
	}
	b.Handle((*busHandler)(s))
}

// change is one change as the server publishes it: the hub's event, and,
// when visibility limits it, the keys of the changed items and the list
// they belong to, which Sees was built from. The hub never reads those;
// the bus carries them, so that another replica builds Sees again from
// its own visibility rules, and the shared state compares them.
type change struct {
	hub.Event
	keys []string
	list List
}

// publish tells this replica's listeners of c and then, through b (nil:
// no bus), the other replicas; tel (nil: none) stamps a list change, which
// came by road, and traces it (under the span ctx holds, if any).
func publish(ctx context.Context, h *hub.Hub, b bus.Bus, c change, tel *changeTelemetry, road string) {
	end := tel.stamp(ctx, &c.Event, road)
	h.PublishRemote(c.Event) // not through the observer: b hears of c below, keys and all
	end()
	if b != nil {
		b.Publish(c.onBus())
	}
}

// spaces are the lists whose items' keys travel, by their key space.
var spaces = [...]struct {
	l List
	s bus.Space
}{{ListTools, bus.SpaceTools}, {ListPrompts, bus.SpacePrompts}, {ListResources, bus.SpaceResources}, {ListTemplates, bus.SpaceTemplates}}

// onBus is c as it travels to the other replicas.
func (c change) onBus() bus.Event {
	e := bus.Event{Kinds: c.Kinds, URI: c.URI, Task: c.Task, Audience: c.Audience, Keys: c.keys}
	if st := c.Stamp; st != nil {
		e.TraceParent, e.TraceState = st.TraceParent, st.TraceState
	}
	if c.keys != nil {
		for _, sp := range spaces {
			if sp.l == c.list {
				e.Space = sp.s
			}
		}
	}
	return e
}

// changeOf is the change e tells of, without Sees; ok is false when e
// names keys of a kind of item this server does not know.
func changeOf(e bus.Event) (c change, ok bool) {
	c = change{Event: hub.Event{Kinds: e.Kinds, URI: e.URI, Task: e.Task, Audience: e.Audience}, keys: e.Keys}
	if e.Keys == nil {
		return c, true
	}
	for _, sp := range spaces {
		if sp.s == e.Space {
			c.list = sp.l
			return c, true
		}
	}
	return c, false
}

// busHandler is the Server as its bus sees it.
type busHandler Server

// Deliver tells this replica's listeners of another replica's change.
func (h *busHandler) Deliver(e bus.Event) {
	s := (*Server)(h)
	c, known := changeOf(e)
	if e.Kinds == 0 && e.URI == "" {
		// Only a task changed: listeners read it from the task store, so
		// the shared state has nothing to load first.
		s.hub.PublishRemote(c.Event)
		return
	}
	// The source forgets what it kept before anyone here is told, so
	// that the re-read the notification prompts finds the change.
	for _, sp := range spaces {
		if e.Kinds&kindOf(sp.l) != 0 && (e.Keys == nil || e.Space == sp.s) {
			s.src.forget(sp.l, "")
		}
	}
	if e.URI != "" {
		s.src.forget(ReadResource, e.URI)
	}
	if v := s.cfg.visible; v != nil && e.Keys != nil {
		if !known {
			// A kind of item this server does not know: it cannot tell
			// who may see the change, so it tells everyone everything.
			h.Resync()
			return
		}
		l, keys := c.list, c.keys
		c.Sees = func(p string) bool {
			for _, k := range keys {
				if v(p, l, k) {
					return true
				}
			}
			return false
		}
	}
	if s.shared != nil {
		s.shared.remote(c) // told once the shared state is loaded
		return
	}
	// The change's span here continues the trace of its span there.
	ctx := tracectx.Extract(context.Background(), e.TraceParent, e.TraceState)
	end := s.changes.stampAt(ctx, &c.Event, roadBus, e.Sent)
	s.hub.PublishRemote(c.Event)
	end()
}

// Resync tells every listener here that everything it follows may have
// changed: the bus may have lost events. With shared state, the state is
// loaded first.
func (h *busHandler) Resync() {
	s := (*Server)(h)
	// What the source kept may predate a change the bus lost: it
	// forgets everything before anyone here is told to re-read.
	for _, sp := range spaces {
		s.src.forget(sp.l, "")
	}
	s.src.forget(ReadResource, "")
	if s.shared != nil {
		s.shared.resyncAll()
		return
	}
	s.hub.MarkAllDirty()
}
