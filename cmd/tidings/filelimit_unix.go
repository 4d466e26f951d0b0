//go:build unix

package main

import (
	"fmt"
	"runtime"
	"syscall"
)

// raiseFileLimit raises the soft limit on open files to the hard one,
// which any process may do, and returns the limit now in force. Every
// connection costs a descriptor; the hard limit is the most the process
// can have.
func raiseFileLimit() (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("reading the open-file limit: %w", err)
	}
	if lim.Cur >= lim.Max {
		return lim.Cur, nil
	}
	raised := syscall.Rlimit{Cur: lim.Max, Max: lim.Max}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); err != nil {
		// macOS refuses a soft limit above kern.maxfilesperproc, even
		// with a higher hard limit; the runtime has raised it that far.
		return lim.Cur, fmt.Errorf("raising the open-file limit from %d to %d: %w", lim.Cur, lim.Max, err)
	}
	return lim.Max, nil
}

// watcherFiles is how many descriptors watching a tree of n files may
// take: one in all for inotify, but one per file and directory for
// kqueue, the watcher of the BSDs and macOS.
func watcherFiles(n int) uint64 {
	if runtime.GOOS == "linux" {
		return 1
	}
	return uint64(n)
}
