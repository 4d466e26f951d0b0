package loadtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"sync"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// listenerSide opens and reads the listens of each run, either in this
// process or in a child process. Only one set of listens is open at a
// time.
type listenerSide interface {
	// open opens the listens of spec and waits for every ack. With
	// measure set it returns the memory the listens cost the process they
	// live in (for the in-process side, that is the server as well).
	open(ctx context.Context, spec openSpec, measure bool) (*Footprint, error)
	// arm makes change c the one notifications are attributed to.
	arm(ctx context.Context, c int) error
	// wait reports whether change c reached every healthy listen before
	// the deadline.
	wait(ctx context.Context, c int, deadline time.Time) (bool, error)
	// close closes the listens and returns when each healthy listen got
	// each change (Unix ns, 0 for never) and how many messages no listen
	// asked for.
	close(ctx context.Context) ([][]int64, int64, error)
	// stop ends the side.
	stop() error
}

// localSide reads the listens in this process.
type localSide struct{ set *listenerSet }

func (l *localSide) open(ctx context.Context, spec openSpec, measure bool) (*Footprint, error) {
	l.set = newListenerSet(spec)
	var before memSnap
	if measure {
		before = snapshot()
	}
	if err := l.set.open(ctx); err != nil {
		l.set = nil
		return nil, err
	}
	if !measure {
		return nil, nil
	}
	fp := footprint(before, snapshot(), spec.Listeners)
	return &fp, nil
}

func (l *localSide) arm(_ context.Context, c int) error {
	l.set.arm(c)
	return nil
}

func (l *localSide) wait(ctx context.Context, c int, deadline time.Time) (bool, error) {
	return waitDone(ctx, l.set.done, c, deadline)
}

func (l *localSide) close(context.Context) ([][]int64, int64, error) {
	recv, bad := l.set.close()
	l.set = nil
	return recv, bad, nil
}

func (l *localSide) stop() error {
	if l.set != nil {
		l.set.close()
		l.set = nil
	}
	return nil
}

// childMsg is one line between the harness and its listener process:
// requests "open", "arm" and "close" one way, and replies "opened",
// "armed", "closed" and the unprompted "done" the other.
type childMsg struct {
	Op        string     `json:"op"`
	Spec      *openSpec  `json:"spec,omitempty"`
	Measure   bool       `json:"measure,omitzero"`
	Run       int        `json:"run,omitzero"`
	Change    int        `json:"change"`
	Footprint *Footprint `json:"footprint,omitempty"`
	Received  [][]int64  `json:"received,omitempty"`
	Bad       int64      `json:"bad,omitzero"`
	Error     string     `json:"error,omitempty"`
}

// ServeListeners is the listener process of a fan-out run: it reads
// requests from in and answers on out until in ends, then closes every
// listen it holds. The harness starts it as a child process so that the
// memory of the server and of its listens are measured apart, and so
// that each process needs only one file descriptor per listen.
func ServeListeners(in io.Reader, out io.Writer) error {
	cmds := make(chan childMsg)
	readErr := make(chan error, 1)
	// The reader ends when in does; stopped only spares it a send that
	// nobody would take.
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		defer close(cmds)
		dec := jsontext.NewDecoder(in)
		for {
			var m childMsg
			if err := json.UnmarshalDecode(dec, &m); err != nil {
				if !errors.Is(err, io.EOF) {
					readErr <- err
				}
				return
			}
			select {
			case cmds <- m:
			case <-stopped:
				return
			}
		}
	}()

	w := bufio.NewWriter(out)
	send := func(m childMsg) error {
		if err := json.MarshalWrite(w, m); err != nil {
			return err
		}
		if err := w.WriteByte('\n'); err != nil {
			return err
		}
		return w.Flush()
	}
	var set *listenerSet
	defer func() {
		if set != nil {
			set.close()
		}
	}()
	var done <-chan int
	for {
		select {
		case c := <-done:
			if err := send(childMsg{Op: "done", Run: set.spec.Run, Change: c}); err != nil {
				return err
			}
		case m, ok := <-cmds:
			if !ok {
				select {
				case err := <-readErr:
					return fmt.Errorf("reading requests: %w", err)
				default:
					return nil
				}
			}
			reply, err := serveChild(m, &set)
			if err != nil {
				reply = childMsg{Op: "error", Error: err.Error()}
			}
			done = nil
			if set != nil {
				done = set.done
			}
			if err := send(reply); err != nil {
				return err
			}
		}
	}
}

