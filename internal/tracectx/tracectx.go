// Package tracectx carries a W3C trace context — traceparent and
// tracestate, the two members MCP's _meta holds and the two HTTP headers
// of the same names — to and from OpenTelemetry's propagator, and names
// a request's span and attributes as OpenTelemetry's conventions for MCP
// say: the same way for the server, the client and the gateway.
package tracectx

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"tidings/jsonrpc"
	"tidings/mcp"
)

// Carrier is a trace context as its two strings. It is a
// propagation.TextMapCarrier.
type Carrier struct{ Parent, State string }

// Get returns the member named key.
func (c *Carrier) Get(key string) string {
	switch key {
	case mcp.MetaTraceParent:
		return c.Parent
	case mcp.MetaTraceState:
		return c.State
	}
	return ""
}

// Set sets the member named key; other keys are dropped.
func (c *Carrier) Set(key, value string) {
	switch key {
	case mcp.MetaTraceParent:
		c.Parent = value
	case mcp.MetaTraceState:
		c.State = value
	}
}

// Keys names the two members.
func (*Carrier) Keys() []string { return []string{mcp.MetaTraceParent, mcp.MetaTraceState} }

// w3c is the W3C trace context propagator, which has no state.
var w3c = propagation.TraceContext{}

// Extract returns ctx holding the remote span context parent and state
// name; ctx as it is when parent is not a well-formed traceparent.
func Extract(ctx context.Context, parent, state string) context.Context {
	if parent == "" {
		return ctx
	}
	return w3c.Extract(ctx, &Carrier{Parent: parent, State: state})
}

// Of returns the trace context of the span ctx holds (empty for none).
func Of(ctx context.Context) Carrier {
	var c Carrier
	w3c.Inject(ctx, &c)
	return c
}

// Request returns the span name the conventions give a request of method
// that names name (a tool, a prompt or a resource's URI; "" for none) in
// protocol version ("" when unknown), and the attributes its span and its
// duration carry.
func Request(method, name, version string) (spanName string, attrs []attribute.KeyValue) {
	attrs = make([]attribute.KeyValue, 0, 6)
	attrs = append(attrs, semconv.McpMethodNameKey.String(method))
	if version != "" {
		attrs = append(attrs, semconv.McpProtocolVersion(version))
	}
	spanName = method
	if name == "" {
		return spanName, attrs
	}
	switch method {
	case mcp.MethodToolsCall:
		attrs = append(attrs, semconv.GenAIToolName(name), semconv.GenAIOperationNameExecuteTool)
	case mcp.MethodPromptsGet:
		attrs = append(attrs, semconv.GenAIPromptName(name))
	case mcp.MethodResourcesRead, mcp.MethodResourcesSubscribe, mcp.MethodResourcesUnsubscribe:
		attrs = append(attrs, semconv.McpResourceURI(name))
	default:
		return spanName, attrs
	}
	return spanName + " " + name, attrs
}

// Failed returns the attributes of a request answered with the JSON-RPC
// error code.
func Failed(code jsonrpc.Code) []attribute.KeyValue {
	c := strconv.Itoa(int(code))
	return []attribute.KeyValue{semconv.ErrorTypeKey.String(c), semconv.RPCResponseStatusCode(c)}
}
