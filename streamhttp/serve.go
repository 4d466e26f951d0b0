package streamhttp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"tidings/server"
	"tidings/streamhttp/internal/coalesce"
	"tidings/streamhttp/internal/connlimit"
	"tidings/streamhttp/internal/h2"
	"tidings/streamhttp/internal/parked"
)

// ListenAndServe listens on the TCP address addr and serves h there
// until ctx ends, as Serve does. It is http.ListenAndServe with what a
// server of many long-lived listens needs: see Serve.
func ListenAndServe(ctx context.Context, addr string, h http.Handler, opts ...ServeOption) error {
	return NewServer(h, opts...).ListenAndServe(ctx, addr)
}

// Server is Serve with its figures kept: a program that exports metrics
// makes one with NewServer and reads Stats while it serves (tidings
// serve's /metrics series come from them). Stats reads the Serve begun
// last, so a Server serves one listener at a time.
type Server struct {
	h     http.Handler
	opts  []ServeOption
	stats atomic.Pointer[live]
}

// live is what Stats reads of a Server serving.
type live struct {
	cfg      serveConfig
	guard    *connlimit.Guard
	h2       *h2.Server
	gathered *coalesce.Stats
}

// NewServer returns a Server of h with opts (see Serve).
func NewServer(h http.Handler, opts ...ServeOption) *Server { return &Server{h: h, opts: opts} }

// ListenAndServe listens on the TCP address addr and serves there (see
// Serve).
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("streamhttp: %w", err)
	}
	return s.Serve(ctx, ln)
}

// ServeStats is what a Server's connections hold and have refused, and
// its bounds, for monitoring.
type ServeStats struct {
	// Open counts the connections open now, Idle those of them waiting
	// between requests; MaxPerAddress and MaxTotal are the caps.
	Open, Idle              int
	MaxPerAddress, MaxTotal int
	// RefusedPerAddress and RefusedTotal count the connections refused
	// at each cap, EvictedPerAddress and EvictedTotal the idle ones
	// closed to make room under it; RefusedUntold those refused without
	// a word (past MaxRefusing refusals under way, Refusing now).
	RefusedPerAddress, RefusedTotal, EvictedPerAddress, EvictedTotal, RefusedUntold int64
	Refusing, MaxRefusing                                                           int
	// BodyTimeouts and WriteTimeouts count the requests whose body was
	// late and the answers cut off for a write that blocked (over
	// tidings' HTTP/2 server, bytes that waited on the client's window).
	BodyTimeouts, WriteTimeouts int64
	// HTTP2Streams counts the streams open over HTTP/2, HTTP2Parked the
	// listens among them that hold no goroutine, HTTP2Refused those
	// refused past HTTP2MaxStreams; WritesGathered and WritesToSockets
	// count the HTTP/2 writes gathered, and the writes to sockets they
	// became (zero with WithNetHTTP2).
	HTTP2Streams, HTTP2Parked, HTTP2Refused int64
	HTTP2MaxStreams                         int
	WritesGathered, WritesToSockets         int64
}

// Stats returns the figures of the Serve under way (zero before it).
func (s *Server) Stats() ServeStats {
	l := s.stats.Load()
	if l == nil {
		return ServeStats{}
	}
	g := l.guard.Stats()
	st := ServeStats{
		Open: g.Open, Idle: g.Idle, MaxPerAddress: l.cfg.maxConnsPerAddr, MaxTotal: l.cfg.maxConns,
		RefusedPerAddress: g.Refused[connlimit.PerAddress], RefusedTotal: g.Refused[connlimit.Total],
		EvictedPerAddress: g.Evicted[connlimit.PerAddress], EvictedTotal: g.Evicted[connlimit.Total],
		RefusedUntold: g.Untold, Refusing: g.Refusing, MaxRefusing: l.cfg.maxRefusing,
		BodyTimeouts: g.BodyTimeouts, WriteTimeouts: g.WriteTimeouts, HTTP2MaxStreams: l.cfg.h2MaxStreams,
	}
	if l.h2 != nil {
		h := l.h2.Stats()
		st.HTTP2Streams, st.HTTP2Parked, st.HTTP2Refused = h.Streams, h.ParkedListens, h.Refused
		st.WriteTimeouts += h.WriteTimeouts
	}
	if l.gathered != nil {
		st.WritesGathered, st.WritesToSockets = l.gathered.Gathered.Load(), l.gathered.Written.Load()
	}
	return st
}

