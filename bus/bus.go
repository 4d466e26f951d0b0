// Package bus carries change events between the replicas of one server,
// so that a listener on any replica behind a load balancer hears of a
// change made through any other.
//
// An event says what changed, never what it now is: list kinds, a
// resource URI, an audience of principals, and for a change only some
// callers may see, the keys of the changed items (each replica asks its
// own visibility rules about them). It holds no content and no tokens,
// and it is small: one message is at most 64 KiB and names at most 1024
// principals and 4096 keys; a larger event is split, and one that cannot
// be split small enough is not sent (see below). Events travel through
// a Conn: a broker connection (NATS, Redis pub/sub) or, in one process,
// a Local group. New turns a Conn into a Bus. The brokers live in
// packages of their own, natsbus and redisbus, so that a program that
// imports bus (or the server, which does) links no broker's client unless
// it asks for one; package brokers opens either by URL (brokers.Open
// dials and does New).
//
// The guarantee. Brokers deliver at most once, so the bus does not try to
// deliver exactly once; it makes sure that nothing is lost in the end.
// Every replica numbers the events it sends (per process, under an origin
// id drawn at random when it starts) and tells the others its latest
// number in a heartbeat every few seconds. A replica that sees a number
// skipped or out of order, a heartbeat ahead of what it received, or its
// own connection lost and regained, cannot know what it missed, so it
// re-notifies: every local listener is told that everything its filter
// covers may have changed, and clients re-read (what they read is for
// the replicas to agree on: the bus carries news, not state). So every
// change reaches every listener it concerns, at once in the usual case,
// and at the latest one heartbeat interval (or one reconnect) after the
// loss. A peer that falls silent for three intervals — it crashed with
// events queued, or its messages stopped arriving without the broker
// saying so — is re-notified for and no longer counted, and if it speaks
// again, re-notified for once more. An
// event the bus could not send — its queue full, the broker down, the
// event too large — still takes its number, so the others see the gap
// and re-notify too. Local listeners never wait on the bus: local
// delivery happens before, and apart from, sending. The one loss a peer
// cannot see is of messages sent before it first heard of their sender
// at all: a replica announces itself when it starts, and the others
// answer with their latest numbers, which keeps that window to the first
// moments of each.
//
// Trust. With WithSecret (the key of server.WithSecret, which replicas
// share anyway), every message carries an HMAC-SHA256 under a key drawn
// from it, and a message without the right one is dropped and counted,
// whatever it says: only a holder of the key can tell replicas of a
// change, make them re-notify, or set what they report. Messages are not
// encrypted: the principals of an audience, the keys of changed items
// and resource URIs travel as they are. A message sent again by someone
// who recorded it is still believed; the most it can do is make the
// replicas re-notify (at most one re-notification every 250ms comes of
// it). Without WithSecret, anyone who can publish on the subject or
// channel can do that, and tell listeners of changes that did not happen
// (they re-read and find none). Either way the broker should be private
// to the deployment and its credentials kept so. Its transport security
// and credentials come from the URL: user and password in it, rediss://
// for Redis over TLS, tls:// for NATS over TLS (both with the system's
// root certificates).
//
// Shared state. News is not state: a replica told that the tool list
// changed answers tools/list from its own registries, which is right for
// what every replica registers in code and wrong for what one replica
// switched off at run time. State (brokers.OpenState, NewLocalState) keeps
// such switches in the same broker — a Redis hash, a NATS JetStream
// key-value bucket — and server.WithSharedState has each replica load it
// before it tells its listeners of a list change.
//
// Tasks. A task of the tasks extension is created through one replica and
// polled, answered and cancelled through any: a TaskStore
// (brokers.OpenTasks, NewLocalTasks) keeps its record in the same broker
// again — a Redis hash per task, an entry of another JetStream bucket —
// changed only by compare-and-swap, so that replicas changing one task at
// once never lose a change, and dropped by the broker once it expires. An
// event's Task says which task changed; each replica reads it from the
// store.
//
// Options. An option that takes a size, a count or a duration keeps its
// default for a value of zero or less: a bound is never turned off by a
// zero left unset.
package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tidings/bus/internal/brokerkit"
	"tidings/hub"
)

