package parked

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: a
// Parker's poller, writers and ticker stop with its last listen.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
