//go:build unix

package main

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tmuxPane is a tidings process in a tmux pane of its own tmux server,
// read as a person would see it.
type tmuxPane struct {
	t    *testing.T
	sock string
	last string
}

// startTmux runs the shell command line in a detached 80×30 pane. The
// test is skipped when tmux is not installed, unless TIDINGS_TMUX=1 (as
// scripts/test-all sets once it has installed tmux) makes that a failure.
func startTmux(t *testing.T, cols, rows int, line string) *tmuxPane {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		if os.Getenv("TIDINGS_TMUX") == "1" {
			t.Fatal("TIDINGS_TMUX=1 but tmux is not installed")
		}
		t.Skip("tmux is not installed; the live view is not tested in a terminal")
	}
	p := &tmuxPane{t: t, sock: filepath.Join(t.TempDir(), "tmux.sock")}
	// The exit status stays on screen once the watch ends.
	p.run("-f", "/dev/null", "new-session", "-d", "-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows),
		line+`; echo "exited $?"; sleep 600`)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the pane showed:\n%s", p.last)
		}
		_ = exec.Command("tmux", "-S", p.sock, "kill-server").Run()
	})
	return p
}

func (p *tmuxPane) run(args ...string) string {
	p.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", p.sock}, args...)...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %q: %v\n%s", args, err, out)
	}
	return string(out)
}

// screen is what the pane shows now.
func (p *tmuxPane) screen() string {
	p.last = p.run("capture-pane", "-p")
	return p.last
}

// waitFor polls the screen until ok holds, and returns it.
func (p *tmuxPane) waitFor(what string, ok func(string) bool) string {
	p.t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(wait)
	for {
		if s := p.screen(); ok(s) {
			return s
		}
		select {
		case <-tick.C:
		case <-deadline:
			p.t.Fatalf("the pane never showed %s", what)
		}
	}
}

func (p *tmuxPane) keys(k ...string) { p.run(append([]string{"send-keys"}, k...)...) }

// shellQuote quotes one word for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func shellLine(words ...string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = shellQuote(w)
	}
	return strings.Join(q, " ")
}

// rowOf returns the first row of screen that starts with prefix.
func rowOf(screen, prefix string) string {
	for l := range strings.Lines(screen) {
		if strings.HasPrefix(l, prefix) {
			return strings.TrimRight(l, "\n")
		}
	}
	return ""
}

var failedAttempts = regexp.MustCompile(`down since \d\d:\d\d:\d\d, (\d+) failed attempts, next retry by \d\d:\d\d:\d\d`)

// TestWatchViewInTmux runs the live view in a real terminal, 80 columns
// wide, against a directory server on loopback, and reads the screen.
func TestWatchViewInTmux(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	long := filepath.Join(dir, "a-directory-with-a-rather-long-name", "and-another-one-below-it")
	if err := os.MkdirAll(long, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if err := os.WriteFile(filepath.Join(long, fmt.Sprintf("note-%02d.txt", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	followed := fileURI(t, long, "note-07.txt")
	srv, addr := startServe(t, bin, dir)
	p := startTmux(t, 80, 30, shellLine(bin, "watch", "--resource", followed, addr))

	// A followed resource the listen covers is live right after it is
	// read, and so are the lists, whatever their TTL.
	s := p.waitFor("the lists and the followed resource live", func(s string) bool {
		return strings.HasPrefix(rowOf(s, "tools "), "tools        3  live") &&
			strings.HasPrefix(rowOf(s, "resources "), "resources   40  live") &&
			strings.HasPrefix(rowOf(s, "  live "), "  live ")
	})
	if strings.Contains(s, "stale") {
		t.Errorf("something shows stale while the listen is live")
	}
	// 80 columns show file names, not only a count.
	if row := rowOf(s, "resources "); !strings.Contains(row, "note-00.txt") {
		t.Errorf("resources row %q names no file", row)
	}
	for l := range strings.Lines(s) {
		if n := len([]rune(strings.TrimRight(l, "\n"))); n > 80 {
			t.Errorf("row wider than the terminal: %q", l)
		}
	}
	if !strings.Contains(s, "?: legend  q: quit") {
		t.Errorf("no keys on the last row")
	}
	p.keys("?")
	p.waitFor("the legend", func(s string) bool {
		return strings.Contains(s, "live      a change would reach us") && strings.Contains(s, "stale     TTL over")
	})
	p.keys("?")

	// The server dies: the outage is one status line that counts the
	// attempts, and one line among the changes.
	port := ""
	if u, err := url.Parse(addr); err == nil {
		port = u.Port()
	}
	if err := srv.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	srv.wait()
	s = p.waitFor("three failed reconnect attempts", func(s string) bool {
		m := failedAttempts.FindStringSubmatch(s)
		if m == nil {
			return false
		}
		n, _ := strconv.Atoi(m[1])
		return n >= 3
	})
	if n := strings.Count(s, "disconnected:"); n != 1 {
		t.Errorf("%d disconnection lines among the changes, want 1", n)
	}
	if !strings.Contains(s, "r: retry now") || !strings.Contains(s, "last error: ") {
		t.Errorf("the outage shows no retry key or no last error")
	}
	if !strings.HasPrefix(rowOf(s, "resources "), "resources   40  unknown") {
		t.Errorf("resources row %q: unknown while the listen is down", rowOf(s, "resources "))
	}

	// The server is back on the same port; r retries at once.
	again := start(t, "serve again", bin, true, "serve", "--dir", dir, "--addr", "127.0.0.1:"+port)
	again.expect("listening line", func(l string) bool { return listening.MatchString(l) })
	again.drain()
	p.keys("r")
	p.waitFor("the outage over", func(s string) bool {
		return strings.Contains(s, "reconnected after") && strings.HasPrefix(rowOf(s, "tools "), "tools        3  live")
	})

	p.keys("q")
	p.waitFor("the watch ended by q", func(s string) bool { return strings.Contains(s, "exited 0") })
}

// TestWatchViewSpawnedServerLogInTmux: a spawned server's stderr shows in
// the log pane, not between the frames.
func TestWatchViewSpawnedServerLogInTmux(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startTmux(t, 80, 30, shellLine(bin, "watch", "--", bin, "serve", "--dir", dir, "--stdio"))
	s := p.waitFor("the server's log in the pane", func(s string) bool {
		return strings.Contains(s, "\nlog\n") && strings.Contains(s, "watching directory")
	})
	if !strings.HasPrefix(s, "tidings watch  ") {
		t.Errorf("the first row is not the title: the log got between the frames")
	}
	if n := strings.Count(s, "watching directory"); n != 1 {
		t.Errorf("the server's line shows %d times, want once, in the pane", n)
	}
	p.keys("q")
	p.waitFor("the watch ended by q", func(s string) bool { return strings.Contains(s, "exited 0") })

	// With --server-log, it goes to the file instead.
	logFile := filepath.Join(t.TempDir(), "server.log")
	p = startTmux(t, 80, 30, shellLine(bin, "watch", "--server-log", logFile, "--", bin, "serve", "--dir", dir, "--stdio"))
	p.waitFor("the log file named", func(s string) bool { return strings.Contains(s, "log       "+logFile) })
	eventually(t, "the server's log in "+logFile, func() bool {
		b, _ := os.ReadFile(logFile)
		return strings.Contains(string(b), "watching directory")
	})
	if s := p.screen(); strings.Contains(s, "watching directory") {
		t.Errorf("the server's log reached the screen despite --server-log")
	}
	p.keys("q")
	p.waitFor("the watch ended by q", func(s string) bool { return strings.Contains(s, "exited 0") })
}
