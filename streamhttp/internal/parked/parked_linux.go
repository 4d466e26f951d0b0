//go:build linux

package parked

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"tidings/hub"
	"tidings/internal/engine"
	"tidings/mcp"
)

// Parker owns the parked listens of one transport. Its poller, writers
// and ticker run only while some listen is parked: the first Park
// starts them and the last listen to end stops them, so a Parker needs
// no Close and holds nothing while idle.
type Parker struct {
	cfg       Config
	keepAlive []byte
	lastChunk []byte // LastChunk, to write from

	mu    sync.Mutex
	loop  *loop // nil while nothing is parked
	count int
	next  uint32 // the serial of the next parked connection
}

// New returns a Parker.
func New(cfg Config) *Parker {
	if cfg.Writers <= 0 {
		cfg.Writers = runtime.GOMAXPROCS(0)
	}
	return &Parker{cfg: cfg, keepAlive: keepAliveChunk(), lastChunk: []byte(LastChunk)}
}

// Len returns the number of parked listens.
func (p *Parker) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count
}

// Park takes nc, a hijacked HTTP/1.1 connection whose response is a
// chunked SSE stream with everything so far written, and l over: from
// then on the Parker writes l's changes and its end to nc, and closes
// nc. An error means nothing was taken: nc and l are the caller's still.
func (p *Parker) Park(nc net.Conn, l *engine.ParkedListen) error {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return errNoSocket
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return fmt.Errorf("parked: reaching the socket: %w", err)
	}
	fd := -1
	if err := rc.Control(func(f uintptr) { fd = int(f) }); err != nil || fd < 0 {
		return fmt.Errorf("parked: reaching the socket: %w", errors.Join(err, errNoSocket))
	}
	// The socket is non-blocking already: the runtime's poller made it so.
	c := &conn{nc: nc, fd: fd, l: l, sub: l.Sub, ka: l.KeepAlive}
	c.lastWrite.Store(time.Now().UnixNano())
	p.mu.Lock()
	if p.loop == nil {
		lp, err := p.start(l.KeepAlive)
		if err != nil {
			p.mu.Unlock()
			return err
		}
		p.loop = lp
	}
	lp := p.loop
	p.next++
	c.loop, c.serial = lp, p.next
	if err := lp.add(c); err != nil {
		if p.count == 0 {
			lp.stop()
			p.loop = nil
		}
		p.mu.Unlock()
		return err
	}
	p.count++
	p.mu.Unlock()
	// Whatever the hub had pending before this is passed on now.
	l.Sub.Notify(c.hubReady)
	return nil
}

// ended counts a parked connection out, and stops the loop with the last.
func (p *Parker) ended() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.count--; p.count == 0 && p.loop != nil {
		p.loop.stop()
		p.loop = nil
	}
}

// Why a connection is scheduled, bits of conn.events.
const (
	evHub      = 1 << iota // its subscription has something pending
	evWritable             // its socket has room again
	evHangup               // its client left, or the socket failed
	evTick                 // a keep-alive or the write timeout may be due
)

// Scheduling states of a connection (conn.sched): a connection is run
// by one writer at a time; one scheduled while it runs is run again.
const (
	scheduled = 1
	again     = 2
)

// loop is one poller, its writers and its ticker.
type loop struct {
	p      *Parker
	epfd   int
	wakefd int // an eventfd that stops the poller

	mu    sync.Mutex
	conns map[int32]*conn // by fd

	qmu   sync.Mutex
	qcond sync.Cond
	queue []*conn // queue[head:] wait for a writer
	head  int
	done  bool

	tickStop chan struct{}
	polled   chan struct{} // closed when the poller returns
}

