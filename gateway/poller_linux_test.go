package gateway_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// epollReader reads every listen of a set from one goroutine: an epoll
// instance of its own watches their sockets (Go's poller keeps them too,
// but nothing reads them there), and each read is searched for the
// change notification, which the server writes whole in one chunk.
type epollReader struct {
	l    *listens
	ep   int
	wake int // an eventfd: written to stop the reader
	done chan struct{}

	mu    sync.Mutex
	conns []*polled // by listen index
}

// polled is one listen's socket and what its reader keeps of it.
type polled struct {
	fd    int
	carry []byte // the tail of the last read that begins a marker
	last  int    // the last round it saw
}

func newPoller(l *listens) (poller, error) {
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(ep)
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: -1}); err != nil {
		unix.Close(ep)
		unix.Close(wake)
		return nil, fmt.Errorf("epoll: %w", err)
	}
	r := &epollReader{l: l, ep: ep, wake: wake, done: make(chan struct{}), conns: make([]*polled, l.n)}
	go r.run()
	return r, nil
}

func (r *epollReader) add(i int, conn net.Conn, rest []byte) error {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return errors.New("not a socket")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	p := &polled{fd: -1}
	if err := rc.Control(func(fd uintptr) { p.fd = int(fd) }); err != nil {
		return err
	}
	if len(rest) > 0 {
		r.feed(i, p, rest, time.Now())
	}
	// Stored before the socket is watched: the reader finds p under
	// the lock, and all that was done to it before.
	r.mu.Lock()
	r.conns[i] = p
	r.mu.Unlock()
	return unix.EpollCtl(r.ep, unix.EPOLL_CTL_ADD, p.fd, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(i)})
}

func (r *epollReader) run() {
	defer close(r.done)
	evs := make([]unix.EpollEvent, 256)
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.EpollWait(r.ep, evs, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		now := time.Now()
		for _, e := range evs[:n] {
			if e.Fd < 0 {
				return
			}
			r.mu.Lock()
			p := r.conns[e.Fd]
			r.mu.Unlock()
			m, err := unix.Read(p.fd, buf)
			switch {
			case m > 0:
				r.feed(int(e.Fd), p, buf[:m], now)
			case errors.Is(err, unix.EAGAIN):
			default: // the end of the stream, or a broken one: no more to read
				_ = unix.EpollCtl(r.ep, unix.EPOLL_CTL_DEL, p.fd, nil)
			}
		}
	}
}

// feed looks for changes in what listen i read at now.
func (r *epollReader) feed(i int, p *polled, b []byte, now time.Time) {
	data := b
	if len(p.carry) > 0 {
		data = append(p.carry, b...)
	}
	for {
		k := bytes.Index(data, toolsChanged)
		if k < 0 {
			break
		}
		r.l.saw(i, &p.last, toolsChanged, now)
		data = data[k+len(toolsChanged):]
	}
	// Kept: the longest tail that begins a marker, usually none.
	keep := min(len(data), len(toolsChanged)-1)
	for keep > 0 && !bytes.HasPrefix(toolsChanged, data[len(data)-keep:]) {
		keep--
	}
	p.carry = append(p.carry[:0], data[len(data)-keep:]...)
}

func (r *epollReader) stop() {
	_, _ = unix.Write(r.wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	<-r.done
	unix.Close(r.ep)
	unix.Close(r.wake)
}
