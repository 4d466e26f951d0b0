//go:build !linux

package loadtest

// residentBytes is not measured here.
func residentBytes() int64 { return 0 }