// Event is one change as it travels between replicas.
type Event struct {
	// Kinds are the lists that changed.
	Kinds hub.Kind
	// URI is a resource whose content changed ("" for none).
	URI string
	// Task is a task (of the tasks extension) whose state changed ("" for
	// none). The event says only that; each replica reads the task itself
	// from the shared TaskStore.
	Task string
	// Audience, when not nil, limits the event to these principals, as
	// hub.Event.Audience does.
	Audience []string
	// Keys, when not nil, limits the event to the principals who may see
	// at least one of the items they name, and Space says which kind of
	// item they are: a visibility-limited change carries its keys, not
	// its verdicts, so that each replica can ask its own visibility rules.
	Keys  []string
	Space Space
	// TraceParent and TraceState, when set, are the W3C trace context of
	// the change on the replica where it happened (a traced server stamps
	// its changes), so that the change's span on the replica that hears
	// of it continues that trace.
	TraceParent string
	TraceState  string

	// Origin, Seq and Sent say where a delivered event came from: the
	// sending replica's origin id, its number for the event and when it
	// was sent (by the sender's clock). Publish ignores them.
	Origin string
	Seq    uint64
	Sent   time.Time
}

// Space names a kind of item whose keys an event carries: the kinds
// whose visibility a server decides (server.WithVisibility). It travels
// by name, so that replicas whose code numbers the kinds differently
// still agree on which one a change is of.
type Space string

// The key spaces.
const (
	SpaceTools     Space = "tools"
	SpacePrompts   Space = "prompts"
	SpaceResources Space = "resources"
	SpaceTemplates Space = "templates"
)

// Handler hears what the other replicas publish. Its methods are called
// one at a time, from the bus's goroutines, and must be quick and must
// not block: the server's hands each event straight to its hub.
type Handler interface {
	// Deliver hands over an event another replica published.
	Deliver(e Event)
	// Resync says events may have been lost: every local listener should
	// be told that everything it follows may have changed.
	Resync()
}

// Bus carries events to and from the other replicas.
type Bus interface {
	// Publish queues e for the other replicas and returns at once: it
	// never waits on the network. When the queue is full or the broker
	// cannot take the event, it is dropped and counted, and the peers
	// re-notify when they see the gap. Publish copies what it keeps of e.
	Publish(e Event)
	// Handle sets who hears of events from other replicas (nil for
	// no one). A bus serves one handler: a later call replaces it.
	Handle(h Handler)
	// Stats reports the bus's health and what it has done so far.
	Stats() Stats
	// Close sends what is still queued (for a short while at most), says
	// goodbye to the peers, closes the connection and stops every
	// goroutine of the bus. It is safe to call more than once.
	Close() error
}

