package peers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tidings/client"
	"tidings/interop/peers/internal/peer"
	"tidings/mcp"
)

// flickerPeriod is how often the peers add or remove their flicker tool.
const flickerPeriod = 300 * time.Millisecond

// checkTimeout bounds each check of a leg: ample for flicker to come and
// go many times, far below the watchers' 30s poll, so that only change
// notifications can show it.
const checkTimeout = 10 * time.Second

// leg is one peer server on one transport.
type leg struct {
	name   string
	server string   // binary in bin
	args   []string // flags besides -flicker
	stdio  bool
	// era is the protocol the client must settle on, and version the
	// revision: the newest both sides support.
	era     client.Era
	version string
}

// legs are the peer servers on each of their transports. go-sdk's
// stateful HTTP handler answers server/discover, but its supportedVersions
// stop at 2025-11-25 and every other request at 2026-07-28 gets -32022, so
// there the client must fall back to initialize; every other leg lists
// 2026-07-28 in server/discover.
var legs = []leg{
	{name: "gosdk-stateful-http", server: "gosdk-server", era: client.EraLegacy, version: "2025-11-25"},
	{name: "gosdk-stateless-http", server: "gosdk-server", args: []string{"-stateless"}, era: client.EraModern, version: "2026-07-28"},
	{name: "gosdk-stdio", server: "gosdk-server", args: []string{"-stdio"}, stdio: true, era: client.EraModern, version: "2026-07-28"},
	{name: "mcpgo-http", server: "mcpgo-server", era: client.EraModern, version: "2026-07-28"},
	{name: "mcpgo-stdio", server: "mcpgo-server", args: []string{"-stdio"}, stdio: true, era: client.EraModern, version: "2026-07-28"},
}

// serverArgs returns the peer's flags.
func (l leg) serverArgs() []string {
	return append(slices.Clone(l.args), "-flicker", flickerPeriod.String())
}

// target is how one leg's peer is reached: an HTTP URL, or for stdio the
// command a client spawns.
type target struct {
	leg leg
	url string
}

// command is the peer's command line, for a stdio client to spawn.
func (tg target) command() []string {
	return append([]string{filepath.Join(bin, tg.leg.server)}, tg.leg.serverArgs()...)
}

// cliArgs places the target among the arguments of a tidings command:
// the URL first, or the command after "--".
func (tg target) cliArgs(sub string, flags []string, request ...string) []string {
	args := append([]string{sub}, flags...)
	if tg.leg.stdio {
		args = append(args, request...)
		return append(append(args, "--"), tg.command()...)
	}
	return append(append(args, tg.url), request...)
}

// TestPeerServers runs the tidings client (the era it settles on, and a
// Watcher), `tidings watch` and `tidings call` against every peer server
// leg.
func TestPeerServers(t *testing.T) {
	for _, l := range legs {
		t.Run(l.name, func(t *testing.T) {
			tg := target{leg: l}
			if !l.stdio {
				tg.url = startPeer(t, l)
			}
			t.Run("client-era", func(t *testing.T) { checkClientEra(t, tg) })
			t.Run("client-watch", func(t *testing.T) { checkClientWatch(t, tg) })
			t.Run("cli-watch", func(t *testing.T) { checkCLIWatch(t, tg) })
			t.Run("cli-call", func(t *testing.T) { checkCLICall(t, tg) })
		})
	}
}

// startPeer starts l's server on HTTP and returns its endpoint's URL.
func startPeer(t *testing.T, l leg) string {
	t.Helper()
	p := start(t, l.server, append(l.serverArgs(), "-addr", "127.0.0.1:0")...)
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	var url string
	if !p.stdout.waitFor(ctx, p.exited, func(all []string) bool {
		var ok bool
		url, ok = lineAfter(all, peer.URLPrefix)
		return ok
	}) {
		t.Fatalf("%s printed no %q line within %v; stdout:\n%s\nstderr:\n%s",
			l.server, peer.URLPrefix, checkTimeout, p.stdout, p.stderr)
	}
	return url
}

