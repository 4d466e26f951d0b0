package h2_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/net/http2"

	"tidings/streamhttp/internal/h2"
)

// TestFloodsAreCutOff: one connection that floods frames which cost the
// server work and carry none — Rapid Reset (open and reset), empty DATA,
// WINDOW_UPDATEs nothing called for, PRIORITY, SETTINGS, frames of an
// unknown type, empty CONTINUATIONs — is ended with GOAWAY
// ENHANCE_YOUR_CALM within a second,
// while it reads every answer; another client of the same server is
// served meanwhile and after.
func TestFloodsAreCutOff(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flood func(c *h2client, i int) error
	}{
		{"Rapid Reset", func(c *h2client, i int) error {
			id := uint32(2*i + 3)
			if err := c.writeHeaders(id, true, reqFields("GET", "/")); err != nil {
				return err
			}
			return c.flush(c.fr.WriteRSTStream(id, http2.ErrCodeCancel))
		}},
		{"empty DATA", func(c *h2client, _ int) error { return c.flush(c.fr.WriteData(1, false, nil)) }},
		{"WINDOW_UPDATE", func(c *h2client, _ int) error { return c.flush(c.fr.WriteWindowUpdate(0, 1)) }},
		{"PRIORITY", func(c *h2client, _ int) error {
			return c.flush(c.fr.WritePriority(1, http2.PriorityParam{StreamDep: 0, Weight: 15}))
		}},
		{"SETTINGS", func(c *h2client, _ int) error {
			return c.flush(c.fr.WriteSettings(http2.Setting{ID: http2.SettingHeaderTableSize, Val: 4096}))
		}},
		{"unknown type", func(c *h2client, _ int) error { return c.flush(c.fr.WriteRawFrame(0xfa, 0, 0, []byte("x"))) }},
		{"empty CONTINUATION", func(c *h2client, i int) error {
			if i == 0 {
				// A header block that never ends: the frame reader
				// gathers its CONTINUATIONs itself.
				if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, EndStream: true}); err != nil {
					return err
				}
			}
			return c.flush(c.fr.WriteContinuation(3, false, nil))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, _, _ := listenH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					<-r.Context().Done() // stream 1 stays open, its body unfinished
					return
				}
				_, _ = w.Write([]byte("ok"))
			}), h2.Config{})
			other := dial(t, addr)
			other.handshake()
			c := dial(t, addr)
			c.handshake()
			c.request(1, "POST", "/", false)
			start := time.Now()
			floodErr := make(chan error, 1)
			go func() {
				for i := range 1 << 20 {
					if err := tc.flood(c, i); err != nil {
						floodErr <- err
						return
					}
				}
				floodErr <- errors.New("a million frames went through")
			}()
			c.expectGoAway(http2.ErrCodeEnhanceYourCalm)
			if d := time.Since(start); d > time.Second {
				t.Errorf("the flood was cut after %v, want within a second", d)
			}
			if err := <-floodErr; err == nil {
				t.Fatal("the flood ended without an error")
			}
			other.request(1, "GET", "/", true)
			if status, body := other.response(1); status != "200" || string(body) != "ok" {
				t.Errorf("another client: %s %q", status, body)
			}
		})
	}
}

// TestOversizedFramesAreNotRead: frames larger than the 16 KiB the server
// takes (it advertises no larger SETTINGS_MAX_FRAME_SIZE) end the
// connection with FRAME_SIZE_ERROR before their payload is read: 40
// connections that each announce a 16 MiB frame cost the server no
// memory to speak of. (The clients here are bare, so that the heap
// measured is the server's.)
func TestOversizedFramesAreNotRead(t *testing.T) {
	addr, _, _ := listenH2C(t, http.NotFoundHandler(), h2.Config{})
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var conns []net.Conn
	for i := range 40 {
		nc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = nc.Close() })
		conns = append(conns, nc)
		typ := byte(0xfa) // of no known type
		if i%2 == 1 {
			typ = byte(http2.FrameData)
		}
		var b bytes.Buffer
		b.WriteString(http2.ClientPreface)
		_ = http2.NewFramer(&b, nil).WriteSettings()
		// The header of a 16 MiB frame: a frame reader that takes such
		// frames makes room for the payload as it reads the header.
		b.Write([]byte{0xff, 0xff, 0xff, typ, 0, 0, 0, 0, 1})
		if _, err := nc.Write(b.Bytes()); err != nil {
			t.Fatal(err)
		}
	}
	for i, nc := range conns {
		_ = nc.SetReadDeadline(time.Now().Add(frameTimeout))
		fr := http2.NewFramer(nil, nc)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("connection %d ended without GOAWAY FRAME_SIZE_ERROR: %v", i, err)
			}
			if ga, ok := f.(*http2.GoAwayFrame); ok {
				if ga.ErrCode != http2.ErrCodeFrameSize {
					t.Fatalf("connection %d: GOAWAY %v, want FRAME_SIZE_ERROR", i, ga.ErrCode)
				}
				break
			}
		}
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 64<<20 {
		t.Errorf("40 oversized frames grew the heap by %d MiB, want at most 64", grew>>20)
	}
}

