package stdio_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"runtime/metrics"
	"testing"

	"tidings/stdio"
)

// goroutinesCreated is how many goroutines the process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestRequestsReuseWorkers: requests one after another run on the
// connection's few carriers (the goroutine that reads a request runs it,
// handing the reading to an idle one), where a goroutine started for
// each grew its stack anew every time.
func TestRequestsReuseWorkers(t *testing.T) {
	srv := newServer(t)
	addTool(t, srv, "echo")
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- stdio.Serve(context.Background(), srv, inR, outW) }()
	lines := bufio.NewReader(outR)
	req := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo",` +
		`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}` + "\n")
	roundTrip := func() {
		if _, err := inW.Write(req); err != nil {
			t.Fatal(err)
		}
		line, err := lines.ReadBytes('\n')
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(line, []byte(`"result"`)) {
			t.Fatalf("not a result: %s", line)
		}
	}
	roundTrip()
	const n = 50
	before := goroutinesCreated()
	for range n {
		roundTrip()
	}
	if started := goroutinesCreated() - before; started >= n/2 {
		t.Errorf("%d requests one after another started %d goroutines", n, started)
	}
	inW.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	outR.Close()
}
