// Package h2 serves HTTP/2 connections for an http.Server, with room for
// listens that outlive their handler.
//
// net/http's HTTP/2 server (and golang.org/x/net's) runs every stream
// on a goroutine of its own until the stream ends, and writes each
// stream's frames as that goroutine flushes them. A connection that
// carries a thousand open listens so holds a thousand goroutines and
// their buffers, and one change costs a thousand small writes to the
// socket. Here a connection has one goroutine that reads its frames and
// one that writes them. A request runs its handler on a goroutine as
// usual; a handler that answers a listen may park it (see Parkable):
// the goroutine returns, and the stream stays open as a few hundred
// bytes of state, written by the connection's writer when its hub
// subscription has something for it. Whatever every stream of a
// connection has to send when the writer wakes leaves in one write to
// the socket.
//
// The server speaks HTTP/2 (RFC 9113) as a client of net/http or x/net
// expects it, over TLS (ALPN h2) and, where the http.Server allows it,
// without TLS by prior knowledge. It does not push, ignores priorities,
// sends no trailers, and takes no Upgrade: h2c. A client that asks for
// 100 Continue hears it when the handler first waits for the body.
//
// Its bounds: at most Config.MaxStreams streams open at once per
// connection (a stream whose handler was reset counts until the handler
// returns, so resetting streams quickly buys no more handlers); header
// blocks of at most Config.MaxHeaderBytes; frames of at most 16 KiB (it
// advertises no larger SETTINGS_MAX_FRAME_SIZE), a larger one ending the
// connection before its payload is read; a budget of frames that cost it
// work and carry none (resets, empty DATA, WINDOW_UPDATEs nothing called
// for, PRIORITY, SETTINGS, unknown types, empty CONTINUATIONs:
// Config.FrameBudget), past which the connection ends with
// ENHANCE_YOUR_CALM; a receive window per
// connection that bounds the request bodies it buffers; a bounded queue
// of control frames, so that a client that floods pings, settings or
// resets without reading is cut off; and a deadline on whatever waits
// for a client's flow-control window: a handler's write deadline while
// it runs and after, a parked listen's write timeout, or
// Config.WriteTimeout.
package h2

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
)

// Config bounds a Server.
type Config struct {
	// MaxStreams is the most streams one connection holds open at once,
	// listens among them (SETTINGS_MAX_CONCURRENT_STREAMS); default
	// DefaultMaxStreams.
	MaxStreams int
	// MaxHeaderBytes bounds a request's header block, decoded; default
	// the http.Server's MaxHeaderBytes, or http.DefaultMaxHeaderBytes.
	MaxHeaderBytes int
	// WriteBuffer is the most bytes gathered for one write to the
	// socket; default DefaultWriteBuffer.
	WriteBuffer int
	// WriteTimeout is how long one write to a connection's socket may
	// take before the connection is cut, and how long a stream's bytes
	// may wait on the client's window before the stream is cut (a parked
	// listen's, the timeout it was parked with); 0 never cuts. Time spent
	// in the server's own queue never counts. A handler may also set a
	// write deadline of its own.
	WriteTimeout time.Duration
	// IdleTimeout closes a connection that has had no stream open for
	// that long; default the http.Server's IdleTimeout, 0 never.
	IdleTimeout time.Duration
	// FrameBudget is how many frames that cost the server work but carry
	// none (resets, empty DATA, WINDOW_UPDATEs nothing called for,
	// PRIORITY, SETTINGS, unknown types, empty CONTINUATIONs) one
	// connection may send in a burst, refilled at a tenth of it a
	// second; past it the connection ends with GOAWAY
	// ENHANCE_YOUR_CALM. Default DefaultFrameBudget.
	FrameBudget int
	// PingAfter is how long a connection may send nothing before the
	// server PINGs it, and PingTimeout how long the ACK may then take
	// before the connection is closed, its listens let go: a peer that
	// vanished is found within their sum. Defaults DefaultPingAfter and
	// DefaultPingTimeout; a negative PingAfter never pings.
	PingAfter, PingTimeout time.Duration
}

const (
	// DefaultMaxStreams is Config.MaxStreams's default.
	DefaultMaxStreams = 1000
	// DefaultWriteBuffer is Config.WriteBuffer's default.
	DefaultWriteBuffer = 256 << 10
	// DefaultFrameBudget is Config.FrameBudget's default: a client that
	// cancels a hundred requests a second for ever, or a thousand at
	// once, is not cut off; a flood is within a second.
	DefaultFrameBudget = 1000
	// DefaultPingAfter and DefaultPingTimeout are Config.PingAfter's and
	// Config.PingTimeout's defaults: a vanished peer is found within 45 s.
	DefaultPingAfter   = 30 * time.Second
	DefaultPingTimeout = 15 * time.Second
	// prefaceTimeout bounds the wait for a client's preface and first
	// SETTINGS when the http.Server sets no ReadHeaderTimeout.
	prefaceTimeout = 10 * time.Second
)

// Server serves the HTTP/2 connections of one http.Server.
type Server struct {
	cfg Config
	hs  *http.Server

	mu       sync.Mutex
	conns    map[*conn]struct{}
	shutdown bool

	streams atomic.Int64 // open streams, all connections
	parked  atomic.Int64 // parked listens, all connections
	refused atomic.Int64 // streams refused for MaxStreams
	// writeTimeouts counts the streams the sweep cut for their write
	// timeout.
	writeTimeouts atomic.Int64
}

