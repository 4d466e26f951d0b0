package client_test

import (
	"context"
	"fmt"
	"os"

	"tidings/mcp"
	"tidings/server"
	"tidings/stdio"
)

// exampleServerEnv, set in its environment, makes the test binary a stdio
// server with the greet tool instead of running tests: ExampleNewCommand
// spawns it, as a host spawns a local server.
const exampleServerEnv = "TIDINGS_CLIENT_EXAMPLE_SERVER"

// init runs before the tests, so that the binary started as a server
// serves and exits without running any.
func init() {
	if os.Getenv(exampleServerEnv) == "" {
		return
	}
	srv := server.New(mcp.Implementation{Name: "greeter", Version: "1.0.0"})
	if err := srv.AddTool(mcp.Tool{Name: "greet"}, greet); err != nil {
		fmt.Fprintln(os.Stderr, "greeter:", err)
		os.Exit(1)
	}
	if err := stdio.Serve(context.Background(), srv, os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "greeter:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
