package oauth

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: a
// login a Flow started, a Loopback's server, a Prompt's reader.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
