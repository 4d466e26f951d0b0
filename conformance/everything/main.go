// Command everything is the conformance target: an MCP server with the
// tools, resources and prompts the official conformance suite exercises,
// served over Streamable HTTP at /mcp. It is a test fixture, kept out of
// the tidings binary.
//
//	go run ./conformance/everything -addr 127.0.0.1:3001
//
// Several copies can run as replicas behind a load balancer
// (scripts/conformance-cluster does): copies started with the same
// -secret accept each other's cursors and request state, so a list can
// be paged, and a multi round-trip request answered, through any of
// them. The key is the SHA-256 of the -secret string, so any string
// will do and the same string always gives the same key; the key is
// only as hard to guess as the string. Without -secret every copy draws
// a random key of its own. Copies given the same -bus also keep their
// tasks (of the tasks extension) in that broker's task store
// (brokers.OpenTasks), so a task created through one copy is polled,
// answered, cancelled and followed through any; without -bus each copy
// keeps its tasks in its own process, known only to the copy that
// created them.
package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"tidings/bus"
	"tidings/bus/brokers"
	"tidings/server"
	"tidings/streamhttp"
)

// options are the command's flags.
type options struct {
	addr   string
	secret string
	bus    string
}

// busDialTimeout bounds how long a copy waits for its broker at start.
const busDialTimeout = 10 * time.Second

// serverOptions turns the flags into options of the server: what makes
// one copy a replica among others. The bus and the task store it opens
// are the server's to close (Shutdown does); closeShared closes them when no
// server takes them.
func (o options) serverOptions(ctx context.Context, log *slog.Logger) (opts []server.Option, closeShared func(), err error) {
	closeShared = func() {}
	if o.secret != "" {
		opts = append(opts, server.WithSecret(secretKey(o.secret)))
	}
	if o.bus != "" {
		ctx, cancel := context.WithTimeout(ctx, busDialTimeout)
		defer cancel()
		busOpts := []bus.Option{bus.WithLogger(log)}
		if o.secret != "" {
			// The copies' secret signs their bus too, as tidings serve's
			// does: a message without its MAC is not believed.
			busOpts = append(busOpts, bus.WithSecret(secretKey(o.secret)))
		}
		b, err := brokers.Open(ctx, o.bus, busOpts...)
		if err != nil {
			return nil, nil, fmt.Errorf("join the other copies: %w", err)
		}
		// The tasks live where the bus is: a client polls, answers and
		// cancels a task through whichever copy the balancer picks, and
		// the copy running it hears of that over the bus.
		ts, err := brokers.OpenTasks(ctx, o.bus, bus.WithLogger(log))
		if err != nil {
			_ = b.Close()
			return nil, nil, fmt.Errorf("share the tasks of the other copies: %w", err)
		}
		opts = append(opts, server.WithBus(b), server.WithTaskStore(ts))
		closeShared = func() { _ = ts.Close(); _ = b.Close() }
	}
	return opts, closeShared, nil
}

// secretKey derives the key of -secret: its SHA-256, 32 bytes whatever
// the string's length, and the same for every copy given the string.
func secretKey(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

func main() {
	var o options
	flag.StringVar(&o.addr, "addr", "127.0.0.1:3001", "address to listen on (host:port)")
	flag.StringVar(&o.secret, "secret", "", "shared secret of replicas: copies given the same one accept each other's cursors and request state (default: a random key per copy)")
	flag.StringVar(&o.bus, "bus", "", "bus URL (nats://... or redis://...): copies on the same one hear of each other's changes (default: none)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(o, log); err != nil {
		log.Error("everything", "err", err)
		os.Exit(1)
	}
}

func run(o options, log *slog.Logger) error {
	opts, closeShared, err := o.serverOptions(context.Background(), log)
	if err != nil {
		return err
	}
	srv, err := newServer(log, opts...)
	if err != nil {
		closeShared()
		return err
	}
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		_ = srv.Shutdown(context.Background())
		return fmt.Errorf("listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", streamhttp.New(srv))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(os.Stderr, "listening on http://%s/mcp\n", ln.Addr())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