// newClient returns a tidings client for the target; its stderr (a stdio
// peer's) goes to the test log on failure.
func newClient(t *testing.T, ctx context.Context, tg target) *client.Client {
	t.Helper()
	if !tg.leg.stdio {
		c := client.NewHTTP(tg.url)
		t.Cleanup(func() { c.Close() })
		return c
	}
	stderr := newLines()
	cmd := tg.command()
	c, err := client.NewCommand(ctx, cmd[0], cmd[1:], client.WithStderr(stderr))
	if err != nil {
		t.Fatalf("starting %s: %v", strings.Join(cmd, " "), err)
	}
	t.Cleanup(func() {
		c.Close()
		if out := stderr.String(); t.Failed() && out != "" {
			t.Logf("%s stderr:\n%s", tg.leg.server, out)
		}
	})
	return c
}

// checkClientEra checks that the client settles on the leg's era, and
// that a request then succeeds.
func checkClientEra(t *testing.T, tg target) {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	c := newClient(t, ctx, tg)
	era, err := c.Era(ctx)
	if err != nil {
		t.Fatalf("Era: %v", err)
	}
	if era != tg.leg.era {
		t.Errorf("Era = %s, want %s", era, tg.leg.era)
	}
	if v, err := c.ProtocolVersion(ctx); err != nil || v != tg.leg.version {
		t.Errorf("ProtocolVersion = %q, %v; want %s", v, err, tg.leg.version)
	}
	if _, err := c.Tools(ctx); err != nil {
		t.Errorf("Tools at era %s: %v", era, err)
	}
}

// checkClientWatch follows the peer's tools with a Watcher and reads them
// with Tools: the Watcher must report flicker added and then removed, and
// Tools must answer with flicker and then without. The Watcher polls only
// every hour, so what it reports came from notifications.
func checkClientWatch(t *testing.T, tg target) {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	c := newClient(t, ctx, tg)

	var mu sync.Mutex
	var added, removed bool
	var lastErr error
	changed := make(chan struct{}, 1)
	w := c.Watch(ctx, client.WatchOptions{
		Tools:        true,
		PollInterval: time.Hour,
		OnEvent: func(e client.Event) {
			mu.Lock()
			defer mu.Unlock()
			switch e.Kind {
			case client.ToolsChanged:
				if slices.Contains(e.Added, peer.FlickerTool) {
					added = true
				}
				if added && slices.Contains(e.Removed, peer.FlickerTool) {
					removed = true
				}
			case client.Disconnected, client.ReadFailed:
				if e.Err != nil {
					lastErr = fmt.Errorf("%v: %w", e.Kind, e.Err)
				}
			}
			select {
			case changed <- struct{}{}:
			default:
			}
		},
	})
	defer w.Close()

	// Tools is read again after every event, and every 50ms besides: each
	// read is one the cache answers while the listen keeps it current.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var listedWith, listedWithout bool
	var toolsErr error
	for {
		tools, err := c.Tools(ctx)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				toolsErr = err
			}
		case slices.ContainsFunc(tools, func(tl mcp.Tool) bool { return tl.Name == peer.FlickerTool }):
			listedWith = true
		case listedWith:
			listedWithout = true
		}
		mu.Lock()
		done := added && removed && listedWith && listedWithout
		summary := fmt.Sprintf("watcher reported flicker added %v, then removed %v; Tools listed it %v, then not %v; watcher state %v, stats %+v",
			added, removed, listedWith, listedWithout, w.State(), w.Stats())
		if lastErr != nil {
			summary += "; last watch error: " + lastErr.Error()
		}
		mu.Unlock()
		if done {
			return
		}
		if toolsErr != nil {
			summary += "; last Tools error: " + toolsErr.Error()
		}
		select {
		case <-ctx.Done():
			t.Fatalf("flicker did not come and go within %v: %s", checkTimeout, summary)
		case <-changed:
		case <-tick.C:
		}
	}
}