// Stats is a snapshot of a bus's health and counters.
type Stats struct {
	// Origin is this replica's origin id.
	Origin string
	// Connected reports that the connection to the broker is up.
	Connected bool
	// Reconnects counts connections regained after a loss.
	Reconnects int64
	// Node names the broker server the connection is on, when the
	// connection says (see NodeReporter): its name and address, without
	// a password; "" while it is on none. Failovers counts the reconnects
	// that landed on another server of the broker's cluster than the one
	// lost.
	Node      string
	Failovers int64
	// Peers is how many other replicas are live: heard from within the
	// last three heartbeat intervals.
	Peers int
	// Published counts events handed to the broker; Dropped counts those
	// that were not (queue full, broker down, too large).
	Published, Dropped int64
	// Received counts events from other replicas passed to the handler;
	// Stale counts duplicated or late ones that were not.
	Received, Stale int64
	// Invalid counts messages that could not be read.
	Invalid int64
	// Unsigned counts messages a bus with a key (WithSecret) refused for
	// carrying no MAC, and BadMAC those whose MAC is not its key's: from a
	// replica without the key or with another, or forged. Neither is
	// delivered, nor re-notified for.
	Unsigned, BadMAC int64
	// Gaps counts sequence gaps seen: an event skipped or out of order,
	// or a heartbeat ahead of the events received.
	Gaps int64
	// Resyncs counts re-notifications asked of the handler (after gaps,
	// reconnects, silent peers and unreadable messages); those asked for
	// within 250ms of the last are merged into one at its end.
	Resyncs int64
	// Lag is how long the last event received took from its sender's
	// clock to this replica's, and MaxLag the longest so far. An event
	// sent, by its sender's clock, more than a minute after it arrived or
	// more than an hour before is left out of both: those are clocks set
	// wrong (or a message made up), not delays, and one of them would
	// hold MaxLag for the life of the process.
	Lag, MaxLag time.Duration
}

// Conn is a broker connection that carries encoded messages to every
// other connection on the same bus, at most once: it may lose, repeat or
// reorder messages, which the Bus built on it detects. natsbus.Dial and
// redisbus.Dial return one (brokers.Dial picks by URL) and Local.Conn an
// in-process one; other brokers can be added by implementing it.
type Conn interface {
	// Send publishes msg. It must not keep msg after it returns, and may
	// fail (the bus counts the message as dropped) but should not block
	// past ctx.
	Send(ctx context.Context, msg []byte) error
	// Run receives until ctx ends or Close is called, reporting to r from
	// one goroutine: each message (its own included, or not), and each
	// loss and regain of the connection, reconnecting meanwhile — however
	// long that takes, with a new client if the old one gave up. It is
	// called once. A Run that returns on its own leaves the bus deaf: it
	// logs an error and reports itself disconnected from then on.
	Run(ctx context.Context, r Receiver) error
	// Close closes the connection and makes Run return.
	Close() error
}

// NodeReporter is what a Conn to a cluster of broker servers may also
// implement, to say which server it is on: natsbus's does (the node of a
// NATS cluster), and redisbus's through Sentinel (the primary it was led
// to). Its methods are safe for concurrent use, and Stats reads them.
type NodeReporter interface {
	// Node names the server the connection is on — its name and address,
	// without a password — or "" while it is on none.
	Node() string
	// Failovers counts the reconnects that landed on another server than
	// the one lost (for Redis, the times the primary changed).
	Failovers() int64
}

// Receiver is what a Conn reports to; the Bus implements it. Its methods
// are safe for concurrent use.
type Receiver interface {
	// Message hands over a received message. The receiver does not keep
	// msg after it returns.
	Message(msg []byte)
	// Down reports that the connection was lost.
	Down(err error)
	// Up reports that a lost connection is back (and resubscribed).
	Up()
}

// maxOrigins bounds how many peers a replica remembers; beyond it, the one
// heard from longest ago is forgotten (replicas that restarted long ago).
const maxOrigins = 4096

// The window of sender times taken for lag (see Stats.Lag).
const (
	maxLagAhead  = time.Minute
	maxLagBehind = time.Hour
)

// flushTimeout bounds how long Close spends sending what is queued.
const flushTimeout = 2 * time.Second

// lastBeatTimeout bounds the goodbye heartbeat Close sends after the
// flush, whether or not the flush finished.
const lastBeatTimeout = time.Second

