//go:build unix

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"tidings/internal/testrig/testkit"
	"tidings/jsonrpc"
)

// proc is a running tidings process whose output is read line by line.
type proc struct {
	t      *testing.T
	name   string
	cmd    *exec.Cmd
	lines  chan string // stdout, or stderr when that is what is followed
	stderr *testkit.SyncBuffer
	seen   []string
	exited bool
}

// start runs bin with args. With followStderr, stderr is read line by
// line (a server's logs) and stdout is collected; otherwise the reverse.
func start(t *testing.T, name, bin string, followStderr bool, args ...string) *proc {
	t.Helper()
	p := &proc{t: t, name: name, cmd: exec.Command(bin, args...), lines: make(chan string), stderr: &testkit.SyncBuffer{}}
	var pipe io.ReadCloser
	var err error
	if followStderr {
		pipe, err = p.cmd.StderrPipe()
		p.cmd.Stdout = p.stderr
	} else {
		pipe, err = p.cmd.StdoutPipe()
		p.cmd.Stderr = p.stderr
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		if !p.exited {
			_ = p.cmd.Process.Kill()
			for range p.lines {
			}
			_ = p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("%s read:\n%s\n%s other output:\n%s", p.name, strings.Join(p.seen, "\n"), p.name, p.stderr.String())
		}
	})
	return p
}

// expect reads lines until one satisfies ok, and returns it.
func (p *proc) expect(what string, ok func(string) bool) string {
	p.t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case line, open := <-p.lines:
			if !open {
				p.t.Fatalf("%s: output ended before %s", p.name, what)
			}
			p.seen = append(p.seen, line)
			if ok(line) {
				return line
			}
		case <-deadline:
			p.t.Fatalf("%s: no %s in time", p.name, what)
		}
	}
}

// stop signals the process, reads the rest of its output and returns its
// exit status.
func (p *proc) stop(sig os.Signal) int {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
	return p.wait()
}

// wait reads the rest of the output and returns the exit status.
func (p *proc) wait() int {
	p.t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case line, open := <-p.lines:
			if open {
				p.seen = append(p.seen, line)
				continue
			}
			p.exited = true
			return waitExit(p.t, p.cmd)
		case <-deadline:
			p.t.Fatalf("%s: did not end in time", p.name)
		}
	}
}

