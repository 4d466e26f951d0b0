package metrics_test

import (
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"tidings/metrics"
)

// TestConnSeries: the connection series show the stats they are read
// from at each scrape, the caps' refusals and evictions apart by their
// limit label.
func TestConnSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := metrics.ConnStats{Open: 1, Idle: 2, MaxPerAddress: 3, MaxTotal: 4, RefusedPerAddress: 5, RefusedTotal: 6,
		EvictedPerAddress: 7, EvictedTotal: 8, BodyTimeouts: 9, WriteTimeouts: 10, Refusing: 11, RefusedUntold: 12, MaxRefusing: 13}
	if err := metrics.RegisterConns(reg, func() metrics.ConnStats { return st }); err != nil {
		t.Fatal(err)
	}
	if err := metrics.RegisterConns(reg, func() metrics.ConnStats { return st }); err == nil {
		t.Error("registered the connection series twice")
	}
	ts := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer ts.Close()
	want := map[string]float64{
		"tidings_http_connections_open": 1, "tidings_http_connections_idle": 2,
		`tidings_http_connections_max{limit="per_address"}`: 3, `tidings_http_connections_max{limit="total"}`: 4,
		`tidings_http_connections_refused_total{limit="per_address"}`: 5, `tidings_http_connections_refused_total{limit="total"}`: 6,
		`tidings_http_connections_evicted_total{limit="per_address"}`: 7, `tidings_http_connections_evicted_total{limit="total"}`: 8,
		"tidings_http_body_timeouts_total": 9, "tidings_http_write_timeouts_total": 10,
		"tidings_http_connections_refusing": 11, "tidings_http_connections_refused_untold_total": 12,
		"tidings_http_connections_refusing_max": 13,
	}
	for series, v := range want {
		if got := scrape(t, ts.URL, series); got != v {
			t.Errorf("%s = %v, want %v", series, got, v)
		}
	}
	st.RefusedPerAddress = 50
	if got := scrape(t, ts.URL, `tidings_http_connections_refused_total{limit="per_address"}`); got != 50 {
		t.Errorf("refusals after more = %v", got)
	}
}
