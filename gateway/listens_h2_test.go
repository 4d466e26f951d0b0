package gateway_test

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"tidings/mcp"
)

// openListensH2 opens n listens at url as streams of one HTTP/2
// connection (h2c) and returns once every one has its ack. One goroutine
// reads the connection with a bare framer and stamps each change as its
// frame arrives: the listens stand for peers that each read their own
// stream, and the time measured is the server's, up to the connection,
// not a client library's hand-off to a goroutine per stream, which on
// the machine's shared cores would weigh on the server it measures.
func openListensH2(b testing.TB, url string, n int) *listens {
	b.Helper()
	addr := strings.TrimPrefix(url, "http://")
	conn, err := net.DialTimeout("tcp", addr, waitTimeout)
	if err != nil {
		b.Fatal(err)
	}
	l := &listens{n: n, conns: []io.Closer{conn}}
	b.Cleanup(func() {
		conn.Close()
		l.wg.Wait()
	})
	bw := bufio.NewWriter(conn)
	fr := http2.NewFramer(bw, bufio.NewReaderSize(conn, 64<<10))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.SetReuseFrames()
	// Stream windows large enough for any run, so that the reader never
	// grants a stream more; the connection's it grants as it is used.
	const window = 1 << 30
	_ = conn.SetDeadline(time.Now().Add(waitTimeout))
	room, err := startH2(bw, fr, window)
	if err != nil {
		b.Fatal(err)
	}
	if err := writeH2Requests(bw, fr, addr, n, room); err != nil {
		b.Fatal(err)
	}
	_ = conn.SetDeadline(time.Time{})
	acked := make(chan error, n)
	l.wg.Go(func() { l.readH2(fr, bw, acked, window) })
	deadline := time.After(waitTimeout)
	for range n {
		select {
		case err := <-acked:
			if err != nil {
				b.Fatal(err)
			}
		case <-deadline:
			b.Fatalf("not every one of %d listens was acknowledged in %v", n, waitTimeout)
		}
	}
	return l
}

// startH2 writes the client preface, settings that open every stream's
// window to window, and as much again for the connection; then reads
// the server's settings (acknowledged) and whatever window it grants at
// once, up to the answer to a ping, and returns the room the server's
// connection window leaves for request bodies.
func startH2(bw *bufio.Writer, fr *http2.Framer, window uint32) (int, error) {
	if _, err := bw.WriteString(http2.ClientPreface); err != nil {
		return 0, err
	}
	if err := fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window},
		http2.Setting{ID: http2.SettingEnablePush, Val: 0}); err != nil {
		return 0, err
	}
	if err := fr.WriteWindowUpdate(0, window); err != nil {
		return 0, err
	}
	if err := fr.WritePing(false, [8]byte{'s', 't', 'a', 'r', 't'}); err != nil {
		return 0, err
	}
	if err := bw.Flush(); err != nil {
		return 0, err
	}
	room := 65535 // the connection's window before any update (RFC 9113, 6.9.2)
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return 0, fmt.Errorf("starting the connection: %w", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					return 0, err
				}
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				room += int(f.Increment)
			}
		case *http2.PingFrame:
			if f.IsAck() {
				return room, bw.Flush()
			}
		case *http2.GoAwayFrame:
			return 0, fmt.Errorf("the server ended the connection: %v %q", f.ErrCode, f.DebugData())
		}
	}
}

// writeH2Requests writes n listens on streams 1, 3, 5, …; their bodies
// must fit in room, the connection's window.
func writeH2Requests(bw *bufio.Writer, fr *http2.Framer, addr string, n, room int) error {
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":authority", Value: addr},
		{Name: ":path", Value: "/"},
	}
	for k, vv := range listenHeaders() {
		for _, v := range vv {
			fields = append(fields, hpack.HeaderField{Name: strings.ToLower(k), Value: v})
		}
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for i := range n {
		body := listenBody(i)
		block.Reset()
		for _, f := range append(fields, hpack.HeaderField{Name: "content-length", Value: strconv.Itoa(len(body))}) {
			if err := enc.WriteField(f); err != nil {
				return err
			}
		}
		if room -= len(body); room < 0 {
			return fmt.Errorf("the server's connection window holds the bodies of %d listens, not %d", i, n)
		}
		id := uint32(2*i + 1)
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true}); err != nil {
			return err
		}
		if err := fr.WriteData(id, true, body); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// readH2 reads the connection until it closes: each stream's first
// event must be its listen's ack, told on acked (or why not); every
// later one is a change, stamped as its frame arrived. The reader alone
// writes once the requests are out: settings and ping acks, and more
// window for the connection as the data uses it up. Frames of the
// connection itself, or of a stream that is not a listen's, are no
// listen's.
func (l *listens) readH2(fr *http2.Framer, bw *bufio.Writer, acked chan<- error, window uint32) {
	pending := make([][]byte, l.n) // the part of an event not yet ended, per listen
	open := make([]bool, l.n)
	last := make([]int, l.n)
	var used uint32
	reply := func(write func() error) bool {
		return write() == nil && bw.Flush() == nil
	}
	// The opener reads n reports at most; beyond them, or once it has
	// given up, a report is dropped, never waited on.
	tell := func(err error) {
		select {
		case acked <- err:
		default:
		}
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		now := time.Now()
		i := -1 // no listen's
		if id := f.Header().StreamID; id%2 == 1 && int(id/2) < l.n {
			i = int(id / 2)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() && !reply(fr.WriteSettingsAck) {
				return
			}
		case *http2.PingFrame:
			if !f.IsAck() && !reply(func() error { return fr.WritePing(true, f.Data) }) {
				return
			}
		case *http2.MetaHeadersFrame:
			if status := f.PseudoValue("status"); i >= 0 && status != "200" {
				tell(fmt.Errorf("listen %d: status %s", i, status))
			}
		case *http2.RSTStreamFrame:
			if i >= 0 && !open[i] {
				tell(fmt.Errorf("listen %d: stream reset: %v", i, f.ErrCode))
			}
		case *http2.DataFrame:
			if used += f.Header().Length; used >= window/2 { // padding included
				if !reply(func() error { return fr.WriteWindowUpdate(0, used) }) {
					return
				}
				used = 0
			}
			if i < 0 {
				continue
			}
			// The frame's bytes are the framer's until the next read: an
			// event cut short is kept, and the rest read where it lies.
			buf := f.Data()
			if len(pending[i]) > 0 {
				buf = append(pending[i], buf...)
			}
			for {
				end := bytes.Index(buf, []byte("\n\n"))
				if end < 0 {
					break
				}
				ev := buf[:end]
				buf = buf[end+2:]
				if !open[i] {
					open[i] = true
					if !bytes.Contains(ev, []byte(mcp.NotifyAcknowledged)) {
						tell(fmt.Errorf("listen %d: the first message is not the ack: %.300s", i, ev))
						continue
					}
					tell(nil)
					continue
				}
				l.saw(i, &last[i], ev, now)
			}
			pending[i] = append(pending[i][:0], buf...)
		}
	}
}
