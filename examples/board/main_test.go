package main

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind: the
// replicas, their Redis clients and buses, and the watchers must all stop.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
