//go:build unix

package loadtest

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time this process has used, user and system, and
// the system part alone; zero where it cannot be read.
func cpuTime() (total, sys time.Duration) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0
	}
	sys = time.Duration(ru.Stime.Nano())
	return time.Duration(ru.Utime.Nano()) + sys, sys
}
