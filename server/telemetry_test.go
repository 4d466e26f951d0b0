package server_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"tidings/bus"
	"tidings/bus/brokers"
	"tidings/internal/testrig/testbroker"
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
	exp.Reset() // the tool's registration is a change, with a span of its own
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

// TestNoProviderRecordsNothing: a server given no tracer provider (none
// at all, or a meter provider alone) reads no trace context and leaves
// the context's span alone.
func TestNoProviderRecordsNothing(t *testing.T) {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	for name, opts := range map[string][]server.Option{"none": nil, "meter alone": {server.WithMeterProvider(mp)}} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, opts...)
			var seen trace.SpanContext
			mustAddTool(t, h.srv, textTool("probe"), func(ctx context.Context, _ *server.ToolRequest) (*mcp.CallToolResult, error) {
				seen = trace.SpanContextFromContext(ctx)
				return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("ok")}}, nil
			})
			callOK(t, h, 1, mcp.MethodToolsCall, P{"name": "probe", "arguments": P{}, "_meta": P{mcp.MetaTraceParent: callerParent}})
			if seen.IsValid() {
				t.Fatalf("a server without a tracer provider linked its handler to %v", seen)
			}
		})
	}
}

// callOK makes a request that must be answered with a result.
func callOK(t *testing.T, h *harness, id any, method string, params P) {
	t.Helper()
	r, _ := h.call(id, method, params)
	r.ok(t)
}

// TestChangeIsATraceItsNotificationCarries: with a tracer, a tool added
// is a trace of its own — a producer span named by the notification —
// and the listen's notification carries that trace's context in _meta
// beside its subscription id; the delay from the change to the
// notification is measured, by road.
func TestChangeIsATraceItsNotificationCarries(t *testing.T) {
	h, exp, reader := tracedHarness(t)
	l := h.startListen("L1", P{"notifications": P{"toolsListChanged": true}})
	l.ack(t)
	mustAddTool(t, h.srv, textTool("added"), echoHandler("x"))
	ns := l.rec.waitUntil(t, "the list change", func(ns []notif) bool { return countMethod(ns, mcp.NotifyToolsListChanged) > 0 })
	// The change's span ends just after the hub was told: it may be
	// exported a moment after the notification came.
	var change *tracetest.SpanStub
	deadline := time.Now().Add(waitLimit)
	for change == nil && time.Now().Before(deadline) {
		for _, s := range exp.GetSpans() {
			if s.Name == mcp.NotifyToolsListChanged {
				change = &s
			}
		}
		time.Sleep(time.Millisecond) // polling, with a deadline
	}
	if change == nil || change.SpanKind != trace.SpanKindProducer || change.Parent.IsValid() {
		t.Fatalf("change span %+v, want a producer span of its own trace", change)
	}
	if road, _ := attr(change.Attributes, "tidings.change.road"); road != "local" {
		t.Errorf("road %q, want local", road)
	}
	for _, n := range ns {
		if n.Method != mcp.NotifyToolsListChanged {
			continue
		}
		l.checkTag(t, n)
		meta, _ := n.Params["_meta"].(map[string]any)
		tp, _ := meta[mcp.MetaTraceParent].(string)
		if want := "00-" + change.SpanContext.TraceID().String() + "-" + change.SpanContext.SpanID().String() + "-01"; tp != want {
			t.Errorf("notification's traceparent %q, want the change's %q", tp, want)
		}
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "tidings.change.delay" {
				continue
			}
			hist := m.Data.(metricdata.Histogram[float64])
			for _, dp := range hist.DataPoints {
				if road, _ := dp.Attributes.Value("tidings.change.road"); road.AsString() == "local" && dp.Count >= 1 {
					return
				}
			}
			t.Fatalf("tidings.change.delay %+v, want a local data point", hist)
		}
	}
	t.Fatal("no tidings.change.delay recorded")
}

// TestChangeTraceIsNotToldToOthers: a change only some principals are
// told of (ListChangedFor) carries no trace, and leaves none behind for
// the next notification of the list.
func TestChangeTraceIsNotToldToOthers(t *testing.T) {
	h, _, _ := tracedHarness(t)
	l := h.startListen("L1", P{"notifications": P{"toolsListChanged": true}})
	l.ack(t)
	mustAddTool(t, h.srv, textTool("added"), echoHandler("x"))
	l.rec.waitUntil(t, "the first change", func(ns []notif) bool { return countMethod(ns, mcp.NotifyToolsListChanged) == 1 })
	h.srv.ListChangedFor("", server.ListTools)
	ns := l.rec.waitUntil(t, "the second change", func(ns []notif) bool { return countMethod(ns, mcp.NotifyToolsListChanged) == 2 })
	last := ns[len(ns)-1]
	if meta, _ := last.Params["_meta"].(map[string]any); meta[mcp.MetaTraceParent] != nil {
		t.Errorf("a change told to one principal carries a trace: %s", last.raw)
	}
}

