package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"tidings/auth"
	"tidings/bus"
	"tidings/bus/brokers"
	"tidings/dirsource"
	"tidings/internal/gitignore"
	"tidings/mcp"
	"tidings/metrics"
	"tidings/server"
	"tidings/stdio"
	"tidings/streamhttp"
)

// serveConfig is what the serve flags set.
type serveConfig struct {
	// principal names a request's caller behind --auth-issuer;
	// auth.Principal when nil.
	principal       func(*http.Request) string
	dir             string
	addr            string
	stdio           bool
	allowedHosts    []string
	allowedOrigins  []string
	shutdownTimeout time.Duration
	maxFiles        int
	maxRead         byteSize
	maxSearch       byteSize
	searchBudget    byteSize
	rootGrace       time.Duration
	authIssuer      string
	authAudience    string
	authScopes      []string
	// bus joins the serve to its other replicas (--bus, TIDINGS_BUS).
	bus string
	// secret seals cursors and request state (--secret-file,
	// TIDINGS_SECRET); nil draws a random key.
	secret []byte
	// searchTimeout, maxRegexp and maxDirEntries bound the work of one
	// search_files or list_directory call; zero keeps the default.
	searchTimeout time.Duration
	maxRegexp     int
	maxDirEntries int
	// conns bounds the HTTP connections and what a request may hold.
	conns connLimits
	// exclude and noGitignore choose what is left out besides hidden
	// files: --exclude patterns, and the tree's .gitignore files unless
	// --no-gitignore.
	exclude     []string
	noGitignore bool
	// limits bound listens and 2025-11-25 sessions (--max-listens…).
	limits streamLimits
}

// byteSize is a flag value in bytes, written as a number with an
// optional unit: 512, 64KiB, 8MiB, 1GiB (K, M and G mean the same).
type byteSize int64

