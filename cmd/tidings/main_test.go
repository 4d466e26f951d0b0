//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"tidings/internal/sse"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 20 * time.Second

// buildBinary compiles this command, as a user would run it.
func buildBinary(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to build the binary: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "tidings")
	out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// request encodes one 2026-07-28 request line.
func request(t *testing.T, id any, method string, params map[string]any) []byte {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	params["_meta"] = map[string]any{
		mcp.MetaProtocolVersion:    mcp.Version,
		mcp.MetaClientCapabilities: map[string]any{},
	}
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type message struct {
	ID     any             `json:"id"`
	Method string          `json:"method"`
	Result map[string]any  `json:"result"`
	Error  json.RawMessage `json:"error"`
}

// waitExit waits for the process to end and returns its exit code.
func waitExit(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
		return cmd.ProcessState.ExitCode()
	case <-time.After(wait):
		_ = cmd.Process.Kill()
		<-done
		t.Fatal("the process did not exit in time")
	}
	return -1
}

func TestServe(t *testing.T) {
	bin := buildBinary(t)
	t.Run("stdio", func(t *testing.T) { testStdio(t, bin) })
	t.Run("http", func(t *testing.T) { testHTTP(t, bin) })
	t.Run("bad flags", func(t *testing.T) {
		var stderr bytes.Buffer
		cmd := exec.Command(bin, "serve", "--stdio")
		cmd.Stderr = &stderr
		if err := cmd.Run(); cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 {
			t.Fatalf("serve without --dir: %v", err)
		}
		if !strings.Contains(stderr.String(), `"dir" not set`) {
			t.Errorf("stderr = %q", stderr.String())
		}
	})
}

func testStdio(t *testing.T, bin string) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--dir", dir, "--stdio")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr testkit.SyncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			t.Logf("stderr:\n%s", stderr.String())
		}
	}()

	lines := make(chan []byte)
	go func() {
		defer close(lines)
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadBytes('\n')
			if len(line) > 0 {
				lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	next := func() message {
		t.Helper()
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("stdout closed early")
			}
			var m message
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatalf("stdout line is not JSON-RPC: %q", line)
			}
			return m
		case <-time.After(wait):
			t.Fatal("no response in time")
		}
		return message{}
	}

	in := append(request(t, 1, mcp.MethodDiscover, nil), '\n')
	in = append(in, request(t, "list", mcp.MethodResourcesList, nil)...)
	in = append(in, '\n')
	if _, err := stdin.Write(in); err != nil {
		t.Fatal(err)
	}
	got := map[string]message{}
	for range 2 {
		m := next()
		got[fmt.Sprint(m.ID)] = m
	}

	d := got["1"]
	if d.Error != nil || !slices.Contains(d.Result["supportedVersions"].([]any), any(mcp.Version)) {
		t.Fatalf("discover: %+v", d)
	}
	caps := d.Result["capabilities"].(map[string]any)
	if res, _ := caps["resources"].(map[string]any); res["subscribe"] != true || res["listChanged"] != true {
		t.Errorf("resources capability = %v", caps["resources"])
	}
	if caps["tools"] == nil {
		t.Errorf("no tools capability: %v", caps)
	}

	l := got["list"]
	if l.Error != nil || l.Result["resultType"] != mcp.ResultComplete {
		t.Fatalf("resources/list: %+v", l)
	}
	rs := l.Result["resources"].([]any)
	if len(rs) != 1 {
		t.Fatalf("resources = %v", rs)
	}
	r := rs[0].(map[string]any)
	if r["uri"] != "file://"+filepath.ToSlash(resolved)+"/hello.txt" || r["name"] != "hello.txt" || r["size"] != 5.0 {
		t.Errorf("resource = %v", r)
	}

	// Closing stdin ends the server cleanly, and nothing else reaches stdout.
	if err := stdin.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case line, ok := <-lines:
		if ok {
			t.Errorf("unexpected output after the responses: %q", line)
			for range lines {
			}
		}
	case <-time.After(wait):
		t.Fatal("stdout not closed after stdin was")
	}
	if code := waitExit(t, cmd); code != 0 {
		t.Fatalf("exit status %d", code)
	}
}

var listening = regexp.MustCompile(`listening on (https?://[^\s"]+)`)

