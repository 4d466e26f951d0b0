package client

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/mcpconv"
	"go.opentelemetry.io/otel/trace"

	"tidings/internal/tracectx"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// instrumentationName names the tracer and the meter the client takes
// from the providers it is given.
const instrumentationName = "tidings/client"

// WithTracerProvider has the client record a span for every request it
// sends, as OpenTelemetry's semantic conventions for MCP describe it:
// named "{method} {target}" (tools/call get_weather), of kind client,
// child of the span in the request's context; and has it carry that
// span's trace context to the server in params._meta (traceparent,
// tracestate), in either era, so that the server's span of the request
// joins the trace. Without this option the client records nothing and
// sends no trace context, whatever the context holds.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return option(func(c *config) {
		if tp != nil {
			c.tracer = tp.Tracer(instrumentationName)
		}
	})
}

// WithMeterProvider has the client record mcp.client.operation.duration,
// the conventions' histogram of how long each request took to be answered
// (seconds), by method, target and error.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return option(func(c *config) {
		if mp == nil {
			return
		}
		if d, err := mcpconv.NewClientOperationDuration(mp.Meter(instrumentationName)); err == nil {
			c.opDuration = &d
		}
	})
}

// addTrace adds the trace context tc (nil: none) to a request's _meta.
func addTrace(meta map[string]any, tc *tracectx.Carrier) {
	if tc == nil || tc.Parent == "" {
		return
	}
	meta[mcp.MetaTraceParent] = tc.Parent
	if tc.State != "" {
		meta[mcp.MetaTraceState] = tc.State
	}
}

// observe starts the account of one request — its span, with the trace
// context o then carries, and its duration — and returns the context the
// request is sent in and the function that closes the account with the
// request's error. It is not called when neither is kept.
func (c *Client) observe(ctx context.Context, method string, o *callOpts) (context.Context, func(error)) {
	start := time.Now()
	target := ""
	if o.name != nil {
		target = *o.name
	}
	name, attrs := tracectx.Request(method, target, c.currentVersion())
	var span trace.Span
	if c.cfg.tracer != nil {
		ctx, span = c.cfg.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
		tc := tracectx.Of(ctx)
		o.trace = &tc
	}
	return ctx, func(err error) {
		if err != nil {
			// A JSON-RPC error is typed by its code, as the server's span
			// of it is; anything else (the server unreachable, the reply
			// unreadable) by the conventions' catch-all.
			failed := []attribute.KeyValue{semconv.ErrorTypeOther}
			if je, ok := errors.AsType[*jsonrpc.Error](err); ok {
				failed = tracectx.Failed(je.Code)
			}
			attrs = append(attrs, failed...)
			if span != nil {
				span.SetAttributes(failed...)
				span.SetStatus(codes.Error, err.Error())
			}
		}
		if span != nil {
			span.End()
		}
		if d := c.cfg.opDuration; d != nil {
			d.RecordSet(ctx, time.Since(start).Seconds(), attribute.NewSet(attrs...))
		}
	}
}