// plainEvent matches a plain watch line: time, event, fields.
var plainEvent = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ([a-z_]+)(?: (.*))?$`)

// plainField returns the comma-separated names of one key=value field.
func plainField(line, key string) []string {
	m := plainEvent.FindStringSubmatch(line)
	if m == nil {
		return nil
	}
	for f := range strings.FieldsSeq(m[2]) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return strings.Split(v, ",")
		}
	}
	return nil
}

func isPlain(event string) func(string) bool {
	return func(line string) bool {
		m := plainEvent.FindStringSubmatch(line)
		return m != nil && m[1] == event
	}
}

type jsonLine struct {
	Time     time.Time       `json:"time"`
	Event    string          `json:"event"`
	Added    []string        `json:"added"`
	Granted  json.RawMessage `json:"granted"`
	Graceful bool            `json:"graceful"`
	Error    string          `json:"error"`
}

func parseJSONLine(t *testing.T, line string) jsonLine {
	t.Helper()
	var j jsonLine
	if err := json.Unmarshal([]byte(line), &j); err != nil {
		t.Fatalf("watch --json printed a line that is not an event: %q (%v)", line, err)
	}
	if j.Time.IsZero() {
		t.Fatalf("event without a time: %q", line)
	}
	return j
}

func isJSON(t *testing.T, event string) func(string) bool {
	return func(line string) bool { return parseJSONLine(t, line).Event == event }
}

// fileURI is the resource URI the directory server gives a file.
func fileURI(t *testing.T, dir, name string) string {
	t.Helper()
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	return "file://" + filepath.ToSlash(resolved) + "/" + name
}

// startServe runs `tidings serve` over HTTP and returns it with its URL,
// once it watches the directory.
func startServe(t *testing.T, bin, dir string) (*proc, string) {
	t.Helper()
	srv := start(t, "serve", bin, true, "serve", "--dir", dir, "--addr", "127.0.0.1:0")
	// Once it watches the directory, files created are changes it
	// announces.
	var url string
	watching := false
	srv.expect("listening and watching lines", func(l string) bool {
		if m := listening.FindStringSubmatch(l); m != nil {
			url = m[1]
		}
		watching = watching || strings.Contains(l, "watching directory")
		return url != "" && watching
	})
	srv.drain()
	return srv, url
}

// drain keeps reading the followed output in the background, so that a
// process nobody listens to any more never blocks on a full pipe.
func (p *proc) drain() {
	go func() {
		for line := range p.lines {
			_, _ = p.stderr.Write([]byte(line + "\n"))
		}
	}()
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(wait)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("no %s in time", what)
		}
	}
}

func TestWatch(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "old.txt"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv, url := startServe(t, bin, dir)

	// stdout is a pipe here, so watch prints lines, not the live view.
	plain := start(t, "watch", bin, false, "watch", url)
	js := start(t, "watch --json", bin, false, "watch", "--json", url)

	line := plain.expect("connected line", isPlain("connected"))
	if got := plainField(line, "granted"); !slices.Equal(got, []string{"tools", "resources"}) {
		t.Errorf("granted = %q in %q; the server offers tools and resources", got, line)
	}
	j := parseJSONLine(t, js.expect("connected event", isJSON(t, "connected")))
	var granted map[string]any
	if err := json.Unmarshal(j.Granted, &granted); err != nil || granted["toolsListChanged"] != true || granted["resourcesListChanged"] != true {
		t.Errorf("granted = %s", j.Granted)
	}

	// The first read reports what is there.
	old := fileURI(t, dir, "old.txt")
	line = plain.expect("first resources read", isPlain("resources_changed"))
	if got := plainField(line, "added"); !slices.Equal(got, []string{old}) {
		t.Errorf("first read %q, want added=%s", line, old)
	}
	j = parseJSONLine(t, js.expect("first resources read", isJSON(t, "resources_changed")))
	if !slices.Equal(j.Added, []string{old}) {
		t.Errorf("first read added %q, want %s", j.Added, old)
	}

	// A new file is announced, re-read and reported by name.
	if err := os.WriteFile(filepath.Join(dir, "new.txt"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	added := fileURI(t, dir, "new.txt")
	plain.expect("resources_changed added="+added, func(l string) bool {
		return isPlain("resources_changed")(l) && slices.Contains(plainField(l, "added"), added)
	})
	js.expect("resources_changed adding "+added, func(l string) bool {
		j := parseJSONLine(t, l)
		return j.Event == "resources_changed" && slices.Contains(j.Added, added)
	})

	// A server that dies mid-stream is reported as a drop.
	if err := srv.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	srv.wait()
	line = plain.expect("disconnected line", isPlain("disconnected"))
	if strings.Contains(line, "graceful") || !strings.Contains(line, ` error="`) {
		t.Errorf("a killed server is an abrupt drop: %q", line)
	}
	j = parseJSONLine(t, js.expect("disconnected event", isJSON(t, "disconnected")))
	if j.Graceful || j.Error == "" {
		t.Errorf("a killed server is an abrupt drop: %+v", j)
	}

	// SIGINT and SIGTERM end a watch cleanly, even while it reconnects.
	if code := plain.stop(os.Interrupt); code != 0 {
		t.Errorf("watch exit status %d after SIGINT", code)
	}
	if code := js.stop(syscall.SIGTERM); code != 0 {
		t.Errorf("watch --json exit status %d after SIGTERM", code)
	}
}

func TestWatchSpawned(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := fileURI(t, dir, "a.txt")
	w := start(t, "watch -- serve", bin, false, "watch", "--json", "--resource", a, "--", bin, "serve", "--dir", dir, "--stdio")
	j := parseJSONLine(t, w.expect("connected event", isJSON(t, "connected")))
	if !strings.Contains(string(j.Granted), a) {
		t.Errorf("granted %s, want the subscription to %s", j.Granted, a)
	}
	// The first read of the followed resource, then a write to it.
	w.expect("first read of "+a, func(l string) bool {
		j := parseJSONLine(t, l)
		return j.Event == "resource_updated" && slices.Equal(j.Added, []string{a})
	})
	// The spawned server's stderr is ours; once it says it watches the
	// directory, writes are announced.
	eventually(t, "watching line from the spawned server", func() bool {
		return strings.Contains(w.stderr.String(), "watching directory")
	})
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.expect("resource_updated for the write", func(l string) bool {
		var e struct {
			Event, URI string
			Changed    []string
		}
		return json.Unmarshal([]byte(l), &e) == nil && e.Event == "resource_updated" && e.URI == a && slices.Equal(e.Changed, []string{a})
	})
	if code := w.stop(syscall.SIGTERM); code != 0 {
		t.Errorf("exit status %d after SIGTERM", code)
	}
	// The spawned server was stopped by closing its stdin, and its stderr
	// reached ours.
	if !strings.Contains(w.stderr.String(), "stdin closed; exiting") {
		t.Errorf("the spawned server did not end on its closed stdin; stderr:\n%s", w.stderr.String())
	}
}