// Serve serves h — a Handler, or a mux or middleware with Handlers in
// it — on ln until ctx ends, and closes ln. It speaks HTTP/1.1, HTTP/2
// by prior knowledge (h2c), and, with WithTLS, HTTP/2 and HTTP/1.1 over
// TLS (ALPN). It is what tidings serve runs:
//
//   - Listens park once acknowledged, wherever the Handler sits: over
//     HTTP/2 a listen waits on its stream for its connection's one
//     writer, and over plain HTTP/1.1 (on Linux) its connection waits on
//     one shared poller, so that an open listen holds no goroutine and
//     a few kilobytes (WithoutParking keeps a goroutine per listen).
//   - HTTP/2 is tidings' own server, whose connection writes every
//     stream's frames in one write, bounded against hostile peers (see
//     WithHTTP2); WithNetHTTP2 switches to net/http's.
//   - Connections are capped per client address and in all, and idle,
//     slow and stalled ones are cut off (WithConnLimits, WithTimeouts);
//     a refused client is told which cap it hit, in what it speaks.
//   - When ctx ends, every listen of the Handlers it served ends with its
//     complete result (their servers shut down), then the connections
//     close; Serve returns once they have, or after the shutdown
//     timeout (WithShutdownTimeout).
//
// Serve returns nil when ctx ended it, and the error that stopped it
// otherwise.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, opts ...ServeOption) error {
	return NewServer(h, opts...).Serve(ctx, ln)
}

// Serve serves on ln until ctx ends (see the function Serve).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	h := s.h
	cfg := defaultServeConfig()
	for _, o := range s.opts {
		o(&cfg)
	}
	if err := cfg.check(); err != nil {
		_ = ln.Close()
		return err
	}
	if cfg.tls != nil {
		// ALPN offers HTTP/2 first; the caller's config is left as it
		// is (its NextProtos too, which a clone shares).
		protos := []string{"h2", "http/1.1"}
		for _, p := range cfg.tls.NextProtos {
			if !slices.Contains(protos, p) {
				protos = append(protos, p)
			}
		}
		cfg.tls = cfg.tls.Clone()
		cfg.tls.NextProtos = protos
	}
	fd := &frontDoor{park: cfg.park, servers: map[*server.Server]bool{}}
	guard := connlimit.New(connlimit.Config{
		PerAddress: cfg.maxConnsPerAddr, Total: cfg.maxConns, BodyTimeout: cfg.bodyTimeout,
		WriteTimeout: cfg.writeTimeout, MaxRefusing: cfg.maxRefusing, Logger: cfg.logger,
		TLS: cfg.tls, HTTP2: true,
	})
	hs := &http.Server{
		Handler:           guard.Handler(h),
		ConnState:         guard.ConnState,
		ReadHeaderTimeout: cfg.headerTimeout,
		IdleTimeout:       cfg.idleTimeout,
		ErrorLog:          slog.NewLogLogger(cfg.logger.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return context.WithValue(context.Background(), frontDoorKey{}, fd) },
		Protocols:         new(http.Protocols),
	}
	hs.Protocols.SetHTTP1(true)
	if cfg.tls == nil {
		ln = requestLineListener{ln}
	}
	served := guard.Listen(ln)
	l := &live{cfg: cfg, guard: guard}
	if cfg.netHTTP2 {
		hs.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: cfg.h2MaxStreams}
		if cfg.tls != nil {
			hs.Protocols.SetHTTP2(true)
			hs.TLSConfig = cfg.tls
			served = tls.NewListener(served, cfg.tls)
		} else {
			hs.Protocols.SetUnencryptedHTTP2(true)
		}
	} else {
		if cfg.h2WriteBuffer > 0 {
			cl := coalesce.Listen(served, cfg.h2WriteBuffer)
			served, l.gathered = cl, cl.Stats()
			if cfg.tls != nil {
				// A connection gathers its writes once TLS chose HTTP/2:
				// an HTTP/1.1 one writes each answer as it comes.
				prev := cfg.tls.GetConfigForClient
				cfg.tls.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
					if c, ok := hello.Conn.(*coalesce.Conn); ok && slices.Contains(hello.SupportedProtos, "h2") {
						c.Coalesce()
					}
					if prev != nil {
						return prev(hello)
					}
					return nil, nil
				}
			}
		}
		if cfg.tls != nil {
			hs.Protocols.SetHTTP2(true)
			hs.TLSConfig = cfg.tls // amended in place by Configure (ALPN)
			served = tls.NewListener(served, cfg.tls)
		} else {
			hs.Protocols.SetUnencryptedHTTP2(true)
		}
		h2srv, err := h2.Configure(hs, h2.Config{MaxStreams: cfg.h2MaxStreams, WriteTimeout: cfg.writeTimeout})
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("streamhttp: %w", err)
		}
		l.h2 = h2srv
	}
	s.stats.Store(l)
	done := make(chan error, 1)
	go func() { done <- hs.Serve(served) }()
	select {
	case err := <-done:
		return fmt.Errorf("streamhttp: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	// Listens first: a parked one has left net/http, and one that has
	// not holds its handler, which http.Server.Shutdown waits for.
	var errs []error
	for _, srv := range fd.takeServers() {
		if err := srv.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("streamhttp: ending listens: %w", err))
		}
	}
	if err := hs.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("streamhttp: closing connections: %w", err))
		_ = hs.Close()
	}
	<-done
	return errors.Join(errs...)
}

