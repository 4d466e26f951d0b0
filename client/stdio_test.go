package client

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"tidings/mcp"
)

// builtServer is the stdio test server, built once per test binary on
// first use and removed by TestMain.
var builtServer struct {
	sync.Mutex
	dir, path string
	err       error
}

// stdioServerPath builds ./internal/stdioserver (once) and returns the
// binary's path.
func stdioServerPath(t testing.TB) string {
	t.Helper()
	builtServer.Lock()
	defer builtServer.Unlock()
	if builtServer.path == "" && builtServer.err == nil {
		dir, err := os.MkdirTemp("", "tidings-stdioserver-")
		if err != nil {
			t.Fatal(err)
		}
		builtServer.dir = dir
		path := filepath.Join(dir, "stdioserver")
		out, err := exec.Command("go", "build", "-o", path, "./internal/stdioserver").CombinedOutput()
		if err != nil {
			builtServer.err = errors.New("go build ./internal/stdioserver: " + err.Error() + "\n" + string(out))
		} else {
			builtServer.path = path
		}
	}
	if builtServer.err != nil {
		t.Fatal(builtServer.err)
	}
	return builtServer.path
}

func removeBuiltServers() {
	builtServer.Lock()
	defer builtServer.Unlock()
	if builtServer.dir != "" {
		_ = os.RemoveAll(builtServer.dir)
	}
}

