// Command board is a sprint board served by several replicas behind a
// plain round-robin load balancer: the board lives in Redis, and every
// change made through any replica is told to the listeners of all of
// them through the Redis bus.
//
// One replica against a local Redis:
//
//	go run ./examples/board -redis redis://127.0.0.1:6379
//
// Three replicas, Redis and nginx in front of them, with Docker (see
// compose.yaml and nginx.conf beside this file):
//
//	docker compose -f examples/board/compose.yaml up
//
// Then follow a board and change it from another terminal, through the
// balancer on port 8080:
//
//	go run ./cmd/tidings watch http://127.0.0.1:8080/mcp
//	go run ./cmd/tidings call http://127.0.0.1:8080/mcp call complete_task '{"board":"sprint-1","task":"build"}'
//	go run ./cmd/tidings call http://127.0.0.1:8080/mcp call enable_reports
//
// What it serves:
//
//   - the resource template board://{name}: a board's tasks and their done
//     flags, as JSON, read from Redis;
//   - complete_task {board, task}: marks a task done in Redis, and every
//     listener following board://{name} on every replica hears
//     notifications/resources/updated;
//   - enable_reports {}: turns reports on for everyone, in the state the
//     replicas share (server.WithSharedState); the sprint_report tool
//     appears on every replica, and every listener of the tool list hears
//     notifications/tools/list_changed;
//   - sprint_report {}: how far each board is.
//
// Flags: -addr (where to listen, default 127.0.0.1:8080), -redis (the
// Redis URL, default redis://127.0.0.1:6379/0; its database holds the
// boards and, in the hash board:state, which tools are on for every
// replica — the reports flag is its field tool:sprint_report — and the
// replicas meet on its pub/sub channel "board") and
// -secret (the key every replica shares, so that cursors one issues are
// accepted by the others; default $BOARD_SECRET, or a random key, which
// suits one replica only). A board named sprint-1 is created with a few
// tasks when it does not exist.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, os.Args[1:], os.Stderr, log, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		log.Error("board", "err", err)
		os.Exit(1)
	}
}

// config is what the flags say.
type config struct {
	addr     string
	redisURL string
	secret   string
}

// parseFlags reads the command line; help and errors go to out.
func parseFlags(args []string, out io.Writer) (config, error) {
	fs := flag.NewFlagSet("board", flag.ContinueOnError)
	fs.SetOutput(out)
	var c config
	fs.StringVar(&c.addr, "addr", "127.0.0.1:8080", "address to listen on (host:port); the endpoint is /mcp")
	fs.StringVar(&c.redisURL, "redis", "redis://127.0.0.1:6379/0", "Redis URL: the boards live in its database, and the replicas meet on its pub/sub")
	fs.StringVar(&c.secret, "secret", os.Getenv("BOARD_SECRET"), "key every replica shares (at least 32 bytes; default $BOARD_SECRET)")
	if err := fs.Parse(args); err != nil {
		return config{}, fmt.Errorf("flags: %w", err)
	}
	if fs.NArg() > 0 {
		return config{}, fmt.Errorf("flags: unexpected arguments %q", fs.Args())
	}
	return c, nil
}