// New starts a Bus over c. The bus owns c from then on: Close closes it.
// Its sequence numbers start at the first event, under a fresh origin id;
// it announces itself to the peers at once.
func New(c Conn, opts ...Option) Bus {
	cfg := newConfig(opts)
	var id [16]byte
	_, _ = rand.Read(id[:])
	n := &node{
		conn:      c,
		cfg:       cfg,
		log:       cfg.Logger,
		id:        hex.EncodeToString(id[:]),
		queue:     make(chan queued, cfg.Queue),
		kick:      make(chan struct{}, 1),
		stopSend:  make(chan struct{}),
		sendDone:  make(chan struct{}),
		recvDone:  make(chan struct{}),
		stopWatch: make(chan struct{}),
		watchDone: make(chan struct{}),
		origins:   make(map[string]*origin),
	}
	if cfg.Key == nil {
		n.log.Warn("bus: messages are neither signed nor checked: anyone who can publish on the broker can tell " +
			"the replicas of changes and make them re-notify; give every replica the server's secret with bus.WithSecret")
	}
	n.connected.Store(true)
	n.sendCtx, n.cancelSend = context.WithCancel(context.Background())
	var recvCtx context.Context
	recvCtx, n.cancelRecv = context.WithCancel(context.Background())
	go n.sendLoop()
	go n.recvLoop(recvCtx)
	go n.watchLoop()
	return n
}

// node is the Bus: sequencing, the send queue and heartbeats on one side,
// gap detection on the other, over one Conn.
type node struct {
	conn Conn
	cfg  config
	log  *slog.Logger
	id   string

	handler atomic.Pointer[handlerRef]

	// mu orders sequence numbers with the queue, so that events are
	// queued in the order of their numbers.
	mu     sync.Mutex
	seq    uint64
	closed bool
	queue  chan queued

	kick       chan struct{} // a heartbeat now (a newcomer heard, a reconnect)
	stopSend   chan struct{} // closed by Close: drain and stop
	sendCtx    context.Context
	cancelSend context.CancelFunc
	cancelRecv context.CancelFunc
	sendDone   chan struct{}
	recvDone   chan struct{}
	stopWatch  chan struct{} // closed by Close: stop watching for silent peers
	watchDone  chan struct{}
	closeOnce  sync.Once
	closeErr   error

	// hmu makes the handler's calls one at a time: the receiving
	// goroutine, the watch for silent peers and the trailing
	// re-notification all make them.
	hmu sync.Mutex

	// rs merges re-notifications (see resync).
	rs struct {
		sync.Mutex
		last    time.Time   // when the handler was last asked
		pending bool        // asked for since, and not yet done
		timer   *time.Timer // the trailing one, when armed
		closed  bool
		running sync.WaitGroup // the trailing one, armed or running
	}

	// rmu guards the receiving side's memory of its peers.
	rmu     sync.Mutex
	origins map[string]*origin

	connected atomic.Bool
	lastWarn  atomic.Int64 // unix nanos of the last rate-limited warning
	// lastRefusal is the same for refused messages, apart so that a flood
	// of them hides no other warning; refusedSince counts them since.
	lastRefusal  atomic.Int64
	refusedSince atomic.Int64
	st           struct {
		reconnects, published, dropped, received, stale, invalid, gaps, resyncs atomic.Int64
		unsigned, badMAC                                                        atomic.Int64
		lag, maxLag                                                             atomic.Int64
	}
}

type handlerRef struct{ h Handler }

type queued struct {
	e   Event
	seq uint64
}

// origin is what a replica remembers of one peer.
type origin struct {
	last  uint64 // the highest sequence number heard of
	heard time.Time
	// silent marks a peer not heard from in silentAfter heartbeats: it
	// crashed, or the connection between us stopped delivering. It was
	// re-notified for, and is no longer counted among the peers; it is
	// kept so that, if it speaks again, what it said meanwhile is
	// re-notified too rather than taken for a newcomer's first words.
	silent bool
}

// silentAfter is how many heartbeat intervals of silence make a peer
// silent. Every replica of a bus is meant to share one interval.
const silentAfter = 3

func (n *node) Handle(h Handler) {
	if h == nil {
		n.handler.Store(nil)
		return
	}
	n.handler.Store(&handlerRef{h})
}

