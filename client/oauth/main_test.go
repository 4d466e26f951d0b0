package oauth

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: a
// Loopback's server, a Prompt's reader, a browser's connection.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