// serveChild carries out one request of the harness.
func serveChild(m childMsg, set **listenerSet) (childMsg, error) {
	switch m.Op {
	case "open":
		if *set != nil || m.Spec == nil {
			return childMsg{}, errors.New("open: listens already open, or no spec")
		}
		spec := *m.Spec
		need := spec.Listeners
		if spec.HTTP2Conns > 0 {
			need = spec.HTTP2Conns
		}
		if err := raiseOpenFiles(uint64(need + fdSlack)); err != nil {
			return childMsg{}, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Duration(spec.OpenTimeoutMs)*time.Millisecond)
		defer cancel()
		l := &localSide{}
		fp, err := l.open(ctx, spec, m.Measure)
		if err != nil {
			return childMsg{}, err
		}
		*set = l.set
		return childMsg{Op: "opened", Footprint: fp}, nil
	case "arm":
		if *set == nil || m.Change < 0 || m.Change >= (*set).spec.Changes {
			return childMsg{}, errors.New("arm: no listens open, or no such change")
		}
		(*set).arm(m.Change)
		return childMsg{Op: "armed", Change: m.Change}, nil
	case "close":
		if *set == nil {
			return childMsg{}, errors.New("close: no listens open")
		}
		recv, bad := (*set).close()
		*set = nil
		return childMsg{Op: "closed", Received: recv, Bad: bad}, nil
	}
	return childMsg{}, fmt.Errorf("unknown request %q", m.Op)
}

// childSide reads the listens in a child process running ServeListeners.
type childSide struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	run   int
	// broken is the first failed request: after it, replies can no longer
	// be matched to requests, so every later request fails with it.
	broken error

	replies chan childMsg
	dones   chan childMsg
	// ended is closed when the child's output ends; readErr says why.
	ended   chan struct{}
	readErr error
	quit    chan struct{}
	once    sync.Once
}

// startChild starts cmd, whose stdin and stdout must be unset, as the
// listener process. Its stderr is passed on to stderr (if not nil).
func startChild(cmd *exec.Cmd, stderr io.Writer) (*childSide, error) {
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if stderr != nil {
		cmd.Stderr = stderr
	}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the listener process: %w", err)
	}
	c := &childSide{
		cmd: cmd, stdin: stdin,
		replies: make(chan childMsg, 1),
		dones:   make(chan childMsg, 1024),
		ended:   make(chan struct{}),
		quit:    make(chan struct{}),
	}
	go c.readLoop(stdout)
	return c, nil
}

// readLoop routes the child's messages until its output ends.
func (c *childSide) readLoop(stdout io.Reader) {
	defer close(c.ended)
	dec := jsontext.NewDecoder(stdout)
	for {
		var m childMsg
		if err := json.UnmarshalDecode(dec, &m); err != nil {
			c.readErr = err
			return
		}
		ch := c.replies
		if m.Op == "done" {
			ch = c.dones
		}
		select {
		case ch <- m:
		case <-c.quit:
			return
		}
	}
}

// request sends m and waits for the reply.
func (c *childSide) request(ctx context.Context, m childMsg) (childMsg, error) {
	if c.broken != nil {
		return childMsg{}, c.broken
	}
	r, err := c.exchange(ctx, m)
	if err != nil {
		c.broken = err
	}
	return r, err
}

func (c *childSide) exchange(ctx context.Context, m childMsg) (childMsg, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return childMsg{}, err
	}
	if _, err := c.stdin.Write(append(b, '\n')); err != nil {
		return childMsg{}, fmt.Errorf("listener process: %w", err)
	}
	select {
	case r := <-c.replies:
		if r.Error != "" {
			return childMsg{}, fmt.Errorf("listener process: %s", r.Error)
		}
		return r, nil
	case <-c.ended:
		return childMsg{}, fmt.Errorf("listener process ended: %w", c.readErr)
	case <-ctx.Done():
		return childMsg{}, ctx.Err()
	}
}

func (c *childSide) open(ctx context.Context, spec openSpec, measure bool) (*Footprint, error) {
	c.run = spec.Run
	r, err := c.request(ctx, childMsg{Op: "open", Spec: &spec, Measure: measure})
	if err != nil {
		return nil, err
	}
	return r.Footprint, nil
}

func (c *childSide) arm(ctx context.Context, ch int) error {
	_, err := c.request(ctx, childMsg{Op: "arm", Change: ch})
	return err
}

func (c *childSide) wait(ctx context.Context, ch int, deadline time.Time) (bool, error) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		select {
		case m := <-c.dones:
			if m.Run == c.run && m.Change == ch {
				return true, nil
			}
		case <-t.C:
			return false, nil
		case <-c.ended:
			return false, fmt.Errorf("listener process ended: %w", c.readErr)
		case <-ctx.Done():
			return false, ctx.Err()
		}
	}
}

func (c *childSide) close(ctx context.Context) ([][]int64, int64, error) {
	r, err := c.request(ctx, childMsg{Op: "close"})
	if err != nil {
		return nil, 0, err
	}
	return r.Received, r.Bad, nil
}

// stop ends the child: closing its stdin makes it close every listen and
// exit; it is killed if it has not after WaitDelay.
func (c *childSide) stop() error {
	var err error
	c.once.Do(func() {
		c.stdin.Close()
		close(c.quit)
		// Its output ends when it exits; Wait may only close the pipe
		// after that.
		t := time.NewTimer(c.cmd.WaitDelay)
		defer t.Stop()
		select {
		case <-c.ended:
		case <-t.C:
			_ = c.cmd.Process.Kill()
			<-c.ended
		}
		if err = c.cmd.Wait(); err != nil {
			err = fmt.Errorf("listener process: %w", err)
		}
	})
	return err
}
