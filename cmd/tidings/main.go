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
// The load harness is a command of its own, in a module of its own:
// bench/cmd/tidings-bench.
//
// tidings --version reports the module version (go install
// tidings/cmd/tidings@VERSION, or go build in a VCS checkout); a build
// without one reports what -ldflags "-X main.buildVersion=VERSION" set,
// else the VCS revision, else "devel".
package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"tidings/internal/buildinfo"
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
	root.AddCommand(newServeCmd(), newGatewayCmd(), newWatchCmd(), newCallCmd(), newVersionCmd())
	// Usage and examples first, where a reader looks; the long account
	// after them.
	root.SetHelpTemplate(helpTemplate)
	return root
}

// helpTemplate is cobra's help with the usage (and its examples) before
// the long description, which for serve and gateway runs to many lines.
const helpTemplate = `{{if or .Runnable .HasSubCommands}}{{.UsageString}}{{end}}{{with (or .Long .Short)}}
{{. | trimTrailingWhitespaces}}
{{end}}`

// buildVersion is set at build time for builds that carry no module
// version, such as a release built from a source tree without VCS
// stamping:
//
//	go build -ldflags "-X main.buildVersion=v1.4.0" ./cmd/tidings
//
// It is the one package-level variable, written only by the linker.
var buildVersion string

// version is what --version, tidings version, serverInfo and the
// client's clientInfo report (see buildinfo.Version).
func version() string { return buildinfo.Version(buildVersion) }

// newVersionCmd is tidings version: --version as a command, for those who
// look for one.
func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of tidings",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "tidings version "+version())
			return err
		},
	}
}
