package loadtest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"tidings/bench/internal/loadtest"
)

// checkRun asserts that a measurement that must not time out delivered
// every change to every healthy listen, with consistent figures.
func checkRun(t *testing.T, r loadtest.Measurement, changes int) {
	t.Helper()
	if r.TimedOut || r.Completed != changes || len(r.Changes) != changes {
		t.Fatalf("%s with %d stalled: completed %d of %d changes (timed out %v)", r.Server, r.Stalled, r.Completed, changes, r.TimedOut)
	}
	if r.Unexpected != 0 {
		t.Errorf("%s with %d stalled: %d unexpected messages", r.Server, r.Stalled, r.Unexpected)
	}
	for _, c := range r.Changes {
		if c.Delivered != r.Healthy || c.TimedOut {
			t.Errorf("%s with %d stalled: change %d reached %d of %d listens", r.Server, r.Stalled, c.Index, c.Delivered, r.Healthy)
		}
		if !(c.P50Ms > 0 && c.P50Ms <= c.P99Ms && c.P99Ms <= c.MaxMs && c.AllDeliveredMs == c.MaxMs) {
			t.Errorf("%s with %d stalled: change %d has inconsistent latencies %+v", r.Server, r.Stalled, c.Index, c.Latency)
		}
		if want := []string{"add", "remove"}[c.Index%2]; c.Op != want {
			t.Errorf("change %d op = %q, want %q", c.Index, c.Op, want)
		}
	}
	if r.Median == nil || r.Median.AllDeliveredMs <= 0 || r.WorstAllDeliveredMs < r.Median.AllDeliveredMs {
		t.Errorf("%s with %d stalled: median %+v, worst %v", r.Server, r.Stalled, r.Median, r.WorstAllDeliveredMs)
	}
}

// checkMemory asserts that a measurement without stalls has a plausible
// footprint: each listen costs heap and goroutines, and not megabytes.
// Stacks are not checked: with few listens, new goroutines may get stacks
// that an earlier measurement freed, which the statistics count as still
// in use.
func checkMemory(t *testing.T, name string, f loadtest.Footprint, minGoroutines float64) {
	t.Helper()
	if f.HeapInuse <= 0 || f.HeapInuse > 1<<20 || f.Goroutines < minGoroutines {
		t.Errorf("%s footprint per listen is implausible: %+v", name, f)
	}
}

// servingGoroutines is how many goroutines of its own a listen holds at
// least on server: none where the project's server parks it (over
// HTTP/1.1 on Linux, over HTTP/2 everywhere), nor on the kernel's floor.
func servingGoroutines(server string) float64 {
	if server == loadtest.ServerTidingsH2 || server == loadtest.ServerWrites ||
		runtime.GOOS == "linux" && (server == loadtest.ServerTidings || server == loadtest.ServerGateway || server == loadtest.ServerServe) {
		return 0
	}
	return 1
}

