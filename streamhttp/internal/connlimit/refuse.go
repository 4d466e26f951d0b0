package connlimit

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// DefaultMaxRefusing is Config.MaxRefusing when it is 0.
const DefaultMaxRefusing = 64

// refusalAnswerTimeout bounds all of a refusal answered apart from the
// accept loop: the client's handshake and first bytes, the answer, and
// the wait for the client to close once it has read it.
const refusalAnswerTimeout = 2 * time.Second

// refusal503 is the HTTP/1.1 answer to a refused connection.
func refusal503(msg string) []byte {
	return fmt.Appendf(nil, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"+
		"Content-Length: %d\r\nConnection: close\r\nRetry-After: 1\r\n\r\n%s", len(msg), msg)
}

// answerRefusal tells the client of a refused connection why, in the
// protocol it speaks: over TLS when the connections speak it, and with
// a 503 in HTTP/2 when the client opens with HTTP/2's preface, else in
// HTTP/1.1. It then closes its side and reads what the client still
// sends until the client closes too, so that closing the connection
// does not reset it before the client has read the answer. It returns
// within refusalAnswerTimeout; the caller closes nc.
func (g *Guard) answerRefusal(nc net.Conn, msg string) {
	_ = nc.SetDeadline(time.Now().Add(refusalAnswerTimeout))
	c := nc
	if g.cfg.TLS != nil {
		tc := tls.Server(nc, g.cfg.TLS)
		if err := tc.Handshake(); err != nil {
			return
		}
		c = tc
	}
	if g.cfg.HTTP2 && opensWithPreface(c) {
		if refuseHTTP2(c, msg) != nil {
			return
		}
	} else if _, err := c.Write(refusal503(msg)); err != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 64<<10))
}

// refuseHTTP2 answers the first request of an HTTP/2 connection whose
// client preface has been read with a 503 whose body is msg, as
// refusal503 does over HTTP/1.1, and then says in a GOAWAY that the
// connection takes no other. A client thus reads the refusal as the
// answer to its request; a GOAWAY alone would have it try again at once
// (the request was not processed), and then on, unable to say why.
func refuseHTTP2(c net.Conn, msg string) error {
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		return err
	}
	var stream uint32
	for stream == 0 {
		f, err := fr.ReadFrame()
		if err != nil {
			return err
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if err := fr.WriteSettingsAck(); err != nil {
					return err
				}
			}
		case *http2.HeadersFrame:
			stream = f.StreamID
		}
	}
	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	for _, f := range []hpack.HeaderField{{Name: ":status", Value: "503"},
		{Name: "content-type", Value: "text/plain; charset=utf-8"},
		{Name: "content-length", Value: strconv.Itoa(len(msg))},
		{Name: "retry-after", Value: "1"}} {
		if err := enc.WriteField(f); err != nil {
			return err
		}
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: hdr.Bytes(), EndHeaders: true}); err != nil {
		return err
	}
	if err := fr.WriteData(stream, true, []byte(msg)); err != nil {
		return err
	}
	return fr.WriteGoAway(stream, http2.ErrCodeNo, nil)
}

// opensWithPreface reads c's first bytes for as long as they are the
// start of HTTP/2's client preface, and reports whether they are all of
// it. An HTTP/1.1 request parts from it within its first few bytes.
func opensWithPreface(c net.Conn) bool {
	buf := make([]byte, len(http2.ClientPreface))
	n := 0
	for n < len(buf) {
		m, err := c.Read(buf[n:])
		n += m
		if !strings.HasPrefix(http2.ClientPreface, string(buf[:n])) || err != nil {
			return false
		}
	}
	return true
}

// endRefusals ends the refusals being answered and waits for them: no
// more are answered after it.
func (g *Guard) endRefusals() {
	g.mu.Lock()
	g.refusalsEnded = true
	for nc := range g.refusing {
		_ = nc.Close()
	}
	g.mu.Unlock()
	g.refusingWG.Wait()
}
