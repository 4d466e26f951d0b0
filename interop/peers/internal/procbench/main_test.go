package procbench_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// peerBin, sdkBin and tidingsBin are the binaries TestMain builds: the
// benchpeer, the go-sdk server and the tidings CLI. They are set once,
// before any test or benchmark runs.
var peerBin, sdkBin, tidingsBin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "tidings-procbench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	peerBin, sdkBin, tidingsBin = filepath.Join(dir, "benchpeer"), filepath.Join(dir, "gosdk-server"), filepath.Join(dir, "tidings")
	// tidings is built in its own module, as its users build it.
	for _, t := range []struct{ wd, pkg, out string }{
		{"../..", "./cmd/benchpeer", peerBin},
		{"../..", "./cmd/gosdk-server", sdkBin},
		{"../../../..", "./cmd/tidings", tidingsBin},
	} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", t.out, t.pkg)
		cmd.Dir = t.wd
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "go build %s: %v\n%s", t.pkg, err, out)
			return 1
		}
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			return 1
		}
	}
	return code
}
