package brokerkit

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: the kit starts none of its own, and a test must not either.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
