//go:build !unix

package main

// raiseFileLimit reports no limit where open files are not bounded by an
// rlimit.
func raiseFileLimit() (uint64, error) { return 0, nil }

// watcherFiles is how many descriptors watching a tree of n files may
// take.
func watcherFiles(int) uint64 { return 1 }