// run runs bin to completion and returns stdout, stderr and the exit status.
func run(t *testing.T, bin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	code := waitExit(t, cmd)
	return stdout.String(), stderr.String(), code
}

func TestCall(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	uri := fileURI(t, dir, "a.txt")
	_, url := startServe(t, bin, dir)

	decode := func(t *testing.T, out string, v any) {
		t.Helper()
		if !strings.HasPrefix(out, "[\n  {") && !strings.HasPrefix(out, "{\n  ") {
			t.Errorf("output is not indented JSON: %q", out)
		}
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("output is not JSON: %v\n%s", err, out)
		}
	}

	t.Run("tools over HTTP", func(t *testing.T) {
		out, errOut, code := run(t, bin, "call", url, "tools")
		if code != 0 {
			t.Fatalf("exit status %d: %s", code, errOut)
		}
		var tools []struct {
			Name        string         `json:"name"`
			InputSchema map[string]any `json:"inputSchema"`
		}
		decode(t, out, &tools)
		var names []string
		for _, tool := range tools {
			names = append(names, tool.Name)
			if tool.InputSchema["type"] != "object" {
				t.Errorf("tool %s input schema %v", tool.Name, tool.InputSchema)
			}
		}
		if want := []string{"file_info", "list_directory", "search_files"}; !slices.Equal(names, want) {
			t.Errorf("tools = %v, want %v", names, want)
		}
	})

	t.Run("resources over stdio", func(t *testing.T) {
		out, errOut, code := run(t, bin, "call", "resources", "--", bin, "serve", "--dir", dir, "--stdio")
		if code != 0 {
			t.Fatalf("exit status %d: %s", code, errOut)
		}
		var rs []map[string]any
		decode(t, out, &rs)
		if len(rs) != 1 || rs[0]["uri"] != uri || rs[0]["name"] != "a.txt" {
			t.Errorf("resources = %v, want just %s", rs, uri)
		}
		if errOut != "" {
			t.Errorf("a call that succeeded printed the spawned server's stderr:\n%s", errOut)
		}
		// With -v the server's stderr comes through as it comes: it shows
		// that the server ended on its closed stdin.
		_, errOut, code = run(t, bin, "call", "-v", "resources", "--", bin, "serve", "--dir", dir, "--stdio")
		if code != 0 || !strings.Contains(errOut, "stdin closed; exiting") {
			t.Errorf("-v: exit status %d, stderr does not show the server ending on its closed stdin:\n%s", code, errOut)
		}
		// A call that fails shows what the server said.
		_, errOut, code = run(t, bin, "call", "read", "file:///no/such/file", "--", bin, "serve", "--dir", dir, "--stdio")
		if code != 1 || !strings.Contains(errOut, "watching directory") {
			t.Errorf("failed call: exit status %d, stderr does not show the server's log:\n%s", code, errOut)
		}
	})

	t.Run("read", func(t *testing.T) {
		out, errOut, code := run(t, bin, "call", url, "read", uri)
		if code != 0 {
			t.Fatalf("exit status %d: %s", code, errOut)
		}
		var res struct {
			Contents []map[string]any `json:"contents"`
		}
		decode(t, out, &res)
		if len(res.Contents) != 1 || res.Contents[0]["uri"] != uri || res.Contents[0]["text"] != "hello" {
			t.Errorf("read = %v", res)
		}
	})

	t.Run("tool call", func(t *testing.T) {
		out, errOut, code := run(t, bin, "call", url, "call", "file_info", `{"path":"a.txt"}`)
		if code != 0 {
			t.Fatalf("exit status %d: %s", code, errOut)
		}
		var res struct {
			StructuredContent map[string]any `json:"structuredContent"`
			IsError           bool           `json:"isError"`
		}
		decode(t, out, &res)
		if res.IsError || res.StructuredContent["size"] != 5.0 || res.StructuredContent["uri"] != uri {
			t.Errorf("file_info = %+v", res)
		}
	})

	t.Run("tool error result", func(t *testing.T) {
		out, _, code := run(t, bin, "call", url, "call", "file_info", `{"path":"missing.txt"}`)
		if code != 2 {
			t.Errorf("exit status %d, want 2 for an isError result", code)
		}
		var res struct {
			IsError bool `json:"isError"`
		}
		decode(t, out, &res)
		if !res.IsError {
			t.Errorf("result printed without isError: %s", out)
		}
	})

	t.Run("JSON-RPC error", func(t *testing.T) {
		out, errOut, code := run(t, bin, "call", url, "read", "file:///no/such/file")
		if code != 1 || out != "" {
			t.Errorf("exit status %d, stdout %q; want 1 and nothing", code, out)
		}
		var e struct {
			Code    jsonrpc.Code `json:"code"`
			Message string       `json:"message"`
		}
		decode(t, errOut, &e)
		if e.Code != -32602 || e.Message == "" {
			t.Errorf("error object %+v", e)
		}
	})

	t.Run("discover", func(t *testing.T) {
		out, errOut, code := run(t, bin, "call", url, "discover")
		if code != 0 {
			t.Fatalf("exit status %d: %s", code, errOut)
		}
		var d map[string]any
		decode(t, out, &d)
		if !slices.Contains(d["supportedVersions"].([]any), any("2026-07-28")) || d["capabilities"] == nil {
			t.Errorf("discover = %v", d)
		}
	})

	t.Run("usage errors", func(t *testing.T) {
		for _, args := range [][]string{
			{"call", "tools"},
			{"call", url},
			{"call", url, "frobnicate"},
			{"call", url, "tools", "--", bin},
			{"watch", url, "extra"},
		} {
			out, errOut, code := run(t, bin, args...)
			if code != 1 || out != "" || !strings.HasPrefix(errOut, "Error: ") {
				t.Errorf("%q: exit status %d, stdout %q, stderr %q", args, code, out, errOut)
			}
		}
	})
}

