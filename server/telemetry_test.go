package server_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// A caller's trace, as a W3C traceparent: the server's span of the
// request must be its child.
const (
	callerTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan   = "00f067aa0ba902b7"
	callerParent = "00-" + callerTrace + "-" + callerSpan + "-01"
)

func tracedHarness(t *testing.T) (*harness, *tracetest.InMemoryExporter, *sdkmetric.ManualReader) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	h := newHarness(t, server.WithTracerProvider(tp), server.WithMeterProvider(mp))
	mustAddTool(t, h.srv, textTool("get_weather"), echoHandler("sunny"))
	return h, exp, reader
}

func attr(kvs []attribute.KeyValue, key string) (string, bool) {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value.String(), true
		}
	}
	return "", false
}

// TestRequestSpanJoinsTheCallersTrace: a tools/call whose _meta carries a
// traceparent is recorded as a server span of that trace, child of the
// caller's span, named and described as the conventions for MCP say.
func TestRequestSpanJoinsTheCallersTrace(t *testing.T) {
	h, exp, _ := tracedHarness(t)
	callOK(t, h, "req-7", mcp.MethodToolsCall, P{"name": "get_weather", "arguments": P{},
		"_meta": P{mcp.MetaTraceParent: callerParent, mcp.MetaTraceState: "vendor=1"}})
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Name != "tools/call get_weather" || s.SpanKind != trace.SpanKindServer {
		t.Errorf("span %q of kind %v, want %q of kind server", s.Name, s.SpanKind, "tools/call get_weather")
	}
	if got := s.SpanContext.TraceID().String(); got != callerTrace {
		t.Errorf("trace %s, want the caller's %s", got, callerTrace)
	}
	if got := s.Parent.SpanID().String(); got != callerSpan || !s.Parent.IsRemote() {
		t.Errorf("parent %s (remote %v), want the caller's span %s", got, s.Parent.IsRemote(), callerSpan)
	}
	if got := s.SpanContext.TraceState().Get("vendor"); got != "1" {
		t.Errorf("tracestate vendor=%q, want the caller's 1", got)
	}
	for key, want := range map[string]string{
		"mcp.method.name":       mcp.MethodToolsCall,
		"gen_ai.tool.name":      "get_weather",
		"gen_ai.operation.name": "execute_tool",
		"jsonrpc.request.id":    "req-7",
		"mcp.protocol.version":  mcp.Version,
	} {
		if got, ok := attr(s.Attributes, key); !ok || got != want {
			t.Errorf("%s = %q (set %v), want %q", key, got, ok, want)
		}
	}
	if s.Status.Code == codes.Error {
		t.Errorf("status %v for an answered call", s.Status)
	}
}

// TestRequestSpanWithoutTraceContextStartsATrace: a request that carries
// no trace context gets a span of a trace of its own, with no parent.
func TestRequestSpanWithoutTraceContextStartsATrace(t *testing.T) {
	h, exp, _ := tracedHarness(t)
	callOK(t, h, 1, mcp.MethodToolsList, P{})
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != mcp.MethodToolsList || spans[0].Parent.IsValid() {
		t.Fatalf("spans %+v, want one tools/list span without a parent", spans)
	}
}

// TestRequestSpanOfAnErrorSaysWhich: an answer that is a JSON-RPC error
// sets the span's status and error.type to its code.
func TestRequestSpanOfAnErrorSaysWhich(t *testing.T) {
	h, exp, reader := tracedHarness(t)
	r, _ := h.call(1, mcp.MethodToolsCall, P{"name": "no_such_tool", "arguments": P{}})
	r.fails(t, jsonrpc.CodeInvalidParams)
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	if spans[0].Status.Code != codes.Error {
		t.Errorf("status %v, want an error", spans[0].Status)
	}
	if got, _ := attr(spans[0].Attributes, "error.type"); got != "-32602" {
		t.Errorf("error.type %q, want -32602", got)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "mcp.server.operation.duration" || m.Unit != "s" {
				continue
			}
			hist, ok := m.Data.(metricdata.Histogram[float64])
			if !ok || len(hist.DataPoints) != 1 || hist.DataPoints[0].Count != 1 {
				t.Fatalf("%s: %+v, want one data point of one request", m.Name, m.Data)
			}
			if got, _ := hist.DataPoints[0].Attributes.Value("error.type"); got.String() != "-32602" {
				t.Errorf("duration's error.type %q, want -32602", got.String())
			}
			found = true
		}
	}
	if !found {
		t.Fatalf("no mcp.server.operation.duration in %+v", rm)
	}
}

// TestNoProviderRecordsNothing: a server given no provider reads no
// trace context and leaves the context's span alone.
func TestNoProviderRecordsNothing(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	h := newHarness(t)
	var seen trace.SpanContext
	mustAddTool(t, h.srv, textTool("probe"), func(ctx context.Context, _ *server.ToolRequest) (*mcp.CallToolResult, error) {
		seen = trace.SpanContextFromContext(ctx)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("ok")}}, nil
	})
	callOK(t, h, 1, mcp.MethodToolsCall, P{"name": "probe", "arguments": P{}, "_meta": P{mcp.MetaTraceParent: callerParent}})
	if seen.IsValid() || len(exp.GetSpans()) != 0 {
		t.Fatalf("a server without providers linked %v and recorded %d spans", seen, len(exp.GetSpans()))
	}
}

// callOK makes a request that must be answered with a result.
func callOK(t *testing.T, h *harness, id any, method string, params P) {
	t.Helper()
	r, _ := h.call(id, method, params)
	r.ok(t)
}
