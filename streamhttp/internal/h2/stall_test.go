package h2_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"

	"tidings/hub"
	"tidings/internal/engine"
	"tidings/mcp"
	"tidings/streamhttp/internal/h2"
)

// stallNotices encode a listen's notifications as small fixed events.
type stallNotices struct{}

func (stallNotices) ListChanged(mcp.List) ([]byte, bool) {
	return []byte(`{"method":"changed"}`), false
}
func (stallNotices) Updated(b []byte, u string) ([]byte, bool) {
	return append(b, u...), true
}

// cutCounter is a listen's observer that counts its cut-offs.
type cutCounter struct{ cuts atomic.Int64 }

func (*cutCounter) Notified(int, int) {}
func (o *cutCounter) CutOff()         { o.cuts.Add(1) }

// parkingHandler answers a listen of hb's tools list changes with an
// acknowledgement, flushed, then waits for before (when not nil) and
// parks the listen with write timeout wt. ends counts the listen's End
// calls; the last reply, on a drain, is "done".
func parkingHandler(t *testing.T, hb *hub.Hub, wt time.Duration, before <-chan struct{}, obs *cutCounter, ends *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sub, err := hb.Subscribe(hub.Filter{Kinds: hub.Of(mcp.ToolsList)})
		if err != nil {
			t.Error(err)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: ack\n\n"))
		_ = http.NewResponseController(w).Flush()
		if before != nil {
			<-before
		}
		l := &engine.ParkedListen{Sub: sub, Notices: stallNotices{}, Observer: obs,
			End: func(how engine.PumpEnd) engine.Reply {
				ends.Add(1)
				sub.Close()
				if how == engine.Drained {
					return engine.Reply{Body: []byte("done")}
				}
				return engine.Reply{}
			}}
		if !w.(h2.Parkable).ParkListen(l, wt) {
			t.Error("the listen was not parked")
		}
	})
}

// TestListenStuckBeforeItParkedIsCut: a listen whose acknowledgement
// the client gave no window for, framed before the listen parked, is
// cut by its write timeout all the same, when it is due (RST_STREAM
// CANCEL, its observer told, End called once).
func TestListenStuckBeforeItParkedIsCut(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		// The writer's sweep, which cuts what waited past its write
		// timeout, runs every quarter of it: a cut comes that much late
		// at most.
		const wt = 200 * time.Millisecond
		hb := hub.New()
		defer hb.Shutdown()
		framed := make(chan struct{})
		var obs cutCounter
		var ends atomic.Int64
		cli, srv, _ := servePipe(t, parkingHandler(t, hb, wt, framed, &obs, &ends), h2.Config{}, nil)
		c := newClient(t, cli)
		c.handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
		c.request(1, "POST", "/", true)
		c.expect("the listen's HEADERS", func(f rframe) bool { return f.Stream == 1 && f.Type == http2.FrameHeaders })
		close(framed) // the acknowledgement waits for the window; now it parks
		parked := time.Now()
		c.expectRST(1, http2.ErrCodeCancel)
		if d := time.Since(parked); d < wt || d > wt+wt/4 {
			t.Errorf("the listen was cut %v after it parked, want its write timeout (%v) to a quarter more", d, wt)
		}
		synctest.Wait()
		if n, cuts, st := ends.Load(), obs.cuts.Load(), srv.Stats(); n != 1 || cuts != 1 || st.ParkedListens != 0 || st.Streams != 0 {
			t.Errorf("once all was quiet: End called %d times, observer told of %d cuts, %+v; want 1, 1, nothing held", n, cuts, st)
		}
	})
}

