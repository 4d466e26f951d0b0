package loadtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"tidings/mcp"
)

// The HTTP/2 side of a listener set is a client of its own, lean enough
// that a million listens fit beside the server on one machine: each
// connection has one goroutine that reads its frames, and a listen is
// some two hundred bytes in its connection's map — no goroutine, no
// buffer, no request of net/http's (which cost some 19 KiB and two
// goroutines a listen). Streams get the largest window HTTP/2 allows,
// and the connection's is topped up as its data is read, so that flow
// control never holds a change back.

// h2Conns are the HTTP/2 connections of one listener set; listen i goes
// over connection i mod their number.
type h2Conns struct {
	conns []*h2Conn
	// resets counts streams the server reset, goAways the GOAWAYs it
	// sent, and cut the connections it closed while the set held them.
	resets, goAways, cut atomic.Int64
}

// h2Conn is one connection of the lean client.
type h2Conn struct {
	s    *listenerSet
	cs   *h2Conns
	nc   net.Conn
	addr string

	wmu    sync.Mutex // guards the writing side
	bw     *bufio.Writer
	wfr    *http2.Framer
	henc   *hpack.Encoder
	hbuf   bytes.Buffer
	nextID uint32

	mu      sync.Mutex // guards what follows
	streams map[uint32]*h2Listen
	closing bool  // the set closes the connection
	ended   error // why the connection ended, once it has

	read    chan struct{}  // closed when the reader returns
	answers sync.WaitGroup // the reader's answers being written
}

// h2Listen is one listen: its index in the set, and while it opens, the
// channel its ack (or failure) is told on.
type h2Listen struct {
	i       int32
	last    int32 // the last change it received, -1 for none
	ok      bool  // its headers said 200 and an event stream
	ack     chan error
	partial []byte // the start of an event split across DATA frames
}

// maxWindow is the largest flow-control window HTTP/2 allows.
const maxWindow = 1<<31 - 1

// dialH2 opens n connections to addr, each with its preface and
// settings sent, and starts their readers.
func dialH2(ctx context.Context, s *listenerSet, addr string, n int) (*h2Conns, error) {
	cs := &h2Conns{conns: make([]*h2Conn, 0, n)}
	for range n {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			cs.close()
			return nil, fmt.Errorf("opening HTTP/2 connection %d: %w", len(cs.conns), err)
		}
		c := &h2Conn{s: s, cs: cs, nc: nc, addr: addr, nextID: 1, streams: map[uint32]*h2Listen{}, read: make(chan struct{})}
		c.bw = bufio.NewWriterSize(nc, 16<<10)
		c.wfr = http2.NewFramer(c.bw, nil)
		c.henc = hpack.NewEncoder(&c.hbuf)
		_, _ = c.bw.WriteString(http2.ClientPreface)
		_ = c.wfr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: maxWindow},
			http2.Setting{ID: http2.SettingEnablePush, Val: 0})
		_ = c.wfr.WriteWindowUpdate(0, maxWindow-65535)
		if err := c.bw.Flush(); err != nil {
			nc.Close()
			cs.close()
			return nil, fmt.Errorf("opening HTTP/2 connection %d: %w", len(cs.conns), err)
		}
		cs.conns = append(cs.conns, c)
		go c.readLoop()
	}
	return cs, nil
}

// close closes every connection and waits for their readers.
func (cs *h2Conns) close() {
	for _, c := range cs.conns {
		c.mu.Lock()
		c.closing = true
		c.mu.Unlock()
		c.nc.Close()
	}
	for _, c := range cs.conns {
		<-c.read
		c.answers.Wait()
	}
}

// openOneH2 opens listen i as a stream of its connection and waits for
// its ack.
func (s *listenerSet) openOneH2(ctx context.Context, i int) error {
	c := s.h2.conns[i%len(s.h2.conns)]
	// The reader owns l once it is registered; the opener keeps only
	// the channel its ack comes on.
	ack := make(chan error, 1)
	l := &h2Listen{i: int32(i), last: -1, ack: ack}
	id := strconv.Itoa(i + 1)
	body := listenBody(id)

	c.wmu.Lock()
	sid := c.nextID
	c.nextID += 2
	c.mu.Lock()
	if c.closing || c.ended != nil {
		err := c.ended
		c.mu.Unlock()
		c.wmu.Unlock()
		if err == nil {
			err = errors.New("listener set closed")
		}
		return err
	}
	c.streams[sid] = l
	c.mu.Unlock()
	c.hbuf.Reset()
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":authority", c.addr}, {":path", listenPath},
		{"content-type", "application/json"}, {"accept", "application/json, text/event-stream"},
		{"mcp-protocol-version", mcp.Version}, {"mcp-method", mcp.MethodListen},
		{"content-length", strconv.Itoa(len(body))},
	} {
		_ = c.henc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	// The body, some 150 bytes, is sent without tracking the server's
	// windows: a stream's first window is 64 KiB at least, and the few
	// bodies per connection waiting at once stay far below the
	// connection's.
	err := c.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: sid, BlockFragment: c.hbuf.Bytes(), EndHeaders: true})
	if err == nil {
		err = c.wfr.WriteData(sid, true, body)
	}
	if err == nil {
		err = c.bw.Flush()
	}
	c.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("sending the listen: %w", err)
	}
	select {
	case err := <-ack:
		return err
	case <-ctx.Done():
		return fmt.Errorf("opening: %w", context.Cause(ctx))
	}
}