// TestChangeTraceCrossesTheBus: a tool added on one replica is told, over
// the bus (in-process, and a real NATS server), to a listen on the other
// in a notification of the same trace: the second replica's change span
// (road bus) is the child of the first's.
func TestChangeTraceCrossesTheBus(t *testing.T) {
	for _, b := range []struct {
		name string
		open func(t *testing.T) func() bus.Bus
	}{
		{"local", func(*testing.T) func() bus.Bus {
			group, quiet := bus.NewLocal(), bus.WithLogger(slog.New(slog.DiscardHandler))
			return func() bus.Bus { return bus.New(group.Conn(), quiet, bus.WithSecret(replicaSecret)) }
		}},
		{"nats", func(t *testing.T) func() bus.Bus {
			url := testbroker.StartNATS(t).URL()
			return func() bus.Bus {
				ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
				defer cancel()
				b, err := brokers.Open(ctx, url, bus.WithSecret(replicaSecret), bus.WithLogger(slog.New(slog.DiscardHandler)))
				if err != nil {
					t.Fatal(err)
				}
				return b
			}
		}},
	} {
		t.Run(b.name, func(t *testing.T) { changeTraceCrossesTheBus(t, b.open(t)) })
	}
}

func changeTraceCrossesTheBus(t *testing.T, open func() bus.Bus) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	a := newHarness(t, server.WithTracerProvider(tp), server.WithBus(open()), server.WithSecret(replicaSecret))
	b := newHarness(t, server.WithTracerProvider(tp), server.WithBus(open()), server.WithSecret(replicaSecret))
	for _, h := range []*harness{a, b} {
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			_ = h.srv.Shutdown(ctx) // closes its bus
		})
	}
	mustAddTool(t, b.srv, textTool("present"), echoHandler("x"))
	l := b.startListen("L1", P{"notifications": P{"toolsListChanged": true}})
	l.ack(t)
	mustAddTool(t, a.srv, textTool("added"), echoHandler("x"))
	ns := l.rec.waitUntil(t, "the change from the other replica", func(ns []notif) bool { return countMethod(ns, mcp.NotifyToolsListChanged) > 0 })
	var told string // the trace the listen's notification carries
	for _, n := range ns {
		if n.Method == mcp.NotifyToolsListChanged {
			meta, _ := n.Params["_meta"].(map[string]any)
			if tp, _ := meta[mcp.MetaTraceParent].(string); len(tp) == 55 {
				told = tp[3:35]
			}
		}
	}
	if told == "" {
		t.Fatalf("the notification carries no trace: %s", dump(ns))
	}
	// The trace holds the change's span on the first replica and, under
	// it, the second replica's span of the change the bus brought.
	// A span is exported when it ends, just after the hub was told: it
	// may come a moment after the notification.
	var local, remote *tracetest.SpanStub
	deadline := time.Now().Add(waitLimit)
	for (local == nil || remote == nil) && time.Now().Before(deadline) {
		for _, s := range exp.GetSpans() {
			if s.Name != mcp.NotifyToolsListChanged || s.SpanContext.TraceID().String() != told {
				continue
			}
			switch road, _ := attr(s.Attributes, "tidings.change.road"); road {
			case "local":
				local = &s
			case "bus":
				remote = &s
			}
		}
		time.Sleep(time.Millisecond) // polling, with a deadline
	}
	if local == nil || remote == nil || local.Parent.IsValid() {
		t.Fatalf("in the notification's trace %s: local span %v, bus span %v; want both, the local one its root", told, local != nil, remote != nil)
	}
	if remote.Parent.SpanID() != local.SpanContext.SpanID() || !remote.Parent.IsRemote() {
		t.Errorf("the bus's change span is under %s, want under the first replica's %s", remote.Parent.SpanID(), local.SpanContext.SpanID())
	}
}

// TestUpdateIsATraceItsNotificationCarries: a resource's update is a
// trace of its own too, and the notification of it to a listen that
// follows the resource carries that trace and the update's time.
func TestUpdateIsATraceItsNotificationCarries(t *testing.T) {
	h, exp, _ := tracedHarness(t)
	const uri = "mem://doc"
	mustAddResource(t, h.srv, uri, textResource(uri, "v1"))
	l := h.startListen("L1", P{"notifications": P{"resourceSubscriptions": []string{uri}}})
	l.ack(t)
	h.srv.ResourceUpdated(uri)
	ns := l.rec.waitUntil(t, "the update", func(ns []notif) bool { return countMethod(ns, mcp.NotifyResourceUpdated) > 0 })
	var meta map[string]any
	for _, n := range ns {
		if n.Method == mcp.NotifyResourceUpdated {
			l.checkTag(t, n)
			meta, _ = n.Params["_meta"].(map[string]any)
		}
	}
	tp, _ := meta[mcp.MetaTraceParent].(string)
	if len(tp) != 55 {
		t.Fatalf("the update's notification carries traceparent %q: %v", tp, meta)
	}
	if at, _ := meta[mcp.MetaChangedAt].(string); at == "" {
		t.Errorf("the update's notification says not when it happened: %v", meta)
	}
	deadline := time.Now().Add(waitLimit)
	for time.Now().Before(deadline) {
		for _, s := range exp.GetSpans() {
			if s.Name == mcp.NotifyResourceUpdated && s.SpanContext.TraceID().String() == tp[3:35] {
				if got, _ := attr(s.Attributes, "mcp.resource.uri"); got != uri {
					t.Errorf("the update's span names %q, want %q", got, uri)
				}
				return
			}
		}
		time.Sleep(time.Millisecond) // polling, with a deadline
	}
	t.Fatal("no span of the update in the notification's trace")
}