// TestEndedListenStuckIsCut: a listen that ends (the hub shuts down)
// while its client gives it no window does not hold its stream: its
// last reply waits for the write timeout, then the stream is reset.
func TestEndedListenStuckIsCut(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		const wt = 200 * time.Millisecond
		hb := hub.New()
		var obs cutCounter
		var ends atomic.Int64
		cli, srv, _ := servePipe(t, parkingHandler(t, hb, wt, nil, &obs, &ends), h2.Config{}, nil)
		c := newClient(t, cli)
		c.handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 11}) // the acknowledgement, and no more
		c.request(1, "POST", "/", true)
		c.expect("the listen's HEADERS", func(f rframe) bool { return f.Stream == 1 && f.Type == http2.FrameHeaders })
		c.expect("the acknowledgement", func(f rframe) bool { return f.Stream == 1 && f.Type == http2.FrameData })
		synctest.Wait()
		if n := srv.Stats().ParkedListens; n != 1 {
			t.Fatalf("%d listens parked once all was quiet, want 1", n)
		}
		hb.Shutdown()
		ended := time.Now()
		c.expectRST(1, http2.ErrCodeCancel)
		if d := time.Since(ended); d < wt || d > wt+wt/4 {
			t.Errorf("the ended listen was cut %v after its last reply was due, want its write timeout (%v) to a quarter more", d, wt)
		}
		synctest.Wait()
		if n, st := ends.Load(), srv.Stats(); n != 1 || st.Streams != 0 {
			t.Errorf("once all was quiet: End called %d times, %+v; want once, no stream held", n, st)
		}
	})
}

// TestAnswerLeftBehindIsBounded: what a returned handler left waiting
// for a client that gives it no window does not hold the stream. The
// handler's write deadline bounds it, as it would a last flush of the
// handler's own; without one, Config.WriteTimeout does. Either way the
// stream is reset (CANCEL) when the bound is due, and let go.
func TestAnswerLeftBehindIsBounded(t *testing.T) {
	const bound = 200 * time.Millisecond
	for _, tc := range []struct {
		name string
		h    http.HandlerFunc
		cfg  h2.Config
	}{
		{"the handler's write deadline", func(w http.ResponseWriter, r *http.Request) {
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(bound))
			_, _ = w.Write(make([]byte, 60<<10))
		}, h2.Config{}},
		{"the server's write timeout", func(w http.ResponseWriter, r *http.Request) {
			_, _ = w.Write(make([]byte, 1000))
		}, h2.Config{WriteTimeout: bound}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				cli, srv, _ := servePipe(t, tc.h, tc.cfg, nil)
				expectCutAfter(t, newClient(t, cli), bound)
				synctest.Wait()
				if n := srv.Stats().Streams; n != 0 {
					t.Errorf("%d streams still held once all was quiet", n)
				}
			})
		})
	}
}

// expectCutAfter has c, with the client's windows closed, ask for an
// answer on stream 1, and checks that its HEADERS come and the stream is
// reset with CANCEL after bound, within a quarter more (the sweep's
// period).
func expectCutAfter(t *testing.T, c *h2client, bound time.Duration) {
	t.Helper()
	c.handshake(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	start := time.Now()
	c.request(1, "GET", "/", true)
	c.expect("the answer's HEADERS", func(f rframe) bool { return f.Stream == 1 && f.Type == http2.FrameHeaders })
	c.expectRST(1, http2.ErrCodeCancel)
	if d := time.Since(start); d < bound || d > bound+bound/4 {
		t.Errorf("stream 1 reset %v after the request, want its bound (%v) to a quarter more", d, bound)
	}
}

// TestShutdownBeforeThePreface: a connection whose client has not sent
// its preface when the server shuts down is closed at once, with no
// GOAWAY ahead of a SETTINGS it never had, and Shutdown does not wait
// for it.
func TestShutdownBeforeThePreface(t *testing.T) {
	hs := &http.Server{}
	cli, _, served := servePipe(t, http.NotFoundHandler(), h2.Config{}, hs)
	ctx, cancel := context.WithTimeout(context.Background(), frameTimeout)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, served, "the connection to close")
	c := newClient(t, cli)
	if fs := c.expectClosed(); len(fs) > 0 {
		t.Fatalf("the server sent %v before closing", fs)
	}
}

// TestWriteBeyondContentLength: a handler that writes more than the
// Content-Length it set is refused the excess (http.ErrContentLength),
// as net/http refuses it, instead of sending a malformed body.
func TestWriteBeyondContentLength(t *testing.T) {
	errs := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "3")
		_, _ = w.Write([]byte("abc"))
		_, err := w.Write([]byte("d"))
		errs <- err
	})
	cli, _, _ := servePipe(t, h, h2.Config{}, nil)
	c := newClient(t, cli)
	c.handshake()
	c.request(1, "GET", "/", true)
	if status, body := c.response(1); status != "200" || string(body) != "abc" {
		t.Fatalf("answered %s %q, want 200 \"abc\"", status, body)
	}
	if err := <-errs; err != http.ErrContentLength {
		t.Fatalf("the write past Content-Length returned %v, want http.ErrContentLength", err)
	}
}
