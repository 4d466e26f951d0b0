package bus

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// natsInbox is how many received messages wait for the receiving loop;
// past it, the client drops them (a slow consumer), which is detected.
const natsInbox = 4096

// natsConn is a Conn over a NATS connection, publishing and subscribing
// on one subject. The client library reconnects on its own, with the
// bus's backoff, and reports losses and returns through callbacks, which
// only count them and wake the receiving loop. The client may also give
// up for good — it closes itself after repeated authorization failures,
// say — and then the receiving loop dials a new one, with the same
// backoff, rather than leave the replica deaf until it restarts.
type natsConn struct {
	server  string // the URL without the subject
	subject string
	cfg     config
	msgs    chan *nats.Msg
	changed chan struct{} // capacity 1: downs or ups moved
	downs   atomic.Int64
	ups     atomic.Int64
	lastErr atomic.Pointer[error]
	stop    chan struct{} // closed by Close
	once    sync.Once

	mu      sync.Mutex // guards what follows against the receiving loop's redial
	nc      *nats.Conn
	ncEnded chan struct{} // closed by nc's closed callback
	closing bool
}

// natsRedialTimeout bounds one attempt at dialling a new client after the
// old one gave up.
const natsRedialTimeout = 5 * time.Second

// dialNATS connects to nats://host:port/subject.
func dialNATS(ctx context.Context, u *url.URL, cfg config) (*natsConn, error) {
	subject, err := natsSubject(u)
	if err != nil {
		return nil, err
	}
	// The client takes a timeout, not a context; without a deadline,
	// dialling is bounded anyway.
	ctx, cancel := boundDial(ctx)
	defer cancel()
	timeout, err := dialTimeout(ctx, u)
	if err != nil {
		return nil, err
	}
	c := &natsConn{subject: subject, cfg: cfg, msgs: make(chan *nats.Msg, natsInbox),
		changed: make(chan struct{}, 1), stop: make(chan struct{}),
		server: (&url.URL{Scheme: u.Scheme, User: u.User, Host: u.Host}).String()}
	if c.nc, c.ncEnded, err = c.connect(timeout); err != nil {
		return nil, fmt.Errorf("bus: dial %s: %w", u.Redacted(), err)
	}
	return c, nil
}

// connect dials a client, subscribed when it returns, and the channel its
// closed callback closes.
func (c *natsConn) connect(timeout time.Duration) (*nats.Conn, chan struct{}, error) {
	ended := make(chan struct{})
	nc, err := nats.Connect(c.server,
		nats.Name("tidings bus"),
		nats.Timeout(timeout),
		nats.NoEcho(),
		nats.MaxReconnects(-1),
		nats.CustomReconnectDelay(c.cfg.backoff),
		// Nothing is buffered while disconnected: events sent then are
		// dropped and counted, and the peers re-notify, the same on every
		// broker.
		nats.ReconnectBufSize(-1),
		nats.PingInterval(10*time.Second),
		nats.MaxPingsOutstanding(2),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err == nil {
				err = errors.New("disconnected")
			}
			c.lastErr.Store(&err)
			c.downs.Add(1)
			c.poke()
		}),
		nats.ReconnectHandler(func(*nats.Conn) { c.ups.Add(1); c.poke() }),
		nats.ClosedHandler(func(*nats.Conn) { close(ended) }),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			c.cfg.logger.Debug("bus: NATS reports an error", "err", err)
		}),
	)
	if err != nil {
		return nil, nil, err // the callers wrap it, with the URL redacted
	}
	if _, err = nc.ChanSubscribe(c.subject, c.msgs); err == nil {
		err = nc.FlushTimeout(timeout) // the subscription is in place when the client is used
	}
	if err != nil {
		nc.Close()
		<-ended
		return nil, nil, fmt.Errorf("subscribe to %q: %w", c.subject, err)
	}
	return nc, ended, nil
}

// current returns the client in use and the channel that says it ended.
func (c *natsConn) current() (*nats.Conn, chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nc, c.ncEnded
}

