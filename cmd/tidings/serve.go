package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"tidings/dirsource"
	"tidings/mcp"
	"tidings/server"
	"tidings/stdio"
	"tidings/streamhttp"
)

// serveConfig is what the serve flags set.
type serveConfig struct {
	dir             string
	addr            string
	stdio           bool
	allowedHosts    []string
	allowedOrigins  []string
	shutdownTimeout time.Duration
}

func newServeCmd() *cobra.Command {
	var cfg serveConfig
	var level string
	cmd := &cobra.Command{
		Use:   "serve --dir DIR [--addr HOST:PORT | --stdio]",
		Short: "Serve a directory as live MCP resources",
		Long: `Serve every regular, non-hidden file under DIR as an MCP resource, with
the tools search_files, file_info and list_directory.

Clients that listen (subscriptions/listen) are told when files appear or
disappear (notifications/resources/list_changed) and when a file they
subscribed to is written (notifications/resources/updated).

By default the server speaks Streamable HTTP at http://ADDR/mcp; with
--stdio it speaks newline-delimited JSON-RPC on stdin and stdout, and logs
only to stderr. SIGINT or SIGTERM end every listen with its complete
result before the process exits.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var lv slog.Level
			if err := lv.UnmarshalText([]byte(level)); err != nil {
				return fmt.Errorf("--log-level: %w", err)
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: lv}))
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runServe(ctx, cfg, log, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.dir, "dir", "", "directory to serve (required)")
	f.StringVar(&cfg.addr, "addr", "127.0.0.1:8080", "address to listen on for Streamable HTTP; port 0 picks a free port")
	f.BoolVar(&cfg.stdio, "stdio", false, "serve over stdin and stdout instead of HTTP")
	f.StringArrayVar(&cfg.allowedHosts, "allowed-host", nil, "accept this Host header besides loopback names (repeatable); needed when serving on a non-loopback address")
	f.StringArrayVar(&cfg.allowedOrigins, "allowed-origin", nil, "accept browser requests from this origin besides loopback ones, e.g. https://app.example.com (repeatable)")
	f.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a graceful shutdown may take")
	f.StringVar(&level, "log-level", "info", "log level: debug, info, warn or error")
	_ = cmd.MarkFlagRequired("dir")
	cmd.MarkFlagsMutuallyExclusive("stdio", "addr")
	cmd.MarkFlagsMutuallyExclusive("stdio", "allowed-host")
	cmd.MarkFlagsMutuallyExclusive("stdio", "allowed-origin")
	return cmd
}

// runServe serves until ctx ends (a signal), the transport ends (stdin
// closed), or watching the directory fails.
func runServe(ctx context.Context, cfg serveConfig, log *slog.Logger, stdin io.Reader, stdout io.Writer) error {
	src, err := dirsource.New(cfg.dir, dirsource.WithLogger(log))
	if err != nil {
		return err
	}
	srv := server.New(
		mcp.Implementation{Name: "tidings", Title: "tidings directory server", Version: version()},
		server.WithLogger(log),
		server.WithInstructions("Files under "+src.Root()+" are resources named by their file:// URI. "+
			"Subscribe to a file's URI with subscriptions/listen to learn when it changes."),
	)
	if err := src.Register(srv); err != nil {
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
		err = serveHTTP(stopCtx, cfg, log, srv)
	}
	if err != nil {
		return err
	}
	if cause := context.Cause(stopCtx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return nil
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
	go func() { done <- stdio.Serve(ioCtx, srv, stdin, stdout) }()
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

// serveHTTP serves Streamable HTTP at /mcp until ctx ends.
func serveHTTP(ctx context.Context, cfg serveConfig, log *slog.Logger, srv *server.Server) error {
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	var opts []streamhttp.Option
	if len(cfg.allowedHosts) > 0 {
		opts = append(opts, streamhttp.WithAllowedHosts(cfg.allowedHosts...))
	}
	if len(cfg.allowedOrigins) > 0 {
		opts = append(opts, streamhttp.WithAllowedOrigins(cfg.allowedOrigins...))
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", streamhttp.New(srv, opts...))
	hs := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	served := make(chan error, 1)
	go func() { served <- hs.Serve(ln) }()

	if tcp, ok := ln.Addr().(*net.TCPAddr); ok && !tcp.IP.IsLoopback() && len(cfg.allowedHosts) == 0 {
		log.Warn("listening on a non-loopback address: requests are refused unless their Host is named with --allowed-host")
	}
	log.Info("listening on http://" + ln.Addr().String() + "/mcp")

	select {
	case err := <-served:
		return fmt.Errorf("http: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down")
	// Listens first: http.Server.Shutdown waits for handlers to return,
	// and a listen returns only once the server ends it.
	shutdown(cfg, log, srv)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("connections did not close in time", "err", err)
		_ = hs.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http: %w", err)
	}
	return nil
}
