package metrics_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/goleak"

	"tidings/bus"
	"tidings/client"
	"tidings/mcp"
	"tidings/metrics"
	"tidings/server"
	"tidings/streamhttp"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func hello(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("hi")}}, nil
}

// scrape reads one series' value from /metrics (-1 when absent).
func scrape(t *testing.T, url, series string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(b)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitSeries polls /metrics until series satisfies ok.
func waitSeries(t *testing.T, url, series string, ok func(float64) bool) float64 {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		v := scrape(t, url, series)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %v, not the value wanted", series, v)
		}
		time.Sleep(10 * time.Millisecond) // polling a scrape, with a deadline
	}
}

// newMeasuredServer serves a server with metrics: /mcp and /metrics on
// one loopback listener, closed at the test's end.
func newMeasuredServer(t *testing.T, opts ...server.Option) (*server.Server, *httptest.Server) {
	t.Helper()
	return newMeasuredHandler(t, nil, opts...)
}

// newMeasuredHandler is newMeasuredServer with handler options.
func newMeasuredHandler(t *testing.T, hopts []streamhttp.Option, opts ...server.Option) (*server.Server, *httptest.Server) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(mcp.Implementation{Name: "m", Version: "1"}, append(m.ServerOptions(), opts...)...)
	mux := http.NewServeMux()
	mux.Handle("/mcp", streamhttp.New(srv, hopts...))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return srv, ts
}

// TestScrapeAfterListenAndChange: a real server with its /metrics beside
// /mcp counts requests, the open listen, and the notification of a change;
// a parked listen (streamhttp.WithParking) is counted open until it ends,
// though its handler returned when it was parked.
func TestScrapeAfterListenAndChange(t *testing.T) {
	t.Run("goroutine", func(t *testing.T) { testScrapeAfterListenAndChange(t, nil) })
	t.Run("parked", func(t *testing.T) { testScrapeAfterListenAndChange(t, []streamhttp.Option{streamhttp.WithParking()}) })
}

func testScrapeAfterListenAndChange(t *testing.T, hopts []streamhttp.Option) {
	srv, ts := newMeasuredHandler(t, hopts)
	if err := srv.AddTool(mcp.Tool{Name: "a"}, hello); err != nil {
		t.Fatal(err)
	}
	scrapeURL := ts.URL + "/metrics"

	c := client.NewHTTP(ts.URL + "/mcp")
	defer c.Close()
	ctx := t.Context()
	if _, err := c.CallTool(ctx, "a", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	changed := make(chan struct{}, 16)
	w := c.Watch(ctx, client.WatchOptions{Tools: true, OnEvent: func(e client.Event) {
		if e.Kind == client.ToolsChanged && slices.Contains(e.Added, "b") {
			changed <- struct{}{}
		}
	}})
	waitSeries(t, scrapeURL, `tidings_listens_open`, func(v float64) bool { return v == 1 })
	if err := srv.AddTool(mcp.Tool{Name: "b"}, hello); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("the watcher never saw tool b")
	}
	if v := scrape(t, scrapeURL, `tidings_requests_total{method="tools/call",outcome="ok"}`); v != 1 {
		t.Errorf("tools/call ok = %v, want 1", v)
	}
	if v := scrape(t, scrapeURL, `tidings_request_duration_seconds_count{method="tools/list"}`); v < 1 {
		t.Errorf("tools/list timed %v times, want at least once", v)
	}
	// Counted once written, which may be just after the client read it.
	waitSeries(t, scrapeURL, `tidings_notifications_sent_total`, func(v float64) bool { return v >= 1 })
	w.Close()
	waitSeries(t, scrapeURL, `tidings_listens_open`, func(v float64) bool { return v == 0 })
	waitSeries(t, scrapeURL, `tidings_requests_total{method="subscriptions/listen",outcome="cancelled"}`, func(v float64) bool { return v >= 1 })
}

// TestUnknownMethodsShareOneLabel: methods a client makes up do not grow
// the series.
func TestUnknownMethodsShareOneLabel(t *testing.T) {
	_, ts := newMeasuredServer(t)
	c := client.NewHTTP(ts.URL + "/mcp")
	defer c.Close()
	for _, method := range []string{"x/one", "x/two", "x/three"} {
		_, _ = c.Request(t.Context(), method, map[string]any{})
	}
	if v := scrape(t, ts.URL+"/metrics", `tidings_requests_total{method="other",outcome="method_not_found"}`); v != 3 {
		t.Errorf("made-up methods counted %v times under \"other\", want 3", v)
	}
}

