package metrics_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"tidings/bus"
	"tidings/metrics"
	"tidings/server"
)

// TestClusterSeries: the bus and shared-state series show the stats they
// are read from, at each scrape; registering twice is an error.
func TestClusterSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := bus.Stats{Connected: true, Peers: 2, Reconnects: 3, Published: 4, Received: 5, Dropped: 6, Stale: 7,
		Invalid: 8, Gaps: 9, Resyncs: 10, Lag: 250 * time.Millisecond, MaxLag: 2 * time.Second, Unsigned: 16, BadMAC: 17, Failovers: 18}
	if err := metrics.RegisterBus(reg, func() bus.Stats { return st }); err != nil {
		t.Fatal(err)
	}
	loaded := time.Unix(1_800_000_000, 0)
	ss := server.StateStats{Loaded: true, Loads: 11, LoadFailures: 12, Writes: 13, WriteFailures: 14, Unwritten: 15, LastLoad: loaded}
	if err := metrics.RegisterState(reg, func() server.StateStats { return ss }); err != nil {
		t.Fatal(err)
	}
	if err := metrics.RegisterBus(reg, func() bus.Stats { return st }); err == nil {
		t.Error("registered the bus series twice")
	}
	ts := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer ts.Close()
	want := map[string]float64{
		"tidings_bus_connected": 1, "tidings_bus_peers": 2, "tidings_bus_reconnects_total": 3,
		"tidings_bus_events_published_total": 4, "tidings_bus_events_received_total": 5,
		"tidings_bus_events_dropped_total": 6, "tidings_bus_events_stale_total": 7,
		"tidings_bus_messages_invalid_total": 8, "tidings_bus_gaps_total": 9, "tidings_bus_resyncs_total": 10,
		"tidings_bus_lag_seconds": 0.25, "tidings_bus_lag_max_seconds": 2, "tidings_bus_failovers_total": 18,
		`tidings_bus_messages_refused_total{reason="unsigned"}`: 16, `tidings_bus_messages_refused_total{reason="bad_mac"}`: 17,
		"tidings_state_loaded": 1, "tidings_state_loads_total": 11, "tidings_state_load_failures_total": 12,
		"tidings_state_writes_total": 13, "tidings_state_write_failures_total": 14, "tidings_state_unwritten": 15,
		"tidings_state_last_load_timestamp_seconds": 1.8e9,
	}
	for series, v := range want {
		if got := scrape(t, ts.URL, series); got != v {
			t.Errorf("%s = %v, want %v", series, got, v)
		}
	}
	st.Connected, st.Gaps = false, 20
	if got := scrape(t, ts.URL, "tidings_bus_connected"); got != 0 {
		t.Errorf("connected after the loss = %v", got)
	}
	if got := scrape(t, ts.URL, "tidings_bus_gaps_total"); got != 20 {
		t.Errorf("gaps after more = %v", got)
	}
}

// TestBusTrustSeries: on a real (in-process) bus, a message from outside
// the replicas — unsigned, or signed with another key — moves the refused
// series by its reason and nothing else, and an event whose sender time
// is the lowest int64 is delivered without moving either lag series.
func TestBusTrustSeries(t *testing.T) {
	l := bus.NewLocal()
	quiet := bus.WithLogger(slog.New(slog.DiscardHandler))
	signed := bus.New(l.Conn(), quiet, bus.WithSecret([]byte("shared secret of the replicas")))
	open := bus.New(l.Conn(), quiet)
	other := bus.New(l.Conn(), quiet, bus.WithSecret([]byte("another secret")))
	defer func() {
		for _, b := range []bus.Bus{signed, open, other} {
			if err := b.Close(); err != nil {
				t.Error(err)
			}
		}
	}()
	reg := prometheus.NewRegistry()
	if err := metrics.RegisterBus(reg, signed.Stats); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer ts.Close()
	openReg := prometheus.NewRegistry()
	if err := metrics.RegisterBus(openReg, open.Stats); err != nil {
		t.Fatal(err)
	}
	openTS := httptest.NewServer(promhttp.HandlerFor(openReg, promhttp.HandlerOpts{}))
	defer openTS.Close()

	raw := l.Conn()
	defer raw.Close()
	pinned := `{"v":2,"body":{"type":"change","origin":"ffffffffffffffffffffffffffffffff","seq":1,"sent":-9223372036854775808,"kinds":1}}`
	if err := raw.Send(context.Background(), []byte(pinned)); err != nil {
		t.Fatal(err)
	}
	other.Publish(bus.Event{Kinds: 1})
	waitSeries(t, ts.URL, `tidings_bus_messages_refused_total{reason="unsigned"}`, func(v float64) bool { return v >= 1 })
	waitSeries(t, ts.URL, `tidings_bus_messages_refused_total{reason="bad_mac"}`, func(v float64) bool { return v >= 1 })
	for _, series := range []string{"tidings_bus_events_received_total", "tidings_bus_messages_invalid_total", "tidings_bus_resyncs_total"} {
		if got := scrape(t, ts.URL, series); got != 0 {
			t.Errorf("%s = %v after refused messages, want 0", series, got)
		}
	}
	// The bus without a secret believes the pinned message, and its lag
	// stays where it was.
	waitSeries(t, openTS.URL, "tidings_bus_events_received_total", func(v float64) bool { return v >= 1 })
	for _, series := range []string{"tidings_bus_lag_seconds", "tidings_bus_lag_max_seconds"} {
		if got := scrape(t, openTS.URL, series); got > 60 {
			t.Errorf("%s = %v after an event sent at the lowest int64, want it ignored", series, got)
		}
	}
}
