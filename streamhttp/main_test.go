package streamhttp_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: every
// stream, listen and client connection a test opens must be closed by it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
