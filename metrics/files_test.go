package metrics_test

import (
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"tidings/dirsource"
	"tidings/metrics"
)

// TestFileSeries: the directory series show the stats they are read
// from, at each scrape.
func TestFileSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := dirsource.Stats{Listed: 1, Unlisted: 2, Refused: 3, ReadsTooLarge: 4, RegexpsRefused: 5,
		SearchesOverBudget: 6, SearchesTimedOut: 7, ListingsCut: 8}
	if err := metrics.RegisterFiles(reg, func() dirsource.Stats { return st }); err != nil {
		t.Fatal(err)
	}
	if err := metrics.RegisterFiles(reg, func() dirsource.Stats { return st }); err == nil {
		t.Error("registered the file series twice")
	}
	ts := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer ts.Close()
	want := map[string]float64{
		"tidings_files_listed": 1, "tidings_files_unlisted": 2, "tidings_files_refused": 3,
		"tidings_files_reads_too_large_total": 4, "tidings_files_regexps_refused_total": 5,
		"tidings_files_searches_over_budget_total": 6, "tidings_files_searches_timed_out_total": 7,
		"tidings_files_listings_cut_total": 8,
	}
	for series, v := range want {
		if got := scrape(t, ts.URL, series); got != v {
			t.Errorf("%s = %v, want %v", series, got, v)
		}
	}
	st.SearchesTimedOut = 9
	if got := scrape(t, ts.URL, "tidings_files_searches_timed_out_total"); got != 9 {
		t.Errorf("timed out after more = %v", got)
	}
}
