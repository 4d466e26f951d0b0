package client

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"tidings/mcp"
	"tidings/server"
)

// TestCallJoinsOneTraceAcrossTheWire: a traced client calling a traced
// server over loopback HTTP, in either era, makes one trace: the
// client's span is the child of the caller's, and the server's the child
// of the client's, its context carried in params._meta.
func TestCallJoinsOneTraceAcrossTheWire(t *testing.T) {
	for _, era := range []string{mcp.Version, mcp.LegacyVersion} {
		t.Run(era, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			f := newFixture(t, nil, fixtureOpts{sopts: []server.Option{server.WithTracerProvider(tp)}})
			addTools(t, f.srv, "get_weather")
			c := f.client(t, WithTracerProvider(tp), WithProtocolVersion(era))

			ctx, caller := tp.Tracer("test").Start(context.Background(), "caller")
			if _, err := c.CallTool(ctx, "get_weather", map[string]any{}); err != nil {
				t.Fatal(err)
			}
			caller.End()

			var client, srv *tracetest.SpanStub
			spans := exp.GetSpans()
			for i := range spans {
				s := &spans[i]
				switch {
				case s.Name == "tools/call get_weather" && s.SpanKind == trace.SpanKindClient:
					client = s
				case s.Name == "tools/call get_weather" && s.SpanKind == trace.SpanKindServer:
					srv = s
				}
			}
			if client == nil || srv == nil {
				t.Fatalf("spans %v: want a client and a server span of tools/call get_weather", spanNames(spans))
			}
			if client.Parent.SpanID() != caller.SpanContext().SpanID() {
				t.Errorf("client span's parent %s, want the caller's %s", client.Parent.SpanID(), caller.SpanContext().SpanID())
			}
			if srv.Parent.SpanID() != client.SpanContext.SpanID() || !srv.Parent.IsRemote() {
				t.Errorf("server span's parent %s (remote %v), want the client's %s", srv.Parent.SpanID(), srv.Parent.IsRemote(), client.SpanContext.SpanID())
			}
			if srv.SpanContext.TraceID() != caller.SpanContext().TraceID() {
				t.Errorf("server span in trace %s, want the caller's %s", srv.SpanContext.TraceID(), caller.SpanContext().TraceID())
			}
		})
	}
}

// TestFailedCallSpanSaysSo: a call the server refuses ends the client's
// span with an error status and the JSON-RPC code as error.type.
func TestFailedCallSpanSaysSo(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	f := newFixture(t, nil, fixtureOpts{})
	addTools(t, f.srv, "present")
	c := f.client(t, WithTracerProvider(tp))
	if _, err := c.Request(context.Background(), mcp.MethodToolsCall, map[string]any{"name": "missing", "arguments": map[string]any{}}); err == nil {
		t.Fatal("a call of a missing tool succeeded")
	}
	for _, s := range exp.GetSpans() {
		if s.Name != "tools/call missing" {
			continue
		}
		if s.Status.Code != codes.Error {
			t.Errorf("status %v, want an error", s.Status)
		}
		for _, kv := range s.Attributes {
			if kv.Key == "error.type" && kv.Value.String() != "-32602" {
				t.Errorf("error.type %q, want -32602", kv.Value.String())
			}
		}
		return
	}
	t.Fatalf("no span of the call in %v", spanNames(exp.GetSpans()))
}

func spanNames(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name+" ("+s.SpanKind.String()+")")
	}
	return out
}
