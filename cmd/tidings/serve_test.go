//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"tidings/dirsource"
	"tidings/internal/testrig/testkit"
)

func TestServeDir(t *testing.T) {
	for _, c := range []struct {
		name    string
		flag    string
		flagSet bool
		args    []string
		want    string // the directory, or "error: " and part of the message
	}{
		{"positional", "", false, []string{"docs"}, "docs"},
		{"flag", "docs", true, nil, "docs"},
		{"dot", ".", true, nil, "."},
		{"neither", "", false, nil, `error: "dir" not set`},
		{"both", "a", true, []string{"b"}, "error: not both"},
		{"empty flag", "", true, nil, `error: use "."`},
		{"blank flag", "  ", true, nil, `error: use "."`},
		{"empty argument", "", false, []string{""}, `error: use "."`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := serveDir(c.flag, c.flagSet, c.args)
			if err != nil {
				got = "error: " + err.Error()
			}
			if strings.HasPrefix(c.want, "error: ") && !strings.Contains(got, strings.TrimPrefix(c.want, "error: ")) ||
				!strings.HasPrefix(c.want, "error: ") && got != c.want {
				t.Errorf("serveDir(%q, %v, %q) = %q, want %q", c.flag, c.flagSet, c.args, got, c.want)
			}
		})
	}
}

func TestByteSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{"4096": 4096, "64KiB": 64 << 10, "8MiB": 8 << 20, "1G": 1 << 30, "3 K": 3 << 10, "10B": 10} {
		var b byteSize
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("Set(%q) = %d, %v; want %d", in, b, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "x", "1.5MiB", "9999999999G"} {
		var b byteSize
		if err := b.Set(in); err == nil {
			t.Errorf("Set(%q) accepted: %d", in, b)
		}
	}
	b := byteSize(8 << 20)
	if b.String() != "8MiB" {
		t.Errorf("String = %q", b.String())
	}
}

// TestServePositionalDir serves a directory named by the argument over
// stdio, in process, until stdin ends.
func TestServePositionalDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := bytes.NewReader(append(request(t, 1, "resources/list", nil), '\n'))
	var out, errOut bytes.Buffer
	cmd := newRootCmd()
	cmd.SetArgs([]string{"serve", dir, "--stdio", "--max-files", "5", "--max-read-bytes", "1KiB"})
	cmd.SetIn(in)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("serve DIR: %v\n%s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "hello.txt") {
		t.Errorf("resources/list did not list hello.txt: %s", out.String())
	}
}

// TestServeExitsWhenTheDirectoryIsGoneForGood removes the served
// directory and its parent: serve must end with an error that says so.
func TestServeExitsWhenTheDirectoryIsGoneForGood(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "parent", "served")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stdin, stdinW := io.Pipe()
	defer stdinW.Close()
	cfg := serveConfig{dir: dir, stdio: true, maxFiles: 10, maxRead: 1 << 10, maxSearch: 1 << 10, searchBudget: 1 << 20,
		rootGrace: 100 * time.Millisecond, shutdownTimeout: time.Second}
	var logs testkit.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	done := make(chan error, 1)
	go func() { done <- runServe(context.Background(), cfg, log, stdin, io.Discard) }()
	deadline := time.Now().Add(wait)
	for !strings.Contains(logs.String(), "watching directory") {
		if time.Now().After(deadline) {
			t.Fatalf("not watching: %s", logs.String())
		}
		time.Sleep(10 * time.Millisecond) // polling with a deadline
	}
	if err := os.RemoveAll(filepath.Join(base, "parent")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, dirsource.ErrRootGone) {
			t.Fatalf("serve ended with %v, want ErrRootGone", err)
		}
	case <-time.After(wait):
		t.Fatal("serve kept running without its directory")
	}
}

