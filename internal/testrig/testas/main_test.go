package testas

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: the authorization server a test starts must be stopped by it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
