//go:build !unix

package testkit

import "time"

// ProcessCPU is not measured here.
func ProcessCPU() (_ time.Duration, ok bool) { return 0, false }
