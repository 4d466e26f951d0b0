package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/contrib/exporters/autoexport"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"tidings/client"
	"tidings/server"
)

// telemetry is what the OpenTelemetry environment asked the command to
// export: traces, metrics, both or neither.
type telemetry struct {
	tp *sdktrace.TracerProvider
	mp *sdkmetric.MeterProvider
}

// getenv reads the environment; tests replace it.
type getenv func(string) string

// wantsTraces and wantsMetrics say whether the environment asks for a
// signal: an exporter named for it (other than none), or an OTLP endpoint
// given. Nothing set, nothing is exported — not even to OTLP's default
// endpoint, which the OpenTelemetry SDK would otherwise try.
func wantsTraces(env getenv) bool {
	return wants(env, "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
}

func wantsMetrics(env getenv) bool {
	return wants(env, "OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
}

func wants(env getenv, exporter, endpoint string) bool {
	if strings.EqualFold(env("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	if e := env(exporter); e != "" {
		return e != "none"
	}
	return env(endpoint) != "" || env("OTEL_EXPORTER_OTLP_ENDPOINT") != ""
}

// writesStdout reports whether the exporter variable names the console
// exporter, which writes to standard output.
func writesStdout(env getenv, exporter string) bool {
	for e := range strings.SplitSeq(env(exporter), ",") {
		if strings.TrimSpace(e) == "console" {
			return true
		}
	}
	return false
}

// startTelemetry sets up the exporters the standard OTEL_* environment
// names (OTLP over HTTP or gRPC, console, prometheus for metrics), through
// OpenTelemetry's autoexport. stdoutTaken, when not empty, says what
// standard output carries (MCP messages with --stdio, the events of
// watch), where the console exporter cannot write.
func startTelemetry(ctx context.Context, env getenv, stdoutTaken string) (*telemetry, error) {
	t := &telemetry{}
	traces, metrics := wantsTraces(env), wantsMetrics(env)
	if !traces && !metrics {
		return t, nil
	}
	if stdoutTaken != "" && (traces && writesStdout(env, "OTEL_TRACES_EXPORTER") || metrics && writesStdout(env, "OTEL_METRICS_EXPORTER")) {
		return nil, fmt.Errorf("the console exporter (OTEL_TRACES_EXPORTER or OTEL_METRICS_EXPORTER=console) writes to standard output, "+
			"which %s: export with otlp instead", stdoutTaken)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("tidings"), semconv.ServiceVersion(version())),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
		resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	if traces {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("OpenTelemetry traces exporter (OTEL_TRACES_EXPORTER): %w", err)
		}
		t.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	}
	if metrics {
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			t.shutdown(slog.New(slog.DiscardHandler))
			return nil, fmt.Errorf("OpenTelemetry metrics exporter (OTEL_METRICS_EXPORTER): %w", err)
		}
		t.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r), sdkmetric.WithResource(res))
	}
	return t, nil
}

// serverOptions hand the providers to a server.
func (t *telemetry) serverOptions() []server.Option {
	var opts []server.Option
	if t.tp != nil {
		opts = append(opts, server.WithTracerProvider(t.tp))
	}
	if t.mp != nil {
		opts = append(opts, server.WithMeterProvider(t.mp))
	}
	return opts
}

// clientOptions hand the providers to a client.
func (t *telemetry) clientOptions() []client.Option {
	var opts []client.Option
	if t.tp != nil {
		opts = append(opts, client.WithTracerProvider(t.tp))
	}
	if t.mp != nil {
		opts = append(opts, client.WithMeterProvider(t.mp))
	}
	return opts
}

// shutdown flushes what is left to export, within a few seconds: an
// exporter that cannot reach its collector does not hold the exit up.
func (t *telemetry) shutdown(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if t.tp != nil {
		if err := t.tp.Shutdown(ctx); err != nil {
			log.Warn("OpenTelemetry: exporting the last spans", "err", err)
		}
	}
	if t.mp != nil {
		if err := t.mp.Shutdown(ctx); err != nil {
			log.Warn("OpenTelemetry: exporting the last metrics", "err", err)
		}
	}
}

// stdoutUse is what standard output carries for a server: MCP messages
// with --stdio, nothing otherwise.
func stdoutUse(stdio bool) string {
	if stdio {
		return "--stdio uses for MCP messages"
	}
	return ""
}