func (n *node) Publish(e Event) {
	e.Origin, e.Seq, e.Sent = "", 0, time.Time{}
	if e.Kinds&allKinds == 0 && e.URI == "" && e.Task == "" {
		return // nothing anyone could be told
	}
	e.Audience = slices.Clone(e.Audience) // keeps nil apart from empty, as the wire does
	e.Keys = slices.Clone(e.Keys)
	parts := split(n.id, e, nil)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		n.st.dropped.Add(int64(len(parts))) // a change made while shutting down: the peers see none of it
		return
	}
	for _, p := range parts {
		n.seq++ // a part that is not sent still takes its number: peers see the gap
		if !p.ok {
			n.st.dropped.Add(1)
			n.warn("bus: an event too large to send was dropped; peers will re-notify", "uri", p.e.URI)
			continue
		}
		select {
		case n.queue <- queued{p.e, n.seq}:
		default:
			n.st.dropped.Add(1)
			n.warn("bus: send queue full, an event was dropped; peers will re-notify", "queue", cap(n.queue))
		}
	}
}

// warn logs at most once every ten seconds, so that an outage or a flood
// of events does not flood the log too.
func (n *node) warn(msg string, args ...any) {
	if due(&n.lastWarn) {
		n.log.Warn(msg, args...)
	}
}

// warnEvery is the shortest time between two rate-limited warnings of
// one kind.
const warnEvery = 10 * time.Second

// due reports whether a rate-limited warning whose last time is in last
// may be logged now, and if so takes the turn.
func due(last *atomic.Int64) bool {
	now := time.Now().UnixNano()
	l := last.Load()
	return now-l >= int64(warnEvery) && last.CompareAndSwap(l, now)
}

// refuse counts a message that is not signed under this bus's key, and
// says so in the log once in a while with how many there were.
func (n *node) refuse(err error) {
	if errors.Is(err, errBadMAC) {
		n.st.badMAC.Add(1)
	} else {
		n.st.unsigned.Add(1)
	}
	k := n.refusedSince.Add(1)
	if !due(&n.lastRefusal) {
		return
	}
	n.refusedSince.Add(-k)
	n.log.Warn("bus: dropped messages not signed with this replica's bus key: a replica without the same "+
		"secret (bus.WithSecret), or someone else publishing on the broker",
		"dropped", k, "unsigned", n.st.unsigned.Load(), "bad_mac", n.st.badMAC.Load(), "last", clip(err.Error()))
}

// clip shortens what a stranger's message may have put in an error (a
// member name, say) to what a log line needs.
func clip(s string) string {
	const most = 200
	if len(s) <= most {
		return s
	}
	return strings.ToValidUTF8(s[:most], "") + "…"
}

func (n *node) sendLoop() {
	defer close(n.sendDone)
	tick := time.NewTicker(n.cfg.Heartbeat)
	defer tick.Stop()
	n.beat() // the hello: peers learn of us, and of our numbering, before our first event
	for {
		select {
		case q := <-n.queue:
			n.sendEvent(q)
		case <-tick.C:
			n.beat()
		case <-n.kick:
			n.beat()
		case <-n.stopSend:
			n.drain()
			n.lastBeat()
			return
		}
	}
}

// drain sends what is queued; Close bounds how long it may take.
func (n *node) drain() {
	for {
		select {
		case q := <-n.queue:
			n.sendEvent(q)
		default:
			return
		}
	}
}

func (n *node) sendEvent(q queued) {
	if n.sendCtx.Err() != nil {
		n.st.dropped.Add(1)
		return
	}
	msg, err := encode(n.cfg.Key, n.id, q.seq, time.Now(), false, q.e)
	if err == nil {
		err = n.send(msg)
	}
	if err != nil {
		n.st.dropped.Add(1)
		n.warn("bus: an event could not be sent; peers will re-notify", "err", err)
		return
	}
	n.st.published.Add(1)
}

