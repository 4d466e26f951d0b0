package loadtest

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"runtime"
	"sync"
)

// ServerWrites is the floor under any server, the kernel's: each listen
// is answered up to its ack by net/http and then taken over from it, and
// a change is one chunk, encoded when the listen opened, written to each
// connection by as many goroutines as the process may run at once. One
// write call per listen per change and nothing else: no hub, filter,
// keep-alive, deadline or bookkeeping. What a change costs it is what
// the loopback's sockets cost, which no server on the machine can go
// below; the project's parked listens make the same writes.
const ServerWrites = "writes"

// writesTarget is the kernel's floor.
type writesTarget struct {
	*front
	writers int

	mu     sync.Mutex
	gen    int        // changes made so far
	conns  []net.Conn // every listen's connection, taken over
	frames [][]byte   // frames[i] is conns[i]'s notification, a whole chunk
	closed bool
	err    error          // the first listen that could not be taken over, told by change
	wg     sync.WaitGroup // the writers of changes under way, and listens being taken over
}

func startWrites() (*writesTarget, error) {
	t := &writesTarget{writers: runtime.GOMAXPROCS(0)}
	f, err := startFront(http.HandlerFunc(t.serve))
	if err != nil {
		return nil, err
	}
	t.front = f
	return t, nil
}

func (t *writesTarget) serve(w http.ResponseWriter, r *http.Request) {
	f, meta, ok := startListen(w, r)
	if !ok {
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	gen := t.gen
	t.wg.Add(1)
	t.mu.Unlock()
	defer t.wg.Done()
	ack, event := listenEvents(meta)
	if _, err := w.Write(ack); err != nil {
		return
	}
	f.Flush()
	// The headers and the ack are out: the connection's next byte is a
	// chunk's, which the frame is.
	nc, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		t.mu.Lock()
		t.err = cmp.Or(t.err, fmt.Errorf("taking a listen's connection over: %w", err))
		t.mu.Unlock()
		return
	}
	// The frame is the event as one chunk of the chunked body.
	var chunk bytes.Buffer
	_, _ = httputil.NewChunkedWriter(&chunk).Write(event)
	frame := chunk.Bytes()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		nc.Close()
		return
	}
	t.conns = append(t.conns, nc)
	t.frames = append(t.frames, frame)
	// A change made once the client had its ack, before the connection
	// was in the list, is written here.
	missed := t.gen != gen
	t.mu.Unlock()
	if missed {
		_, _ = nc.Write(frame)
	}
}

// change writes every listen's frame, the connections split evenly
// among the writers, and returns at once, as the other servers do; the
// next change comes once every listen has this one.
func (t *writesTarget) change(context.Context, int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return errors.New("writes target closed")
	}
	if t.err != nil {
		return t.err
	}
	t.gen++
	conns, frames := t.conns, t.frames
	for w := range t.writers {
		t.wg.Go(func() {
			for i := w; i < len(conns); i += t.writers {
				_, _ = conns[i].Write(frames[i])
			}
		})
	}
	return nil
}

// close closes the connections taken over, then shuts the front down,
// which within ctx closes any a handler still writes an ack to, and
// then waits for the handlers and writers.
func (t *writesTarget) close(ctx context.Context) error {
	t.mu.Lock()
	t.closed = true
	conns := t.conns
	t.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	err := t.front.shutdown(ctx)
	t.wg.Wait()
	return err
}