func TestWatchEndsWithItsServer(t *testing.T) {
	bin := buildBinary(t)
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	// A server that dies at once leaves nothing to reconnect to.
	out, errOut, code := run(t, bin, "watch", "--", sh, "-c", "echo dying >&2; exit 3")
	if code != 1 || !strings.Contains(errOut, "Error: the server process exited") {
		t.Errorf("exit status %d, stderr %q; want 1 and the reason", code, errOut)
	}
	if !strings.Contains(errOut, "dying") {
		t.Errorf("the server's stderr did not reach ours: %q", errOut)
	}
	for line := range strings.Lines(out) {
		if !isPlain("disconnected")(strings.TrimSuffix(line, "\n")) {
			t.Errorf("unexpected output %q", line)
		}
	}
}

// legacyServerEnv makes the test binary act as a 2025-11-25 stdio server
// (see TestLegacyStdioServer).
const legacyServerEnv = "TIDINGS_TEST_LEGACY_SERVER"

// TestLegacyStdioServer is not a test: run with legacyServerEnv set, the
// test binary becomes a minimal server of the 2025-11-25 era, which has
// initialize and no server/discover, for `tidings call` to spawn.
func TestLegacyStdioServer(t *testing.T) {
	if os.Getenv(legacyServerEnv) == "" {
		t.Skip("only run as a spawned server")
	}
	sc := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for sc.Scan() {
		var req struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(sc.Bytes(), &req) != nil || req.ID == nil {
			continue // notifications need no answer
		}
		resp := map[string]any{"jsonrpc": "2.0", "id": req.ID}
		switch req.Method {
		case "initialize":
			resp["result"] = map[string]any{
				"protocolVersion": "2025-11-25",
				"capabilities":    map[string]any{"tools": map[string]any{}},
				"serverInfo":      map[string]any{"name": "old-server", "version": "0.9"},
				"instructions":    "from the past",
			}
		case "tools/list":
			resp["result"] = map[string]any{"tools": []any{map[string]any{"name": "old_tool", "inputSchema": map[string]any{"type": "object"}}}}
		default:
			resp["error"] = map[string]any{"code": -32601, "message": "Method not found"}
		}
		if err := out.Encode(resp); err != nil {
			os.Exit(1)
		}
	}
	// Nothing of the test framework may reach the client.
	os.Exit(0)
}

func TestCallLegacyServer(t *testing.T) {
	bin := buildBinary(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	call := func(what string) string {
		t.Helper()
		cmd := exec.Command(bin, "call", what, "--", self, "-test.run=^TestLegacyStdioServer$")
		cmd.Env = append(os.Environ(), legacyServerEnv+"=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		if code := waitExit(t, cmd); code != 0 {
			t.Fatalf("call %s: exit status %d: %s", what, code, stderr.String())
		}
		return stdout.String()
	}
	var d map[string]any
	if err := json.Unmarshal([]byte(call("discover")), &d); err != nil {
		t.Fatal(err)
	}
	info, _ := d["serverInfo"].(map[string]any)
	if !slices.Equal(d["supportedVersions"].([]any), []any{"2025-11-25"}) || info["name"] != "old-server" || d["instructions"] != "from the past" {
		t.Errorf("discover of a legacy server = %v", d)
	}
	var tools []map[string]any
	if err := json.Unmarshal([]byte(call("tools")), &tools); err != nil {
		t.Fatal(err)
	}
	if len(tools) != 1 || tools[0]["name"] != "old_tool" {
		t.Errorf("tools = %v", tools)
	}
}
