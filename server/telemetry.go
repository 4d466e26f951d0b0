package server

import (
	"context"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/mcpconv"
	"go.opentelemetry.io/otel/trace"

	"tidings/internal/engine"
	"tidings/mcp"
)

// instrumentationName names the tracer and the meter the server takes
// from the providers it is given.
const instrumentationName = "tidings/server"

// WithTracerProvider has the server record a span for every request it
// serves, on either transport and in either era, as OpenTelemetry's
// semantic conventions for MCP describe it: named "{method} {target}"
// (tools/call get_weather), of kind server, with mcp.method.name,
// jsonrpc.request.id, mcp.protocol.version and the target's attribute,
// and error.type and an error status when the answer is a JSON-RPC error.
// Its parent is the trace context the request carries in params._meta
// (traceparent, tracestate), and otherwise whatever span the context the
// transport passed holds (an HTTP middleware's). Without this option the
// server records nothing and reads no trace context.
//
// A listen's span covers the request until its acknowledgement, not the
// listen's life.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp != nil {
			c.tracer = tp.Tracer(instrumentationName)
		}
	}
}

// WithMeterProvider has the server record mcp.server.operation.duration,
// the conventions' histogram of how long each request took to be
// answered (seconds), by method, target, protocol version and error.
// The server's Prometheus metrics (see the metrics package) are kept as
// they are; this is the same measure in the conventions' name, for
// programs that export OpenTelemetry metrics.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp == nil {
			return
		}
		d, err := mcpconv.NewServerOperationDuration(mp.Meter(instrumentationName))
		if err == nil {
			c.opDuration = &d
		}
	}
}

// traceContext reads the W3C trace context the server writes and reads
// in _meta.
var traceContext = propagation.TraceContext{}

// metaCarrier gives a request's _meta to the trace context propagator.
type metaCarrier struct{ m *mcp.RequestMeta }

func (c metaCarrier) Get(key string) string {
	switch key {
	case mcp.MetaTraceParent:
		return c.m.TraceParent
	case mcp.MetaTraceState:
		return c.m.TraceState
	}
	return ""
}

func (metaCarrier) Set(string, string) {}

func (metaCarrier) Keys() []string { return []string{mcp.MetaTraceParent, mcp.MetaTraceState} }

// observe starts the account of one request — its span and its duration,
// as the server was told to keep them — and returns the context the
// request runs in and the function that closes the account with its
// reply. It is not called when neither is kept.
func (s *Server) observe(ctx context.Context, call *engine.Call, req *Request) (context.Context, func(*engine.Reply)) {
	if m := call.P.Meta; m != nil && m.TraceParent != "" {
		ctx = traceContext.Extract(ctx, metaCarrier{m})
	}
	start := time.Now()
	attrs := requestAttributes(req)
	var span trace.Span
	if s.cfg.tracer != nil {
		name := req.Method
		if t := spanTarget(req); t != "" {
			name += " " + t
		}
		ctx, span = s.cfg.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		if !req.ID.IsZero() {
			id := req.ID.Raw()
			if u, err := strconv.Unquote(id); err == nil {
				id = u // a string id, without its quotes
			}
			span.SetAttributes(semconv.JSONRPCRequestID(id))
		}
	}
	return ctx, func(rep *engine.Reply) {
		if rep.Err != nil {
			code := strconv.Itoa(rep.Err.Code)
			attrs = append(attrs, semconv.ErrorTypeKey.String(code), semconv.RPCResponseStatusCode(code))
			if span != nil {
				span.SetAttributes(semconv.ErrorTypeKey.String(code), semconv.RPCResponseStatusCode(code))
				span.SetStatus(codes.Error, rep.Err.Message)
			}
		}
		if span != nil {
			span.End()
		}
		if d := s.cfg.opDuration; d != nil {
			d.RecordSet(ctx, time.Since(start).Seconds(), attribute.NewSet(attrs...))
		}
	}
}

// spanTarget is what the conventions append to a span's name: the tool,
// the prompt or the resource's URI the request names.
func spanTarget(req *Request) string {
	switch req.Method {
	case mcp.MethodToolsCall, mcp.MethodPromptsGet, mcp.MethodResourcesRead,
		mcp.MethodResourcesSubscribe, mcp.MethodResourcesUnsubscribe:
		return req.Name
	}
	return ""
}

// requestAttributes are the conventions' attributes of req that both the
// span and the duration carry.
func requestAttributes(req *Request) []attribute.KeyValue {
	attrs := make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, semconv.McpMethodNameKey.String(req.Method))
	if req.ProtocolVersion != "" {
		attrs = append(attrs, semconv.McpProtocolVersion(req.ProtocolVersion))
	}
	switch req.Method {
	case mcp.MethodToolsCall:
		attrs = append(attrs, semconv.GenAIToolName(req.Name), semconv.GenAIOperationNameExecuteTool)
	case mcp.MethodPromptsGet:
		attrs = append(attrs, semconv.GenAIPromptName(req.Name))
	case mcp.MethodResourcesRead, mcp.MethodResourcesSubscribe, mcp.MethodResourcesUnsubscribe:
		attrs = append(attrs, semconv.McpResourceURI(req.Name))
	}
	return attrs
}
