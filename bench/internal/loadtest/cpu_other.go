//go:build !unix

package loadtest

import "time"

// cpuTime is not measured here.
func cpuTime() (total, sys time.Duration) { return 0, 0 }