// Stats is what a Server's connections hold and have refused.
type Stats struct {
	// Streams counts the open streams, ParkedListens the listens among
	// them that hold no goroutine.
	Streams, ParkedListens int64
	// Refused counts the streams refused because their connection held
	// MaxStreams already.
	Refused int64
	// WriteTimeouts counts the streams cut because their bytes waited
	// on the client's window for longer than their write timeout.
	WriteTimeouts int64
}

// Stats returns what the server holds now.
func (s *Server) Stats() Stats {
	return Stats{Streams: s.streams.Load(), ParkedListens: s.parked.Load(), Refused: s.refused.Load(),
		WriteTimeouts: s.writeTimeouts.Load()}
}

// Configure has hs serve HTTP/2 with this package: over TLS when
// hs.TLSConfig is set (h2 is added to its ALPN protocols), and without
// TLS where hs.Protocols allows unencrypted HTTP/2. Call it after
// hs.Protocols and hs.TLSConfig are set and before hs serves; the
// returned Server reports what the connections hold. hs.Shutdown sends
// every connection a GOAWAY and closes each once its streams have
// ended; hs.Close cuts them.
func Configure(hs *http.Server, cfg Config) (*Server, error) {
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = DefaultMaxStreams
	}
	if cfg.MaxStreams > 1<<31-1 {
		return nil, fmt.Errorf("h2: MaxStreams %d is over 2^31-1", cfg.MaxStreams)
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = hs.MaxHeaderBytes
		if cfg.MaxHeaderBytes <= 0 {
			cfg.MaxHeaderBytes = http.DefaultMaxHeaderBytes
		}
	}
	if cfg.WriteBuffer <= 0 {
		cfg.WriteBuffer = DefaultWriteBuffer
	}
	if cfg.FrameBudget <= 0 {
		cfg.FrameBudget = DefaultFrameBudget
	}
	if cfg.PingAfter == 0 {
		cfg.PingAfter = DefaultPingAfter
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = DefaultPingTimeout
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = hs.IdleTimeout
	}
	s := &Server{cfg: cfg, hs: hs, conns: make(map[*conn]struct{})}
	if hs.TLSNextProto == nil {
		hs.TLSNextProto = make(map[string]func(*http.Server, *tls.Conn, http.Handler))
	}
	if hs.TLSConfig != nil && !slices.Contains(hs.TLSConfig.NextProtos, "h2") {
		hs.TLSConfig.NextProtos = append([]string{"h2"}, hs.TLSConfig.NextProtos...)
	}
	hs.TLSNextProto["h2"] = func(_ *http.Server, tc *tls.Conn, h http.Handler) {
		st := tc.ConnectionState()
		if st.Version < tls.VersionTLS12 {
			// RFC 9113, 9.2: HTTP/2 over TLS needs TLS 1.2 or later.
			s.refuseInsecure(tc)
			return
		}
		s.serve(tc, &st, h, false)
	}
	// net/http hands over a connection that opened with the HTTP/2
	// preface, read already, wrapped in a *tls.Conn that is not one.
	hs.TLSNextProto["unencrypted_http2"] = func(_ *http.Server, tc *tls.Conn, h http.Handler) {
		u, ok := tc.NetConn().(interface{ UnencryptedNetConn() net.Conn })
		if !ok {
			_ = tc.Close()
			return
		}
		s.serve(u.UnencryptedNetConn(), nil, h, true)
	}
	hs.RegisterOnShutdown(s.goAway)
	return s, nil
}

// ServeConn serves HTTP/2 on nc, whose client has yet to send its
// preface, with h, until the connection ends. It is for a connection
// that did not come through an http.Server's listener (a test's pipe, a
// proxy's tunnel); one that did is served by Configure's hooks.
func (s *Server) ServeConn(ctx context.Context, nc net.Conn, h http.Handler) {
	s.serve(nc, nil, baseContexted{h, ctx}, false)
}

// baseContexted gives a handler the base context net/http's hooks carry.
type baseContexted struct {
	http.Handler
	ctx context.Context
}

func (b baseContexted) BaseContext() context.Context { return b.ctx }

// serve runs one connection to its end.
func (s *Server) serve(nc net.Conn, st *tls.ConnectionState, h http.Handler, sawPreface bool) {
	ctx := context.Background()
	if bc, ok := h.(interface{ BaseContext() context.Context }); ok && bc.BaseContext() != nil {
		ctx = bc.BaseContext()
	}
	c := newConn(s, nc, st, h, ctx)
	s.mu.Lock()
	if s.shutdown {
		s.mu.Unlock()
		_ = nc.Close()
		return
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	c.serve(sawPreface)
}

// goAway tells every connection that no new stream will be taken; each
// closes once its open streams have ended.
func (s *Server) goAway() {
	s.mu.Lock()
	s.shutdown = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.goAway()
	}
}

// refuseInsecure ends a connection whose TLS is older than HTTP/2 takes.
func (s *Server) refuseInsecure(tc *tls.Conn) {
	defer tc.Close()
	if s.cfg.WriteTimeout > 0 {
		_ = tc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	}
	var b bytes.Buffer
	_ = http2.NewFramer(&b, nil).WriteGoAway(0, errCodeInadequateSecurity, []byte("HTTP/2 needs TLS 1.2 or later"))
	_, _ = tc.Write(b.Bytes())
}

// errClosed is what a stream's reads and writes return once its
// connection has ended.
var errClosed = errors.New("h2: the connection is closed")

// errReset is what a stream's reads and writes return once the stream
// was reset, by the client or by a write deadline.
var errReset = errors.New("h2: the stream was reset")
