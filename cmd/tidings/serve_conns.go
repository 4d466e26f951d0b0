package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"tidings/streamhttp"
)

// connLimits are the serve flags that bound connections and the time a
// request may hold one.
type connLimits struct {
	maxConns        int
	maxConnsPerAddr int
	// maxRefusing bounds the refusals told why at once (--max-refusing).
	maxRefusing   int
	idleTimeout   time.Duration
	headerTimeout time.Duration
	bodyTimeout   time.Duration
	writeTimeout  time.Duration
	// parkListens hands listens to streamhttp's shared poller
	// (--park-listens, on by default).
	parkListens bool
	// h2 are the flags of HTTP/2 and TLS.
	h2 h2Flags
}

// The flags' defaults are streamhttp.Serve's.
const (
	defaultMaxConnsPerAddr = streamhttp.DefaultMaxConnsPerAddr
	defaultIdleTimeout     = streamhttp.DefaultIdleTimeout
	defaultHeaderTimeout   = streamhttp.DefaultHeaderTimeout
	defaultBodyTimeout     = streamhttp.DefaultBodyTimeout
	defaultWriteTimeout    = streamhttp.DefaultWriteTimeout
	// maxDerivedConns bounds the cap derived from the open-file limit:
	// a hard limit of a million files would otherwise let clients hold
	// gigabytes in idle connections.
	maxDerivedConns = 1 << 16
)

// connHelp is the part of serve's and gateway's help that speaks of
// connections.
const connHelp = `Connections are bounded, so that no client can take the server from the
others: at most --max-conns-per-addr are open from one client address (an
IPv6 client's /64 counts as one address), and --max-conns in all. By
default the latter is seven eighths of the open-file limit, which the
command raises to its hard limit at start, less what serve takes to watch
its DIR, and at most 65536. Near a cap, the connections idle longest between requests are
closed to make room; only when none is idle is a new connection refused,
with a 503 that names the cap, in what the client speaks (HTTP/1.1 or
HTTP/2, over TLS when served; past --max-refusing refusals under way at
once, one is answered in HTTP/1.1 at once, or closed untold over TLS).
Request headers must arrive within --header-timeout and a body within
--body-timeout of them; a connection idle for --idle-timeout is closed;
and no write of an answer may block for longer than --write-timeout, so a
client that stops reading is cut off; a timeout of 0 means its default,
as none can be switched off, and so does a --max-refusing of 0. A listen
lasts as long as its client reads it. /metrics counts open
and idle connections, refusals and evictions by cap, and timeouts
(tidings_http_*).

Behind a proxy or load balancer, every connection comes from the proxy's
address: raise --max-conns-per-addr above the connections the proxy opens
to the server, or set it to 0 to disable the cap (and bound clients at
the proxy). Refusals with limit="per_address" in /metrics are the sign.

` + h2Help

// register adds the flags to cmd; none applies to --stdio.
func (c *connLimits) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&c.maxConns, "max-conns", 0, "most connections open at once in all (default 7/8 of the open-file limit, at most 65536)")
	f.IntVar(&c.maxConnsPerAddr, "max-conns-per-addr", defaultMaxConnsPerAddr, "most connections open at once from one client address; 0 for no cap (behind a proxy)")
	f.IntVar(&c.maxRefusing, "max-refusing", streamhttp.DefaultMaxRefusing, "most refused connections told why at once while their client speaks first (TLS, HTTP/2), each for up to 2s; past them one is answered at once in HTTP/1.1, or closed untold over TLS")
	f.DurationVar(&c.idleTimeout, "idle-timeout", defaultIdleTimeout, "how long a connection may stay idle between requests")
	f.DurationVar(&c.headerTimeout, "header-timeout", defaultHeaderTimeout, "how long a request's headers may take to arrive")
	f.DurationVar(&c.bodyTimeout, "body-timeout", defaultBodyTimeout, "how long a request's body may take to arrive, once its headers have")
	f.DurationVar(&c.writeTimeout, "write-timeout", defaultWriteTimeout, "how long one write of an answer may block before the client is cut off; a stream lasts as long as it is read")
	f.BoolVar(&c.parkListens, "park-listens", true, "once a listen is acknowledged, keep no goroutine for it: over HTTP/2 its connection's writer carries it, over plain HTTP/1.1 one shared poller (Linux); false keeps goroutines")
	for _, name := range []string{"max-conns", "max-conns-per-addr", "max-refusing", "idle-timeout", "header-timeout", "body-timeout", "write-timeout", "park-listens"} {
		cmd.MarkFlagsMutuallyExclusive("stdio", name)
	}
	c.h2.register(cmd)
}

