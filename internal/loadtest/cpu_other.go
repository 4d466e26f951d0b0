//go:build !linux && !darwin

package loadtest

import "time"

// processCPU is not measured here.
func processCPU() time.Duration { return 0 }
