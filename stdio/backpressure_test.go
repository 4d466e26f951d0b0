package stdio_test

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"tidings/mcp"
	"tidings/server"
	"tidings/stdio"
)

// TestBlockedStdoutStillReadsCancel: when the client stops reading stdout,
// neither the request whose write is blocked nor the answers the reader
// gives itself may stop the reader, so that a notifications/cancelled —
// for that request or for any other — still takes effect.
func TestBlockedStdoutStillReadsCancel(t *testing.T) {
	srv := server.New(mcp.Implementation{Name: "t", Version: "1"})
	waiting, cancelled, writing := make(chan struct{}), make(chan struct{}), make(chan struct{})
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(srv.AddTool(mcp.Tool{Name: "waiter"}, func(ctx context.Context, _ *server.ToolRequest) (*mcp.CallToolResult, error) {
		close(waiting)
		<-ctx.Done()
		close(cancelled)
		return nil, ctx.Err()
	}))
	must(srv.AddTool(mcp.Tool{Name: "chatty"}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		close(writing)
		for i := 1; ctx.Err() == nil; i++ {
			if err := req.Progress(float64(i), nil, ""); err != nil {
				return nil, err
			}
		}
		return nil, ctx.Err()
	}))
	inR, inW := io.Pipe()
	outR, outW := io.Pipe() // nobody reads it until the end
	served := make(chan error, 1)
	go func() { served <- stdio.Serve(context.Background(), srv, inR, outW) }()
	defer func() {
		outR.Close() // the blocked write fails
		inW.Close()  // end of input
		if err := <-served; err != nil {
			t.Logf("Serve: %v", err)
		}
	}()
	send := func(line string) {
		t.Helper()
		written := make(chan error, 1)
		go func() { _, err := io.WriteString(inW, line+"\n"); written <- err }()
		select {
		case err := <-written:
			must(err)
		case <-time.After(waitLimit):
			t.Fatal("the server stopped reading its input")
		}
	}
	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(waitLimit):
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	meta := func(extra string) string {
		return `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}` + extra + `}`
	}
	send(`{"jsonrpc":"2.0","id":"b","method":"tools/call","params":{"name":"waiter",` + meta("") + `}}`)
	wait(waiting, "the waiter to start")
	send(`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"chatty",` + meta(`,"progressToken":"p"`) + `}}`)
	wait(writing, "the chatty tool to start writing")
	// Lines the reader answers itself, a parse error and a duplicate id,
	// must not make it wait for stdout either.
	send(`{not json`)
	send(`{"jsonrpc":"2.0","id":"b","method":"tools/call","params":{"name":"waiter",` + meta("") + `}}`)
	for _, id := range []string{"a", "b"} {
		send(fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%q}}`, id))
	}
	wait(cancelled, "the cancel of b, behind a request blocked on stdout")
}
