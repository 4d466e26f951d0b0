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
	benchPlain(b, request(1, mcp.MethodToolsList, ""), headers(mcp.MethodToolsList, ""))
}

// benchPlain captures the real handler's answer to body and then POSTs
// body b.N times to a handler that only reads the request and writes
// that answer.
func benchPlain(b *testing.B, body []byte, hdr http.Header) {
	b.Helper()
	ts := plainServer(b, body, hdr)
	defer ts.Close()
	testkit.PostLoop(b, ts.URL, body, hdr)
}

// plainServer captures the real handler's answer to body and serves it
// from a handler that only reads the request and writes that answer.
func plainServer(b *testing.B, body []byte, hdr http.Header) *httptest.Server {
	b.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/", bytes.NewReader(body))
	req.Header = hdr
	streamhttp.New(benchServer(b)).ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("capturing the response: status %d: %s", rec.Code, rec.Body)
	}
	resp := rec.Body.Bytes()
	length := strconv.Itoa(len(resp))
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		h := w.Header()
		h["Content-Type"] = []string{"application/json"}
		h["Content-Length"] = []string{length}
		_, _ = w.Write(resp)
	}))
}

// benchPair POSTs body to the real handler and to the plain one in
// turns (testkit.PostPair): x-ceiling is the real handler's share of
// the plain one's rate, measured in the same moments.
func benchPair(b *testing.B, body []byte, hdr http.Header) {
	b.Helper()
	plain := plainServer(b, body, hdr)
	defer plain.Close()
	ts := httptest.NewServer(streamhttp.New(benchServer(b)))
	defer ts.Close()
	testkit.PostPair(b, ts.URL, plain.URL, body, hdr)
}

// BenchmarkToolsListVsPlain is BenchmarkToolsListHTTP and
// BenchmarkToolsListPlainHandler in one: its x-ceiling is the real
// handler's share of the plain one's rate.
func BenchmarkToolsListVsPlain(b *testing.B) {
	benchPair(b, request(1, mcp.MethodToolsList, ""), headers(mcp.MethodToolsList, ""))
}

// BenchmarkToolsCallVsPlain is BenchmarkToolsCallHTTP and
// BenchmarkToolsCallPlainHandler in one (see BenchmarkToolsListVsPlain).
func BenchmarkToolsCallVsPlain(b *testing.B) {
	benchPair(b, request(1, mcp.MethodToolsCall, callArgs), headers(mcp.MethodToolsCall, "search_files_07"))
}

// callArgs are the arguments of the benchmarks' tools/call.
const callArgs = `"name":"search_files_07","arguments":{"path":"src","query":"TODO","limit":10}`

// BenchmarkToolsCallHTTP is one tools/call through the real handler over
// loopback HTTP: the Mcp-Name header held against the body, the
// arguments validated against the tool's input schema, the handler run
// and its result written.
func BenchmarkToolsCallHTTP(b *testing.B) {
	ts := httptest.NewServer(streamhttp.New(benchServer(b)))
	defer ts.Close()
	testkit.PostLoop(b, ts.URL, request(1, mcp.MethodToolsCall, callArgs), headers(mcp.MethodToolsCall, "search_files_07"))
}

// BenchmarkToolsCallPlainHandler is BenchmarkToolsCallHTTP's ceiling: the
// same answer from a handler that only writes it.
func BenchmarkToolsCallPlainHandler(b *testing.B) {
	benchPlain(b, request(1, mcp.MethodToolsCall, callArgs), headers(mcp.MethodToolsCall, "search_files_07"))
}