// TestSilentPeerIsPingedAndLetGo: with the default timings, on the
// bubble's fake clock, a client that sends nothing for PingAfter (30 s)
// is sent a PING, not before; one that does not answer it within
// PingTimeout (15 s) has its connection closed, not before, its open
// streams with it; one that answers keeps it, PING after PING.
func TestSilentPeerIsPingedAndLetGo(t *testing.T) {
	const after, timeout = h2.DefaultPingAfter, h2.DefaultPingTimeout
	// The writer's sweep, which pings and cuts, runs every quarter of
	// PingAfter: each may come that much after it is due.
	const sweep = after / 4
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // a long answer, as a listen is
	})
	isPing := func(f rframe) bool { return f.Type == http2.FramePing && !f.Flags.Has(http2.FlagPingAck) }
	// open starts a client whose stream 1 is answered and stays open,
	// and returns when the server read the client's last frame.
	open := func(t *testing.T) (*h2client, *h2.Server, time.Time) {
		cli, srv, _ := servePipe(t, h, h2.Config{}, nil)
		c := newClient(t, cli)
		c.wait = after + timeout
		c.handshake()
		c.request(1, "GET", "/", true)
		c.expect("the answer's HEADERS", func(f rframe) bool { return f.Stream == 1 && f.Type == http2.FrameHeaders })
		return c, srv, time.Now()
	}

	t.Run("silent", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			c, srv, quiet := open(t)
			c.expect("the server's PING", isPing)
			pinged := time.Now()
			if d := pinged.Sub(quiet); d < after || d > after+sweep {
				t.Errorf("PING after %v of silence, want %v to %v", d, after, after+sweep)
			}
			c.expectClosed()
			if d := time.Since(pinged); d < timeout || d > timeout+sweep {
				t.Errorf("the connection closed %v after the unanswered PING, want %v to %v", d, timeout, timeout+sweep)
			}
			synctest.Wait()
			if n := srv.Stats().Streams; n != 0 {
				t.Errorf("%d streams still held after the silent client's connection closed", n)
			}
		})
	})
	t.Run("answering", func(t *testing.T) {
		inBubble(t, func(t *testing.T) {
			c, _, quiet := open(t)
			for range 3 { // well past PingAfter + PingTimeout
				f := c.expect("the server's PING", isPing)
				if d := time.Since(quiet); d < after {
					t.Errorf("PING after %v of silence, before PingAfter (%v)", d, after)
				}
				c.must(c.flush(c.fr.WritePing(true, [8]byte(f.Data))))
				quiet = time.Now()
			}
			c.ping() // the one that answers is still served
			for _, f := range c.backlog {
				if f.Stream == 1 {
					t.Errorf("stream 1, open all along, got %v", f)
				}
			}
		})
	})
	t.Run("behind", func(t *testing.T) {
		// The client's bytes come, but make no whole frame for long: the
		// reader, waiting for the rest of one, sees no frame, as a reader
		// that fell behind on a busy machine sees none. Bytes that came
		// since the PING mean a peer still there.
		inBubble(t, func(t *testing.T) {
			c, _, _ := open(t)
			var frame bytes.Buffer
			_ = http2.NewFramer(&frame, nil).WritePing(false, [8]byte{1})
			c.expect("the server's PING", isPing)
			for _, b := range frame.Bytes() { // 17 bytes, one every 5s: 85s
				time.Sleep(5 * time.Second)
				c.must(c.flush(c.bw.WriteByte(b)))
			}
			c.expect("the answer to the client's PING", func(f rframe) bool {
				return f.Type == http2.FramePing && f.Flags.Has(http2.FlagPingAck) && [8]byte(f.Data) == [8]byte{1}
			})
		})
	})
}

// TestBusyClientIsNotCut: Go's HTTP/2 client at work — many streams at
// once, bodies both ways over the windows, so WINDOW_UPDATEs both ways —
// spends little of the budget of frames that carry no work: with a
// tenth of the default budget it is served on the one connection it
// dialed, never told to calm down. (One connection at most: net/http
// pools an HTTP/2 connection only once the request that dialed it has
// it, and a request right behind would dial its own; with the bound it
// waits for the pool, so a second dial means the first was cut.)
func TestBusyClientIsNotCut(t *testing.T) {
	addr, _, _ := listenH2C(t, http.HandlerFunc(echo), h2.Config{FrameBudget: h2.DefaultFrameBudget / 10})
	var dials atomic.Int32
	tr := &http.Transport{Protocols: new(http.Protocols), MaxConnsPerHost: 1}
	tr.Protocols.SetUnencryptedHTTP2(true)
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}
	t.Cleanup(tr.CloseIdleConnections)
	client := &http.Client{Transport: tr}
	body := bytes.Repeat([]byte("x"), 100<<10) // over a stream's first window
	// One request first, so that the others find its connection rather
	// than each dial one of its own.
	resp, err := client.Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := range 32 {
		wg.Go(func() {
			for i := range 40 {
				var resp *http.Response
				var err error
				if (w+i)%2 == 0 {
					resp, err = client.Post("http://"+addr+"/", "application/octet-stream", bytes.NewReader(body))
				} else {
					resp, err = client.Get("http://" + addr + "/")
				}
				if err != nil {
					errs <- err
					return
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if n := dials.Load(); n != 1 {
		t.Errorf("the client dialed %d connections, want 1: the server cut one", n)
	}
}
