package dirsource

// Stats says how a Source's list stands, for monitoring.
type Stats struct {
	// Listed files are in the resource list; Unlisted ones are readable
	// but left out by the file limit (WithMaxFiles).
	Listed, Unlisted int
	// Refused files are readable, but the server would not list them
	// (an entry it cannot encode); the log names each.
	Refused int
}

// Stats returns how the source's list stands now.
func (s *Source) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{Listed: s.st.listed, Unlisted: len(s.st.overflow), Refused: s.st.refused}
}
