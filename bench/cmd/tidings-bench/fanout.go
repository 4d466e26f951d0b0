package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"syscall"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/spf13/cobra"

	"tidings/bench/internal/loadtest"
)

// listenerProcessCmd is the hidden subcommand the fan-out harness runs as
// its child process.
const listenerProcessCmd = "fanout-listeners"

func newFanoutCmd() *cobra.Command {
	var cfg loadtest.Config
	var asJSON, inProcess, quiet bool
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "fanout [--listeners N] [--changes C] [--stalled K] [--gateway] [--json]",
		Short: "Measure how fast a change reaches many listens, against a naive broadcaster",
		Long: `Measure change fan-out over real HTTP on loopback.

The server (streamhttp on an in-process http.Server on 127.0.0.1) gets N
subscriptions/listen streams for tools list changes, each a POST on its own
TCP connection read as SSE. Once every ack has arrived, C changes are made
one at a time (a tool added, then removed, ...); for each, the time from
the change until each listen received its notification is recorded, and
the next change waits until the last listen has it.

The same listens and changes are then run against a naive broadcaster in
this process: a plain net/http SSE handler whose single publisher writes
each notification to every stream in turn, flushing each. The report gives
the per-listen latency (p50, p99) and the time until all had the change,
each the median over the changes, and memory and goroutines per listen
(after a GC; kernel socket buffers not included), with the ratios of the
two servers.

With --stalled K, both servers are measured again with K of the N listens
stalled: after their ack they are never read again, with the smallest
socket buffers on both ends and a request id so long that a single
notification cannot fit in them, so that the server's write to them blocks
from the first change on. A change that takes longer than --timeout ends
its measurement, which is reported as timed out; the naive broadcaster is
expected to.

With --floor, they are run once more against the net/http floor: a
handler per listen that writes, for each change, one notification encoded
when the listen opened, and nothing else (no hub, filter, keep-alive or
write timeout); and, over HTTP/1.1, against the kernel's floor: each
listen's connection taken over after its ack, and each change one
pre-encoded write per connection from a goroutine per core, the least
any server on the machine can do. The report compares the server with
both, and the kernel's floor with net/http's. With --unparked,
the server is measured once more with every listen on its own goroutines
(without streamhttp.WithParking). Memory per listen includes the growth of the
resident set (Linux).

With --gateway, the server is measured once more behind a gateway (the
gateway package, as tidings gateway serves it), without stalled listens:
the N listens are the gateway's, each change is made on the server behind
it, which tells the gateway's one listen on it over loopback HTTP, and the
gateway re-reads the list and tells its own. The report compares it with
the server reached directly.

By default the listens are read by a child process (this binary), so the
server's memory is measured on its own and each process needs one file
descriptor per listen; --in-process reads them in the server's process.
The open file limit is raised as far as allowed. Progress goes to stderr.

With --http2-conns C, the project's server alone is measured with the N
listens as HTTP/2 streams without TLS (h2c, by prior knowledge), spread
evenly over C connections, so N may go up to ` + fmt.Sprint(loadtest.MaxHTTP2Listeners) + ` whatever the open
file limit; they are read by a client that keeps no goroutine or buffer
per stream, one reader per connection, and opened up to 64 per
connection at a time. A stream the server resets or a connection it
cuts fails the run, saying how many. The server gathers each connection's frames into one write
per wake-up, unless --http2-no-coalesce. The memory table gives the
resident set per listen and in all as well.

With --rounds R, the whole sequence is made R times, each server in
turn within a round, and each ratio is the median of the R rounds'
ratios: on a shared machine one noisy minute then moves one round, not
the figure.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Zero would mean "the default" to the harness.
			if cfg.Listeners < 1 || cfg.Changes < 1 || cfg.Rounds < 1 || cfg.Timeout <= 0 || cfg.WriteTimeout <= 0 || cfg.OpenTimeout <= 0 {
				return fmt.Errorf("--listeners, --changes, --rounds and the timeouts must be positive")
			}
			if cfg.HTTP2Conns < 0 {
				return fmt.Errorf("--http2-conns must be positive, not %d", cfg.HTTP2Conns)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if !inProcess {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("finding this binary for the listener process: %w", err)
				}
				cfg.ListenerProcess = func(ctx context.Context) *exec.Cmd {
					return exec.CommandContext(ctx, exe, listenerProcessCmd)
				}
			}
			if !quiet {
				cfg.Log = cmd.ErrOrStderr()
			}
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			rep, err := loadtest.Run(ctx, cfg)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				if err := json.MarshalWrite(out, rep, jsontext.WithIndent("  ")); err != nil {
					return err
				}
				if _, err := fmt.Fprintln(out); err != nil {
					return err
				}
			} else if err := rep.WriteTable(out); err != nil {
				return err
			}
			// The project's server must reach every healthy listen with
			// every change, stalled listens or not.
			for _, r := range rep.Runs {
				if r.Server != loadtest.ServerNaive && (r.TimedOut || r.Unexpected > 0) {
					return fmt.Errorf("%s with %d stalled listens timed out or sent unexpected messages", r.Server, r.Stalled)
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Listeners, "listeners", 2000, fmt.Sprintf("listens open during each measurement (at most %d)", loadtest.MaxListeners))
	f.IntVar(&cfg.Changes, "changes", 20, fmt.Sprintf("tools list changes per measurement (at most %d)", loadtest.MaxChanges))
	f.IntVar(&cfg.Rounds, "rounds", 1, fmt.Sprintf("make the whole sequence of measurements this many times, each server in turn, and give each ratio as the median of the rounds' (at most %d)", loadtest.MaxRounds))
	f.IntVar(&cfg.Stalled, "stalled", 0, "also measure with this many of the listens never read after their ack")
	f.BoolVar(&cfg.Floor, "floor", false, "also measure the net/http floor (a handler per listen writing one pre-encoded notification per change) and the kernel's (one pre-encoded write per connection per change)")
	f.BoolVar(&cfg.Unparked, "unparked", false, "also measure the server with every listen on its own goroutines (without streamhttp.WithParking)")
	f.BoolVar(&cfg.Serve, "serve", false, "also measure the server as a Go program serves it: streamhttp.Serve, the handler (without WithParking) on a ServeMux; over HTTP/2 with --http2-conns")
	f.BoolVar(&cfg.Gateway, "gateway", false, "also measure the server behind a gateway, the changes made on the server and the listens the gateway's")
	f.DurationVar(&cfg.Timeout, "timeout", 10*time.Second, "how long one change may take to reach every healthy listen")
	f.DurationVar(&cfg.WriteTimeout, "write-timeout", 10*time.Second, "the server's write timeout, after which it cuts a listen that does not read")
	f.DurationVar(&cfg.OpenTimeout, "open-timeout", 2*time.Minute, "how long opening the listens of one measurement may take")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	f.BoolVar(&inProcess, "in-process", false, "read the listens in the server's process (needs two file descriptors per listen; memory covers both sides)")
	f.BoolVar(&quiet, "quiet", false, "do not report progress on stderr")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the servers' process (opening the listens included) to this file, for go tool pprof")
	f.IntVar(&cfg.HTTP2Conns, "http2-conns", 0, "open the listens as HTTP/2 streams (h2c) over this many connections, the project's server alone")
	f.BoolVar(&cfg.HTTP2NoCoalesce, "http2-no-coalesce", false, "with --http2-conns, leave the server's writes as net/http makes them, one per flush")
	return cmd
}

// newListenersCmd is the child process of fanout: it opens and reads
// listens as the parent asks on stdin, answering on stdout.
func newListenersCmd() *cobra.Command {
	return &cobra.Command{
		Use:    listenerProcessCmd,
		Short:  "The listener process of fanout (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Ctrl-C reaches the whole process group: the parent ends
			// this process by closing stdin once it has cleaned up.
			signal.Ignore(os.Interrupt)
			return loadtest.ServeListeners(cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
}
