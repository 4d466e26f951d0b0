package streamhttp_test

import (
	"context"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"tidings/server"
	"tidings/streamhttp"
)

// discardSpans is an exporter that drops what it is given: the cost of
// recording and batching spans, without that of sending them.
type discardSpans struct{}

func (discardSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardSpans) Shutdown(context.Context) error                             { return nil }

// BenchmarkToolsListHTTPTraced is BenchmarkToolsListHTTP with every
// request sampled and its span batched for export: the cost of tracing
// each request.
func BenchmarkToolsListHTTPTraced(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(discardSpans{}))
	defer tp.Shutdown(context.Background())
	ts := httptest.NewServer(streamhttp.New(benchServer(b, server.WithTracerProvider(tp))))
	defer ts.Close()
	runToolsList(b, ts.URL)
}