func testHTTP(t *testing.T, bin string) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startListening(t, exec.Command(bin, "serve", "--dir", dir, "--addr", "127.0.0.1:0"))
	url := p.url
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/mcp") || strings.HasSuffix(url, ":0/mcp") {
		t.Fatalf("listening URL %q does not name the real port", url)
	}

	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	post := func(id any, method string, params map[string]any) *http.Response {
		t.Helper()
		return mcpPost(context.Background(), t, client, url, method, request(t, id, method, params))
	}

	resp := post(1, mcp.MethodToolsList, nil)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("tools/list: %d %v %s", resp.StatusCode, err, body)
	}
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range m.Result["tools"].([]any) {
		names = append(names, tool.(map[string]any)["name"].(string))
	}
	if want := []string{"file_info", "list_directory", "search_files"}; !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v", names, want)
	}

	// A listen open at SIGTERM ends with its complete result.
	resp = post("l", mcp.MethodListen, map[string]any{"notifications": map[string]any{"resourcesListChanged": true}})
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("listen: %d %s", resp.StatusCode, ct)
	}
	events := sse.NewReader(resp.Body, 0)
	ev, err := events.Next()
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(ev.Data, &m); err != nil || m.Method != mcp.NotifyAcknowledged {
		t.Fatalf("first event %s (%v)", ev.Data, err)
	}

	// A change while the listen is open: it is told, and /metrics counts
	// the requests, the open listen and the notification.
	if err := os.WriteFile(filepath.Join(dir, "b.txt"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	ev, err = events.Next()
	if err != nil {
		t.Fatal(err)
	}
	m = message{}
	if err := json.Unmarshal(ev.Data, &m); err != nil || m.Method != mcp.NotifyResourcesListChanged {
		t.Fatalf("after a new file: event %s (%v), want resources/list_changed", ev.Data, err)
	}
	base := strings.TrimSuffix(url, "/mcp")
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The stream counts a notification once written, which can be just
	// after the client has read it: poll, with a deadline.
	var metrics string
	for deadline := time.Now().Add(wait); ; {
		code, body := get("/metrics")
		if code != http.StatusOK {
			t.Fatalf("/metrics: %d", code)
		}
		metrics = body
		if strings.Contains(metrics, "tidings_notifications_sent_total 1") || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, series := range []string{
		`tidings_requests_total{method="tools/list",outcome="ok"} 1`,
		`tidings_listens_open 1`,
		`tidings_listens_parked 1`,
		`tidings_notifications_sent_total 1`,
		`tidings_request_duration_seconds_count{method="tools/list"} 1`,
		`tidings_stream_cutoffs_total 0`,
		`tidings_files_unlisted 0`,
		`tidings_files_searches_timed_out_total 0`,
		`go_goroutines`,
	} {
		if !strings.Contains(metrics, series) {
			t.Errorf("/metrics lacks %s", series)
		}
	}
	if code, _ := get("/healthz"); code != http.StatusOK {
		t.Errorf("/healthz: %d", code)
	}
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz: %d %s", code, body)
	}

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	ev, err = events.Next()
	if err != nil {
		t.Fatalf("listen ended without its result: %v", err)
	}
	m = message{}
	if err := json.Unmarshal(ev.Data, &m); err != nil || m.ID != "l" || m.Result["resultType"] != mcp.ResultComplete {
		t.Fatalf("last event %s (%v), want the complete result", ev.Data, err)
	}
	if code := p.exit(t); code != 0 {
		t.Fatalf("exit status %d after SIGTERM", code)
	}
}

// listeningProc is a tidings process serving HTTP (see startListening).
type listeningProc struct {
	cmd *exec.Cmd
	// url is what its "listening on" line named.
	url    string
	stderr *testkit.SyncBuffer
	// done is closed when its stderr ends: it is exiting.
	done   chan struct{}
	exited bool
}

// startListening starts cmd and waits for the URL its log says it
// listens on. The process is killed when the test ends unless it exited
// (exit), and its stderr is shown if the test failed.
func startListening(t *testing.T, cmd *exec.Cmd) *listeningProc {
	t.Helper()
	stderrPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &listeningProc{cmd: cmd, stderr: &testkit.SyncBuffer{}, done: make(chan struct{})}
	urls := make(chan string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderrPipe)
		for sc.Scan() {
			p.stderr.Write(append(sc.Bytes(), '\n'))
			if m := listening.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case urls <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, stderrPipe)
	}()
	t.Cleanup(func() {
		if !p.exited {
			_ = cmd.Process.Kill()
			<-p.done
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("stderr:\n%s", p.stderr.String())
		}
	})
	select {
	case p.url = <-urls:
	case <-p.done:
		t.Fatal("the process exited before it listened")
	case <-time.After(wait):
		t.Fatal("no listening line on stderr")
	}
	return p
}

// exit waits for the process to exit, and returns its status.
func (p *listeningProc) exit(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(wait):
		t.Fatal("the process did not exit")
	}
	p.exited = true
	return waitExit(t, p.cmd)
}
