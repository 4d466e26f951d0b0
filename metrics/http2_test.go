package metrics_test

import (
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"tidings/metrics"
)

// TestHTTP2Series: the HTTP/2 series show the stats they are read from.
func TestHTTP2Series(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := metrics.HTTP2Stats{Streams: 1, Parked: 5, MaxStreams: 2, Refused: 6, WritesGathered: 3, WritesToSockets: 4}
	if err := metrics.RegisterHTTP2(reg, func() metrics.HTTP2Stats { return st }); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer ts.Close()
	for series, v := range map[string]float64{
		"tidings_http2_streams_open": 1, "tidings_http2_streams_max": 2,
		"tidings_http2_writes_gathered_total": 3, "tidings_http2_socket_writes_total": 4,
		"tidings_http2_listens_parked": 5, "tidings_http2_streams_refused_total": 6,
	} {
		if got := scrape(t, ts.URL, series); got != v {
			t.Errorf("%s = %v, want %v", series, got, v)
		}
	}
}
