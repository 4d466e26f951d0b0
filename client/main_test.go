package client

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: every
// client, watcher, listen and server a test starts must be stopped by it,
// including after drops, reconnect loops and errors. It also removes the
// stdio test server binary built on demand by the stdio tests.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		removeBuiltServers()
		os.Exit(code)
	}))
}
