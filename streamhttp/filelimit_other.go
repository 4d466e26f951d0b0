//go:build !unix

package streamhttp

// openFileLimit is not known here.
func openFileLimit() uint64 { return 0 }