func (b *byteSize) String() string {
	n := int64(*b)
	for _, u := range []struct {
		name  string
		scale int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.scale == 0 {
			return strconv.FormatInt(n/u.scale, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b *byteSize) Set(s string) error {
	num, scale := strings.TrimSpace(s), int64(1)
	for _, u := range []struct {
		suffix string
		scale  int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(num, u.suffix) {
			num, scale = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.scale
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/scale {
		return fmt.Errorf("%q is not a positive size such as 4096, 64KiB or 8MiB", s)
	}
	*b = byteSize(n * scale)
	return nil
}

func (*byteSize) Type() string { return "size" }

// serveDir picks the directory to serve from --dir and the positional
// argument. Exactly one must name it; an empty name is refused rather
// than taken to mean the current directory, so that a script whose
// variable is unset (--dir "$DIR") does not publish whatever directory
// it happens to run in. "." serves the current directory.
func serveDir(flagDir string, flagSet bool, args []string) (string, error) {
	switch {
	case flagSet && len(args) > 0:
		return "", errors.New("give the directory either as an argument or with --dir, not both")
	case len(args) > 0:
		flagDir = args[0]
	case !flagSet:
		return "", errors.New(`required flag "dir" not set: give the directory to serve as an argument or with --dir`)
	}
	if strings.TrimSpace(flagDir) == "" {
		return "", errors.New(`the directory to serve is empty; use "." for the current directory`)
	}
	return flagDir, nil
}

func newServeCmd() *cobra.Command {
	var cfg serveConfig
	var ep endpointFlags
	cmd := &cobra.Command{
		Use:   "serve (DIR | --dir DIR) [--addr HOST:PORT | --stdio]",
		Short: "Serve a directory as live MCP resources",
		Example: `  tidings serve .                                   # on http://127.0.0.1:8080/mcp
  tidings serve ./docs --exclude '*.tmp' --addr 127.0.0.1:9001
  tidings serve ./docs --stdio                      # for a host that starts it
  tidings serve ./docs --auth-issuer https://as.example.com --auth-scope mcp
  tidings serve /srv/docs --bus nats://nats:4222 --secret-file /run/secrets/tidings`,
		Long: `Serve every regular, non-hidden file under DIR as an MCP resource, with
the tools search_files, file_info and list_directory.

What DIR's .gitignore files exclude (the root's and its subdirectories',
with git's pattern rules; .git itself is always left out) is not served:
not listed, not readable by URI, not seen by the tools, not watched. A
changed .gitignore takes effect at once. --exclude adds patterns of the
same syntax, applied from DIR and deciding before any .gitignore;
--no-gitignore serves what the .gitignore files name too.

Clients that listen (subscriptions/listen) are told when files appear or
disappear (notifications/resources/list_changed) and when a file they
subscribed to changes in any way a read would show — written, truncated,
created, removed, renamed, made readable or unreadable
(notifications/resources/updated).

At most --max-files files are listed. When more are readable, the list
also holds a resource at tidings:partial:<DIR's file URI> whose _meta key
"io.github.tidings/partial" is {"listed": N, "limit": M, "unlisted": K};
unlisted files can still be read by URI and searched, and they are listed
as soon as room appears.

If DIR disappears, nothing is listed until a directory is at its path
again, which is then watched afresh. If none comes back within
--root-grace, serve exits with status 1 and says so.

By default the server speaks Streamable HTTP at http://ADDR/mcp, with
Prometheus metrics at /metrics, /healthz (200 while the process serves)
and /readyz (200 once DIR is scanned, 503 while shutting down); with
--stdio it speaks newline-delimited JSON-RPC on stdin and stdout, and logs
only to stderr. SIGINT or SIGTERM end every listen with its complete
result before the process exits.

Several replicas behind a load balancer form one server with --bus URL
(nats://host:port[,nats://host:port...][/subject][?replicas=N],
redis://host:port[/db][?channel=name] or
redis+sentinel://host:port,host:port,.../master[/db][?channel=name]; or
TIDINGS_BUS, which keeps a password in the URL out of the process list):
a listener on any replica hears of changes seen by any. Every replica
must serve the same DIR (one shared volume, or identical copies): each
watches it itself, so all list the same files, and the bus only carries
the news. serve switches nothing on or off at run time, so it keeps no
shared state beyond the files. Give every replica the same key for the
cursors and request state it hands out, in a file (--secret-file) or in
TIDINGS_SECRET, at least 32 bytes (surrounding white space is trimmed);
it also signs the bus's messages, and a replica drops those not signed
with it. Without one each replica draws its own and refuses the others'
cursors, and the bus believes whoever can publish on the broker.
There is deliberately no flag that takes the key itself, which anyone
could read in the process list. While the bus is down a replica keeps
serving correct answers and hears of other replicas' changes once it is
back: /readyz stays 200 and says "bus: disconnected" (the broker is
shared, so failing readiness would take every replica out of rotation
at once); alert on tidings_bus_connected in /metrics instead. /readyz
also names the broker server the bus is on ("bus server: NAME (URL)" on
NATS, "bus server: ADDR" for the primary a Redis Sentinel named), and
tidings_bus_failovers_total counts its moves to another server.

` + connHelp,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := serveDir(cfg.dir, cmd.Flags().Changed("dir"), args)
			if err != nil {
				return err
			}
			cfg.dir = dir
			if err := checkToolLimits(cfg); err != nil {
				return err
			}
			if _, err := gitignore.Compile(cfg.exclude); err != nil {
				return fmt.Errorf("--exclude: %w", err)
			}
			log, ctx, stop, err := ep.start(cmd, &cfg)
			if err != nil {
				return err
			}
			defer stop()
			return runServe(ctx, cfg, log, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	ep.register(cmd, &cfg, "server")
	f.StringVar(&cfg.dir, "dir", "", "directory to serve (or give it as the argument); \".\" is the current directory")
	f.IntVar(&cfg.maxFiles, "max-files", dirsource.DefaultMaxFiles, "most files listed; beyond it the list says it is partial")
	cfg.maxRead, cfg.maxSearch, cfg.searchBudget = dirsource.DefaultMaxReadBytes, dirsource.DefaultMaxSearchBytes, dirsource.DefaultSearchBudget
	f.Var(&cfg.maxRead, "max-read-bytes", "largest file resources/read returns")
	f.Var(&cfg.maxSearch, "max-search-bytes", "largest file search_files looks into; larger ones are skipped and the result says so")
	f.Var(&cfg.searchBudget, "search-budget", "most bytes one search_files call reads in all")
	f.DurationVar(&cfg.searchTimeout, "search-timeout", dirsource.DefaultSearchTimeout, "longest one search_files call may take; a search that runs out of time answers with what it found and says so")
	f.IntVar(&cfg.maxRegexp, "max-regexp-size", dirsource.DefaultMaxRegexpSize, "most instructions a search_files regular expression may compile to; larger ones are refused")
	f.IntVar(&cfg.maxDirEntries, "max-dir-entries", dirsource.DefaultMaxDirEntries, "most entries one list_directory answer holds; a larger directory's listing says it was cut")
	f.StringArrayVar(&cfg.exclude, "exclude", nil, "leave out what this .gitignore-style pattern matches, from DIR, e.g. '*.tmp' or 'dist/' (repeatable)")
	f.BoolVar(&cfg.noGitignore, "no-gitignore", false, "serve what DIR's .gitignore files exclude too")
	f.DurationVar(&cfg.rootGrace, "root-grace", dirsource.DefaultRootGrace, "how long DIR may be missing before serve exits with an error; 0 exits at once, a negative value waits forever")
	f.StringVar(&cfg.bus, "bus", "", "join the other replicas on this bus: nats://HOST:PORT[,nats://HOST:PORT...][/SUBJECT], redis://HOST:PORT[/DB][?channel=NAME] or redis+sentinel://HOST:PORT,.../MASTER[/DB] (default $TIDINGS_BUS)")
	return cmd
}

// minSecret is the shortest key serve accepts: a key chosen for a
// cluster should be a real one.
const minSecret = 32

// serveSecret reads the key from the --secret-file file or from the
// TIDINGS_SECRET value, not both; neither is nil, a key of this process.
func serveSecret(file, env string) ([]byte, error) {
	var key []byte
	switch {
	case file != "" && env != "":
		return nil, errors.New("give the key either with --secret-file or in TIDINGS_SECRET, not both")
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--secret-file: %w", err)
		}
		// A key file may hold raw bytes, white space among them: only
		// the one line ending an editor or echo adds is not the key's.
		key = b
		if k, ok := bytes.CutSuffix(key, []byte("\n")); ok {
			key = bytes.TrimSuffix(k, []byte("\r"))
		}
	case env != "":
		key = []byte(strings.TrimSpace(env))
	default:
		return nil, nil
	}
	if len(key) < minSecret {
		return nil, fmt.Errorf("the key has %d bytes; give at least %d (for example: head -c 32 /dev/urandom | base64)", len(key), minSecret)
	}
	return key, nil
}

// checkConnectionLimits refuses the flags that bound one connection's
// listens without --stdio: over HTTP each listen is a request of its own,
// and the per-caller and total bounds are the ones that hold.
func checkConnectionLimits(cmd *cobra.Command, stdio bool) error {
	if stdio {
		return nil
	}
	for _, name := range []string{"max-listens-per-connection", "max-followed-uris-per-connection"} {
		if cmd.Flags().Changed(name) {
			return fmt.Errorf("--%s bounds the one connection of --stdio; over HTTP, where each listen is a request of its own, "+
				"use --max-listens-per-principal, --max-followed-uris-per-principal, --max-listens or --max-followed-uris", name)
		}
	}
	return nil
}

// checkToolLimits refuses tool limits given as zero or less, which the
// source would silently replace by its defaults.
func checkToolLimits(cfg serveConfig) error {
	switch {
	case cfg.searchTimeout <= 0:
		return fmt.Errorf("--search-timeout must be positive, not %v", cfg.searchTimeout)
	case cfg.maxRegexp <= 0:
		return fmt.Errorf("--max-regexp-size must be positive, not %d", cfg.maxRegexp)
	case cfg.maxDirEntries <= 0:
		return fmt.Errorf("--max-dir-entries must be positive, not %d", cfg.maxDirEntries)
	}
	return nil
}

// openBus dials the bus of --bus, bounded in time: a replica that cannot
// reach its broker at start is better restarted than serving alone
// unnoticed.
func openBus(ctx context.Context, rawURL string, secret []byte, log *slog.Logger) (bus.Bus, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// The replicas' shared key signs the bus's messages too; without one
	// the bus warns that it believes anyone.
	b, err := brokers.Open(ctx, rawURL, bus.WithLogger(log), bus.WithSecret(secret))
	if err != nil {
		return nil, fmt.Errorf("--bus: %w", err)
	}
	return b, nil
}

// runServe serves until ctx ends (a signal), the transport ends (stdin
// closed), or watching the directory fails.
func runServe(ctx context.Context, cfg serveConfig, log *slog.Logger, stdin io.Reader, stdout io.Writer) error {
	if cfg.maxFiles <= 0 {
		return fmt.Errorf("--max-files must be positive, not %d", cfg.maxFiles)
	}
	ignore := []dirsource.Option{dirsource.WithExclude(cfg.exclude...)}
	if !cfg.noGitignore {
		ignore = append(ignore, dirsource.WithGitignore())
	}
	src, err := dirsource.New(cfg.dir, append(ignore, dirsource.WithLogger(log),
		dirsource.WithMaxFiles(cfg.maxFiles),
		dirsource.WithMaxReadBytes(int64(cfg.maxRead)),
		dirsource.WithMaxSearchBytes(int64(cfg.maxSearch)),
		dirsource.WithSearchBudget(int64(cfg.searchBudget)),
		dirsource.WithSearchTimeout(cfg.searchTimeout),
		dirsource.WithMaxRegexpSize(cfg.maxRegexp),
		dirsource.WithMaxDirEntries(cfg.maxDirEntries),
		dirsource.WithRootGrace(cfg.rootGrace))...)
	if err != nil {
		return err
	}
	obs, err := newObservability()
	if err != nil {
		return err
	}
	if err := metrics.RegisterFiles(obs.registry, src.Stats); err != nil {
		return err
	}
	tel, err := startTelemetry(ctx, os.Getenv, stdoutUse(cfg.stdio))
	if err != nil {
		return err
	}
	defer tel.shutdown(log)
	opts := append(obs.serverOptions(log),
		server.WithLogger(log),
		server.WithInstructions("Files under "+src.DisplayRoot()+" are resources named by their file:// URI. "+
			"Subscribe to a file's URI with subscriptions/listen to learn when it changes."),
		server.WithListenLimits(cfg.limits.listens),
	)
	opts = append(opts, tel.serverOptions()...)
	if cfg.secret != nil {
		opts = append(opts, server.WithSecret(cfg.secret))
	}
	if cfg.bus != "" {
		b, err := joinBus(ctx, cfg, log, obs)
		if err != nil {
			return err
		}
		// The server closes the bus at shutdown; this covers the ways out
		// before it (closing twice is harmless).
		defer b.Close()
		opts = append(opts, server.WithBus(b))
	}
	srv := server.New(
		mcp.Implementation{Name: "tidings", Title: "tidings directory server", Version: version()},
		opts...,
	)
	if err := src.Register(srv); err != nil {
		return err
	}
	if err := obs.watchListens(srv); err != nil {
		return err
	}

	// stopCtx ends on a signal or when watching fails; either way the
	// transport shuts down gracefully. The watcher itself runs until the
	// transport is done, so no change is missed while draining.
	stopCtx, stopServing := context.WithCancelCause(ctx)
	defer stopServing(nil)
	watchCtx, stopWatch := context.WithCancel(context.WithoutCancel(ctx))
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		if err := src.Run(watchCtx); err != nil {
			stopServing(fmt.Errorf("watching %s: %w", src.Root(), err))
		}
	}()
	go func() {
		select {
		case <-src.Ready():
			obs.ready.Store(true)
			log.Info("watching directory", "dir", src.Root())
		case <-watchDone:
		}
	}()
	defer func() {
		stopWatch()
		<-watchDone
	}()

	if cfg.stdio {
		err = serveStdio(stopCtx, cfg, log, srv, stdin, stdout)
	} else {
		err = serveHTTP(stopCtx, cfg, log, srv, obs)
	}
	if err != nil {
		return err
	}
	if cause := context.Cause(stopCtx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
}

// joinBus opens the bus cfg names, with its metrics, for a replica of
// serve or of the gateway.
func joinBus(ctx context.Context, cfg serveConfig, log *slog.Logger, obs *observability) (bus.Bus, error) {
	b, err := openBus(ctx, cfg.bus, cfg.secret, log)
	if err != nil {
		return nil, err
	}
	if err := obs.watchBus(b); err != nil {
		_ = b.Close()
		return nil, err
	}
	if cfg.secret == nil {
		log.Warn("joined a bus without a shared key: cursors from one replica are refused by the others, " +
			"and bus messages are not signed; set --secret-file or TIDINGS_SECRET")
	}
	log.Info("joined the bus", "origin", b.Stats().Origin)
	return b, nil
}

// shutdown ends every open listen with its complete result.
func shutdown(cfg serveConfig, log *slog.Logger, srv *server.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("listens did not end in time", "err", err)
	}
}

// serveStdio serves until stdin is closed or ctx ends.
func serveStdio(ctx context.Context, cfg serveConfig, log *slog.Logger, srv *server.Server, stdin io.Reader, stdout io.Writer) error {
	ioCtx, cancelIO := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelIO()
	done := make(chan error, 1)
	// The transport's own bound on listens is the server's, so that
	// --max-listens-per-connection is the one that bites, either way.
	go func() {
		done <- stdio.Serve(ioCtx, srv, stdin, stdout, stdio.WithMaxListens(cfg.limits.listens.PerConnection.Listens))
	}()
	log.Info("serving on stdin and stdout")
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("stdio: %w", err)
		}
		log.Info("stdin closed; exiting")
		return nil
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdown(cfg, log, srv)
	cancelIO()
	if err := <-done; err != nil {
		return fmt.Errorf("stdio: %w", err)
	}
	return nil
}

// mountMCP serves the transport at /mcp; with --auth-issuer, behind an
// OAuth resource server whose metadata is at both well-known URLs.
func mountMCP(mux *http.ServeMux, cfg serveConfig, log *slog.Logger, srv *server.Server, obs *observability, self string, opts []streamhttp.Option) error {
	if cfg.authIssuer == "" {
		if cfg.authAudience != "" || len(cfg.authScopes) > 0 {
			return errors.New("--auth-audience and --auth-scope need --auth-issuer")
		}
		h := streamhttp.New(srv, opts...)
		obs.sessions, obs.parked = h.SessionStats, h.ParkedListens
		mux.Handle("/mcp", h)
		return nil
	}
	audience := cfg.authAudience
	if audience == "" {
		audience = self
	}
	g, err := auth.New(cfg.authIssuer, audience, auth.WithScopes(cfg.authScopes...), auth.WithLogger(log),
		auth.WithItemScopes(srv.RequiredScopes))
	if err != nil {
		return err
	}
	// The middleware checks what the HTTP layer cannot see: the item
	// scopes of 2025-11-25 requests, which name their item only in the
	// body.
	obs.late.set(g.Middleware())
	principal := cfg.principal
	if principal == nil {
		principal = auth.Principal
	}
	h := streamhttp.New(srv, append(opts, streamhttp.WithPrincipal(principal))...)
	obs.sessions, obs.parked = h.SessionStats, h.ParkedListens
	mux.Handle("/mcp", g.Require(h))
	md, err := url.Parse(g.MetadataURL())
	if err != nil {
		return fmt.Errorf("metadata URL: %w", err)
	}
	mux.Handle(md.Path, g.Metadata())
	if md.Path != "/.well-known/oauth-protected-resource" {
		mux.Handle("/.well-known/oauth-protected-resource", g.Metadata())
	}
	log.Info("requiring OAuth access tokens", "issuer", cfg.authIssuer, "audience", audience)
	return nil
}

// serveHTTP serves Streamable HTTP at /mcp until ctx ends.
func serveHTTP(ctx context.Context, cfg serveConfig, log *slog.Logger, srv *server.Server, obs *observability) error {
	if err := cfg.conns.check(); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	opts := append([]streamhttp.Option{streamhttp.WithLogger(log), streamhttp.WithWriteTimeout(cfg.conns.writeTimeout)}, cfg.limits.handlerOptions()...)
	if cfg.conns.parkListens {
		// serve ends its listens with the server's Shutdown before the
		// http.Server's, which parked ones need.
		opts = append(opts, streamhttp.WithParking())
	}
	if len(cfg.allowedHosts) > 0 {
		opts = append(opts, streamhttp.WithAllowedHosts(cfg.allowedHosts...))
	}
	if len(cfg.allowedOrigins) > 0 {
		opts = append(opts, streamhttp.WithAllowedOrigins(cfg.allowedOrigins...))
	}
	mux := http.NewServeMux()
	self := cfg.conns.h2.scheme() + "://" + ln.Addr().String() + "/mcp"
	if err := mountMCP(mux, cfg, log, srv, obs, self, opts); err != nil {
		_ = ln.Close()
		return err
	}
	if err := obs.watchSessions(); err != nil {
		_ = ln.Close()
		return err
	}
	obs.mount(mux)
	sopts, err := cfg.conns.serveOptions(cfg.maxFiles, log)
	if err != nil {
		_ = ln.Close()
		return err
	}
	front := streamhttp.NewServer(mux, append(sopts, streamhttp.WithShutdownTimeout(cfg.shutdownTimeout))...)
	if err := obs.watchServe(front); err != nil {
		_ = ln.Close()
		return err
	}
	serveCtx, stopServing := context.WithCancel(context.Background())
	defer stopServing()
	served := make(chan error, 1)
	go func() { served <- front.Serve(serveCtx, ln) }()

	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && len(cfg.allowedHosts) == 0 {
		log.Warn("listening on a non-loopback address: requests are refused unless their Host is named with --allowed-host")
	}
	log.Info("listening on " + self)

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	obs.stopping.Store(true)
	// Listens first, here too: the server's Shutdown ends them (and its
	// bus), which Serve would otherwise do only for a server whose
	// Handler it has seen a request of.
	shutdown(cfg, log, srv)
	stopServing()
	if err := <-served; err != nil {
		log.Warn("connections did not close in time", "err", err)
	}
	return nil
}
