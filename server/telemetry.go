package server

import (
	"context"
	"strconv"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/mcpconv"
	"go.opentelemetry.io/otel/trace"

	"tidings/hub"
	"tidings/internal/engine"
	"tidings/internal/tracectx"
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
// (traceparent, tracestate), otherwise whatever span the context the
// transport passed holds (an HTTP middleware's), and otherwise the
// request's traceparent and tracestate HTTP headers. Without this option
// the server records no span and reads no trace context.
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
// answered (seconds), by method, target, protocol version and error; and
// tidings.change.delay, how long a list change took to be told to each
// listener (seconds), by the road it came by: local, bus (another
// replica's) or origin (a gateway's upstream's).
// The server's Prometheus metrics (see the metrics package) are kept as
// they are; this is the same measure in the conventions' name, for
// programs that export OpenTelemetry metrics.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp == nil {
			return
		}
		c.meter = mp.Meter(instrumentationName)
		d, err := mcpconv.NewServerOperationDuration(c.meter)
		if err == nil {
			c.opDuration = &d
		}
	}
}

// observe starts the account of one request — its span and its duration,
// as the server was told to keep them — and returns the context the
// request runs in and the function that closes the account with its
// reply. It is not called when neither is kept.
func (s *Server) observe(ctx context.Context, call *engine.Call, req *Request) (context.Context, func(*engine.Reply)) {
	if m := call.P.Meta; m != nil && m.TraceParent != "" && s.cfg.tracer != nil {
		ctx = tracectx.Extract(ctx, m.TraceParent, m.TraceState)
	}
	start := time.Now()
	name, attrs := tracectx.Request(req.Method, req.Name, req.ProtocolVersion)
	var span trace.Span
	if s.cfg.tracer != nil {
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
			failed := tracectx.Failed(rep.Err.Code)
			attrs = append(attrs, failed...)
			if span != nil {
				span.SetAttributes(failed...)
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

// The roads a change comes by, as the change's spans and the delay
// histogram name them (tidings.change.road).
const (
	roadLocal  = "local"  // registered, changed or removed here
	roadBus    = "bus"    // told by another replica
	roadOrigin = "origin" // told by the server's Origin (a gateway's upstream)
)

// changeRoadKey names the road a change came by.
const changeRoadKey = attribute.Key("tidings.change.road")

// changeTelemetry traces the server's list changes and measures how long
// each took to reach its listeners. A change of a list is a trace of its
// own: a producer span named by the notification that tells of it
// (notifications/tools/list_changed), from the change until the hub has
// told every listener; every notification of it carries that span's
// trace context in _meta, so that the re-read it prompts can join the
// change's trace. A span per listen (tens of thousands per change) would
// cost more than the notification; the delay histogram gives each
// listen's share instead.
type changeTelemetry struct {
	tracer trace.Tracer
	// delay is tidings.change.delay: from a change to a notification of
	// it made for a listener, by road.
	delay metric.Float64Histogram
	roads map[string]metric.RecordOption // by road, made once
}

// newChangeTelemetry returns the change telemetry cfg asks for, or nil.
func newChangeTelemetry(cfg config) *changeTelemetry {
	if cfg.tracer == nil && cfg.meter == nil {
		return nil
	}
	t := &changeTelemetry{tracer: cfg.tracer}
	if cfg.meter != nil {
		d, err := cfg.meter.Float64Histogram("tidings.change.delay", metric.WithUnit("s"),
			metric.WithDescription("Time from a list change to a notification of it made for a listener, by the road the change came by."))
		if err == nil {
			t.delay = d
			t.roads = map[string]metric.RecordOption{}
			for _, r := range []string{roadLocal, roadBus, roadOrigin} {
				t.roads[r] = metric.WithAttributeSet(attribute.NewSet(changeRoadKey.String(r)))
			}
		}
	}
	return t
}

// stamp stamps e, a change of lists or a resource's update told to
// everyone, with the time and
// (when traced) the trace of the change — a span of its own, the child of
// the span ctx holds if any (a gateway's upstream's change, another
// replica's) — and returns the function that ends its span once the hub
// has told everyone. A task's change, or one told only to some (whose
// trace others must not see), is left as it is.
func (t *changeTelemetry) stamp(ctx context.Context, e *hub.Event, road string) (end func()) {
	return t.stampAt(ctx, e, road, time.Time{})
}

// stampAt is stamp for a change that happened at at (zero: now), by its
// teller's clock: another replica's, which sent it then. A time ahead of
// this clock's is taken for now.
func (t *changeTelemetry) stampAt(ctx context.Context, e *hub.Event, road string, at time.Time) (end func()) {
	if t == nil || (e.Kinds == 0 && e.URI == "") || e.Audience != nil || e.Sees != nil {
		return func() {}
	}
	st := &hub.Stamp{At: time.Now(), Road: road}
	if !at.IsZero() && at.Before(st.At) {
		st.At = at
	}
	e.Stamp = st
	st.Members = append(st.Members, `,"`+mcp.MetaChangedAt+`":"`...)
	st.Members = st.At.UTC().AppendFormat(st.Members, time.RFC3339Nano)
	st.Members = append(st.Members, '"')
	if t.tracer == nil {
		return func() {}
	}
	name := mcp.NotifyResourceUpdated
	for _, l := range mcp.Lists() {
		if e.Kinds.Has(l) {
			name = l.Changed()
			break
		}
	}
	attrs := []attribute.KeyValue{semconv.McpMethodNameKey.String(name), changeRoadKey.String(road)}
	if e.URI != "" {
		attrs = append(attrs, semconv.McpResourceURI(e.URI))
	}
	ctx, span := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	c := tracectx.Of(ctx)
	st.TraceParent, st.TraceState = c.Parent, c.State
	if c.Parent != "" {
		st.Members = append(st.Members, `,"`+mcp.MetaTraceParent+`":`...)
		st.Members, _ = jsontext.AppendQuote(st.Members, c.Parent)
		if c.State != "" {
			st.Members = append(st.Members, `,"`+mcp.MetaTraceState+`":`...)
			st.Members, _ = jsontext.AppendQuote(st.Members, c.State)
		}
	}
	return func() { span.End() }
}

// delayed records that a notification of the change st stamped was made
// for a listener now.
func (t *changeTelemetry) delayed(st *hub.Stamp) {
	if t == nil || t.delay == nil {
		return
	}
	if opt, ok := t.roads[st.Road]; ok {
		t.delay.Record(context.Background(), time.Since(st.At).Seconds(), opt)
	}
}

// withTraceHeaders returns ctx holding the trace context of env's HTTP
// headers, for a traced server's request whose _meta names none and whose
// context holds no span already.
func (s *Server) withTraceHeaders(ctx context.Context, call *engine.Call, env engine.Envelope) context.Context {
	th, ok := env.(engine.TraceHeaders)
	if !ok || s.cfg.tracer == nil || (call.P.Meta != nil && call.P.Meta.TraceParent != "") || trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	parent, state := th.TraceHeaders()
	return tracectx.Extract(ctx, parent, state)
}