// beat sends a heartbeat with the latest sequence number, unless events
// are still queued: they carry numbers of their own, and a heartbeat sent
// ahead of them would make the peers see a gap that is not there.
func (n *node) beat() {
	n.mu.Lock()
	if len(n.queue) > 0 {
		n.mu.Unlock()
		return
	}
	seq := n.seq
	n.mu.Unlock()
	if n.sendCtx.Err() != nil {
		return
	}
	n.sendBeat(n.sendCtx, seq)
}

// lastBeat is the goodbye, sent once the queue is drained or given up on.
// Events that Close's flush timeout cut off still took their numbers, so
// this heartbeat is how the peers learn that they missed them: it goes
// out on a short context of its own, not on the one the timeout ended.
func (n *node) lastBeat() {
	n.mu.Lock()
	seq := n.seq
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), lastBeatTimeout)
	defer cancel()
	n.sendBeat(ctx, seq)
}

func (n *node) sendBeat(ctx context.Context, seq uint64) {
	msg, err := encode(n.cfg.Key, n.id, seq, time.Now(), true, Event{})
	if err == nil {
		err = n.sendOn(ctx, msg)
	}
	if err != nil {
		n.warn("bus: a heartbeat could not be sent", "err", err)
	}
}

func (n *node) send(msg []byte) error { return n.sendOn(n.sendCtx, msg) }

func (n *node) sendOn(parent context.Context, msg []byte) error {
	ctx, cancel := context.WithTimeout(parent, n.cfg.SendTimeout)
	defer cancel()
	if err := n.conn.Send(ctx, msg); err != nil {
		return fmt.Errorf("bus: send: %w", err)
	}
	return nil
}

func (n *node) recvLoop(ctx context.Context) {
	defer close(n.recvDone)
	err := n.conn.Run(ctx, (*receiver)(n))
	if ctx.Err() == nil {
		// The connection gave up on its own: nothing more will arrive.
		n.connected.Store(false)
		n.log.Error("bus: the connection ended", "err", err)
	}
}

func (n *node) Close() error {
	n.closeOnce.Do(func() {
		n.mu.Lock()
		n.closed = true
		n.mu.Unlock()
		close(n.stopSend)
		stop := time.AfterFunc(flushTimeout, n.cancelSend)
		<-n.sendDone
		stop.Stop()
		n.cancelSend()
		n.cancelRecv()
		close(n.stopWatch)
		<-n.watchDone
		n.stopResyncs()
		if err := n.conn.Close(); err != nil {
			n.closeErr = fmt.Errorf("bus: close: %w", err)
		}
		<-n.recvDone
		n.connected.Store(false)
	})
	return n.closeErr
}

func (n *node) Stats() Stats {
	n.rmu.Lock()
	peers := 0
	for _, o := range n.origins {
		if !o.silent {
			peers++
		}
	}
	n.rmu.Unlock()
	var node string
	var failovers int64
	if r, ok := n.conn.(NodeReporter); ok {
		node, failovers = r.Node(), r.Failovers()
	}
	return Stats{
		Origin:     n.id,
		Connected:  n.connected.Load(),
		Reconnects: n.st.reconnects.Load(),
		Node:       node,
		Failovers:  failovers,
		Peers:      peers,
		Published:  n.st.published.Load(),
		Dropped:    n.st.dropped.Load(),
		Received:   n.st.received.Load(),
		Stale:      n.st.stale.Load(),
		Invalid:    n.st.invalid.Load(),
		Unsigned:   n.st.unsigned.Load(),
		BadMAC:     n.st.badMAC.Load(),
		Gaps:       n.st.gaps.Load(),
		Resyncs:    n.st.resyncs.Load(),
		Lag:        time.Duration(n.st.lag.Load()),
		MaxLag:     time.Duration(n.st.maxLag.Load()),
	}
}

// resyncEvery is the shortest time between two re-notifications. Each
// costs every listener of the replica a re-read, and a flood of what
// causes them — unreadable or forged messages, a flapping peer — must not
// keep every replica re-notifying without pause.
const resyncEvery = 250 * time.Millisecond

