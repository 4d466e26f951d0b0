package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"tidings/internal/testrig/testbroker"
	"tidings/internal/testrig/testkit"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// TestServeSecret: the key comes from a file or from TIDINGS_SECRET, not
// both, trimmed, and at least 32 bytes long; neither means none.
func TestServeSecret(t *testing.T) {
	dir := t.TempDir()
	key := strings.Repeat("k", 40)
	good := filepath.Join(dir, "good")
	short := filepath.Join(dir, "short")
	binary := filepath.Join(dir, "binary")
	raw := " \t" + strings.Repeat("\x00k", 16) + "\n "
	crlf := filepath.Join(dir, "crlf")
	for name, body := range map[string]string{good: key + "\n", short: "tiny\n", binary: raw + "\n", crlf: key + "\r\n"} {
		if err := os.WriteFile(name, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		file, env string
		want      string // the key, or "error: " and part of the message
	}{
		{"", "", ""},
		{good, "", key},
		{binary, "", raw},
		{crlf, "", key},
		{"", " " + key + "\n", key},
		{good, key, "error: not both"},
		{short, "", "error: 4 bytes"},
		{"", "short", "error: at least 32"},
		{filepath.Join(dir, "none"), "", "error: --secret-file"},
	} {
		got, err := serveSecret(c.file, c.env)
		res := string(got)
		if err != nil {
			res = "error: " + err.Error()
		}
		if strings.HasPrefix(c.want, "error: ") && !strings.Contains(res, strings.TrimPrefix(c.want, "error: ")) ||
			!strings.HasPrefix(c.want, "error: ") && res != c.want {
			t.Errorf("serveSecret(%q, %q) = %q, want %q", c.file, c.env, res, c.want)
		}
	}
}

// replicaServe is one `serve` run in this process.
type replicaServe struct {
	url    string // http://HOST:PORT
	logs   *testkit.SyncBuffer
	cancel context.CancelFunc
	done   chan error
}

var listeningOn = regexp.MustCompile(`listening on (http://\S+)/mcp`)

// startReplica serves dir over HTTP on the bus at busURL with key, and
// waits until it listens and watches the directory.
func startReplica(t *testing.T, dir, busURL string, key []byte) *replicaServe {
	t.Helper()
	cfg := serveConfig{dir: dir, addr: "127.0.0.1:0", maxFiles: 1000, maxRead: 1 << 20, maxSearch: 1 << 20,
		searchBudget: 1 << 20, rootGrace: time.Minute, shutdownTimeout: 5 * time.Second, bus: busURL, secret: key}
	r := &replicaServe{logs: &testkit.SyncBuffer{}, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- runServe(ctx, cfg, slog.New(slog.NewTextHandler(r.logs, nil)), nil, io.Discard) }()
	t.Cleanup(func() { r.stop(t) })
	eventually(t, "a replica listening and watching", func() bool {
		m := listeningOn.FindStringSubmatch(r.logs.String())
		if m != nil {
			r.url = m[1]
		}
		return m != nil && strings.Contains(r.logs.String(), "watching directory")
	})
	return r
}

func (r *replicaServe) stop(t *testing.T) {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("serve ended with %v\n%s", err, r.logs.String())
		}
	case <-time.After(wait):
		t.Errorf("serve did not end\n%s", r.logs.String())
	}
}