// start makes a loop and starts its goroutines. ka is the keep-alive
// interval of the listens (one server's, the same for each).
func (p *Parker) start(ka time.Duration) (*loop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("parked: epoll_create1: %w", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("parked: eventfd: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(wakefd)}); err != nil {
		unix.Close(wakefd)
		unix.Close(epfd)
		return nil, fmt.Errorf("parked: epoll_ctl: %w", err)
	}
	lp := &loop{p: p, epfd: epfd, wakefd: wakefd, conns: make(map[int32]*conn), tickStop: make(chan struct{}), polled: make(chan struct{})}
	lp.qcond.L = &lp.qmu
	go lp.poll()
	for range p.cfg.Writers {
		go lp.write()
	}
	if period := TickPeriod(ka, p.cfg.WriteTimeout); period > 0 {
		go lp.tick(period)
	}
	return lp, nil
}

// stop ends the loop's goroutines, and closes the descriptors once the
// poller has returned (it may have already). The caller holds p.mu, and
// no connection is left.
func (lp *loop) stop() {
	lp.qmu.Lock()
	lp.done = true
	lp.qcond.Broadcast()
	lp.qmu.Unlock()
	close(lp.tickStop)
	one := [8]byte{1}
	_, _ = unix.Write(lp.wakefd, one[:])
	<-lp.polled
	unix.Close(lp.wakefd)
	unix.Close(lp.epfd)
}

// add registers c with the poller. It is in conns first, so that an
// event for it finds it.
func (lp *loop) add(c *conn) error {
	lp.mu.Lock()
	lp.conns[int32(c.fd)] = c
	lp.mu.Unlock()
	ev := unix.EpollEvent{Events: watched, Fd: int32(c.fd), Pad: int32(c.serial)}
	if err := unix.EpollCtl(lp.epfd, unix.EPOLL_CTL_ADD, c.fd, &ev); err != nil {
		lp.mu.Lock()
		delete(lp.conns, int32(c.fd))
		lp.mu.Unlock()
		return fmt.Errorf("parked: epoll_ctl: %w", err)
	}
	return nil
}

// remove unregisters c, before its socket is closed.
func (lp *loop) remove(c *conn) {
	_ = unix.EpollCtl(lp.epfd, unix.EPOLL_CTL_DEL, c.fd, nil)
	lp.mu.Lock()
	if lp.conns[int32(c.fd)] == c {
		delete(lp.conns, int32(c.fd))
	}
	lp.mu.Unlock()
}

// watched are the events every parked socket is watched for: its client
// leaving or the socket failing. Edge-triggered, so that one event is
// reported once.
const watched = unix.EPOLLRDHUP | unix.EPOLLHUP | unix.EPOLLERR | unix.EPOLLET

// poll waits for socket events and schedules their connections, until
// stop wakes it. An error of epoll_wait's other than EINTR (a bad
// descriptor: a bug) ends it early; hang-ups then go unseen, and a
// listen whose client left ends when a write to it fails.
func (lp *loop) poll() {
	defer close(lp.polled)
	events := make([]unix.EpollEvent, 256)
	for {
		n, err := unix.EpollWait(lp.epfd, events, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		for _, ev := range events[:n] {
			if ev.Fd == int32(lp.wakefd) {
				return
			}
			lp.mu.Lock()
			c := lp.conns[ev.Fd]
			lp.mu.Unlock()
			// The serial tells a socket closed and its number reused
			// apart from the one the event was for.
			if c == nil || int32(c.serial) != ev.Pad {
				continue
			}
			var bits uint32
			if ev.Events&(unix.EPOLLRDHUP|unix.EPOLLHUP|unix.EPOLLERR) != 0 {
				bits |= evHangup
			}
			if ev.Events&unix.EPOLLOUT != 0 {
				bits |= evWritable
			}
			c.kick(bits)
		}
	}
}

// tick sweeps the connections for keep-alives and write timeouts.
func (lp *loop) tick(period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	wt := lp.p.cfg.WriteTimeout.Nanoseconds()
	var conns []*conn // reused: the poller waits on lp.mu for a copy, not a sweep
	for {
		select {
		case <-lp.tickStop:
			return
		case now := <-t.C:
			ns := now.UnixNano()
			lp.mu.Lock()
			for _, c := range lp.conns {
				conns = append(conns, c)
			}
			lp.mu.Unlock()
			for _, c := range conns {
				if stuck := c.stuck.Load(); stuck != 0 {
					if wt > 0 && ns-stuck >= wt {
						c.kick(evTick)
					}
				} else if c.ka > 0 && ns-c.lastWrite.Load() >= c.ka.Nanoseconds() {
					c.kick(evTick)
				}
			}
			clear(conns)
			conns = conns[:0]
		}
	}
}

// push queues c for a writer.
func (lp *loop) push(c *conn) {
	lp.qmu.Lock()
	lp.queue = append(lp.queue, c)
	lp.qmu.Unlock()
	lp.qcond.Signal()
}

// pop takes the next connection to run, or nil once the loop stops.
func (lp *loop) pop() *conn {
	lp.qmu.Lock()
	defer lp.qmu.Unlock()
	for lp.head == len(lp.queue) && !lp.done {
		lp.qcond.Wait()
	}
	if lp.done {
		return nil
	}
	c := lp.queue[lp.head]
	lp.queue[lp.head] = nil
	if lp.head++; lp.head == len(lp.queue) {
		lp.queue, lp.head = lp.queue[:0], 0
	}
	return c
}

// write runs queued connections until the loop stops.
func (lp *loop) write() {
	var s scratch
	for {
		c := lp.pop()
		if c == nil {
			return
		}
		for {
			c.run(&s)
			if c.sched.CompareAndSwap(scheduled, 0) {
				break
			}
			c.sched.Store(scheduled) // scheduled again while it ran
		}
	}
}

// scratch is one writer's reusable space.
type scratch struct {
	Frames
	iov [][]byte
}

// conn is one parked listen.
type conn struct {
	loop   *loop
	serial uint32
	nc     net.Conn // kept open, and closed, by the Parker: it may count toward a connection limit
	fd     int
	l      *engine.ParkedListen
	sub    *hub.Subscription
	ka     time.Duration

	sched     atomic.Uint32
	events    atomic.Uint32
	lastWrite atomic.Int64 // unix nanoseconds
	stuck     atomic.Int64 // unix nanoseconds since when unsent bytes wait without progress; 0: none

	// Owned by the writer that runs the connection.
	pending []byte              // unsent bytes: the rest of one drain, bounded by the filter
	lists   mcp.PerList[[]byte] // each list's change, framed, made on first use
	dirty   bool                // the hub notified while bytes were unsent
	out     bool                // EPOLLOUT is watched
	final   bool                // the last reply is in pending (or written): close once written
	ended   bool                // End was called
	rep     engine.Reply
	done    bool
}

// hubReady is the subscription's Notify hook: it never blocks and, with
// the queue's room grown, allocates nothing.
func (c *conn) hubReady() { c.kick(evHub) }

// kick records why c is to run and schedules it.
func (c *conn) kick(bits uint32) {
	c.events.Or(bits)
	for {
		switch s := c.sched.Load(); s {
		case 0:
			if c.sched.CompareAndSwap(0, scheduled) {
				c.loop.push(c)
				return
			}
		case scheduled:
			if c.sched.CompareAndSwap(scheduled, scheduled|again) {
				return
			}
		default:
			return
		}
	}
}

// run does what c's events ask for, on a writer.
func (c *conn) run(s *scratch) {
	if c.done {
		return
	}
	ev := c.events.Swap(0)
	if ev&evHangup != 0 {
		c.cut(engine.Stopped, false)
		return
	}
	if ev&evHub != 0 {
		c.dirty = true
	}
	for !c.done {
		if len(c.pending) > 0 {
			if err := c.writeOut(s, nil); err != nil {
				c.cut(engine.Lost, true)
				return
			}
			if len(c.pending) > 0 {
				c.checkTimeout()
				return
			}
		}
		if c.final {
			c.close(false)
			return
		}
		if c.dirty {
			c.dirty = false
			c.drain(s)
			continue
		}
		if ev&evTick != 0 && c.ka > 0 && time.Now().UnixNano()-c.lastWrite.Load() >= c.ka.Nanoseconds() {
			s.iov = append(s.iov[:0], c.loop.p.keepAlive)
			if err := c.writeOut(s, s.iov); err != nil {
				c.cut(engine.Lost, true)
			}
			ev = 0
			continue
		}
		return
	}
}

// checkTimeout cuts c if its unsent bytes waited past the write timeout.
func (c *conn) checkTimeout() {
	wt := c.loop.p.cfg.WriteTimeout
	if stuck := c.stuck.Load(); wt > 0 && stuck != 0 && time.Now().UnixNano()-stuck >= wt.Nanoseconds() {
		if !c.ended && c.l.Observer != nil {
			c.l.Observer.CutOff()
		}
		c.cut(engine.Lost, true)
	}
}

// drain takes what the subscription has pending and writes it, with the
// last reply after it if the hub is shutting down.
func (c *conn) drain(s *scratch) {
	iov, rep, end := s.Take(c.l, &c.lists, s.iov[:0], AppendChunk)
	if end {
		c.ended, c.rep, c.final = true, rep, true
		if rep.Body != nil && rep.Outcome != engine.Broken {
			iov = append(iov, c.loop.p.lastChunk)
		}
	}
	if len(iov) == 0 {
		return
	}
	err := c.writeOut(s, iov)
	clear(iov) // nothing of this drain is kept alive by the scratch
	s.iov = iov[:0]
	if err != nil {
		c.cut(engine.Lost, true)
	}
}

// writeOut writes iov (nil: the pending bytes) without blocking. What
// the socket has no room for is kept in pending, and the poller watches
// for room.
func (c *conn) writeOut(s *scratch, iov [][]byte) error {
	fromPending := iov == nil
	if fromPending {
		iov = append(s.iov[:0], c.pending)
		s.iov = iov[:0]
	}
	total := 0
	for _, b := range iov {
		total += len(b)
	}
	n, err := writev(c.fd, iov)
	if n > 0 {
		now := time.Now().UnixNano()
		c.lastWrite.Store(now)
		if n < total {
			c.stuck.Store(now) // progress: the timeout starts over
		}
	}
	if err != nil && !errors.Is(err, unix.EAGAIN) {
		return err
	}
	if n == total {
		c.pending = c.pending[:0]
		if cap(c.pending) > 4<<10 {
			c.pending = nil
		}
		c.stuck.Store(0)
		if c.out {
			c.out = false
			return c.watch(false)
		}
		return nil
	}
	// Keep the rest: the pending bytes move to the front of their own
	// buffer; anything else is copied into it (it is empty then, as
	// nothing else is written while bytes are pending), since iov is the
	// writer's scratch.
	if fromPending {
		c.pending = c.pending[:copy(c.pending, c.pending[n:])]
	} else {
		rest := c.pending[:0]
		for _, b := range iov {
			if n >= len(b) {
				n -= len(b)
				continue
			}
			rest = append(rest, b[n:]...)
			n = 0
		}
		c.pending = rest
	}
	if c.stuck.Load() == 0 {
		c.stuck.Store(time.Now().UnixNano())
	}
	if !c.out {
		c.out = true
		return c.watch(true)
	}
	return nil
}

// watch starts or stops watching c's socket for room to write.
func (c *conn) watch(out bool) error {
	ev := unix.EpollEvent{Events: watched, Fd: int32(c.fd), Pad: int32(c.serial)}
	if out {
		ev.Events |= unix.EPOLLOUT
	}
	if err := unix.EpollCtl(c.loop.epfd, unix.EPOLL_CTL_MOD, c.fd, &ev); err != nil {
		return fmt.Errorf("parked: epoll_ctl: %w", err)
	}
	return nil
}

// writev writes iov once, retrying only an interrupted call; n is never
// negative.
func writev(fd int, iov [][]byte) (int, error) {
	for {
		var n int
		var err error
		if len(iov) == 1 {
			n, err = unix.Write(fd, iov[0])
		} else {
			n, err = unix.Writev(fd, iov)
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return max(n, 0), err
	}
}

// cut ends c as how says, unless it ended already, and closes it;
// abrupt resets the connection, so that the client sees the stream broken.
func (c *conn) cut(how engine.PumpEnd, abrupt bool) {
	if !c.ended {
		c.ended = true
		c.rep = c.l.End(how)
	}
	c.close(abrupt || c.rep.Outcome == engine.Broken)
}

// close unregisters and closes c's connection, and releases its last
// reply, which tells the server its last message is written (or lost).
func (c *conn) close(abrupt bool) {
	c.done = true
	c.loop.remove(c)
	if abrupt {
		_ = unix.SetsockoptLinger(c.fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
	}
	_ = c.nc.Close()
	c.rep.Release()
	c.l, c.sub, c.pending, c.lists = nil, nil, nil, mcp.PerList[[]byte]{}
	c.loop.p.ended()
}
