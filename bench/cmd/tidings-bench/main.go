// Command tidings-bench is the load harness of tidings, kept apart from
// the tidings binary so that what ships carries no load generator.
//
//	tidings-bench fanout [--listeners N] [--changes C] [--stalled K] [--gateway] [--json]
//
// fanout measures how fast a change reaches many listens over loopback
// HTTP, and at what memory cost, against a naive broadcaster measured in
// the same run, and with --gateway through a gateway in front of it.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

func main() {
	root := &cobra.Command{
		Use:           "tidings-bench",
		Short:         "Measure a tidings server on this machine",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newFanoutCmd(), newListenersCmd())
	if err := root.ExecuteContext(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}
