package clustertest_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: every
// replica, bus, broker, balancer, client and watcher a test starts must be
// stopped by it, after a broker outage or a killed replica as after a
// clean run. Started as a replica process (see replicaMain), the binary
// is that replica instead, and runs no test.
func TestMain(m *testing.M) {
	if os.Getenv(replicaEnv) != "" {
		os.Exit(replicaMain())
	}
	goleak.VerifyTestMain(m)
}
