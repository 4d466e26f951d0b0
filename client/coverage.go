package client

import (
	"strconv"
	"sync"
	"time"

	"tidings/jsonrpc"
	"tidings/mcp"
)

// Notice says how a change of a cached answer reaches the client. A TTL
// only bounds how long an answer is trusted; a notice is what lets a
// change be heard before that.
type Notice int

// The ways a change is heard.
const (
	// Unnotified: no Watcher hears of its changes; it is read again when
	// its TTL runs out, or at a Watcher's next poll.
	Unnotified Notice = iota
	// Notified: a Watcher's listen announces its changes as the server
	// agreed: granted in the acknowledgement (2026-07-28), or, on a
	// 2025-11-25 session's stream, a list whose listChanged the server
	// declared or a resource the session subscribed to.
	Notified
	// NotifiedUntagged: the server sends change notifications for it
	// without tying them to a listen: without the subscription id
	// (2026-07-28), or for a list its capabilities do not say it announces
	// (2025-11-25). A Watcher follows them, as a re-read costs less than a
	// change missed, and keeps polling what its listen was not granted.
	NotifiedUntagged
)

var noticeNames = [...]string{"unnotified", "notified", "notified (untagged)"}

// String names the notice; an unknown value is printed as Notice(n).
func (n Notice) String() string {
	if n >= 0 && int(n) < len(noticeNames) {
		return noticeNames[n]
	}
	return "Notice(" + strconv.Itoa(int(n)) + ")"
}

// coverage records what the Watchers of a client and its views hear of:
// for each of them, the cache topics its listen was granted, those it
// heard untagged notifications for, and since when its listen is up.
// Freshness reads it to tell an answer that a change would reach from
// one that only its TTL vouches for.
type coverage struct {
	mu sync.Mutex
	by map[*Watcher]*watchCover
}

// watchCover is what one Watcher hears of.
type watchCover struct {
	// since is when the listen now open was acknowledged (the client's
	// clock); zero while none is.
	since   time.Time
	granted map[string]bool
	// untagged holds the topics untagged notifications arrived for, for
	// the Watcher's lifetime: a server that sends them keeps doing so
	// after a reconnect.
	untagged map[string]bool
}

// register starts recording what w hears of; the other methods ignore a
// Watcher that is not registered, so a notification handed over after
// the Watcher ended leaves nothing behind.
func (c *coverage) register(w *Watcher) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[*Watcher]*watchCover{}
	}
	c.by[w] = &watchCover{granted: map[string]bool{}, untagged: map[string]bool{}}
}

// remove forgets w.
func (c *coverage) remove(w *Watcher) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.by, w)
}

// acknowledged records that w's listen is up since at, granted topics.
func (c *coverage) acknowledged(w *Watcher, at time.Time, granted []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if wc := c.by[w]; wc != nil {
		wc.since = at
		clear(wc.granted)
		for _, t := range granted {
			wc.granted[t] = true
		}
	}
}

// heardUntagged records that untagged notifications reach w for topics.
func (c *coverage) heardUntagged(w *Watcher, topics []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if wc := c.by[w]; wc != nil {
		for _, t := range topics {
			wc.untagged[t] = true
		}
	}
}

// down records that w's listen ended: what it was granted is kept, for
// the next listen is asked for the same, but nothing is heard until then.
func (c *coverage) down(w *Watcher) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if wc := c.by[w]; wc != nil {
		wc.since = time.Time{}
	}
}

// of returns how the changes of topic are heard, and the earliest
// acknowledgement of a listen that is up and hears them (zero when none
// is). Untagged notifications outrank a grant: they are what actually
// arrives.
func (c *coverage) of(topic string) (Notice, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, since := Unnotified, time.Time{}
	for _, wc := range c.by {
		var heard Notice
		switch {
		case wc.untagged[topic]:
			heard = NotifiedUntagged
		case wc.granted[topic]:
			heard = Notified
		default:
			continue
		}
		n = max(n, heard)
		if !wc.since.IsZero() && (since.IsZero() || wc.since.Before(since)) {
			since = wc.since
		}
	}
	return n, since
}

// notifies reports whether change notification m is one that filter f
// asks for: the list_changed of a list it wants, or a resources/updated
// of a resource it subscribes to, or of a part of one.
func notifies(f mcp.SubscriptionFilter, m *jsonrpc.Message) bool {
	if l, ok := mcp.ChangedList(m.Method); ok {
		return f.Wants(l)
	}
	uri, ok := updatedURI(m)
	if !ok {
		return false
	}
	for _, u := range f.ResourceSubscriptions {
		if u == uri || subResource(uri, u) {
			return true
		}
	}
	return false
}

// updatedURI returns the URI a resources/updated notification names.
func updatedURI(m *jsonrpc.Message) (string, bool) {
	if m.Method != mcp.NotifyResourceUpdated {
		return "", false
	}
	var p struct {
		URI string `json:"uri"`
	}
	if jsonrpc.UnmarshalParams(m.Params, &p) != nil || p.URI == "" {
		return "", false
	}
	return p.URI, true
}

// isChange reports whether a notification announces a change that a
// listen can be asked for.
func isChange(method string) bool {
	_, list := mcp.ChangedList(method)
	return list || method == mcp.NotifyResourceUpdated
}

// tagged reports whether a notification names the subscription it was
// sent for.
func tagged(m *jsonrpc.Message) bool {
	var rm routeParams
	_ = jsonrpc.UnmarshalParams(m.Params, &rm)
	return len(rm.Meta.SubscriptionID) > 0
}

// peerNotes remembers what the client has logged about the server at the
// other end of one connection, so that a server that keeps doing
// something odd is reported once per connection, not once per message.
type peerNotes struct {
	mu   sync.Mutex
	said map[string]bool
}

// first reports whether what is being said of the peer for the first
// time on this connection, and remembers that it was.
func (n *peerNotes) first(what string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.said[what] {
		return false
	}
	if n.said == nil {
		n.said = map[string]bool{}
	}
	n.said[what] = true
	return true
}

// noting is a transport that keeps peerNotes for the connection it has
// now.
type noting interface {
	toldOfPeer() *peerNotes
}

func (c *stdioConn) toldOfPeer() *peerNotes { return &c.told }

func (t *httpTransport) toldOfPeer() *peerNotes { return t.told }

// toldOfPeer is about the process running now: a server started again
// is another connection, which may run another program.
func (t *commandTransport) toldOfPeer() *peerNotes {
	t.mu.Lock()
	defer t.mu.Unlock()
	return &t.cur.told
}

// strayChange handles a change notification that arrived on the stream
// of a request other than a listen (a server may announce, while it
// answers a tools/call, the tool list that call changed). On a 2025-11-25
// session it is the session's, and goes to the Watcher following the
// session when there is one; otherwise what it announces is invalidated
// in the cache, so that the next read asks the server again.
func (c *Client) strayChange(ls *legacySession, m *jsonrpc.Message) {
	if !isChange(m.Method) {
		return
	}
	if ls != nil && ls.shared.streaming() {
		ls.shared.streamed(m)
		return
	}
	if l, ok := mcp.ChangedList(m.Method); ok {
		c.cache.invalidate(listTopics(l)...)
	} else if uri, ok := updatedURI(m); ok {
		c.cache.invalidate(topicResource + uri)
	}
}
