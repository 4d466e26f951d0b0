// Package testkit holds small helpers that tests and benchmarks of
// several packages share.
package testkit

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/mcp"
	"tidings/server"
)

// SyncBuffer is a bytes.Buffer safe for concurrent writers and readers:
// a log sink or a subprocess's stderr that a test reads while it fills.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// PostLoop POSTs body with hdr to url b.N times on one keep-alive client,
// reads every response whole, and reports allocations, the response
// size and the process's CPU time per request, client and server
// (cpu-ns/op: what a request costs, however busy the machine's other
// processes keep its cores): the loop of the HTTP request benchmarks.
func PostLoop(b *testing.B, url string, body []byte, hdr http.Header) {
	b.Helper()
	c := benchClient()
	defer c.CloseIdleConnections()
	var n int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, cpuOK := ProcessCPU()
	for b.Loop() {
		n = post(b, c, url, body, hdr)
	}
	b.SetBytes(n)
	if cpu1, _ := ProcessCPU(); cpuOK {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
}

// PostPair is PostLoop against two servers at once: each op POSTs body
// to url and to ceiling, in turns, each on its own keep-alive client,
// and the benchmark reports the time of each (url-ns/op, ceiling-ns/op)
// and ceiling's time over url's (x-ceiling: url's share of the rate
// ceiling keeps up). Both are timed in the same moments, so that a
// machine whose other processes come and go slows both alike and the
// ratio holds where two benchmarks run one after the other would not.
func PostPair(b *testing.B, url, ceiling string, body []byte, hdr http.Header) {
	b.Helper()
	c, cc := benchClient(), benchClient()
	defer c.CloseIdleConnections()
	defer cc.CloseIdleConnections()
	var took, ceilingTook time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		t0 := time.Now()
		if i%2 == 0 {
			post(b, c, url, body, hdr)
			t1 := time.Now()
			post(b, cc, ceiling, body, hdr)
			took, ceilingTook = took+t1.Sub(t0), ceilingTook+time.Since(t1)
		} else {
			post(b, cc, ceiling, body, hdr)
			t1 := time.Now()
			post(b, c, url, body, hdr)
			took, ceilingTook = took+time.Since(t1), ceilingTook+t1.Sub(t0)
		}
		i++
	}
	b.ReportMetric(float64(took)/float64(i), "url-ns/op")
	b.ReportMetric(float64(ceilingTook)/float64(i), "ceiling-ns/op")
	b.ReportMetric(float64(ceilingTook)/float64(took), "x-ceiling")
}

// benchClient is a keep-alive client of the request benchmarks.
func benchClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
}

// post POSTs body with hdr to url, reads the response whole and returns
// its size.
func post(b *testing.B, c *http.Client, url string, body []byte, hdr http.Header) int64 {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header = hdr
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d, %v", resp.StatusCode, err)
	}
	return n
}

// benchSchema is the shape of a typical tool's input: a few documented
// properties, bounds and a required list.
const benchSchema = `{"type":"object","properties":{` +
	`"path":{"type":"string","description":"File path relative to the workspace root"},` +
	`"query":{"type":"string","description":"Text or regular expression to look for"},` +
	`"limit":{"type":"integer","minimum":1,"maximum":1000,"description":"Maximum number of results"},` +
	`"recursive":{"type":"boolean","default":false,"description":"Descend into subdirectories"}},` +
	`"required":["path","query"],"additionalProperties":false}`

// ToolsServer returns the server the tools/list benchmarks serve: 50
// tools of a typical size, so that figures of different packages compare.
func ToolsServer(tb testing.TB, opts ...server.Option) *server.Server {
	tb.Helper()
	srv := server.New(mcp.Implementation{Name: "bench", Version: "1.0.0"}, opts...)
	if err := AddBenchTools(srv); err != nil {
		tb.Fatal(err)
	}
	return srv
}

// AddBenchTools registers ToolsServer's 50 tools on srv, for benchmarks
// that make their servers themselves (replicas of a cluster).
func AddBenchTools(srv *server.Server) error {
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
			return fmt.Errorf("bench tool %d: %w", i, err)
		}
	}
	return nil
}

// WaitFor polls cond every millisecond until it holds, or fails the test
// once d has passed.
func WaitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("timed out after %v waiting for %s", d, what)
		case <-tick.C:
		}
	}
}
