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
	"time"

	"tidings/internal/coalesce"
	"tidings/internal/connlimit"
	"tidings/internal/h2"
	"tidings/internal/parked"
	"tidings/server"
)

// ListenAndServe listens on the TCP address addr and serves h there
// until ctx ends, as Serve does. It is http.ListenAndServe with what a
// server of many long-lived listens needs: see Serve.
func ListenAndServe(ctx context.Context, addr string, h http.Handler, opts ...ServeOption) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("streamhttp: %w", err)
	}
	return Serve(ctx, ln, h, opts...)
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
	cfg := defaultServeConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.check(); err != nil {
		_ = ln.Close()
		return err
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
	if cfg.tls != nil {
		// ALPN offers HTTP/2 first; the caller's config is left as it is.
		cfg.tls = cfg.tls.Clone()
		cfg.tls.NextProtos = append([]string{"h2", "http/1.1"}, slices.DeleteFunc(cfg.tls.NextProtos, func(p string) bool { return p == "h2" || p == "http/1.1" })...)
	}
	served := guard.Listen(ln)
	if cfg.netHTTP2 {
		if cfg.tls != nil {
			hs.Protocols.SetHTTP2(true)
			hs.TLSConfig = cfg.tls
			served = tls.NewListener(served, cfg.tls)
		} else {
			hs.Protocols.SetUnencryptedHTTP2(true)
		}
	} else {
		if cfg.h2WriteBuffer > 0 {
			served = coalesce.Listen(served, cfg.h2WriteBuffer)
		}
		if cfg.tls != nil {
			hs.Protocols.SetHTTP2(true)
			hs.TLSConfig = cfg.tls // amended in place by Configure (ALPN)
			served = tls.NewListener(served, cfg.tls)
		} else {
			hs.Protocols.SetUnencryptedHTTP2(true)
		}
		if _, err := h2.Configure(hs, h2.Config{MaxStreams: cfg.h2MaxStreams, WriteTimeout: cfg.writeTimeout}); err != nil {
			_ = ln.Close()
			return fmt.Errorf("streamhttp: %w", err)
		}
	}
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
	DefaultHTTP2WriteBuffer = 64 << 10
	// maxDerivedConns bounds the cap on connections derived from the
	// open-file limit: a hard limit of a million files would otherwise
	// let clients hold gigabytes in idle connections.
	maxDerivedConns = 1 << 16
)

func defaultServeConfig() serveConfig {
	return serveConfig{
		logger: slog.Default(), maxConnsPerAddr: DefaultMaxConnsPerAddr, maxRefusing: connlimit.DefaultMaxRefusing,
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
		c.maxRefusing = connlimit.DefaultMaxRefusing
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
