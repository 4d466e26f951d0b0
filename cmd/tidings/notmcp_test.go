//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"tidings/client"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// TestWatchFailsOnAnEndpointThatIsNotMCP runs watch against HTTP
// endpoints that answer, but not as MCP servers: each must end the watch
// at once with an error that says so, instead of being retried forever.
func TestWatchFailsOnAnEndpointThatIsNotMCP(t *testing.T) {
	for _, c := range []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"404", http.NotFound, "nothing answers MCP at this URL (HTTP 404 Not Found)"},
		{"405", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}, "HTTP 405"},
		{"HTML page", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, "<!DOCTYPE html><html><body>Welcome</body></html>")
		}, "an HTML page"},
		{"JSON that is not JSON-RPC", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"status":"ok"}`)
		}, "JSON that is not a JSON-RPC response"},
		{"401", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "who are you", http.StatusUnauthorized)
		}, "pass credentials with -H"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(c.handler)
			defer srv.Close()
			cl := client.NewHTTP(srv.URL, client.WithTimeout(5*time.Second))
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			var out bytes.Buffer
			err := runWatch(ctx, cl, target{url: srv.URL}, watchConfig{}, &out, nil)
			if ctx.Err() != nil {
				t.Fatal("the watch went on retrying until the test's deadline")
			}
			if err == nil || !strings.Contains(err.Error(), "is not an MCP endpoint") || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one saying %q", err, c.want)
			}
		})
	}
}

// lineSignal is an io.Writer that tells, once, when n lines containing
// sub have been written.
type lineSignal struct {
	mu   sync.Mutex
	sub  string
	n    int
	done chan struct{}
}

func (l *lineSignal) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for line := range strings.Lines(string(p)) {
		if strings.Contains(line, l.sub) {
			if l.n--; l.n == 0 {
				close(l.done)
			}
		}
	}
	return len(p), nil
}

// TestWatchRetriesTransientFailures checks the other side: a server that
// fails with a 5xx may recover, so the watch keeps reconnecting.
func TestWatchRetriesTransientFailures(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	cl := client.NewHTTP(srv.URL, client.WithTimeout(5*time.Second))
	defer cl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &lineSignal{sub: " disconnected ", n: 3, done: make(chan struct{})}
	res := make(chan error, 1)
	go func() { res <- runWatch(ctx, cl, target{url: srv.URL}, watchConfig{}, out, nil) }()
	select {
	case <-out.done:
	case err := <-res:
		t.Fatalf("the watch ended on a 503: %v", err)
	case <-time.After(wait):
		t.Fatal("no three reconnect attempts in time")
	}
	cancel()
	if err := <-res; err != nil {
		t.Errorf("watch ended with %v after its context", err)
	}
}

func TestNotMCP(t *testing.T) {
	for _, c := range []struct {
		err   error
		fatal bool
	}{
		{&client.HTTPError{Status: 404}, true},
		{fmt.Errorf("wrapped: %w", &client.HTTPError{Status: 405}), true},
		{&client.HTTPError{Status: 200, Body: "<html><body>hi"}, true},
		{&client.HTTPError{Status: 200, Body: "plain text"}, true},
		{&client.HTTPError{Status: 400}, true},
		{&client.HTTPError{Status: 500}, false},
		{&client.HTTPError{Status: 503}, false},
		{&client.HTTPError{Status: 429}, false},
		{&client.HTTPError{Status: 408}, false},
		{fmt.Errorf("dial tcp 127.0.0.1:1: connect: connection refused"), false},
		{context.DeadlineExceeded, false},
	} {
		if _, fatal := notMCP(c.err); fatal != c.fatal {
			t.Errorf("notMCP(%v) = %v, want %v", c.err, fatal, c.fatal)
		}
	}
}

// TestNotMCPExitStatus runs the binary against a 404: watch and call end
// with status 1 and say what is wrong.
func TestNotMCPExitStatus(t *testing.T) {
	bin := buildBinary(t)
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	for _, args := range [][]string{{"watch", srv.URL}, {"watch", "--json", srv.URL}, {"call", srv.URL, "tools"}} {
		out, errOut, code := run(t, bin, args...)
		if code != 1 || !strings.Contains(errOut, "Error: "+srv.URL+" is not an MCP endpoint: nothing answers MCP at this URL (HTTP 404 Not Found)") {
			t.Errorf("%q: exit status %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

// TestCallSaysWhatWentWrong runs the binary against the mistakes a
// newcomer makes first: a port nothing listens on, a URL without /mcp,
// and an unknown --protocol.
func TestCallSaysWhatWentWrong(t *testing.T) {
	bin := buildBinary(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String() + "/mcp"
	ln.Close()
	_, errOut, code := run(t, bin, "call", closed, "tools")
	if code != 1 || !strings.Contains(errOut, closed+": connection refused") || strings.Contains(errOut, "context canceled") {
		t.Errorf("refused: exit status %d, stderr %q", code, errOut)
	}

	srv := server.New(mcp.Implementation{Name: "t", Version: "1"})
	mux := http.NewServeMux()
	mux.Handle("/mcp", streamhttp.New(srv))
	ts := httptest.NewServer(mux)
	defer ts.Close()
	_, errOut, code = run(t, bin, "call", ts.URL, "tools")
	if code != 1 || !strings.Contains(errOut, "nothing answers MCP at this URL (HTTP 404 Not Found); did you mean "+ts.URL+"/mcp?") {
		t.Errorf("no /mcp: exit status %d, stderr %q", code, errOut)
	}

	_, errOut, code = run(t, bin, "call", "--protocol", "2024-11-05", ts.URL+"/mcp", "tools")
	if code != 1 || !strings.Contains(errOut, "--protocol 2024-11-05: not a revision this client speaks") {
		t.Errorf("--protocol: exit status %d, stderr %q", code, errOut)
	}
	out, errOut, code := run(t, bin, "call", "--protocol", "2025-06-18", ts.URL+"/mcp", "discover")
	if code != 0 || !strings.Contains(out, `"2025-06-18"`) || !strings.Contains(errOut, "protocol revision 2025-06-18 (agreed through initialize)") {
		t.Errorf("--protocol 2025-06-18 discover: exit status %d, stdout %q, stderr %q", code, out, errOut)
	}
	_, errOut, code = run(t, bin, "call", ts.URL+"/mcp", "discover")
	if code != 0 || !strings.Contains(errOut, "protocol revision "+mcp.Version+" (agreed through server/discover)") {
		t.Errorf("discover: exit status %d, stderr %q", code, errOut)
	}

	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh for a server that dies")
	}
	_, errOut, code = run(t, bin, "call", "tools", "--", sh, "-c", "echo dying >&2; exit 3")
	if code != 1 || !strings.Contains(errOut, "dying") ||
		!strings.Contains(errOut, "the server exited (exit status 3) before it answered server/discover") {
		t.Errorf("a server that dies: exit status %d, stderr %q", code, errOut)
	}
}
