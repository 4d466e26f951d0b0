// Package peers_test checks tidings against MCP servers and clients built
// on other Go SDKs, each a real subprocess: the official Go SDK
// (github.com/modelcontextprotocol/go-sdk) and mcp-go
// (github.com/mark3labs/mcp-go).
//
// In one direction (servers_test.go) the tidings client package, `tidings
// watch` and `tidings call` talk to the peer servers of cmd/gosdk-server
// and cmd/mcpgo-server over every transport they offer; in the other
// (clients_test.go) each SDK's client talks to a `tidings serve`. In
// gateway_test.go a `tidings gateway` serves a go-sdk, an mcp-go and a
// TypeScript SDK v1 peer behind one endpoint, and `tidings watch` follows
// their changes through it.
//
// The module is apart from tidings' own, so that tidings never depends on
// the SDKs it is tested against. TestMain builds the peers and the tidings
// CLI once.
package peers_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// bin is the folder TestMain builds the binaries into; it is set once,
// before any test runs.
var bin string

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tidings-peers-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	bin = dir
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}

// build compiles the peer servers of this module and the tidings CLI, the
// latter in tidings' own module, as its users build it.
func build(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, b := range []struct{ wd, pkg, out string }{
		{".", "./cmd/gosdk-server", "gosdk-server"},
		{".", "./cmd/mcpgo-server", "mcpgo-server"},
		{"../..", "./cmd/tidings", "tidings"},
	} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, b.out), b.pkg)
		cmd.Dir = b.wd
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %w\n%s", b.pkg, err, out)
		}
	}
	return nil
}

// lines collects what a subprocess writes to one of its streams, line by
// line, and lets a test wait for a line it expects.
type lines struct {
	mu      sync.Mutex
	all     []string
	partial []byte
	// changed is closed and replaced whenever a line arrives.
	changed chan struct{}
}

func newLines() *lines { return &lines{changed: make(chan struct{})} }

// Write implements io.Writer; exec's copying goroutine calls it.
func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	grew := false
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.all = append(l.all, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
		grew = true
	}
	if grew {
		close(l.changed)
		l.changed = make(chan struct{})
	}
	return len(p), nil
}

// snapshot returns the complete lines so far and a channel closed when
// another arrives.
func (l *lines) snapshot() ([]string, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all[:len(l.all):len(l.all)], l.changed
}

// String returns everything written so far.
func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.all, "\n") + string(l.partial)
}

// waitFor waits until match accepts the lines so far, the process ends
// (exited closes) or ctx ends; it reports whether match accepted them.
func (l *lines) waitFor(ctx context.Context, exited <-chan struct{}, match func([]string) bool) bool {
	for {
		all, changed := l.snapshot()
		if match(all) {
			return true
		}
		select {
		case <-changed:
		case <-exited:
			all, _ := l.snapshot()
			return match(all)
		case <-ctx.Done():
			return false
		}
	}
}

// proc is a running subprocess whose output is collected.
type proc struct {
	name           string
	cmd            *exec.Cmd
	stdout, stderr *lines
	// exited is closed once the process has been waited for; err is then
	// what Wait returned.
	exited chan struct{}
	err    error
}

// start runs the binary name from bin with args; the test's cleanup stops
// it if the test has not.
func start(t *testing.T, name string, args ...string) *proc {
	t.Helper()
	return startCmd(t, name, exec.Command(filepath.Join(bin, name), args...), false)
}

// startCmd is start for any command; name is how it is called in
// messages. With stdin set, the process gets a pipe on its stdin that
// stays open until the process ends: a server that exits when its stdin
// ends (as the Node ones do, so that none outlives a test run that was
// killed) then lives as long as the test wants it.
func startCmd(t *testing.T, name string, cmd *exec.Cmd, stdin bool) *proc {
	t.Helper()
	args := cmd.Args[1:]
	p := &proc{name: name, cmd: cmd, stdout: newLines(), stderr: newLines(), exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if stdin {
		// The pipe's write end is the process's to close: Wait closes
		// it once the process has ended.
		if _, err := p.cmd.StdinPipe(); err != nil {
			t.Fatalf("starting %s: %v", name, err)
		}
	}
	// A grandchild holding the pipes must not hold up Wait.
	p.cmd.WaitDelay = 2 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.stop()
		if out := p.stderr.String(); t.Failed() && out != "" {
			t.Logf("%s %s stderr:\n%s", name, strings.Join(args, " "), out)
		}
	})
	return p
}

// stop sends SIGINT and waits for the process to end, killing it after
// five seconds; it returns what Wait returned. It may be called again.
func (p *proc) stop() error {
	select {
	case <-p.exited:
		return p.err
	default:
	}
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
	return p.err
}

// lineAfter returns the rest of the first line in all that starts with
// prefix.
func lineAfter(all []string, prefix string) (string, bool) {
	for _, l := range all {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			return strings.TrimSpace(rest), true
		}
	}
	return "", false
}

// lastLines returns the last n lines of s, for failure messages.
func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(ls[max(len(ls)-n, 0):], "\n")
}
