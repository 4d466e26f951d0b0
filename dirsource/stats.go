package dirsource

import "sync/atomic"

// Stats says how a Source's limits are biting, for monitoring (see
// metrics.RegisterFiles): each count says how often a request was
// refused or cut short by one limit since the source was made, and the
// gauges how the resource list stands now.
type Stats struct {
	// Listed files are in the resource list; Unlisted ones are readable
	// but left out by the file limit (WithMaxFiles).
	Listed, Unlisted int
	// Refused files are readable, but the server would not list them
	// (an entry it cannot encode); the log names each.
	Refused int
	// ReadsTooLarge counts reads refused by WithMaxReadBytes.
	ReadsTooLarge int64
	// RegexpsRefused counts searches refused because their regular
	// expression compiles to more than WithMaxRegexpSize instructions.
	RegexpsRefused int64
	// SearchesOverBudget counts searches cut short by WithSearchBudget,
	// and SearchesTimedOut those cut short by WithSearchTimeout.
	SearchesOverBudget, SearchesTimedOut int64
	// ListingsCut counts list_directory answers cut at
	// WithMaxDirEntries.
	ListingsCut int64
}

// counters are the counts of Stats, kept without the source's lock so
// that a busy tool never waits for it.
type counters struct {
	readsTooLarge, regexpsRefused, overBudget, timedOut, listingsCut atomic.Int64
}

// Stats returns how the source's limits stand now.
func (s *Source) Stats() Stats {
	s.mu.Lock()
	st := Stats{Listed: s.st.listed, Unlisted: len(s.st.overflow), Refused: s.st.refused}
	s.mu.Unlock()
	st.ReadsTooLarge = s.counts.readsTooLarge.Load()
	st.RegexpsRefused = s.counts.regexpsRefused.Load()
	st.SearchesOverBudget = s.counts.overBudget.Load()
	st.SearchesTimedOut = s.counts.timedOut.Load()
	st.ListingsCut = s.counts.listingsCut.Load()
	return st
}
