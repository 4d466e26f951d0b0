package stdiobench_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a benchmark leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
