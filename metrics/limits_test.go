package metrics_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/metrics"
	"tidings/server"
	"tidings/streamhttp"
)

// TestListenLimitSeries: a listen refused for a limit is counted under
// that limit, and the URIs the open listens follow are a gauge.
func TestListenLimitSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(mcp.Implementation{Name: "m", Version: "1"}, append(m.ServerOptions(),
		server.WithListenLimits(server.ListenLimits{PerPrincipal: server.Allowance{Listens: 1}}))...)
	if err := srv.AddResource(mcp.Resource{URI: "a://1"}, func(context.Context, *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{}, nil
	}); err != nil {
		t.Fatal(err)
	}
	h := streamhttp.New(srv)
	if err := metrics.RegisterListens(reg, srv.ListenStats); err != nil {
		t.Fatal(err)
	}
	if err := metrics.RegisterSessions(reg, h.SessionStats); err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", h)
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)

	listen := func(id string) *http.Response {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":` + id + `,"method":"subscriptions/listen","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"` +
			mcp.Version + `","io.modelcontextprotocol/clientCapabilities":{}},"notifications":{"resourceSubscriptions":["a://1","a://2","a://3"]}}}`
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, ts.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version)
		req.Header.Set(mcp.HeaderMethod, mcp.MethodListen)
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	open := listen("1")
	if line, err := bufio.NewReader(open.Body).ReadString('\n'); err != nil || !strings.HasPrefix(line, "event:") && !strings.HasPrefix(line, "data:") {
		t.Fatalf("the first listen's stream began with %q, %v", line, err)
	}
	refused := listen("2")
	var e struct {
		Error struct {
			Code jsonrpc.Code `json:"code"`
		} `json:"error"`
	}
	if err := json.NewDecoder(refused.Body).Decode(&e); err != nil || e.Error.Code != -32603 {
		t.Fatalf("the second listen: %v, code %d; want -32603", err, e.Error.Code)
	}
	url := ts.URL + "/metrics"
	if v := scrape(t, url, `tidings_listen_refusals_total{limit="listensPerPrincipal"}`); v != 1 {
		t.Errorf("refusals for listensPerPrincipal = %v, want 1", v)
	}
	if v := scrape(t, url, `tidings_listen_refusals_total{limit="uris"}`); v != 0 {
		t.Errorf("refusals for uris = %v, want 0", v)
	}
	if v := scrape(t, url, `tidings_listen_uris_followed`); v != 3 {
		t.Errorf("URIs followed = %v, want the open listen's 3", v)
	}
	if v := scrape(t, url, `tidings_sessions_open`); v != 0 {
		t.Errorf("sessions open = %v, want 0", v)
	}
	open.Body.Close()
	waitSeries(t, url, `tidings_listen_uris_followed`, func(v float64) bool { return v == 0 })
}
