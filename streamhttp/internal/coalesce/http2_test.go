package coalesce_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"tidings/streamhttp/internal/coalesce"
)

// heldConn counts the writes made to a TCP connection and, once held,
// blocks them until let go: a socket whose buffer is full.
type heldConn struct {
	net.Conn
	writes  atomic.Int64
	hold    chan struct{} // nil: writes pass
	holding atomic.Bool
}

func (c *heldConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	if c.holding.Load() {
		<-c.hold
	}
	return c.Conn.Write(p)
}

type heldListener struct {
	net.Listener
	conns chan *heldConn
	wrap  bool
}

func (l *heldListener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	hc := &heldConn{Conn: nc, hold: make(chan struct{})}
	l.conns <- hc
	if !l.wrap {
		return hc, nil
	}
	return coalesce.Sniffing(hc, 0), nil
}

// TestStreamsShareWrites sends one frame on each of several HTTP/2
// streams of one connection while the connection's socket is held, as
// one under load is: the frames leave in fewer writes than there are
// frames, rather than one write per frame.
func TestStreamsShareWrites(t *testing.T) {
	const streams = 10
	frame := bytes.Repeat([]byte("x"), 3000) // most of net/http's 4 KiB write buffer

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hl := &heldListener{Listener: ln, conns: make(chan *heldConn, 4), wrap: true}
	release := make(chan struct{})
	flushed := make(chan struct{}, streams)
	hs := &http.Server{
		Protocols: new(http.Protocols),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
			_, _ = w.Write(frame)
			w.(http.Flusher).Flush()
			flushed <- struct{}{}
			<-r.Context().Done()
		}),
	}
	hs.Protocols.SetUnencryptedHTTP2(true)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(hl) }()
	defer func() {
		_ = hs.Close()
		<-served
	}()

	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	// net/http pools an HTTP/2 connection only once the request that
	// dialed it has it: a request right behind would dial its own, but
	// for this bound, which has it wait for the pool instead.
	tr.MaxConnsPerHost = 1
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bodies := make([]io.ReadCloser, streams)
	for i := range bodies {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+ln.Addr().String()+"/", nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		bodies[i] = resp.Body
		defer resp.Body.Close()
	}
	hc := <-hl.conns
	if len(hl.conns) != 0 {
		t.Fatal("the streams did not share one connection")
	}

	// Hold the socket, let every stream write its frame, and wait until
	// each handler's flush is done: with coalescing, the frames wait in
	// the Conn's buffer, and no handler waits for the socket.
	hc.holding.Store(true)
	before := hc.writes.Load()
	close(release)
	timeout := time.After(10 * time.Second)
	for range streams {
		select {
		case <-flushed:
		case <-timeout:
			t.Fatal("handlers could not flush while the socket was busy: their frames are not gathered")
		}
	}
	close(hc.hold)
	for i, b := range bodies {
		if _, err := io.ReadFull(b, make([]byte, len(frame))); err != nil {
			t.Fatalf("stream %d: %v", i, err)
		}
	}
	if w := hc.writes.Load() - before; w >= streams {
		t.Fatalf("%d frames on one connection left in %d writes", streams, w)
	} else {
		t.Logf("%d frames on one connection left in %d writes", streams, w)
	}
	cancel()
}