// resync asks the handler to re-notify everything: at once if it has not
// in the last resyncEvery, else once at the end of that time, however
// often it was asked meanwhile.
func (n *node) resync() {
	n.rs.Lock()
	if n.rs.closed {
		n.rs.Unlock()
		return
	}
	now := time.Now()
	if n.rs.timer == nil && now.Sub(n.rs.last) >= resyncEvery {
		n.rs.last = now
		n.rs.Unlock()
		n.callResync()
		return
	}
	n.rs.pending = true
	if n.rs.timer == nil {
		n.rs.running.Add(1)
		n.rs.timer = time.AfterFunc(n.rs.last.Add(resyncEvery).Sub(now), n.trailingResync)
	}
	n.rs.Unlock()
}

// trailingResync is the re-notification asked for during the last one's
// resyncEvery.
func (n *node) trailingResync() {
	defer n.rs.running.Done()
	n.rs.Lock()
	n.rs.timer = nil
	if n.rs.closed || !n.rs.pending {
		n.rs.Unlock()
		return
	}
	n.rs.pending, n.rs.last = false, time.Now()
	n.rs.Unlock()
	n.callResync()
}

// stopResyncs cancels a trailing re-notification, or waits for it to end.
func (n *node) stopResyncs() {
	n.rs.Lock()
	n.rs.closed = true
	if n.rs.timer != nil && n.rs.timer.Stop() {
		n.rs.running.Done()
	}
	n.rs.timer = nil
	n.rs.Unlock()
	n.rs.running.Wait()
}

func (n *node) callResync() {
	n.st.resyncs.Add(1)
	if r := n.handler.Load(); r != nil {
		n.hmu.Lock()
		r.h.Resync()
		n.hmu.Unlock()
	}
}

// receiver is the node as its Conn sees it.
type receiver node

func (r *receiver) Message(msg []byte) {
	n := (*node)(r)
	m, err := decode(n.cfg.Key, msg)
	if errors.Is(err, errUnsigned) || errors.Is(err, errBadMAC) {
		n.refuse(err) // not from a replica: nothing it says is believed, gaps included
		return
	}
	if err != nil {
		n.st.invalid.Add(1)
		n.warn("bus: an unreadable message was received; re-notifying", "err", err)
		n.resync() // it may have been a change we cannot read
		return
	}
	if m.e.Origin == n.id {
		return // our own, echoed by the broker
	}
	now := time.Now()
	deliver, gap, first := n.track(m, now)
	if first {
		n.kickBeat() // a newcomer learns of us, and of our numbering, at once
	}
	if gap {
		n.st.gaps.Add(1)
		n.resync()
	}
	if !deliver {
		return
	}
	n.noteLag(now, m.e.Sent)
	n.st.received.Add(1)
	if h := n.handler.Load(); h != nil {
		n.hmu.Lock()
		h.h.Deliver(m.e)
		n.hmu.Unlock()
	}
}

// noteLag records how long an event sent at sent took to arrive at now,
// unless sent is outside the window of times a sender's clock can say.
func (n *node) noteLag(now, sent time.Time) {
	if sent.After(now.Add(maxLagAhead)) || sent.Before(now.Add(-maxLagBehind)) {
		return
	}
	lag := max(now.Sub(sent), 0)
	n.st.lag.Store(int64(lag))
	for {
		old := n.st.maxLag.Load()
		if int64(lag) <= old || n.st.maxLag.CompareAndSwap(old, int64(lag)) {
			break
		}
	}
}