// get returns the status and body of a GET of path.
func (r *replicaServe) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(r.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// series reads one series' value from /metrics (-1 when absent).
func (r *replicaServe) series(t *testing.T, name string) float64 {
	t.Helper()
	_, body := r.get(t, "/metrics")
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// ready reports /readyz's status and whether its body has line.
func (r *replicaServe) ready(t *testing.T, line string) bool {
	t.Helper()
	code, body := r.get(t, "/readyz")
	if code != http.StatusOK {
		t.Fatalf("/readyz = %d %q, want 200 whatever the bus does", code, body)
	}
	return strings.Contains(body, line+"\n")
}

// listResources posts a resources/list with cursor ("" for the first
// page) and returns the result or the error code.
func (r *replicaServe) listResources(t *testing.T, cursor string) (next string, code jsonrpc.Code) {
	t.Helper()
	params := map[string]any{}
	if cursor != "" {
		params["cursor"] = cursor
	}
	req, err := http.NewRequest(http.MethodPost, r.url+"/mcp", bytes.NewReader(request(t, 1, mcp.MethodResourcesList, params)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version)
	req.Header.Set(mcp.HeaderMethod, mcp.MethodResourcesList)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Result *struct {
			NextCursor string `json:"nextCursor"`
		} `json:"result"`
		Error *struct {
			Code jsonrpc.Code `json:"code"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("resources/list: %v", err)
	}
	if out.Error != nil {
		return "", out.Error.Code
	}
	return out.Result.NextCursor, 0
}

// TestServeCluster: replicas of `serve --bus` on a real NATS server
// serve one directory: a change seen by one reaches the others over the
// bus, a cursor from one is good on another with the same key and
// refused by one with another key, whose bus messages the others drop
// and count as it drops theirs; /readyz and /metrics tell the bus's
// health, and stay ready while the broker is down and back.
func TestServeCluster(t *testing.T) {
	nats := testbroker.StartNATS(t)
	dir := t.TempDir()
	for i := range 101 { // more than a page
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d.txt", i)), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	key := []byte(strings.Repeat("k", 32))
	a := startReplica(t, dir, nats.URL(), key)
	b := startReplica(t, dir, nats.URL(), key)
	other := startReplica(t, dir, nats.URL(), []byte(strings.Repeat("o", 32)))
	reps := []*replicaServe{a, b, other}
	const refused = `tidings_bus_messages_refused_total{reason="bad_mac"}`
	for _, r := range reps {
		peers := 1.0 // the one with the same key
		if r == other {
			peers = 0
		}
		eventually(t, "replicas hearing each other", func() bool {
			return r.series(t, "tidings_bus_peers") == peers && r.series(t, refused) > 0
		})
		if !r.ready(t, "bus: connected") || r.series(t, "tidings_bus_connected") != 1 {
			t.Fatalf("a fresh replica does not report its bus connected:\n%s", r.logs.String())
		}
		if _, body := r.get(t, "/readyz"); !strings.Contains(body, "\nbus server: ") || !strings.Contains(body, " (nats://127.0.0.1:") {
			t.Errorf("/readyz does not name the NATS server the bus is on: %q", body)
		}
	}

	cursor, code := a.listResources(t, "")
	if code != 0 || cursor == "" {
		t.Fatalf("A's first page: cursor %q, error %d", cursor, code)
	}
	if _, code := b.listResources(t, cursor); code != 0 {
		t.Errorf("B refused A's cursor: %d", code)
	}
	if _, code := other.listResources(t, cursor); code != -32602 {
		t.Errorf("a replica with another key answered A's cursor with %d, want -32602", code)
	}

	// A file every replica sees: each publishes the change, and each
	// hears the others'.
	before := b.series(t, "tidings_bus_events_received_total")
	if err := os.WriteFile(filepath.Join(dir, "new.txt"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "B to receive the others' change", func() bool {
		return b.series(t, "tidings_bus_events_received_total") > before
	})

	nats.Down()
	for _, r := range reps {
		eventually(t, "/readyz to say the bus is down", func() bool { return r.ready(t, "bus: disconnected") })
		if v := r.series(t, "tidings_bus_connected"); v != 0 {
			t.Errorf("tidings_bus_connected = %v with the broker down", v)
		}
	}
	nats.Up()
	for _, r := range reps {
		eventually(t, "/readyz to say the bus is back", func() bool { return r.ready(t, "bus: connected") })
		if v := r.series(t, "tidings_bus_reconnects_total"); v != 1 {
			t.Errorf("tidings_bus_reconnects_total = %v, want 1", v)
		}
		if v := r.series(t, "tidings_bus_resyncs_total"); v < 1 {
			t.Errorf("tidings_bus_resyncs_total = %v after a reconnect, want at least 1", v)
		}
		if v := r.series(t, "tidings_bus_lag_max_seconds"); v < 0 {
			t.Errorf("no lag series")
		}
	}
	for _, r := range reps {
		r.stop(t)
	}
}

// TestServeBusErrorHidesThePassword: serve's startup error for a --bus
// URL that does not parse, or names a broker that is not there, does not
// show the password it holds.
func TestServeBusErrorHidesThePassword(t *testing.T) {
	for _, u := range []string{
		"redis://user:hunter2/x@127.0.0.1:1",
		"redis://user:hunter2@[::1",
		"nats://user:hunter2@127.0.0.1:1/a",
		"redis://user:hunter2@127.0.0.1:1",
	} {
		cfg := serveConfig{dir: t.TempDir(), addr: "127.0.0.1:0", maxFiles: 1000, maxRead: 1 << 20, maxSearch: 1 << 20,
			searchBudget: 1 << 20, rootGrace: time.Minute, shutdownTimeout: 5 * time.Second, bus: u}
		logs := &testkit.SyncBuffer{}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := runServe(ctx, cfg, slog.New(slog.NewTextHandler(logs, nil)), nil, io.Discard)
		cancel()
		if err == nil {
			t.Errorf("%s: serve started", u)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") || strings.Contains(logs.String(), "hunter2") {
			t.Errorf("%s: the password shows: %v\n%s", u, err, logs)
		}
	}
}