// TestRefusalsCounted: a request refused before it is served — here for
// a protocol version header that does not match its _meta — is counted
// under its outcome.
func TestRefusalsCounted(t *testing.T) {
	_, ts := newMeasuredServer(t)
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/mcp", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderProtocolVersion, "2099-01-01")
	req.Header.Set(mcp.HeaderMethod, "tools/list")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status %d, want 400", resp.StatusCode)
	}
	if v := scrape(t, ts.URL+"/metrics", `tidings_requests_total{method="tools/list",outcome="header_mismatch"}`); v != 1 {
		t.Errorf("header mismatches counted %v, want 1", v)
	}
}

// cutStore is a task store that refuses every call once cut, as the
// store of a replica that was killed is: nothing it does arrives.
type cutStore struct {
	bus.TaskStore
	cut atomic.Bool
}

var errCut = errors.New("cut off")

func (s *cutStore) Get(ctx context.Context, id string) ([]byte, uint64, error) {
	if s.cut.Load() {
		return nil, 0, errCut
	}
	return s.TaskStore.Get(ctx, id)
}

func (s *cutStore) Update(ctx context.Context, id string, rec []byte, rev uint64) (uint64, error) {
	if s.cut.Load() {
		return 0, errCut
	}
	return s.TaskStore.Update(ctx, id, rec, rev)
}

// TestTaskLeaseLapsedCounted: a replica that fails a task because the
// replica running it stopped renewing its lease counts it, once.
func TestTaskLeaseLapsedCounted(t *testing.T) {
	store := bus.NewLocalTasks()
	runnerStore := &cutStore{TaskStore: store}
	common := []server.Option{server.WithSecret([]byte("the replicas' shared secret, of 32 bytes or more")),
		server.WithTaskLease(100 * time.Millisecond), server.WithLogger(slog.New(slog.DiscardHandler))}
	runner := server.New(mcp.Implementation{Name: "runner", Version: "1"}, append(common, server.WithTaskStore(runnerStore))...)
	defer func() {
		runnerStore.cut.Store(false) // back, its task failed: it stops the work
		if err := runner.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
	}()
	if err := runner.AddTool(mcp.Tool{Name: "job"}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return req.RunAsTask(ctx, func(ctx context.Context, _ *server.ToolRequest) (*mcp.CallToolResult, error) {
			<-ctx.Done()
			return nil, context.Cause(ctx)
		})
	}); err != nil {
		t.Fatal(err)
	}
	rts := httptest.NewServer(streamhttp.New(runner))
	defer rts.Close()
	other, ts := newMeasuredServer(t, append(common, server.WithTaskStore(store))...)
	defer func() { _ = other.Shutdown(context.Background()) }()
	scrapeURL := ts.URL + "/metrics"
	if v := scrape(t, scrapeURL, "tidings_tasks_lease_lapsed_total"); v != 0 {
		t.Fatalf("before any task: %v", v)
	}

	rc := client.NewHTTP(rts.URL)
	defer rc.Close()
	raw, err := rc.Request(t.Context(), mcp.MethodToolsCall, map[string]any{"name": "job", "arguments": map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	var created mcp.Task
	if err := json.Unmarshal(raw, &created); err != nil || created.TaskID == "" {
		t.Fatalf("tools/call: %s (%v), want a task", raw, err)
	}
	runnerStore.cut.Store(true)
	c := client.NewHTTP(ts.URL + "/mcp")
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		raw, err := c.Request(t.Context(), mcp.MethodTasksGet, map[string]any{"taskId": created.TaskID})
		var task mcp.Task
		if err == nil && json.Unmarshal(raw, &task) == nil && task.Status == mcp.TaskFailed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the task is still %s, %v: %s", task.Status, err, raw)
		}
		time.Sleep(10 * time.Millisecond) // polling the task, with a deadline
	}
	if v := scrape(t, scrapeURL, "tidings_tasks_lease_lapsed_total"); v != 1 {
		t.Errorf("tidings_tasks_lease_lapsed_total = %v, want 1", v)
	}
}
