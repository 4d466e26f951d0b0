package metrics_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/goleak"

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
func newMeasuredServer(t *testing.T) (*server.Server, *httptest.Server) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(mcp.Implementation{Name: "m", Version: "1"}, m.ServerOptions()...)
	mux := http.NewServeMux()
	mux.Handle("/mcp", streamhttp.New(srv))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return srv, ts
}

// TestScrapeAfterListenAndChange: a real server with its /metrics beside
// /mcp counts requests, the open listen, and the notification of a change.
func TestScrapeAfterListenAndChange(t *testing.T) {
	srv, ts := newMeasuredServer(t)
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
