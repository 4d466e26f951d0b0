package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/spf13/cobra"

	"tidings/gateway"
	"tidings/metrics"
	"tidings/server"
)

// newGatewayCmd is `tidings gateway`: many servers behind one endpoint.
func newGatewayCmd() *cobra.Command {
	var cfg serveConfig
	var ep endpointFlags
	var file string
	cmd := &cobra.Command{
		Use: "gateway (FILE | --config FILE) [--addr HOST:PORT | --stdio]",
		Example: `  tidings gateway gateway.yaml                       # on http://127.0.0.1:8080/mcp
  tidings gateway gateway.yaml --addr 0.0.0.0:8080 --auth-issuer https://as.example.com
  tidings gateway gateway.yaml --stdio               # for a host that starts it
  kill -HUP $(pidof tidings)                          # reload the file (a change to it does too)`,
		Short: "Serve many MCP servers behind one endpoint",
		Long: `Serve the tools, prompts and resources of the MCP servers FILE names
(over Streamable HTTP, or started as stdio servers) as one server, to
clients of either protocol era.

FILE is YAML:

  upstreams:
    - id: files                      # a-z, 0-9 and '-'
      url: http://127.0.0.1:9001/mcp
    - id: weather
      command: [./weather-server, --stdio]
      prefix: ""                     # keep its names (default: "weather_")
      exclude: ["debug_*"]           # its items left out, by their own names
      auth:
        bearer_file: /run/secrets/weather   # or header: X-Api-Key, header_file: …
    - id: mail
      url: https://mail.example.com/mcp
      auth:                          # each caller's token, exchanged (RFC 8693); needs --auth-issuer
        token_exchange: {issuer: https://as.example.com, client_id: gw, client_secret_file: /run/secrets/gw}
  callers:                           # optional: who sees what (first match)
    - scope: admin
    - upstreams: [files]
      exclude: ["files_delete*"]
  max_ttl: 1m                        # cap on ttlMs and on keeping answers (default 5m)
  max_items: 10000                   # most items kept of one upstream's list (the default)

Tool and prompt names get the upstream's prefix; resource URIs are kept.
Two upstreams offering one name is an error, at start and at a reload.
Lists are kept for the ttlMs the upstream gave (at most max_ttl): one the
upstream marked public is fetched once for every caller; one it marked
private is fetched for each caller and never served to another. One
subscriptions/listen per upstream hears of its changes, however many
clients listen here; each is told only what it may see. An upstream that
goes down leaves the lists (listeners are told) and returns when it is
back. The callers' tokens are never sent upstream: each upstream gets the
credential its auth names — with token_exchange, a token the authorization
server issues for that upstream in exchange for the caller's own, which
needs --auth-issuer; such an upstream's answers are kept per caller, and
one listen per caller listening here hears of its changes.

SIGHUP, or a change to FILE, reloads it; a file that does not check is
refused and the running configuration goes on. /metrics has
tidings_gateway_* per upstream. /readyz names each upstream's state: 200
once the gateway started, saying "degraded" while some upstream is down,
and 503 while none is up. What a spawned upstream writes to its stderr is
logged, a line at a time, under its id.
Several gateways behind a balancer share --bus and --secret-file as serve
replicas do: a change one hears of is told to listeners on all.

` + connHelp,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				if file != "" && file != args[0] {
					return fmt.Errorf("two config files: %s and --config %s; give one", args[0], file)
				}
				file = args[0]
			}
			if file == "" {
				return errors.New("no config file: name the YAML file of the upstreams (tidings gateway FILE); --help shows its format")
			}
			log, ctx, stop, err := ep.start(cmd, &cfg)
			if err != nil {
				return err
			}
			defer stop()
			return runGateway(ctx, cfg, file, log, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&file, "config", "", "the YAML file naming the upstreams, as the positional FILE (its format is below)")
	f.StringVar(&cfg.bus, "bus", "", "join the other gateway replicas on this bus (as serve's --bus; default $TIDINGS_BUS)")
	ep.register(cmd, &cfg, "gateway")
	return cmd
}