// readLoop reads the connection's frames until it ends.
func (c *h2Conn) readLoop() {
	defer close(c.read)
	fr := http2.NewFramer(nil, bufio.NewReaderSize(c.nc, 64<<10))
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 64 << 10
	var unacked uint32 // connection window used since the last top-up
	var err error
	for {
		var f http2.Frame
		f, err = fr.ReadFrame()
		if err != nil {
			break
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				c.answer(func() error { return c.wfr.WriteSettingsAck() })
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				data := f.Data
				c.answer(func() error { return c.wfr.WritePing(true, data) })
			}
		case *http2.MetaHeadersFrame:
			c.onHeaders(f)
		case *http2.DataFrame:
			if unacked += f.Length; unacked >= 1<<30 {
				n := unacked
				unacked = 0
				c.answer(func() error { return c.wfr.WriteWindowUpdate(0, n) })
			}
			c.onData(f)
		case *http2.RSTStreamFrame:
			c.cs.resets.Add(1)
			c.end(f.StreamID, fmt.Errorf("the server reset the stream (%v)", f.ErrCode))
		case *http2.GoAwayFrame:
			c.cs.goAways.Add(1)
		}
	}
	c.mu.Lock()
	closing := c.closing
	pending := c.streams
	c.streams = nil
	c.ended = fmt.Errorf("the connection ended before the ack: %w", err)
	c.mu.Unlock()
	if !closing {
		c.cs.cut.Add(1)
	}
	for _, l := range pending {
		if l.ack != nil {
			l.ack <- c.ended
		}
	}
}

// answer writes one frame the server's called for (an ack, a window)
// under the writing lock, aside: the reader must not wait for an opener
// whose write waits for the server to read, or neither would move.
func (c *h2Conn) answer(frame func() error) {
	c.answers.Go(func() {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		if frame() == nil {
			_ = c.bw.Flush()
		}
	})
}

// stream returns the listen of stream id, or nil.
func (c *h2Conn) stream(id uint32) *h2Listen {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

// end forgets stream id; a listen still opening is told err.
func (c *h2Conn) end(id uint32, err error) {
	c.mu.Lock()
	l := c.streams[id]
	delete(c.streams, id)
	c.mu.Unlock()
	if l != nil && l.ack != nil {
		l.ack <- err
		l.ack = nil
	}
}

func (c *h2Conn) onHeaders(f *http2.MetaHeadersFrame) {
	l := c.stream(f.StreamID)
	if l == nil {
		return
	}
	if status := f.PseudoValue("status"); status != "200" || !bytes.HasPrefix([]byte(headerValue(f, "content-type")), []byte("text/event-stream")) {
		c.end(f.StreamID, fmt.Errorf("listen refused: %s %s", status, headerValue(f, "content-type")))
		return
	}
	l.ok = true
	if f.StreamEnded() {
		c.end(f.StreamID, errors.New("the listen ended without an ack"))
	}
}

// headerValue is the first value of field name in f.
func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

func (c *h2Conn) onData(f *http2.DataFrame) {
	l := c.stream(f.StreamID)
	if l == nil || !l.ok {
		return
	}
	p := f.Data()
	if len(l.partial) > 0 {
		l.partial = append(l.partial, p...)
		p = l.partial
	}
	for {
		end := bytes.Index(p, []byte("\n\n"))
		if end < 0 {
			break
		}
		c.onEvent(l, f.StreamID, p[:end+1])
		p = p[end+2:]
	}
	// What is left is the start of the next event, kept until its end
	// comes (the connection's frame buffer is reused).
	l.partial = append(l.partial[:0], p...)
	if len(l.partial) == 0 {
		l.partial = nil
	}
	if f.StreamEnded() {
		c.end(f.StreamID, errors.New("the listen ended"))
	}
}

// onEvent takes one event of l's stream: its ack while it opens, a
// change after.
func (c *h2Conn) onEvent(l *h2Listen, sid uint32, ev []byte) {
	var data []byte
	for line := range bytes.Lines(ev) {
		line = bytes.TrimRight(line, "\r\n")
		if rest, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(rest, []byte(" "))...)
		}
	}
	if data == nil {
		return // a comment: a keep-alive
	}
	id := strconv.AppendInt(nil, int64(l.i)+1, 10)
	if l.ack != nil {
		err := checkAck(data, string(id))
		l.ack <- err
		l.ack = nil
		if err != nil {
			c.end(sid, err)
		}
		return
	}
	if slot := c.s.slot[l.i]; slot >= 0 {
		last := int64(l.last)
		c.s.deliver(slot, data, id, &last)
		l.last = int32(last)
	}
}