// TestServeDirectoryNamedNotInUTF8 serves, over stdio, a directory whose
// own name and one file's name are Latin-1 bytes, not UTF-8: every
// answer still encodes, the instructions included.
func TestServeDirectoryNamedNotInUTF8(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "r\xe9sum\xe9s")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a.txt", "caf\xe9.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var in bytes.Buffer
	methods := []string{"server/discover", "resources/list", "resources/templates/list", "tools/list"}
	for i, m := range methods {
		in.Write(append(request(t, i+1, m, nil), '\n'))
	}
	var out, errOut bytes.Buffer
	cmd := newRootCmd()
	cmd.SetArgs([]string{"serve", dir, "--stdio"})
	cmd.SetIn(&in)
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("serve: %v\n%s", err, errOut.String())
	}
	answered := map[float64]bool{}
	for line := range strings.Lines(out.String()) {
		var m message
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		if m.Error != nil || m.Result == nil {
			t.Errorf("request %v: %s", m.ID, line)
			continue
		}
		answered[m.ID.(float64)] = true
		if m.ID == 1.0 && !strings.Contains(m.Result["instructions"].(string), "r%E9sum%E9s") {
			t.Errorf("instructions = %q", m.Result["instructions"])
		}
		if m.ID == 2.0 && !strings.Contains(line, `"name":"caf%E9.txt"`) {
			t.Errorf("resources/list = %s", line)
		}
	}
	if len(answered) != len(methods) {
		t.Errorf("answered %v of %v\n%s", answered, methods, errOut.String())
	}
}

func TestServeRefusesToolLimitsOfZero(t *testing.T) {
	for _, flag := range []string{"--search-timeout=0s", "--max-regexp-size=0", "--max-dir-entries=-1"} {
		cmd := newRootCmd()
		cmd.SetArgs([]string{"serve", t.TempDir(), "--stdio", flag})
		cmd.SetIn(strings.NewReader(""))
		cmd.SetOut(io.Discard)
		cmd.SetErr(io.Discard)
		name := strings.SplitN(flag, "=", 2)[0]
		if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), name+" must be positive") {
			t.Errorf("%s: %v", flag, err)
		}
	}
}

// TestServeGitignore serves a checkout over stdio: what its .gitignore
// and --exclude name is left out, unless --no-gitignore.
func TestServeGitignore(t *testing.T) {
	dir := t.TempDir()
	for rel, body := range map[string]string{
		".gitignore":                "node_modules/\n",
		"node_modules/dep/index.js": "x",
		"main.go":                   "package main",
		"scratch.tmp":               "x",
	} {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	list := func(flags ...string) string {
		t.Helper()
		var out, errOut bytes.Buffer
		cmd := newRootCmd()
		cmd.SetArgs(append([]string{"serve", dir, "--stdio"}, flags...))
		cmd.SetIn(bytes.NewReader(append(request(t, 1, "resources/list", nil), '\n')))
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Fatalf("serve %v: %v\n%s", flags, err, errOut.String())
		}
		return out.String()
	}
	for _, c := range []struct {
		flags     []string
		want, not []string
	}{
		{nil, []string{"main.go", "scratch.tmp"}, []string{"index.js"}},
		{[]string{"--exclude", "*.tmp", "--exclude", "/main.go"}, nil, []string{"main.go", "scratch.tmp", "index.js"}},
		{[]string{"--no-gitignore"}, []string{"main.go", "scratch.tmp", "node_modules/dep/index.js"}, nil},
		{[]string{"--no-gitignore", "--exclude", "*.tmp"}, []string{"main.go", "index.js"}, []string{"scratch.tmp"}},
	} {
		out := list(c.flags...)
		for _, w := range c.want {
			if !strings.Contains(out, w) {
				t.Errorf("serve %v: %s not listed: %s", c.flags, w, out)
			}
		}
		for _, n := range c.not {
			if strings.Contains(out, n) {
				t.Errorf("serve %v: %s listed: %s", c.flags, n, out)
			}
		}
	}

	cmd := newRootCmd()
	cmd.SetArgs([]string{"serve", dir, "--stdio", "--exclude", "#generated"})
	cmd.SetIn(strings.NewReader(""))
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	if err := cmd.ExecuteContext(context.Background()); err == nil || !strings.Contains(err.Error(), `--exclude: pattern "#generated" is a comment`) {
		t.Errorf("serve --exclude '#generated' = %v, want a refusal that says the pattern is a comment", err)
	}
}
