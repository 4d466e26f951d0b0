package clustertest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: every
// replica, bus, broker, balancer, client and watcher a test starts must be
// stopped by it, after a broker outage or a killed replica as after a
// clean run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
