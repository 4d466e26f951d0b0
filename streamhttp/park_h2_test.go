package streamhttp_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"tidings/internal/engine"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
	"tidings/streamhttp/internal/h2"
)

// overH2 serves f's handler over HTTP/2 without TLS with the h2
// package, in place of the fixture's own server, and gives f a client
// that speaks it.
func overH2(t *testing.T, f *fixture) *h2.Server {
	t.Helper()
	f.ts.Close() // the fixture's own server; its cleanup closes the one made here
	ts := httptest.NewUnstartedServer(f.h)
	ts.Config.Protocols = new(http.Protocols)
	ts.Config.Protocols.SetHTTP1(true)
	ts.Config.Protocols.SetUnencryptedHTTP2(true)
	srv, err := h2.Configure(ts.Config, h2.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ts.Start()
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	t.Cleanup(tr.CloseIdleConnections)
	f.ts, f.c = ts, &http.Client{Transport: tr}
	return srv
}

// TestListensParkOnHTTP2Streams: listens over one HTTP/2 connection are
// parked on their streams: they hold no goroutine, each hears a change
// tagged with its own id, one whose client resets its stream ends (the
// hub and the open-listen count let go of it), and the rest end with
// their result and a clean end of the stream when the server shuts down.
func TestListensParkOnHTTP2Streams(t *testing.T) {
	const listens = 200
	f := newFixture(t, []server.Option{server.WithKeepAlive(0)}, streamhttp.WithParking())
	srv := overH2(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	before := runtime.NumGoroutine()
	streams := make([]*stream, listens)
	for i := range streams {
		streams[i] = f.open(t, ctx, listenBody(i, `{"toolsListChanged":true}`), headers(mcp.MethodListen, ""))
		if ev := streams[i].next(t); ev.Method != mcp.NotifyAcknowledged {
			t.Fatalf("listen %d: first event %q, want the acknowledgement", i, ev.Method)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the listens to be parked", func() bool { return srv.Stats().ParkedListens == listens })
	// The client's side holds goroutines of its own for each stream.
	if grown := runtime.NumGoroutine() - before; grown > listens+50 {
		t.Fatalf("%d listens over HTTP/2 hold %d more goroutines, server and client; want the client's %d and a few", listens, grown, listens)
	}
	f.srv.RemoveTools("coffee")
	for i, s := range streams {
		if ev := s.next(t); ev.Method != mcp.NotifyToolsListChanged || subscriptionID(t, ev.Params) != strconv.Itoa(i) {
			t.Fatalf("listen %d: after a tool change got %q %s", i, ev.Method, ev.Params)
		}
	}
	streams[0].resp.Body.Close() // the client resets the stream
	testkit.WaitFor(t, 10*time.Second, "the reset listen to end", func() bool {
		return srv.Stats().ParkedListens == listens-1 && f.srv.ListenStats().Listens == listens-1 && engine.Of(f.srv).Hub().Len() == listens-1
	})
	if err := f.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for i, s := range streams[1:] {
		if end := s.next(t); string(end.ID) != strconv.Itoa(i+1) || end.Result == nil {
			t.Fatalf("listen %d: after shutdown got %+v, want its result", i+1, end)
		}
		if _, err := s.r.Next(); err != io.EOF && (err == nil || err.Error() != "EOF") {
			t.Fatalf("listen %d: after the result: %v, want EOF", i+1, err)
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the streams to close", func() bool { return srv.Stats().Streams == 0 && srv.Stats().ParkedListens == 0 })
}

// TestParkedHTTP2ListenStuckPastTheWriteTimeoutIsCut: a listen whose
// client gives it no flow-control window is cut once its bytes have
// waited for the write timeout (RST_STREAM CANCEL), while a listen on
// the same connection whose client reads goes on hearing its changes.
func TestParkedHTTP2ListenStuckPastTheWriteTimeoutIsCut(t *testing.T) {
	f := newFixture(t, []server.Option{server.WithKeepAlive(0)}, streamhttp.WithParking(), streamhttp.WithWriteTimeout(200*time.Millisecond))
	srv := overH2(t, f)
	nc, err := net.Dial("tcp", f.ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	fr := http2.NewFramer(nc, nc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	// No stream may be sent a byte until the client says so.
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0}); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	open := func(id uint32, body []byte) {
		hb.Reset()
		fields := [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", f.ts.Listener.Addr().String()}, {":path", "/"},
			{"content-length", strconv.Itoa(len(body))}}
		for k, vv := range headers(mcp.MethodListen, "") {
			for _, v := range vv {
				fields = append(fields, [2]string{strings.ToLower(k), v})
			}
		}
		for _, hf := range fields {
			_ = enc.WriteField(hpack.HeaderField{Name: hf[0], Value: hf[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteData(id, true, body); err != nil {
			t.Fatal(err)
		}
	}
	open(1, listenBody(1, `{"toolsListChanged":true}`))
	open(3, listenBody(3, `{"toolsListChanged":true}`))
	if err := fr.WriteWindowUpdate(3, 1<<20); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "both listens to be parked", func() bool { return srv.Stats().ParkedListens == 2 })
	var got3 bytes.Buffer
	cut := false
	for !cut || !bytes.Contains(got3.Bytes(), []byte(mcp.NotifyToolsListChanged)) {
		fm, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading (cut %v, stream 3 had %q): %v", cut, got3.String(), err)
		}
		switch fm := fm.(type) {
		case *http2.DataFrame:
			if fm.StreamID == 1 {
				t.Fatalf("stream 1, given no window, was sent %q", fm.Data())
			}
			got3.Write(fm.Data())
			if bytes.Contains(got3.Bytes(), []byte(mcp.NotifyAcknowledged)) && !bytes.Contains(got3.Bytes(), []byte(mcp.NotifyToolsListChanged)) {
				f.srv.RemoveTools("coffee")
			}
		case *http2.RSTStreamFrame:
			if fm.StreamID != 1 || fm.ErrCode != http2.ErrCodeCancel {
				t.Fatalf("RST_STREAM %d %v, want stream 1 cut with CANCEL", fm.StreamID, fm.ErrCode)
			}
			cut = true
		}
	}
	testkit.WaitFor(t, 10*time.Second, "the cut listen to end", func() bool {
		return srv.Stats().ParkedListens == 1 && f.srv.ListenStats().Listens == 1
	})
}
