package xheader

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: header checks start no goroutine, and a test must not either.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
