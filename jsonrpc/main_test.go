package jsonrpc_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: decoding and encoding start no goroutine, and a test must not either.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