// frontDoor is what Serve tells the Handlers beneath it, through the
// requests' context: that listens may park, and where to record the
// servers whose listens Serve must end.
type frontDoor struct {
	park bool

	mu      sync.Mutex
	servers map[*server.Server]bool
	closed  bool
}

type frontDoorKey struct{}

// frontDoorOf returns the Serve that r came through, nil for none.
func frontDoorOf(r *http.Request) *frontDoor {
	fd, _ := r.Context().Value(frontDoorKey{}).(*frontDoor)
	return fd
}

// note records srv as one whose listens Serve ends.
func (fd *frontDoor) note(srv *server.Server) {
	fd.mu.Lock()
	if !fd.closed {
		fd.servers[srv] = true
	}
	fd.mu.Unlock()
}

// takeServers returns the servers noted, and notes no more.
func (fd *frontDoor) takeServers() []*server.Server {
	fd.mu.Lock()
	defer fd.mu.Unlock()
	fd.closed = true
	out := make([]*server.Server, 0, len(fd.servers))
	for s := range fd.servers {
		out = append(out, s)
	}
	return out
}

// parkerFor returns the parker of the listens h serves through fd: the
// handler's own (WithParking), or one made for it on first use.
func (h *Handler) parkerFor(fd *frontDoor) (*parked.Parker, bool) {
	if h.cfg.park {
		return h.parker, true
	}
	if fd == nil || !fd.park {
		return nil, false
	}
	h.parkOnce.Do(func() { h.lazyParker.Store(parked.New(parked.Config{WriteTimeout: h.cfg.writeTimeout})) })
	return h.lazyParker.Load(), true
}

// ServeOption configures Serve and ListenAndServe.
type ServeOption func(*serveConfig)

type serveConfig struct {
	logger                    *slog.Logger
	tls                       *tls.Config
	maxConns, maxConnsPerAddr int
	maxRefusing               int
	idleTimeout               time.Duration
	headerTimeout             time.Duration
	bodyTimeout               time.Duration
	writeTimeout              time.Duration
	shutdownTimeout           time.Duration
	h2MaxStreams              int
	h2WriteBuffer             int
	netHTTP2                  bool
	park                      bool
}

// The defaults of Serve, those of tidings serve.
const (
	DefaultMaxConnsPerAddr  = 256
	DefaultIdleTimeout      = 2 * time.Minute
	DefaultHeaderTimeout    = 10 * time.Second
	DefaultBodyTimeout      = 30 * time.Second
	DefaultWriteTimeout     = 10 * time.Second
	DefaultShutdownTimeout  = 10 * time.Second
	DefaultHTTP2MaxStreams  = h2.DefaultMaxStreams
	DefaultHTTP2WriteBuffer = coalesce.DefaultLimit
	// DefaultMaxRefusing bounds the refusals told why at once (see
	// WithMaxRefusing).
	DefaultMaxRefusing = connlimit.DefaultMaxRefusing
	// maxDerivedConns bounds the cap on connections derived from the
	// open-file limit: a hard limit of a million files would otherwise
	// let clients hold gigabytes in idle connections.
	maxDerivedConns = 1 << 16
)

func defaultServeConfig() serveConfig {
	return serveConfig{
		logger: slog.Default(), maxConnsPerAddr: DefaultMaxConnsPerAddr, maxRefusing: DefaultMaxRefusing,
		idleTimeout: DefaultIdleTimeout, headerTimeout: DefaultHeaderTimeout, bodyTimeout: DefaultBodyTimeout,
		writeTimeout: DefaultWriteTimeout, shutdownTimeout: DefaultShutdownTimeout,
		h2MaxStreams: DefaultHTTP2MaxStreams, h2WriteBuffer: DefaultHTTP2WriteBuffer, park: true,
	}
}

