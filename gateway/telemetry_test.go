package gateway_test

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"tidings/client"
	"tidings/gateway"
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
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	up := server.New(mcp.Implementation{Name: "upstream", Version: "1"}, server.WithTracerProvider(tp))
	addEcho(t, up, "get_weather", `{"type":"object"}`)
	upURL := serveOnLoopback(t, up, streamhttp.New(up))
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

func spanID(s *tracetest.SpanStub) trace.SpanID {
	if s == nil {
		return trace.SpanID{}
	}
	return s.SpanContext.SpanID()
}