// checkCLIWatch runs `tidings watch --plain` against the peer: its output
// must show flicker added and, later, removed; SIGINT then ends it with
// status 0.
func checkCLIWatch(t *testing.T, tg target) {
	p := start(t, "tidings", tg.cliArgs("watch", []string{"--plain"})...)
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if !p.stdout.waitFor(ctx, p.exited, flickerCameAndWent) {
		select {
		case <-p.exited:
			t.Fatalf("tidings watch ended (%v) before flicker came and went; stdout:\n%s\nstderr:\n%s",
				p.err, lastLines(p.stdout.String(), 10), lastLines(p.stderr.String(), 10))
		default:
		}
		t.Fatalf("tidings watch did not show flicker come and go within %v; stdout:\n%s\nstderr:\n%s",
			checkTimeout, lastLines(p.stdout.String(), 10), lastLines(p.stderr.String(), 10))
	}
	if err := p.stop(); err != nil {
		t.Errorf("tidings watch after SIGINT: %v, want exit status 0; stderr:\n%s", err, lastLines(p.stderr.String(), 10))
	}
}

// flickerCameAndWent reports whether watch lines show a tools_changed
// adding flicker followed by one removing it.
func flickerCameAndWent(all []string) bool {
	added := false
	for _, l := range all {
		f := strings.Fields(l)
		if len(f) < 3 || f[1] != "tools_changed" {
			continue
		}
		for _, kv := range f[2:] {
			k, v, _ := strings.Cut(kv, "=")
			has := slices.Contains(strings.Split(v, ","), peer.FlickerTool)
			switch {
			case k == "added" && has:
				added = true
			case k == "removed" && has && added:
				return true
			}
		}
	}
	return false
}

// checkCLICall runs `tidings call ... call echo` against the peer: it
// must exit 0 and print the tool's result, the text sent. Then it calls
// flicker, the tool that comes and goes, until one call finds it there
// (a call made while it is gone fails, as it should).
func checkCLICall(t *testing.T, tg target) {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	const text = "sent through tidings call"
	args := tg.cliArgs("call", nil, "call", "echo", `{"text":"`+text+`"}`)
	out, stderr, err := runCLI(ctx, args)
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("tidings %s: %v, want exit status 0; stderr:\n%s", strings.Join(args, " "), err, lastLines(stderr, 15))
		}
		t.Fatalf("tidings %s: %v", strings.Join(args, " "), err)
	}
	if got, ok := resultText(out); !ok || got != text {
		t.Fatalf("tidings call echo printed\n%s\nwant one text content %q", out, text)
	}

	// A stdio server is spawned for each call: it has the tool from its
	// start.
	first := tg
	first.leg.args = append(slices.Clone(tg.leg.args), "-flicker-first")
	args = first.cliArgs("call", nil, "call", peer.FlickerTool, `{}`)
	var tries []string
	for ctx.Err() == nil && len(tries) < maxFlickerCalls {
		out, stderr, err := runCLI(ctx, args)
		if err == nil {
			if got, ok := resultText(out); !ok || got != "still here" {
				t.Fatalf("tidings call %s printed\n%s\nwant one text content %q", peer.FlickerTool, out, "still here")
			}
			return
		}
		tries = append(tries, fmt.Sprintf("%v: %s", err, lastLines(stderr, 3)))
	}
	t.Fatalf("tidings %s never found the tool in %d tries:\n%s", strings.Join(args, " "), len(tries), strings.Join(tries, "\n"))
}

// maxFlickerCalls bounds the calls of flicker checkCLICall makes: with the
// tool there half of the time, one in two calls finds it.
const maxFlickerCalls = 40

// runCLI runs the tidings binary with args and returns its stdout and
// stderr.
func runCLI(ctx context.Context, args []string) ([]byte, string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "tidings"), args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.WaitDelay = 2 * time.Second
	out, err := cmd.Output()
	return out, stderr.String(), err
}

// resultText returns the text of a tool result that holds one text
// content and is not an error.
func resultText(out []byte) (string, bool) {
	var res struct {
		Content []struct {
			Type, Text string
		} `json:"content"`
		IsError bool `json:"isError"`
	}
	if err := json.Unmarshal(out, &res); err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].Type != "text" {
		return "", false
	}
	return res.Content[0].Text, true
}
