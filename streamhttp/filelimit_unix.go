//go:build unix

package streamhttp

import "syscall"

// openFileLimit is the process's limit on open files (the Go runtime
// raises it to the hard limit at start), 0 when it cannot be read.
func openFileLimit() uint64 {
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) != nil {
		return 0
	}
	return lim.Cur
}
