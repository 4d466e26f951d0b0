package hub

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: the
// hub starts none, and what a test starts to race it must end.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
