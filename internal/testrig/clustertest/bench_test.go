package clustertest_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"tidings/internal/testrig/clustertest"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
)

// BenchmarkToolsListThroughBalancer measures tools/list (50 tools) from
// parallel keep-alive clients through each balancer in front of one
// replica and of three, and straight to one replica for reference. It
// reports requests per second. On a machine of few cores the replicas
// share them with the balancer and the clients, so three replicas show
// what the spreading costs rather than what it gains.
//
//	go test -run '^$' -bench ToolsListThroughBalancer ./internal/clustertest/
func BenchmarkToolsListThroughBalancer(b *testing.B) {
	setup := func(r *clustertest.Replica) error { return testkit.AddBenchTools(r.Server) }
	b.Run("direct/replicas=1", func(b *testing.B) {
		c := clustertest.Start(b, clustertest.Options{Replicas: 1, Setup: setup})
		postParallel(b, c.Replicas[0].URL()+"/mcp")
	})
	for _, lb := range balancers() {
		for _, n := range []int{1, 3} {
			b.Run(fmt.Sprintf("%s/replicas=%d", lb.name, n), func(b *testing.B) {
				c := clustertest.Start(b, clustertest.Options{Replicas: n, Setup: setup})
				l := lb.start(b, c.Upstreams()...)
				postParallel(b, l.URL()+"/mcp")
			})
		}
	}
}

// postParallel POSTs tools/list to url from 4 goroutines per core, b.N
// times in all, reading every answer whole.
func postParallel(b *testing.B, url string) {
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"` + mcp.Version + `","io.modelcontextprotocol/clientCapabilities":{}}}}`)
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Accept", "application/json, text/event-stream")
	hdr.Set(mcp.HeaderProtocolVersion, mcp.Version)
	hdr.Set(mcp.HeaderMethod, mcp.MethodToolsList)
	tr := &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	b.SetParallelism(4)
	b.ReportAllocs()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			req.Header = hdr.Clone()
			resp, err := hc.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				b.Errorf("status %d, %v", resp.StatusCode, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
}