// total returns the cap on connections in all: --max-conns, or one
// derived from the open-file limit (0 where there is none) that leaves
// room for the files a request reads, the watcher and the bus.
func (c *connLimits) total(fileLimit uint64, maxFiles int) (int, error) {
	reserve := max(fileLimit/8, 64) + watcherFiles(maxFiles)
	switch {
	case c.maxConns < 0:
		return 0, fmt.Errorf("--max-conns must be positive, not %d", c.maxConns)
	case c.maxConns > 0 && fileLimit > 0 && uint64(c.maxConns) > fileLimit:
		return 0, fmt.Errorf("--max-conns %d is above the open-file limit of %d: raise the limit (ulimit -n) or lower --max-conns", c.maxConns, fileLimit)
	case c.maxConns > 0:
		return c.maxConns, nil
	case fileLimit == 0:
		return maxDerivedConns, nil
	case fileLimit <= reserve+16:
		return 16, nil
	}
	return int(min(fileLimit-reserve, maxDerivedConns)), nil
}

// check refuses limits that make no sense, and puts the default in place
// of a timeout of 0: none may be switched off, since one client could
// then hold a connection for ever.
func (c *connLimits) check() error {
	if err := c.h2.check(); err != nil {
		return err
	}
	if c.maxConnsPerAddr < 0 {
		return fmt.Errorf("--max-conns-per-addr must be 0 (no cap) or positive, not %d", c.maxConnsPerAddr)
	}
	switch {
	case c.maxRefusing < 0:
		return fmt.Errorf("--max-refusing must be positive, not %d", c.maxRefusing)
	case c.maxRefusing == 0:
		c.maxRefusing = streamhttp.DefaultMaxRefusing
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"idle-timeout", &c.idleTimeout, defaultIdleTimeout},
		{"header-timeout", &c.headerTimeout, defaultHeaderTimeout},
		{"body-timeout", &c.bodyTimeout, defaultBodyTimeout},
		{"write-timeout", &c.writeTimeout, defaultWriteTimeout},
	} {
		switch {
		case *d.v < 0:
			return fmt.Errorf("--%s must be positive, not %v", d.name, *d.v)
		case *d.v == 0:
			*d.v = d.def
		}
	}
	return nil
}

// serveOptions are the options of streamhttp.Serve the flags ask for:
// the caps count TCP connections, beneath TLS, and an HTTP/2 connection
// as one whatever its streams.
func (c *connLimits) serveOptions(maxFiles int, log *slog.Logger) ([]streamhttp.ServeOption, error) {
	fileLimit, err := raiseFileLimit()
	if err != nil {
		log.Debug("serving within the open-file limit as it is", "err", err, "limit", fileLimit)
	}
	total, err := c.total(fileLimit, maxFiles)
	if err != nil {
		return nil, err
	}
	log.Debug("connection limits", "max_conns", total, "max_conns_per_addr", c.maxConnsPerAddr, "open_file_limit", fileLimit)
	opts := []streamhttp.ServeOption{
		streamhttp.WithServeLogger(log),
		streamhttp.WithConnLimits(c.maxConnsPerAddr, total),
		streamhttp.WithMaxRefusing(c.maxRefusing),
		streamhttp.WithTimeouts(c.idleTimeout, c.headerTimeout, c.bodyTimeout, c.writeTimeout),
		streamhttp.WithHTTP2(c.h2.maxStreams, c.h2.writeBuffer),
	}
	if !c.parkListens {
		opts = append(opts, streamhttp.WithoutParking())
	}
	if c.h2.tlsCert != "" {
		tlsCfg, err := c.h2.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, streamhttp.WithTLS(tlsCfg))
	}
	return opts, nil
}