// track notes m's sequence number and says whether to deliver it,
// whether it reveals a gap, and whether it is the first heard from its
// origin.
func (n *node) track(m message, now time.Time) (deliver, gap, first bool) {
	n.rmu.Lock()
	defer n.rmu.Unlock()
	o, known := n.origins[m.e.Origin]
	if !known {
		// A peer heard of for the first time, mid-stream or new: track
		// it from here. Making room for it may forget a live peer, whose
		// next words would then look like a newcomer's: re-notify.
		gap = n.forgetOldest()
		n.origins[m.e.Origin] = &origin{last: m.e.Seq, heard: now}
		return !m.beat, gap, true
	}
	o.heard = now
	if o.silent {
		// Back from a silence that was re-notified for: what it sent
		// since cannot be known.
		o.silent, o.last = false, m.e.Seq
		return !m.beat, true, true
	}
	switch {
	case m.beat:
		if m.e.Seq > o.last {
			o.last = m.e.Seq
			return false, true, false
		}
		return false, false, false
	case m.e.Seq == o.last+1:
		o.last = m.e.Seq
		return true, false, false
	case m.e.Seq > o.last+1:
		o.last = m.e.Seq
		return true, true, false
	}
	if o.last-m.e.Seq > maxBehind {
		// Too far back to be late: the numbering started again, or the
		// number heard before was not the peer's (a message forged or
		// garbled with its origin id, which would otherwise make all its
		// real events look stale for good). Either way, follow the new
		// number and re-notify.
		o.last = m.e.Seq
		return !m.beat, true, false
	}
	// A repeat, or one that arrives after a later one: the gap its
	// lateness opened was re-notified already.
	n.st.stale.Add(1)
	return false, false, false
}

// maxBehind is how far behind the latest number heard an event may be and
// still be taken as late: far more than a broker reorders, which is by the
// messages in flight at once.
const maxBehind = 1 << 16

// forgetOldest makes room for one more peer, and reports whether the one
// it forgot was still live (not silent). Called with rmu held.
func (n *node) forgetOldest() bool {
	if len(n.origins) < maxOrigins {
		return false
	}
	var oldest string
	var at time.Time
	for id, o := range n.origins {
		if oldest == "" || o.heard.Before(at) {
			oldest, at = id, o.heard
		}
	}
	live := !n.origins[oldest].silent
	delete(n.origins, oldest)
	return live
}

// watchLoop looks for peers gone silent once every heartbeat interval.
// A peer that crashed with events queued, or whose messages stop reaching
// this replica (a subscription that stopped delivering, a partition the
// broker does not report), sends no heartbeat that could show the gap:
// its silence is the only sign.
func (n *node) watchLoop() {
	defer close(n.watchDone)
	tick := time.NewTicker(n.cfg.Heartbeat)
	defer tick.Stop()
	for {
		select {
		case <-n.stopWatch:
			return
		case now := <-tick.C:
			if k := n.silence(now); k > 0 {
				n.log.Warn("bus: peers went silent; re-notifying local listeners", "peers", k,
					"silence", silentAfter*n.cfg.Heartbeat)
				n.resync()
			}
		}
	}
}

// silence marks the peers not heard from in silentAfter intervals as
// silent and returns how many it marked.
func (n *node) silence(now time.Time) int {
	limit := silentAfter * n.cfg.Heartbeat
	n.rmu.Lock()
	defer n.rmu.Unlock()
	k := 0
	for _, o := range n.origins {
		if !o.silent && now.Sub(o.heard) > limit {
			o.silent = true
			k++
		}
	}
	return k
}

func (r *receiver) Down(err error) {
	n := (*node)(r)
	if n.connected.Swap(false) {
		n.log.Warn("bus: connection lost; local listeners are still told of local changes", "err", err)
	}
}

func (r *receiver) Up() {
	n := (*node)(r)
	if n.connected.Swap(true) {
		return
	}
	n.st.reconnects.Add(1)
	n.log.Info("bus: connection regained; re-notifying local listeners")
	n.resync()
	n.kickBeat() // tell the peers our latest number, so they see what they missed
}

// kickBeat has the sending loop send a heartbeat now.
func (n *node) kickBeat() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// errClosed is what a Conn of a closed Local group, or a closed Conn,
// returns from Send.
var errClosed = brokerkit.ErrClosed
