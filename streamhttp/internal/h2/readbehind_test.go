package h2

import (
	"context"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"
)

// TestReadDeadlineWaitsForABusyReader: a handler's read deadline that
// passes while the connection's reader is not waiting on the socket —
// busy, or behind on a busy machine, with the body perhaps in bytes it
// has yet to read — does not time the client out; once the reader waits
// on the socket with nothing for the stream, it does.
func TestReadDeadlineWaitsForABusyReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, err := Configure(&http.Server{}, Config{})
		if err != nil {
			t.Fatal(err)
		}
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		c := newConn(srv, a, nil, http.NotFoundHandler(), context.Background())
		s := newStream(c, 1)
		w := &responseWriter{s: s}
		expired := func() bool {
			c.mu.Lock()
			defer c.mu.Unlock()
			return s.readExpired
		}
		_ = w.SetReadDeadline(time.Now().Add(time.Second))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if expired() {
			t.Fatal("the read deadline passed while the reader was behind, and timed the client out")
		}
		c.inRead.Store(true) // the reader waits on the socket: nothing came
		time.Sleep(readRecheck)
		synctest.Wait()
		if !expired() {
			t.Fatal("the read deadline did not time out a client whose body did not come")
		}
		c.mu.Lock()
		s.readTimer.Stop()
		c.mu.Unlock()
	})
}
