package coalesce_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a flusher, or any other
// goroutine, behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
