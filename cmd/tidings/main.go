// Command tidings works with Model Context Protocol servers whose tools,
// prompts and resources change while they run.
//
//	tidings serve --dir DIR [--addr HOST:PORT | --stdio]
//
// serve publishes a directory as live resources: every file is a
// resource, writes reach subscribed clients as notifications, and files
// that come and go change the resource list.
//
//	tidings watch (URL | -- COMMAND [ARG...])
//
// watch follows a server's lists (and chosen resources) as they change,
// as a live terminal view or one line per event.
//
//	tidings call (URL REQUEST [ARG...] | REQUEST [ARG...] -- COMMAND [ARG...])
//
// call sends one request (discover, a whole list, a tool call, a read or
// a prompt) and prints the answer as JSON.
//
//	tidings bench fanout [--listeners N] [--changes C] [--stalled K] [--json]
//
// bench fanout measures how fast a change reaches many listens over
// loopback HTTP, and at what memory cost, against a naive broadcaster.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func main() {
	if err := newRootCmd().ExecuteContext(context.Background()); err != nil {
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code) // the command has already reported it
		}
		// Errors may quote what a server sent; keep control sequences in
		// them off the terminal.
		fmt.Fprintln(os.Stderr, "Error:", printable(err.Error()))
		os.Exit(1)
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "tidings",
		Short: "Serve and inspect MCP servers whose contents change at run time",
		// Usage text on every run-time error hides the error itself, and
		// main prints errors itself, made safe for a terminal.
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version(),
	}
	root.AddCommand(newServeCmd(), newWatchCmd(), newCallCmd(), newBenchCmd())
	return root
}

// version is the module version the binary was built from, or "devel".
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}
