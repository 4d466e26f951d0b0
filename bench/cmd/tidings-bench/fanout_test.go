//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// buildBinary compiles this command, as a user would run it.
func buildBinary(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool is needed to build the binary: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "tidings-bench")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// TestBenchFanout runs the built binary as a user would, with the listens
// read by its hidden child command, and checks the JSON report: every
// change reached every healthy listen of the project's server, stalled
// listens or not, while the naive broadcaster was held up by them.
func TestBenchFanout(t *testing.T) {
	bin := buildBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "fanout", "--listeners", "20", "--changes", "2",
		"--stalled", "1", "--timeout", "1s", "--json", "--quiet")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var rep struct {
		ListenerProcess bool `json:"listenerProcess"`
		Runs            []struct {
			Server    string `json:"server"`
			Stalled   int    `json:"stalled"`
			Healthy   int    `json:"healthy"`
			Completed int    `json:"completed"`
			TimedOut  bool   `json:"timedOut"`
			Memory    *struct {
				Listeners *struct {
					Goroutines float64 `json:"goroutinesPerListen"`
				} `json:"listeners"`
			} `json:"memory"`
		} `json:"runs"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, stdout.String())
	}
	if !rep.ListenerProcess || len(rep.Runs) != 4 {
		t.Fatalf("report: %s", stdout.String())
	}
	for i, r := range rep.Runs {
		if want := []string{"tidings", "naive"}[i%2]; r.Server != want || r.Stalled != i/2 || r.Healthy != 20-i/2 {
			t.Fatalf("run %d is %s with %d stalled, %d healthy; want %s", i, r.Server, r.Stalled, r.Healthy, want)
		}
		if r.Stalled == 0 && (r.Memory == nil || r.Memory.Listeners == nil || r.Memory.Listeners.Goroutines < 1) {
			t.Errorf("%s: no memory figures for the listener process", r.Server)
		}
		stalledNaive := r.Server == "naive" && r.Stalled > 0
		if stalledNaive != r.TimedOut || (!r.TimedOut && r.Completed != 2) {
			t.Errorf("%s with %d stalled: completed %d, timed out %v", r.Server, r.Stalled, r.Completed, r.TimedOut)
		}
	}
}
