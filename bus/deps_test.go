package bus_test

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// libraryPackages are what a program serving or calling MCP imports, and
// bus, which the server imports for its interfaces: none of them may
// link a broker's client, which only the broker adapters (natsbus,
// redisbus) and brokers do.
var libraryPackages = []string{"tidings/bus", "tidings/server", "tidings/stdio", "tidings/streamhttp", "tidings/client"}

// TestLibraryLinksNoBroker: the packages a library user imports depend on
// bus for its interfaces and its in-process implementations, never on the
// NATS or Redis client.
func TestLibraryLinksNoBroker(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the dependencies with")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, append([]string{"list", "-deps"}, libraryPackages...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderr.Bytes())
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "tidings/bus") {
		t.Fatalf("tidings/bus is not among the %d dependencies listed, so the list says nothing", len(deps))
	}
	for _, d := range deps {
		switch {
		case strings.Contains(d, "nats-io") || strings.Contains(d, "redis/go-redis"):
			t.Errorf("%s link %s: a broker's client belongs to its adapter (bus/natsbus, bus/redisbus)",
				strings.Join(libraryPackages, ", "), d)
		case strings.HasPrefix(d, "tidings/bus/") && d != "tidings/bus/internal/brokerkit":
			// An adapter of a broker yet to come, or brokers, which
			// imports them all.
			t.Errorf("%s import %s, a broker adapter: only programs that choose a broker may",
				strings.Join(libraryPackages, ", "), d)
		}
	}
}