// natsSubject returns the subject of nats://host:port/subject (default
// "tidings").
func natsSubject(u *url.URL) (string, error) {
	subject := strings.TrimPrefix(u.Path, "/")
	if subject == "" {
		subject = "tidings"
	}
	if !validSubject(subject) {
		return "", fmt.Errorf("bus: %q is not a NATS subject without wildcards", subject)
	}
	if len(u.Query()) > 0 {
		return "", fmt.Errorf("bus: a NATS URL takes no parameters, got %q", u.RawQuery)
	}
	return subject, nil
}

// boundDial gives ctx a deadline of 5s if it has none: the NATS client
// dials with a timeout, not a context, and dialling must end.
func boundDial(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, 5*time.Second)
}

// dialTimeout is what is left of ctx's deadline, or an error once none is.
func dialTimeout(ctx context.Context, u *url.URL) (time.Duration, error) {
	dl, _ := ctx.Deadline()
	timeout := time.Until(dl)
	if timeout <= 0 || ctx.Err() != nil {
		return 0, fmt.Errorf("bus: dial %s: %w", u.Redacted(), context.DeadlineExceeded)
	}
	return timeout, nil
}

// validSubject reports whether s is a NATS subject one may publish to:
// dot-separated non-empty tokens without wildcards or white space.
func validSubject(s string) bool {
	for tok := range strings.SplitSeq(s, ".") {
		if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n*>") {
			return false
		}
	}
	return true
}

func (c *natsConn) poke() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

func (c *natsConn) Send(_ context.Context, msg []byte) error {
	// Publish only appends to the client's buffer, which its own
	// goroutine flushes at once; it fails while disconnected.
	nc, _ := c.current()
	if err := nc.Publish(c.subject, msg); err != nil {
		return fmt.Errorf("nats publish: %w", err)
	}
	return nil
}

func (c *natsConn) Run(ctx context.Context, r Receiver) error {
	var downs, ups int64
	for {
		nc, ended := c.current()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c.stop:
			return errClosed
		case <-ended:
			if err := c.redial(ctx, r); err != nil {
				return err
			}
		case m := <-c.msgs:
			r.Message(m.Data)
		case <-c.changed:
			// A loss and a return may both have happened since we last
			// looked; report them in that order.
			if d := c.downs.Load(); d != downs {
				downs = d
				var err error = errors.New("disconnected")
				if p := c.lastErr.Load(); p != nil {
					err = *p
				}
				r.Down(err)
			}
			if u := c.ups.Load(); u != ups {
				ups = u
				r.Up()
				if !nc.IsConnected() {
					r.Down(errors.New("disconnected again")) // its own callback is still to come
				}
			}
		}
	}
}

// redial replaces a client that closed without Close being called, trying
// with the bus's backoff until it succeeds or the connection is closed.
func (c *natsConn) redial(ctx context.Context, r Receiver) error {
	var err error = errors.New("the NATS client gave up reconnecting")
	if p := c.lastErr.Load(); p != nil {
		err = fmt.Errorf("the NATS client gave up reconnecting: %w", *p)
	}
	r.Down(err)
	for attempt := 1; ; attempt++ {
		t := time.NewTimer(c.cfg.backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-c.stop:
			t.Stop()
			return errClosed
		case <-t.C:
		}
		nc, ended, err := c.connect(natsRedialTimeout)
		if err != nil {
			c.cfg.logger.Debug("bus: dialling NATS again failed", "attempt", attempt, "err", err)
			continue
		}
		c.mu.Lock()
		if c.closing {
			c.mu.Unlock()
			nc.Close()
			<-ended
			return errClosed
		}
		c.nc, c.ncEnded = nc, ended
		c.mu.Unlock()
		r.Up()
		return nil
	}
}

func (c *natsConn) Close() error {
	c.once.Do(func() {
		c.mu.Lock()
		c.closing = true
		nc, ended := c.nc, c.ncEnded
		c.mu.Unlock()
		close(c.stop)
		if nc.IsConnected() {
			_ = nc.FlushTimeout(time.Second)
		}
		nc.Close()
		<-ended // the client's callbacks have run; its goroutines are ending
	})
	return nil
}
