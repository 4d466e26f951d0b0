//go:build unix

package testkit

import (
	"syscall"
	"time"
)

// ProcessCPU is the CPU time this process has used, user and system, as
// the kernel counts it: on a machine whose cores other processes share,
// what a benchmark costs, where its wall time also counts the waits for
// a core. ok is false where it cannot be read.
func ProcessCPU() (_ time.Duration, ok bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