// TestFanOutInProcess runs the harness with the listens in the test
// process and two of them stalled: the project's server reaches every
// healthy listen with every change, while the sequential baseline is
// held up by the stalled ones, which shows the stall is real.
func TestFanOutInProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const listeners, changes, stalled = 50, 3, 2
	rep, err := loadtest.Run(ctx, loadtest.Config{Listeners: listeners, Changes: changes, Stalled: stalled, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 4 {
		t.Fatalf("got %d measurements, want 4", len(rep.Runs))
	}
	want := []struct {
		server  string
		stalled int
	}{{"tidings", 0}, {"naive", 0}, {"tidings", stalled}, {"naive", stalled}}
	for i, w := range want {
		if r := rep.Runs[i]; r.Server != w.server || r.Stalled != w.stalled || r.Healthy != listeners-w.stalled {
			t.Fatalf("measurement %d is %s with %d stalled and %d healthy, want %s with %d", i, r.Server, r.Stalled, r.Healthy, w.server, w.stalled)
		}
	}
	checkRun(t, rep.Runs[0], changes)
	checkRun(t, rep.Runs[1], changes)
	checkRun(t, rep.Runs[2], changes)

	// The first stalled listen is the 13th to register with the naive
	// broadcaster: its publisher gets the first change to the 12 before
	// it, blocks on it, and the other 36 never hear of the change.
	naive := rep.Runs[3]
	if !naive.TimedOut || naive.Completed != 0 || len(naive.Changes) != 1 {
		t.Fatalf("the baseline with stalled listens completed %d of %d changes; the stall did not take", naive.Completed, changes)
	}
	if c := naive.Changes[0]; !c.TimedOut || c.Delivered != 12 || c.AllDeliveredMs != 0 || naive.Median != nil {
		t.Errorf("the baseline's first change is %+v, want it timed out after reaching 12 listens", c)
	}

	for _, r := range rep.Runs[:2] {
		if r.Memory == nil || r.Memory.Listeners != nil {
			t.Fatalf("%s: memory = %+v, want one footprint covering server and listens", r.Server, r.Memory)
		}
		// A listen costs at least a reading goroutine, and a serving
		// one unless the server parked it.
		checkMemory(t, r.Server, r.Memory.Server, servingGoroutines(r.Server)+1)
	}
	for _, r := range rep.Runs[2:] {
		if r.Memory != nil {
			t.Errorf("%s with stalls measured memory", r.Server)
		}
	}
	x := rep.Ratios
	if x.AllDelivered <= 0 || x.P99 <= 0 || x.HeapPerListen <= 0 || x.StallCostTidings <= 0 {
		t.Errorf("ratios missing: %+v", x)
	}
	if x.AllDeliveredStalled != 0 || x.StallCostNaive != 0 {
		t.Errorf("ratios against a baseline that timed out: %+v", x)
	}

	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"tidings", "naive", "timed out at change", "memory per listen", "tidings / naive"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
}

// TestFanOutChildProcess runs the harness with the listens read by a
// child process (this test binary, see TestMain), which is how the
// command runs it: the server's memory is then measured on its own.
func TestFanOutChildProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const listeners, changes = 50, 3
	var stderr bytes.Buffer
	rep, err := loadtest.Run(ctx, loadtest.Config{
		Listeners: listeners, Changes: changes, Timeout: 5 * time.Second, Floor: true, Unparked: true, Serve: true,
		ListenerProcess: func(ctx context.Context) *exec.Cmd {
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
			// The race runtime otherwise lingers a second at exit.
			cmd.Env = append(os.Environ(), childEnv+"=1", "GORACE=atexit_sleep_ms=0")
			return cmd
		},
		Log: &stderr,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if !rep.ListenerProcess || len(rep.Runs) != 6 {
		t.Fatalf("listener process %v, %d measurements", rep.ListenerProcess, len(rep.Runs))
	}
	for i, want := range []string{loadtest.ServerTidings, loadtest.ServerNaive, loadtest.ServerFloor, loadtest.ServerWrites, loadtest.ServerUnparked, loadtest.ServerServe} {
		r := rep.Runs[i]
		if r.Server != want {
			t.Fatalf("measurement %d is of %s, want %s", i, r.Server, want)
		}
		checkRun(t, r, changes)
		if r.Memory == nil || r.Memory.Listeners == nil {
			t.Fatalf("%s: memory = %+v, want server and listens apart", r.Server, r.Memory)
		}
		// A parked listen holds no goroutine of the server's, nor does
		// one of the kernel's floor; every other listen holds one at
		// least.
		if servingGoroutines(r.Server) == 0 {
			if g := r.Memory.Server.Goroutines; g > 0.2 {
				t.Errorf("%s: %.2f server goroutines per listen, want next to none", r.Server, g)
			}
			checkMemory(t, r.Server+" server", r.Memory.Server, -1)
		} else {
			checkMemory(t, r.Server+" server", r.Memory.Server, 1)
		}
		checkMemory(t, r.Server+" listens", *r.Memory.Listeners, 1)
	}
	if x := rep.Ratios; x.FloorAllDelivered <= 0 || x.FloorP99 <= 0 || x.FloorCPUPerChange <= 0 ||
		x.WritesAllDelivered <= 0 || x.WritesP99 <= 0 || x.WritesCPUPerChange <= 0 || x.WritesFloorP99 <= 0 ||
		x.ServeFloorAllDelivered <= 0 || x.ServeFloorP99 <= 0 {
		t.Errorf("ratios to the floor missing: %+v", x)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"floor", "tidings-unparked", "tidings / floor", "tidings-serve / floor", "tidings / writes", "writes / floor", "resident"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
}

// TestFanOutRounds: with rounds, every server is measured once per
// round, in turn, and each ratio is the median of the rounds' own.
func TestFanOutRounds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const listeners, changes, rounds = 20, 2, 3
	rep, err := loadtest.Run(ctx, loadtest.Config{Listeners: listeners, Changes: changes, Rounds: rounds, Floor: true, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	servers := []string{loadtest.ServerTidings, loadtest.ServerNaive, loadtest.ServerFloor, loadtest.ServerWrites}
	if rep.Rounds != rounds || len(rep.Runs) != rounds*len(servers) {
		t.Fatalf("%d rounds, %d measurements; want %d and %d", rep.Rounds, len(rep.Runs), rounds, rounds*len(servers))
	}
	var p99s []float64
	for i, r := range rep.Runs {
		if want, round := servers[i%len(servers)], i/len(servers)+1; r.Server != want || r.Round != round {
			t.Fatalf("measurement %d is %s of round %d, want %s of round %d", i, r.Server, r.Round, want, round)
		}
		checkRun(t, r, changes)
		if r.Server == loadtest.ServerFloor {
			p99s = append(p99s, rep.Runs[i-2].Median.P99Ms/r.Median.P99Ms)
		}
	}
	slices.Sort(p99s)
	if got := rep.Ratios.FloorP99; got != p99s[1] {
		t.Errorf("tidings / floor p99 = %v, want the median of the rounds' %v", got, p99s)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"3 rounds", "tidings #1", "writes #3"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, table.String())
		}
	}
	if _, err := loadtest.Run(ctx, loadtest.Config{Rounds: loadtest.MaxRounds + 1}); err == nil || !strings.Contains(err.Error(), "rounds") {
		t.Errorf("Run with %d rounds: %v, want an error naming the rounds", loadtest.MaxRounds+1, err)
	}
}
