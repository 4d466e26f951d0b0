package gateway_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"tidings/client"
	"tidings/gateway"
	"tidings/internal/testrig/testkit"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// TestCallThroughTheGatewayIsOneTrace: a traced caller calls a tool
// through a traced gateway in front of a traced upstream. The spans make
// one chain: the caller's client span, the gateway's server span under
// it, the gateway's client span upstream under that, and the upstream's
// server span under the gateway's client span — the trace context
// carried in _meta on both hops.
func TestCallThroughTheGatewayIsOneTrace(t *testing.T) {
	tp, exp, _, upURL := tracedUpstream(t)
	_, url := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "weather", URL: upURL, Prefix: new(string)}}},
		gateway.WithServerOptions(server.WithTracerProvider(tp)), gateway.WithClientOptions(client.WithTracerProvider(tp)))
	c := client.NewHTTP(url, client.WithTracerProvider(tp))
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.CallTool(context.Background(), "get_weather", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	var callerSpan, gatewayServer, gatewayClient, upstreamServer *tracetest.SpanStub
	var servers []*tracetest.SpanStub
	spans := exp.GetSpans()
	for i := range spans {
		switch s := &spans[i]; {
		case s.Name != "tools/call get_weather":
		case s.SpanKind == trace.SpanKindClient && !s.Parent.IsValid():
			callerSpan = s
		case s.SpanKind == trace.SpanKindClient:
			gatewayClient = s // made within the gateway's server span
		case s.SpanKind == trace.SpanKindServer:
			servers = append(servers, s)
		}
	}
	for _, s := range servers {
		if s.Parent.SpanID() == spanID(callerSpan) {
			gatewayServer = s
		} else {
			upstreamServer = s
		}
	}
	if callerSpan == nil || gatewayServer == nil || gatewayClient == nil || upstreamServer == nil {
		t.Fatalf("want four spans of the call; got %d spans in all", len(spans))
	}
	if gatewayClient.Parent.SpanID() != gatewayServer.SpanContext.SpanID() {
		t.Errorf("the gateway's upstream call is under %s, want its server span %s", gatewayClient.Parent.SpanID(), gatewayServer.SpanContext.SpanID())
	}
	if upstreamServer.Parent.SpanID() != gatewayClient.SpanContext.SpanID() || !upstreamServer.Parent.IsRemote() {
		t.Errorf("the upstream's span is under %s, want the gateway's client span %s", upstreamServer.Parent.SpanID(), gatewayClient.SpanContext.SpanID())
	}
	if upstreamServer.SpanContext.TraceID() != callerSpan.SpanContext.TraceID() {
		t.Errorf("the upstream's span is in trace %s, want the caller's %s", upstreamServer.SpanContext.TraceID(), callerSpan.SpanContext.TraceID())
	}
}

// tracedUpstream serves a traced upstream with one tool, get_weather,
// over HTTP on loopback, its spans recorded by the provider it returns.
func tracedUpstream(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter, *server.Server, string) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	up := server.New(mcp.Implementation{Name: "upstream", Version: "1"}, server.WithTracerProvider(tp))
	addEcho(t, up, "get_weather", `{"type":"object"}`)
	return tp, exp, up, serveOnLoopback(t, up, streamhttp.New(up))
}

func spanID(s *tracetest.SpanStub) trace.SpanID {
	if s == nil {
		return trace.SpanID{}
	}
	return s.SpanContext.SpanID()
}

// TestUpstreamChangeIsOneTraceThroughTheGateway: a tool added on a traced
// upstream is told by the gateway to its listening callers in one trace:
// the gateway's change span (road origin) is the child of the upstream's,
// and the caller's notification carries that trace.
func TestUpstreamChangeIsOneTraceThroughTheGateway(t *testing.T) {
	tp, exp, up, upURL := tracedUpstream(t)
	g, url := startGateway(t, gateway.Config{Upstreams: []gateway.Upstream{{ID: "weather", URL: upURL, Prefix: new(string)}}},
		gateway.WithServerOptions(server.WithTracerProvider(tp)))
	testkit.WaitFor(t, waitTimeout, "the gateway's listen on the upstream", func() bool {
		st := g.Stats()
		return len(st) == 1 && st[0].Listens == 1
	})
	c := client.NewHTTP(url)
	t.Cleanup(func() { _ = c.Close() })
	events := make(chan client.Event, 16)
	w := c.Watch(context.Background(), client.WatchOptions{Tools: true, OnEvent: func(e client.Event) { events <- e }})
	t.Cleanup(w.Close)
	for e := range events {
		if e.Kind == client.ToolsChanged {
			break // the first read
		}
	}
	addEcho(t, up, "get_tides", `{"type":"object"}`)
	var traced client.Event
	deadline := time.After(waitTimeout)
	for traced.TraceParent == "" {
		select {
		case e := <-events:
			if e.Kind == client.ToolsChanged && slices.Contains(e.Added, "get_tides") {
				traced = e
				if e.TraceParent == "" {
					t.Fatalf("the caller's change event carries no trace: %+v", e)
				}
			}
		case <-deadline:
			t.Fatal("the caller never heard of the upstream's new tool")
		}
	}
	var upstream, gw *tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name != mcp.NotifyToolsListChanged {
			continue
		}
		for _, a := range s.Attributes {
			if a.Key == "tidings.change.road" && a.Value.AsString() == "local" {
				upstream = &s
			}
			if a.Key == "tidings.change.road" && a.Value.AsString() == "origin" {
				gw = &s
			}
		}
	}
	if upstream == nil || gw == nil {
		t.Fatalf("change spans: upstream %v, gateway %v; want both", upstream != nil, gw != nil)
	}
	if gw.Parent.SpanID() != upstream.SpanContext.SpanID() {
		t.Errorf("the gateway's change span is under %s, want the upstream's %s", gw.Parent.SpanID(), upstream.SpanContext.SpanID())
	}
	if want := upstream.SpanContext.TraceID().String(); !strings.Contains(traced.TraceParent, want) {
		t.Errorf("the caller's notification carries %s, want the upstream change's trace %s", traced.TraceParent, want)
	}
}
