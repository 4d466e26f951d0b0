package streamhttp_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/metrics"
	"tidings/server"
	"tidings/streamhttp"
)

// benchServer returns testkit's 50-tool server.
func benchServer(b *testing.B, opts ...server.Option) *server.Server {
	b.Helper()
	return testkit.ToolsServer(b, opts...)
}

// runToolsList POSTs the same tools/list b.N times and reads every body.
func runToolsList(b *testing.B, url string) {
	b.Helper()
	testkit.PostLoop(b, url, request(1, mcp.MethodToolsList, ""), headers(mcp.MethodToolsList, ""))
}

// BenchmarkToolsListHTTP is one tools/list of 50 tools through the real
// handler over loopback HTTP: body read, strict decode, header checks,
// dispatch and the response write.
func BenchmarkToolsListHTTP(b *testing.B) {
	ts := httptest.NewServer(streamhttp.New(benchServer(b)))
	defer ts.Close()
	runToolsList(b, ts.URL)
}

// BenchmarkToolsListHTTPMetrics is BenchmarkToolsListHTTP with the
// Prometheus metrics on: the cost of counting and timing each request.
func BenchmarkToolsListHTTPMetrics(b *testing.B) {
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	ts := httptest.NewServer(streamhttp.New(benchServer(b, m.ServerOptions()...)))
	defer ts.Close()
	runToolsList(b, ts.URL)
}

// BenchmarkToolsListPlainHandler serves the exact bytes the real handler
// answers with from a handler that does nothing else: the ceiling for
// BenchmarkToolsListHTTP on the same client and network path.
func BenchmarkToolsListPlainHandler(b *testing.B) {
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/", bytes.NewReader(request(1, mcp.MethodToolsList, "")))
	req.Header = headers(mcp.MethodToolsList, "")
	streamhttp.New(benchServer(b)).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("capturing the response: status %d: %s", rec.Code, rec.Body)
	}
	resp := rec.Body.Bytes()
	length := strconv.Itoa(len(resp))
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		h["Content-Length"] = []string{length}
		_, _ = w.Write(resp)
	}))
	defer ts.Close()
	runToolsList(b, ts.URL)
}
