package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
)

// endpointFlags are the flags serve and gateway share: where and how to
// listen, logging, authorization, the bus's key and the limits on
// connections, listens and sessions. Each command adds its own --bus,
// whose help differs.
type endpointFlags struct{ level, logFormat, secretFile string }

// register adds the shared flags to cmd, setting cfg; what names the
// server in the help ("server" or "gateway").
func (e *endpointFlags) register(cmd *cobra.Command, cfg *serveConfig, what string) {
	f := cmd.Flags()
	f.StringVar(&cfg.addr, "addr", "127.0.0.1:8080", "address to listen on for Streamable HTTP; port 0 picks a free port")
	f.BoolVar(&cfg.stdio, "stdio", false, "serve over stdin and stdout instead of HTTP")
	f.StringArrayVar(&cfg.allowedHosts, "allowed-host", nil, "accept this Host header besides loopback names (repeatable); needed when serving on a non-loopback address")
	f.StringArrayVar(&cfg.allowedOrigins, "allowed-origin", nil, "accept browser requests from this origin besides loopback ones, e.g. https://app.example.com (repeatable)")
	f.DurationVar(&cfg.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long a graceful shutdown may take")
	f.StringVar(&e.level, "log-level", "info", "log level: debug (adds a line per request), info, warn or error")
	f.StringVar(&e.logFormat, "log-format", "text", "log format: text, or json for one object per line")
	f.StringVar(&cfg.authIssuer, "auth-issuer", "", "require OAuth bearer tokens (JWTs) from this issuer on /mcp")
	f.StringVar(&cfg.authAudience, "auth-audience", "", "this "+what+"'s canonical URL, the audience tokens must name (default http://ADDR/mcp)")
	f.StringArrayVar(&cfg.authScopes, "auth-scope", nil, "scope every request's token must grant (repeatable)")
	f.StringVar(&e.secretFile, "secret-file", "", "file holding the key that seals cursors, the same on every replica (or set TIDINGS_SECRET); at least 32 bytes")
	cfg.limits.register(f)
	cmd.MarkFlagsMutuallyExclusive("stdio", "auth-issuer")
	cmd.MarkFlagsMutuallyExclusive("stdio", "addr")
	cmd.MarkFlagsMutuallyExclusive("stdio", "allowed-host")
	cmd.MarkFlagsMutuallyExclusive("stdio", "allowed-origin")
	// 2025-11-25 sessions of their own exist over HTTP alone: a stdio
	// connection is its one session.
	cmd.MarkFlagsMutuallyExclusive("stdio", "max-sessions")
	cmd.MarkFlagsMutuallyExclusive("stdio", "max-sessions-per-principal")
	cfg.conns.register(cmd)
}

// start checks the connection limits and reads what the flags name that
// takes more than parsing — the logger, the key, a bus URL from the
// environment — and returns the context that ends on SIGINT or SIGTERM,
// with its stop.
func (e *endpointFlags) start(cmd *cobra.Command, cfg *serveConfig) (*slog.Logger, context.Context, context.CancelFunc, error) {
	if err := checkConnectionLimits(cmd, cfg.stdio); err != nil {
		return nil, nil, nil, err
	}
	log, err := newLogger(cmd.ErrOrStderr(), e.logFormat, e.level)
	if err != nil {
		return nil, nil, nil, err
	}
	if cfg.secret, err = serveSecret(e.secretFile, os.Getenv("TIDINGS_SECRET")); err != nil {
		return nil, nil, nil, err
	}
	if !cmd.Flags().Changed("bus") {
		cfg.bus = os.Getenv("TIDINGS_BUS")
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	return log, ctx, stop, nil
}
