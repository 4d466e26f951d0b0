package h2_test

import (
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"

	"tidings/streamhttp/internal/h2"
)

// TestRunningHandlerCutForTheClientsWindow: a handler blocked in Write
// because the client opens no window is cut — its stream reset, its
// Write failing — once its bytes waited WriteTimeout, with no write
// deadline of its own: the server bounds its streams' writes by what
// waits on the client (so that the front door's middleware need not time
// them by the clock), and counts the cut.
func TestRunningHandlerCutForTheClientsWindow(t *testing.T) {
	const bound = 200 * time.Millisecond
	wrote := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tw, ok := w.(interface{ WriteTimeout() time.Duration }); !ok || tw.WriteTimeout() != bound {
			t.Errorf("the ResponseWriter does not report the server's write timeout")
		}
		_, err := w.Write(make([]byte, 1<<20))
		wrote <- err
	})
	inBubble(t, func(t *testing.T) {
		cli, srv, _ := servePipe(t, h, h2.Config{WriteTimeout: bound}, nil)
		expectCutAfter(t, newClient(t, cli), bound)
		synctest.Wait()
		select {
		case err := <-wrote:
			if err == nil {
				t.Error("the handler's Write succeeded on a cut stream")
			}
		default:
			t.Error("the handler's Write still blocks on a cut stream")
		}
		if n := srv.Stats().WriteTimeouts; n != 1 {
			t.Errorf("%d write timeouts counted, want 1", n)
		}
	})
}

// slowConn reads at most slowRead bytes at a time, slowEvery apart: a
// client that reads steadily, more slowly than the server writes.
type slowConn struct{ net.Conn }

const (
	slowRead  = 8 << 10
	slowEvery = 10 * time.Millisecond
)

func (c *slowConn) Read(p []byte) (int, error) {
	time.Sleep(slowEvery) // on the bubble's clock
	return c.Conn.Read(p[:min(len(p), slowRead)])
}

// TestSlowReaderIsNotCut: a client that reads steadily but more slowly
// than one write of the server's takes within the write timeout keeps
// its connection and gets every answer: the timeout runs again while the
// client takes bytes, and cuts only a client that takes none.
func TestSlowReaderIsNotCut(t *testing.T) {
	const (
		timeout = 50 * time.Millisecond
		streams = 8
	)
	body := make([]byte, 64<<10)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(body) })
	inBubble(t, func(t *testing.T) {
		cli, _, _ := servePipe(t, h, h2.Config{WriteTimeout: timeout}, nil)
		c := newClient(t, &slowConn{cli})
		// Windows as wide as HTTP/2 allows: nothing waits on them.
		c.handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
		c.must(c.flush(c.fr.WriteWindowUpdate(0, 1<<31-1-65535)))
		for i := range streams {
			c.request(uint32(2*i+1), "GET", "/", true)
		}
		deadline := time.After(c.timeout())
		for ended := 0; ended < streams; {
			f, ok := c.next(deadline)
			switch {
			case !ok:
				t.Fatalf("%d of %d answers ended within %v", ended, streams, c.timeout())
			case f.Err != nil:
				t.Fatalf("the connection ended after %d answers: %v", ended, f.Err)
			case f.Type == http2.FrameRSTStream, f.Type == http2.FrameGoAway:
				t.Fatalf("with %d answers ended, the server sent %v", ended, f)
			case f.ends():
				ended++
			}
		}
	})
}
