//go:build linux || darwin

package loadtest

import (
	"fmt"
	"syscall"
)

// raiseOpenFiles makes sure this process may hold need open files,
// raising RLIMIT_NOFILE (the hard limit too, where the process is
// allowed to) if it is lower.
func raiseOpenFiles(need uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("reading the open file limit: %w", err)
	}
	if lim.Cur >= need {
		return nil
	}
	want := syscall.Rlimit{Cur: need, Max: max(lim.Max, need)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		return fmt.Errorf("about %d open files are needed, but RLIMIT_NOFILE allows %d (hard limit %d) and raising it failed: %w; "+
			"raise it (ulimit -n, as a user allowed to) or use fewer listeners", need, lim.Cur, lim.Max, err)
	}
	return nil
}
