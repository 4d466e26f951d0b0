package server

import (
	"tidings/bus"
	"tidings/hub"
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
func (s *Server) joinBus(b bus.Bus) {
	s.hub.SetObserver(func(e hub.Event) { b.Publish(toBusEvent(e)) })
	b.Handle((*busHandler)(s))
}

// toBusEvent is e as it travels to the other replicas.
func toBusEvent(e hub.Event) bus.Event {
	return bus.Event{Kinds: e.Kinds, URI: e.URI, Task: e.Task, Audience: e.Audience, Keys: e.Keys, Space: e.Space}
}

// busHandler is the Server as its bus sees it.
type busHandler Server

// Deliver tells this replica's listeners of another replica's change.
func (h *busHandler) Deliver(e bus.Event) {
	s := (*Server)(h)
	// Keys and Space stay with the event: the shared state reads them to
	// tell which changed items an event it holds already covers.
	he := hub.Event{Kinds: e.Kinds, URI: e.URI, Task: e.Task, Audience: e.Audience, Keys: e.Keys, Space: e.Space}
	if e.Kinds == 0 && e.URI == "" {
		// Only a task changed: listeners read it from the task store, so
		// the shared state has nothing to load first.
		s.hub.PublishRemote(he)
		return
	}
	if v := s.cfg.visible; v != nil && e.Keys != nil {
		l := List(e.Space)
		if l < 0 || l >= numLists {
			// A kind of item this server does not know: it cannot tell
			// who may see the change, so it tells everyone everything.
			h.Resync()
			return
		}
		keys := e.Keys
		he.Sees = func(p string) bool {
			for _, k := range keys {
				if v(p, l, k) {
					return true
				}
			}
			return false
		}
	}
	if s.shared != nil {
		s.shared.remote(he) // told once the shared state is loaded
		return
	}
	s.hub.PublishRemote(he)
}

// Resync tells every listener here that everything it follows may have
// changed: the bus may have lost events. With shared state, the state is
// loaded first.
func (h *busHandler) Resync() {
	s := (*Server)(h)
	if s.shared != nil {
		s.shared.resyncAll()
		return
	}
	s.hub.MarkAllDirty()
}
