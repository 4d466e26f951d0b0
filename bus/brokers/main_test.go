package brokers_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: every
// bus, broker connection, store, server and test broker a test starts
// must be stopped by it, after broker outages as after a clean run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
