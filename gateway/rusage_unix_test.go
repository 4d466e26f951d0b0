//go:build unix

package gateway_test

import (
	"syscall"
	"time"
)

// processCPU is the CPU time this process has used, user and system,
// as the kernel counts it: on a machine whose cores other processes
// share, what a benchmark costs, where its wall time also counts the
// waits for a core.
func processCPU() (time.Duration, bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
