package gateway_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"testing"

	"go.uber.org/goleak"

	"tidings/mcp"
	"tidings/server"
	"tidings/stdio"
)

// stdioUpstreamEnv makes the test binary a stdio upstream instead of
// running the tests (see stdioUpstream): a real subprocess, as an
// operator's command upstream is.
const stdioUpstreamEnv = "TIDINGS_GATEWAY_TEST_STDIO_UPSTREAM"

// TestMain fails the package when a test leaves a goroutine behind: every
// gateway, upstream listen and server a test starts must be stopped by it.
func TestMain(m *testing.M) {
	if kind := os.Getenv(stdioUpstreamEnv); kind != "" {
		os.Exit(serveStdioUpstream(kind))
	}
	goleak.VerifyTestMain(m)
}

// stdioUpstream is the command of a stdio upstream of the given kind,
// served by this test binary: a tidings server with the tools "ok" and
// "crash" (which exits with status 3 at once). "garble-tools" answers
// every tools/list with a line that is not JSON (a broken server);
// "noisy" says hello on its stderr when it starts.
func stdioUpstream(kind string) []string {
	return []string{"env", stdioUpstreamEnv + "=" + kind, os.Args[0]}
}

func serveStdioUpstream(kind string) int {
	srv := server.New(mcp.Implementation{Name: "stdio-" + kind, Version: "1"})
	err := srv.AddTool(mcp.Tool{Name: "ok", InputSchema: []byte(`{"type":"object"}`)}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("ok")}}, nil
	})
	if err != nil {
		return 1
	}
	err = srv.AddTool(mcp.Tool{Name: "crash", InputSchema: []byte(`{"type":"object"}`)}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		os.Exit(3)
		return nil, nil
	})
	if err != nil {
		return 1
	}
	if kind == "noisy" {
		_, _ = io.WriteString(os.Stderr, "hello from stderr\nsecond line\n")
	}
	var out io.Writer = os.Stdout
	if kind == "garble-tools" {
		out = garbler{os.Stdout}
	}
	if err := stdio.Serve(context.Background(), srv, os.Stdin, out); err != nil {
		return 1
	}
	return 0
}

// garbler writes what it is given, but for an answer that lists tools,
// which it replaces with a line that is not JSON.
type garbler struct{ w io.Writer }

func (g garbler) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"tools":[`)) {
		if _, err := io.WriteString(g.w, "Traceback (most recent call last): no tools today\n"); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return g.w.Write(p)
}
