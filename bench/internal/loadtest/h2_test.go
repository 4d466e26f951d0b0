package loadtest_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"tidings/bench/internal/loadtest"
)

// TestFanOutOverHTTP2 runs the harness with the listens as HTTP/2
// streams over a few connections, gathered writes and not, in the test
// process and in a child: every change reaches every listen, and the
// server's memory is measured.
func TestFanOutOverHTTP2(t *testing.T) {
	const listeners, changes, conns = 60, 3, 3
	for _, tc := range []struct {
		name       string
		noCoalesce bool
		child      bool
	}{{"gathered", false, false}, {"as net/http writes", true, false}, {"child", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := loadtest.Config{Listeners: listeners, Changes: changes, Timeout: 5 * time.Second,
				HTTP2Conns: conns, HTTP2NoCoalesce: tc.noCoalesce}
			if tc.child {
				cfg.ListenerProcess = func(ctx context.Context) *exec.Cmd {
					cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
					cmd.Env = append(os.Environ(), childEnv+"=1", "GORACE=atexit_sleep_ms=0")
					return cmd
				}
			}
			rep, err := loadtest.Run(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Runs) != 1 || rep.Runs[0].Server != loadtest.ServerTidingsH2 || rep.HTTP2Conns != conns || rep.HTTP2Coalesce == tc.noCoalesce {
				t.Fatalf("report: %+v", rep)
			}
			checkRun(t, rep.Runs[0], changes)
			if m := rep.Runs[0].Memory; m == nil {
				t.Fatal("no memory figures")
			} else {
				checkMemory(t, "server", m.Server, servingGoroutines(loadtest.ServerTidingsH2))
			}
			var table strings.Builder
			if err := rep.WriteTable(&table); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(table.String(), "over HTTP/2 (h2c): the listens are streams of 3 connections") {
				t.Errorf("the table does not say the listens went over HTTP/2:\n%s", table.String())
			}
		})
	}
}

func TestHTTP2ConfigRefused(t *testing.T) {
	for _, cfg := range []loadtest.Config{
		{Listeners: 10, HTTP2Conns: 20},
		{Listeners: loadtest.MaxHTTP2Listeners + 1, HTTP2Conns: 10},
		{Listeners: 10, HTTP2Conns: 2, Stalled: 1},
	} {
		if _, err := loadtest.Run(context.Background(), cfg); err == nil {
			t.Errorf("%+v was accepted", cfg)
		}
	}
}

// TestFloorOverHTTP2 measures the net/http floor as HTTP/2 streams beside
// the server's, and the ratios compare the two.
func TestFloorOverHTTP2(t *testing.T) {
	const listeners, changes, conns = 40, 3, 2
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rep, err := loadtest.Run(ctx, loadtest.Config{Listeners: listeners, Changes: changes, Timeout: 5 * time.Second,
		HTTP2Conns: conns, Floor: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 2 || rep.Runs[0].Server != loadtest.ServerTidingsH2 || rep.Runs[1].Server != loadtest.ServerFloorH2 {
		t.Fatalf("runs: %+v", rep.Runs)
	}
	for _, run := range rep.Runs {
		checkRun(t, run, changes)
	}
	if rep.Ratios.FloorP99 <= 0 || rep.Ratios.FloorAllDelivered <= 0 {
		t.Fatalf("no ratios against the floor: %+v", rep.Ratios)
	}
}
