package streamhttp_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/prometheus/client_golang/prometheus"

	"tidings/mcp"
	"tidings/metrics"
	"tidings/server"
	"tidings/streamhttp"
)

// benchSchema is the shape of a typical tool's input: a few documented
// properties, bounds and a required list.
const benchSchema = `{"type":"object","properties":{` +
	`"path":{"type":"string","description":"File path relative to the workspace root"},` +
	`"query":{"type":"string","description":"Text or regular expression to look for"},` +
	`"limit":{"type":"integer","minimum":1,"maximum":1000,"description":"Maximum number of results"},` +
	`"recursive":{"type":"boolean","default":false,"description":"Descend into subdirectories"}},` +
	`"required":["path","query"],"additionalProperties":false}`

// benchServer returns a server with 50 tools.
func benchServer(b *testing.B, opts ...server.Option) *server.Server {
	b.Helper()
	srv := server.New(mcp.Implementation{Name: "bench", Version: "1.0.0"}, opts...)
	yes := true
	for i := range 50 {
		err := srv.AddTool(mcp.Tool{
			Name:        fmt.Sprintf("search_files_%02d", i),
			Title:       fmt.Sprintf("Search files (%d)", i),
			Description: "Searches the files under a path for text and returns matching lines with their locations.",
			InputSchema: jsontext.Value(benchSchema),
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: &yes},
		}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return srv
}

// benchClient is the keep-alive client both tools/list benchmarks use.
func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
}

// runToolsList POSTs the same tools/list b.N times and reads every body.
func runToolsList(b *testing.B, url string) {
	b.Helper()
	c := benchClient()
	defer c.CloseIdleConnections()
	body := request(1, mcp.MethodToolsList, "")
	hdr := headers(mcp.MethodToolsList, "")
	var n int64
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header = hdr
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		m, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d, %v", resp.StatusCode, err)
		}
		n = m
	}
	b.SetBytes(n)
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