// stdioClient starts the stdio test server as a subprocess.
func stdioClient(t testing.TB, args ...string) *Client {
	t.Helper()
	c, err := NewCommand(context.Background(), stdioServerPath(t), args,
		WithLogger(quietLogger()), WithTimeout(waitTimeout), WithStderr(testWriter{t}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// testWriter sends a subprocess's stderr to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("server stderr: %s", p)
	return len(p), nil
}

func control(t testing.TB, c *Client, tool string, args map[string]any) {
	t.Helper()
	res, err := c.CallTool(context.Background(), tool, args)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		t.Fatalf("%s: %s", tool, *res.Content[0].Text)
	}
}

func TestStdioAPI(t *testing.T) {
	c := stdioClient(t, "-page", "2", "-seed", "5")
	ctx := context.Background()
	d, err := c.Discover(ctx)
	must(t, err)
	if d.ServerInfo == nil || d.ServerInfo.Name != "stdioserver" {
		t.Errorf("serverInfo = %+v", d.ServerInfo)
	}
	tools, err := c.Tools(ctx)
	must(t, err)
	want := []string{"add_prompt", "add_tool", "big", "crash", "garble", "remove_tool", "seed1", "seed2", "seed3", "seed4", "seed5", "set_resource", "shutdown", "stall"}
	if got := names(tools); !slices.Equal(got, want) {
		t.Errorf("Tools = %v, want %v (all pages, sorted)", got, want)
	}
	res, err := c.CallTool(ctx, "seed4", nil)
	must(t, err)
	if *res.Content[0].Text != "seed4" {
		t.Errorf("seed4 answered %q", *res.Content[0].Text)
	}
	control(t, c, "set_resource", map[string]any{"uri": "mem://a", "text": "one"})
	rr, err := c.ReadResource(ctx, "mem://a")
	must(t, err)
	if got := contentText(t, rr); got != "one" {
		t.Errorf("ReadResource = %q", got)
	}
	control(t, c, "add_prompt", map[string]any{"name": "hello"})
	pr, err := c.GetPrompt(ctx, "hello", nil)
	must(t, err)
	if *pr.Messages[0].Content.Text != "hello" {
		t.Errorf("GetPrompt = %+v", pr)
	}
	// Requests run concurrently on the one pipe and find their answers.
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			name := []string{"seed1", "seed2", "seed3", "seed4", "seed5"}[i%5]
			r, err := c.CallTool(ctx, name, nil)
			if err == nil && *r.Content[0].Text != name {
				err = errors.New("answer for " + name + " was " + *r.Content[0].Text)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// TestStdioWatcher follows changes made through the protocol itself, with
// the listen sharing the pipe with the calls that cause the changes.
func TestStdioWatcher(t *testing.T) {
	c := stdioClient(t)
	control(t, c, "set_resource", map[string]any{"uri": "mem://doc", "text": "v1"})
	w, log := watch(t, c, WatchOptions{Tools: true, URIs: []string{"mem://doc"}, PollInterval: waitTimeout})
	ev, _ := log.waitFor(t, "connected", kindIs(Connected))
	if !ev.Granted.ToolsListChanged || !slices.Equal(ev.Granted.ResourceSubscriptions, []string{"mem://doc"}) {
		t.Errorf("granted = %+v", ev.Granted)
	}
	log.waitAll(t, "initial reads", ToolsChanged, ResourceUpdated)

	control(t, c, "add_tool", map[string]any{"name": "fresh"})
	ev, _ = log.waitFor(t, "tool added", kindIs(ToolsChanged))
	if !slices.Equal(ev.Added, []string{"fresh"}) || len(ev.Removed)+len(ev.Changed) != 0 {
		t.Errorf("ToolsChanged = %+v, want Added [fresh]", ev)
	}
	control(t, c, "set_resource", map[string]any{"uri": "mem://doc", "text": "v2"})
	ev, _ = log.waitFor(t, "resource update", kindIs(ResourceUpdated))
	if ev.URI != "mem://doc" || !slices.Equal(ev.Changed, []string{"mem://doc"}) {
		t.Errorf("ResourceUpdated = %+v", ev)
	}
	rr, err := c.ReadResource(context.Background(), "mem://doc")
	must(t, err)
	if got := contentText(t, rr); got != "v2" {
		t.Errorf("ReadResource after update = %q", got)
	}
	if w.State() != Live {
		t.Errorf("state = %s, want live", w.State())
	}
}

// TestStdioGracefulShutdown: the server ends its listens itself (a
// notifications/cancelled and the complete result): a graceful end, after
// which cached entries stay trusted.
func TestStdioGracefulShutdown(t *testing.T) {
	c := stdioClient(t)
	_, log := watch(t, c, WatchOptions{Tools: true, PollInterval: waitTimeout, MinBackoff: 5e6, MaxBackoff: waitTimeout})
	log.waitFor(t, "connected", kindIs(Connected))
	log.waitFor(t, "initial tools", kindIs(ToolsChanged))
	control(t, c, "shutdown", nil)
	ev, _ := log.waitFor(t, "disconnected", kindIs(Disconnected))
	if !ev.Graceful || ev.Err != nil {
		t.Errorf("Disconnected = %+v, want graceful", ev)
	}
	if st := c.Freshness(mcp.MethodToolsList, "").State; st == Unknown {
		t.Errorf("freshness after a graceful end = %s, want not unknown", st)
	}
}

// TestStdioServerCrash covers STDIO-11: the subprocess dies mid-stream.
// The watcher reports an abrupt drop and cached entries become unknown;
// the next request starts the server again, and the watcher reconnects to
// the new process and reconciles.
func TestStdioServerCrash(t *testing.T) {
	c := stdioClient(t)
	_, log := watch(t, c, WatchOptions{Tools: true, PollInterval: waitTimeout, MinBackoff: 1e6, MaxBackoff: 2e6})
	log.waitFor(t, "connected", kindIs(Connected))
	log.waitFor(t, "initial tools", kindIs(ToolsChanged))
	if st := c.Freshness(mcp.MethodToolsList, "").State; st != Fresh {
		t.Fatalf("freshness before the crash = %s", st)
	}
	control(t, c, "add_tool", map[string]any{"name": "added"})
	log.waitFor(t, "the added tool", func(e Event) bool { return e.Kind == ToolsChanged && slices.Contains(e.Added, "added") })
	_, err := c.CallTool(context.Background(), "crash", nil)
	if !errors.Is(err, ErrDropped) {
		t.Errorf("call that crashed the server: err = %v, want ErrDropped", err)
	}
	ev, _ := log.waitFor(t, "disconnected", kindIs(Disconnected))
	if ev.Graceful || ev.Err == nil {
		t.Errorf("Disconnected = %+v, want an abrupt drop with an error", ev)
	}
	// The new process starts from its seed tools: the tool added to the old
	// one is gone, and the reconciling re-read reports exactly that.
	log.waitFor(t, "reconnected", kindIs(Connected))
	ev, _ = log.waitFor(t, "the reconciled list", kindIs(ToolsChanged))
	if !slices.Equal(ev.Removed, []string{"added"}) || len(ev.Added) != 0 {
		t.Errorf("after the restart: %+v, want only \"added\" removed", ev)
	}
	if _, err := c.CallTool(context.Background(), "seed1", nil); err != nil {
		t.Errorf("call after the restart: %v", err)
	}
}

// TestStdioServerCrashLoop: a server that dies right after every start is
// not started forever; requests then fail with ErrServerGone, and a
// watcher settles down instead of retrying.
func TestStdioServerCrashLoop(t *testing.T) {
	c := stdioClient(t, "-die-after", "1")
	w, _ := watch(t, c, WatchOptions{Tools: true, PollInterval: waitTimeout, MinBackoff: 1e6, MaxBackoff: 2e6})
	waitUntil(t, "watcher to give up", func() bool {
		_, err := c.Tools(context.Background())
		return errors.Is(err, ErrServerGone) && w.State() == Down
	})
	if _, err := c.CallTool(context.Background(), "seed1", nil); !errors.Is(err, ErrServerGone) || !errors.Is(err, ErrClosed) {
		t.Errorf("call to a crash-looping server: err = %v, want ErrServerGone", err)
	}
	r := w.Stats().Reconnects
	observe(t, 100*time.Millisecond, func(time.Duration) {
		if now := w.Stats().Reconnects; now > r+1 {
			t.Fatalf("watcher kept reconnecting (%d → %d) to a server that is gone", r, now)
		}
	})
}
