package streamhttp_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/server"
)

// TestNotificationCarriesTheChangesTrace: a traced server's listen, parked
// or on its own goroutine, hears of a change in a notification whose
// _meta carries the change's trace context beside its subscription id;
// and the next change's notification carries the next change's.
func TestNotificationCarriesTheChangesTrace(t *testing.T) {
	for _, m := range parkModes() {
		t.Run(m.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			f := newFixture(t, []server.Option{server.WithTracerProvider(tp)}, m.opts...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			s := f.open(t, ctx, listenBody(7, `{"toolsListChanged":true}`), headers(mcp.MethodListen, ""))
			if ev := s.next(t); ev.Method != mcp.NotifyAcknowledged {
				t.Fatalf("first event %q, want the acknowledgement", ev.Method)
			}
			m.want(t, f, 1)
			seen := map[string]bool{}
			for i := range 2 {
				if i == 0 {
					f.srv.RemoveTools("coffee")
				} else {
					if err := f.srv.AddTool(mcp.Tool{Name: "tea"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
						return &mcp.CallToolResult{}, nil
					}); err != nil {
						t.Fatal(err)
					}
				}
				ev := s.next(t)
				var p struct {
					Meta map[string]json.RawMessage `json:"_meta"`
				}
				if err := json.Unmarshal(ev.Params, &p); err != nil || ev.Method != mcp.NotifyToolsListChanged || subscriptionID(t, ev.Params) != "7" {
					t.Fatalf("change %d: got %q %s", i, ev.Method, ev.Params)
				}
				var tp string
				_ = json.Unmarshal(p.Meta[mcp.MetaTraceParent], &tp)
				if tp == "" || seen[tp] {
					t.Fatalf("change %d: traceparent %q, want a trace of its own", i, tp)
				}
				seen[tp] = true
				// The change's span ends just after the hub was told: it
				// may be exported a moment after the notification came.
				testkit.WaitFor(t, 10*time.Second, "the change's span of trace "+tp, func() bool {
					for _, s := range exp.GetSpans() {
						if s.Name == mcp.NotifyToolsListChanged && tp == "00-"+s.SpanContext.TraceID().String()+"-"+s.SpanContext.SpanID().String()+"-01" {
							return true
						}
					}
					return false
				})
			}
		})
	}
}

// TestTraceHeadersNameTheParent: a request whose _meta names no trace but
// whose HTTP headers do (a peer instrumented at the HTTP layer) is traced
// as a child of the headers' span.
func TestTraceHeadersNameTheParent(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	f := newFixture(t, []server.Option{server.WithTracerProvider(tp)})
	const (
		headerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		headerSpan  = "00f067aa0ba902b7"
	)
	hdr := headers(mcp.MethodToolsList, "")
	hdr.Set("Traceparent", "00-"+headerTrace+"-"+headerSpan+"-01")
	if r := f.post(t, request(1, mcp.MethodToolsList, ""), hdr); r.status != 200 {
		t.Fatalf("tools/list: %d %s", r.status, r.body)
	}
	for _, s := range exp.GetSpans() {
		if s.Name == mcp.MethodToolsList {
			if s.SpanContext.TraceID().String() != headerTrace || s.Parent.SpanID().String() != headerSpan {
				t.Fatalf("span in trace %s under %s, want the headers' %s under %s", s.SpanContext.TraceID(), s.Parent.SpanID(), headerTrace, headerSpan)
			}
			return
		}
	}
	t.Fatal("no tools/list span")
}
