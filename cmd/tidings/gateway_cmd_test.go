package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"tidings/client"
	"tidings/gateway"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// TestGatewayCommand runs `tidings gateway` as a user would, in front of
// two `tidings serve --stdio` processes it starts itself: their tools are
// listed under their prefixes, a change to the config file is taken at
// once, a broken one is refused while the running one goes on, and
// SIGTERM ends it cleanly.
func TestGatewayCommand(t *testing.T) {
	bin := buildBinary(t)
	root := t.TempDir()
	docs, notes := filepath.Join(root, "docs"), filepath.Join(root, "notes")
	for _, d := range []string{docs, notes} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "a.txt"), []byte("a"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfgDir := t.TempDir()
	cfgFile := filepath.Join(cfgDir, "gateway.yaml")
	upstream := func(id, dir string) string {
		return "  - id: " + id + "\n    command: [" + bin + ", serve, --stdio, " + dir + "]\n"
	}
	write := func(body string) {
		t.Helper()
		// Written aside and renamed, as config managers do.
		tmp := cfgFile + ".new"
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfgFile); err != nil {
			t.Fatal(err)
		}
	}
	write("upstreams:\n" + upstream("docs", docs))

	p := startListening(t, exec.Command(bin, "gateway", "--config", cfgFile, "--addr", "127.0.0.1:0"))
	url, stderr := p.url, p.stderr

	c := client.NewHTTP(url)
	defer c.Close()
	tools := func() []string {
		ts, err := c.Tools(context.Background())
		if err != nil {
			t.Fatalf("tools: %v\n%s", err, stderr.String())
		}
		var out []string
		for _, tl := range ts {
			out = append(out, tl.Name)
		}
		return out
	}
	if got := tools(); !slices.Contains(got, "docs_search_files") || slices.ContainsFunc(got, func(s string) bool { return !strings.HasPrefix(s, "docs_") }) {
		t.Fatalf("tools %v, want docs_ ones", got)
	}
	base := strings.TrimSuffix(url, "/mcp")
	for _, p := range []string{"/healthz", "/readyz"} {
		resp, err := http.Get(base + p)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s", p, resp.Status)
		}
	}

	// A second upstream, by editing the file.
	write("upstreams:\n" + upstream("docs", docs) + upstream("notes", notes))
	testkit.WaitFor(t, wait, "the notes upstream after the config changed", func() bool {
		return slices.Contains(tools(), "notes_search_files")
	})

	// A file that does not check is refused, named, and changes nothing.
	write("upstreams:\n  - id: Bad\n    url: http://127.0.0.1:1/mcp\n")
	testkit.WaitFor(t, wait, "the refusal in the log", func() bool {
		return strings.Contains(stderr.String(), "configuration not reloaded")
	})
	if !strings.Contains(stderr.String(), `upstream 1 (\"Bad\"): the id has 'B' at byte 0`) {
		t.Fatalf("the refusal does not say what is wrong:\n%s", stderr.String())
	}
	if got := tools(); !slices.Contains(got, "notes_search_files") || !slices.Contains(got, "docs_search_files") {
		t.Fatalf("after a refused reload the tools are %v", got)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exit(t); code != 0 {
		t.Fatalf("the gateway exited with status %d after SIGTERM", code)
	}
}

// TestReloadWaitsOutAHalfWrittenFile: a config file caught half-written
// by a reload is read again, not reported; the whole file, once there,
// is taken.
func TestReloadWaitsOutAHalfWrittenFile(t *testing.T) {
	srv := server.New(mcp.Implementation{Name: "up", Version: "1"})
	hs := httptest.NewServer(streamhttp.New(srv))
	defer hs.Close()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()
	up := func(id string) string { return "  - id: " + id + "\n    url: " + hs.URL + "\n" }
	file := filepath.Join(t.TempDir(), "gateway.yaml")
	whole := "upstreams:\n" + up("a")
	if err := os.WriteFile(file, []byte(whole), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := gateway.LoadConfig(file)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	var logs testkit.SyncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		reloadOnChange(ctx, file, g, func(gateway.Config) error { return nil }, log)
	}()
	defer func() {
		cancel()
		<-done
	}()
	// The file as an editor leaves it halfway through writing it.
	next := whole + up("b")
	testkit.WaitFor(t, 10*time.Second, "the half-written file to be read again", func() bool {
		if err := os.WriteFile(file, []byte(whole+"  - id: b\n"), 0o644); err != nil { // no url yet
			t.Fatal(err)
		}
		return strings.Contains(logs.String(), "reading it again")
	})
	if err := os.WriteFile(file, []byte(next), 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the whole file to be taken", func() bool { return len(g.Stats()) == 2 })
	if strings.Contains(logs.String(), "configuration not reloaded") {
		t.Errorf("a half-written file was reported:\n%s", logs.String())
	}
}

// TestGatewayTakesItsFileAsAnArgument: tidings gateway FILE reads FILE,
// as --config FILE does, and two different files are refused.
func TestGatewayTakesItsFileAsAnArgument(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gateway.yaml")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"gateway", missing}, missing},
		{[]string{"gateway", missing, "--config", "other.yaml"}, "two config files"},
		{[]string{"gateway"}, "no config file"},
	} {
		root := newRootCmd()
		root.SetArgs(c.args)
		root.SetOut(io.Discard)
		root.SetErr(io.Discard)
		err := root.Execute()
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "unknown command") {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}
