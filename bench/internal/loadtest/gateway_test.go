package loadtest_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"tidings/bench/internal/loadtest"
)

// TestFanOutGateway runs the harness with the gateway measured too: its
// listens hear of every change made on the server behind it, and the
// report compares it with the server reached directly.
func TestFanOutGateway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const listeners, changes = 50, 3
	rep, err := loadtest.Run(ctx, loadtest.Config{Listeners: listeners, Changes: changes, Timeout: 5 * time.Second, Gateway: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Runs) != 3 || rep.Runs[2].Server != loadtest.ServerGateway || rep.Runs[2].Stalled != 0 {
		t.Fatalf("measurements: %+v", rep.Runs)
	}
	for _, r := range rep.Runs {
		checkRun(t, r, changes)
	}
	if g := rep.Runs[2]; g.Memory == nil {
		t.Errorf("the gateway's memory was not measured")
	} else {
		checkMemory(t, g.Server, g.Memory.Server, servingGoroutines(g.Server)+1)
	}
	if x := rep.Ratios; x.GatewayAllDelivered <= 0 || x.GatewayP99 <= 0 {
		t.Errorf("gateway ratios missing: %+v", x)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "gateway / tidings: all delivered") {
		t.Errorf("table lacks the gateway's ratios:\n%s", table.String())
	}
}
