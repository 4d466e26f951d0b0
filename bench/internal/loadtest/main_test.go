package loadtest_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"tidings/bench/internal/loadtest"
)

// childEnv makes the test binary act as the listener process, so that
// the child-process side is tested as the command runs it.
const childEnv = "TIDINGS_LOADTEST_LISTENER_PROCESS"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		if err := loadtest.ServeListeners(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "listener process:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}