// check puts the derived default in place of a total cap of 0.
func (c *serveConfig) check() error {
	if c.maxConns < 0 || c.maxConnsPerAddr < 0 || c.maxRefusing < 0 {
		return errors.New("streamhttp: connection limits must be 0 (the default) or positive")
	}
	if c.maxConns == 0 {
		c.maxConns = maxDerivedConns
		if lim := openFileLimit(); lim > 0 {
			c.maxConns = int(min(lim-lim/8, maxDerivedConns))
		}
	}
	if c.maxRefusing == 0 {
		c.maxRefusing = DefaultMaxRefusing
	}
	return nil
}

// WithServeLogger sets where Serve logs (refusals, HTTP errors); default
// slog.Default().
func WithServeLogger(l *slog.Logger) ServeOption { return func(c *serveConfig) { c.logger = l } }

// WithTLS serves TLS with cfg (its certificates), HTTP/2 chosen by ALPN.
func WithTLS(cfg *tls.Config) ServeOption { return func(c *serveConfig) { c.tls = cfg } }

// WithConnLimits caps the connections open at once: perAddr from one
// client address (an IPv6 client's /64 counts as one; 0 for no cap, as
// behind a proxy, where every connection comes from the proxy; default
// DefaultMaxConnsPerAddr), and total in all (0: seven eighths of the
// open-file limit, at most 65,536). Near a cap the connections idle
// longest are closed to make room; only when none is idle is a new one
// refused, with a 503 that names the cap.
func WithConnLimits(perAddr, total int) ServeOption {
	return func(c *serveConfig) { c.maxConnsPerAddr, c.maxConns = perAddr, total }
}

// WithMaxRefusing bounds the refusals told why at once while their
// clients speak first (TLS, HTTP/2): each holds a connection past the cap
// for up to 2 s, so past this many a refused connection is answered at
// once in HTTP/1.1, or closed untold over TLS (0: the default, 64).
func WithMaxRefusing(n int) ServeOption { return func(c *serveConfig) { c.maxRefusing = n } }

// WithTimeouts bounds how long a connection may stay idle between
// requests, how long a request's headers and then its body may take to
// arrive, and how long one write of an answer may block before its
// client is cut off (a listen lasts as long as its client reads it). A
// zero keeps that default (DefaultIdleTimeout and the others): none can
// be switched off, since one client could then hold a connection for
// ever.
func WithTimeouts(idle, header, body, write time.Duration) ServeOption {
	return func(c *serveConfig) {
		for _, p := range []struct {
			dst *time.Duration
			v   time.Duration
		}{{&c.idleTimeout, idle}, {&c.headerTimeout, header}, {&c.bodyTimeout, body}, {&c.writeTimeout, write}} {
			if p.v > 0 {
				*p.dst = p.v
			}
		}
	}
}

// WithShutdownTimeout bounds how long Serve waits, once ctx ended, for
// listens to end and connections to close (default
// DefaultShutdownTimeout); then it cuts them.
func WithShutdownTimeout(d time.Duration) ServeOption {
	return func(c *serveConfig) {
		if d > 0 {
			c.shutdownTimeout = d
		}
	}
}

// WithHTTP2 bounds tidings' HTTP/2 server: the streams one connection
// holds at once, listens among them (default DefaultHTTP2MaxStreams),
// and the bytes of frames gathered into one write to the socket (default
// DefaultHTTP2WriteBuffer; 0 writes each batch as it comes). Zero keeps
// the default stream bound.
func WithHTTP2(maxStreams, writeBuffer int) ServeOption {
	return func(c *serveConfig) {
		if maxStreams > 0 {
			c.h2MaxStreams = maxStreams
		}
		c.h2WriteBuffer = max(writeBuffer, 0)
	}
}

// WithNetHTTP2 serves HTTP/2 with net/http's own server instead of
// tidings': each stream then runs on a goroutine to its end, and listens
// over HTTP/2 do not park.
func WithNetHTTP2() ServeOption { return func(c *serveConfig) { c.netHTTP2 = true } }

// WithoutParking keeps a goroutine and net/http's buffers for every
// listen, as a Handler served by net/http alone does.
func WithoutParking() ServeOption { return func(c *serveConfig) { c.park = false } }
