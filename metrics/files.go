package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"tidings/dirsource"
)

// RegisterFiles registers how the limits of a served directory are
// biting with reg, read from stats (usually Source.Stats) at each scrape:
//
//	tidings_files_listed                        files in the resource list
//	tidings_files_unlisted                      readable files left out by the file limit
//	tidings_files_refused                       readable files the server would not list
//	tidings_files_reads_too_large_total         reads refused by the read size limit
//	tidings_files_regexps_refused_total         searches refused: pattern over the regexp size limit
//	tidings_files_searches_over_budget_total    searches cut short by the search byte budget
//	tidings_files_searches_timed_out_total      searches cut short by the search time limit
//	tidings_files_listings_cut_total            list_directory answers cut at the entry limit
//
// Unlisted above zero means the list is partial (raise the file limit);
// searches timing out often mean patterns too costly for the tree.
func RegisterFiles(reg prometheus.Registerer, stats func() dirsource.Stats) error {
	c := &statsCollector[dirsource.Stats]{stats: stats, series: []series[dirsource.Stats]{
		gauge("tidings_files_listed", "Files in the resource list.", func(s dirsource.Stats) float64 { return float64(s.Listed) }),
		gauge("tidings_files_unlisted", "Readable files left out of the resource list by the file limit.",
			func(s dirsource.Stats) float64 { return float64(s.Unlisted) }),
		gauge("tidings_files_refused", "Readable files the server would not list (the log names each).",
			func(s dirsource.Stats) float64 { return float64(s.Refused) }),
		counter("tidings_files_reads_too_large_total", "Reads refused because the file is over the read size limit.",
			func(s dirsource.Stats) int64 { return s.ReadsTooLarge }),
		counter("tidings_files_regexps_refused_total", "Searches refused because their regular expression compiles to more instructions than the limit.",
			func(s dirsource.Stats) int64 { return s.RegexpsRefused }),
		counter("tidings_files_searches_over_budget_total", "Searches cut short because they read as many bytes as one search may.",
			func(s dirsource.Stats) int64 { return s.SearchesOverBudget }),
		counter("tidings_files_searches_timed_out_total", "Searches cut short because they took as long as one search may.",
			func(s dirsource.Stats) int64 { return s.SearchesTimedOut }),
		counter("tidings_files_listings_cut_total", "Directory listings cut at the most entries one listing shows.",
			func(s dirsource.Stats) int64 { return s.ListingsCut }),
	}}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("metrics: files: %w", err)
	}
	return nil
}