// runGateway serves the gateway FILE describes until ctx ends.
func runGateway(ctx context.Context, cfg serveConfig, file string, log *slog.Logger, stdin io.Reader, stdout io.Writer) error {
	gcfg, err := gateway.LoadConfig(file)
	if err != nil {
		return err
	}
	// An upstream reached with each caller's token exchanged needs
	// callers that bring one.
	checkCallers := func(gcfg gateway.Config) error {
		if gcfg.ExchangesTokens() && cfg.authIssuer == "" {
			return fmt.Errorf("gateway config %s: an upstream's auth is token_exchange, which exchanges each caller's token, "+
				"but callers bring none: give --auth-issuer (and --auth-audience) so that they must", file)
		}
		return nil
	}
	if err := checkCallers(gcfg); err != nil {
		return err
	}
	obs, err := newObservability()
	if err != nil {
		return err
	}
	tel, err := startTelemetry(ctx, os.Getenv, stdoutUse(cfg.stdio))
	if err != nil {
		return err
	}
	defer tel.shutdown(log)
	opts := append(obs.serverOptions(log), server.WithLogger(log), server.WithListenLimits(cfg.limits.listens))
	opts = append(opts, tel.serverOptions()...)
	if cfg.secret != nil {
		opts = append(opts, server.WithSecret(cfg.secret))
	}
	if cfg.bus != "" {
		b, err := joinBus(ctx, cfg, log, obs)
		if err != nil {
			return err
		}
		defer b.Close()
		opts = append(opts, server.WithBus(b))
	}
	g, err := gateway.New(ctx, gcfg, gateway.WithLogger(log), gateway.WithServerOptions(opts...), gateway.WithClientOptions(tel.clientOptions()...))
	if err != nil {
		return err
	}
	defer g.Close()
	srv := g.Server()
	if err := metrics.RegisterGateway(obs.registry, g.Stats); err != nil {
		return err
	}
	obs.upstreams = g.Stats
	if err := obs.watchListens(srv); err != nil {
		return err
	}
	reloadCtx, stopReload := context.WithCancel(ctx)
	reloaded := make(chan struct{})
	go func() {
		defer close(reloaded)
		reloadOnChange(reloadCtx, file, g, checkCallers, log)
	}()
	defer func() {
		stopReload()
		<-reloaded
	}()
	obs.ready.Store(true)
	for _, u := range gcfg.Upstreams {
		log.Info("upstream", "id", u.ID, "url", u.URL, "command", u.Command)
	}
	if cfg.stdio {
		return serveStdio(ctx, cfg, log, srv, stdin, stdout)
	}
	// Callers are told apart by their tokens' scopes too, which the
	// caller rules may choose by.
	cfg.principal = gateway.Principal
	return serveHTTP(ctx, cfg, log, srv, obs)
}

// A config file that fails to parse after a change is read again
// halfWrittenTries times, halfWrittenWait apart, before the failure is
// reported: an editor or a config manager may still be writing it.
const (
	halfWrittenTries = 4
	halfWrittenWait  = 250 * time.Millisecond
)

// reloadOnChange reloads the gateway's configuration on SIGHUP and when
// FILE changes, until ctx ends. A file that does not check, or that check
// refuses, is logged and the running configuration goes on.
func reloadOnChange(ctx context.Context, file string, g *gateway.Gateway, check func(gateway.Config) error, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	var changed <-chan fsnotify.Event
	// The directory is watched, not the file: editors and config
	// managers replace a file by renaming another onto it.
	if w, err := fsnotify.NewWatcher(); err != nil {
		log.Warn("config changes are not watched; send SIGHUP to reload", "err", err)
	} else if err := w.Add(filepath.Dir(file)); err != nil {
		_ = w.Close()
		log.Warn("config changes are not watched; send SIGHUP to reload", "err", err)
	} else {
		defer w.Close()
		changed = w.Events
	}
	abs, _ := filepath.Abs(file)
	// A file read as it is being written fails to parse: after a change,
	// a failed read is tried again a few times before it is reported.
	var again <-chan time.Time
	tries := 0
	for {
		fromChange := false
		select {
		case <-ctx.Done():
			return
		case <-hup:
		case <-again:
			fromChange = true
		case e := <-changed:
			if p, _ := filepath.Abs(e.Name); p != abs || e.Op&(fsnotify.Write|fsnotify.Create|fsnotify.Rename) == 0 {
				continue
			}
			fromChange = true
		}
		gcfg, err := gateway.LoadConfig(file)
		if err != nil && fromChange && tries < halfWrittenTries {
			log.Debug("the changed config file does not check; reading it again, as it may be half-written", "err", fmt.Sprint(err))
			tries++
			again = time.After(halfWrittenWait)
			continue
		}
		tries, again = 0, nil
		if err == nil {
			err = check(gcfg)
		}
		if err == nil {
			err = g.Reload(ctx, gcfg)
		}
		if err != nil {
			log.Error("configuration not reloaded; the running one goes on", "err", fmt.Sprint(err))
			continue
		}
	}
}
