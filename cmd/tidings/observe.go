package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"tidings/bus"
	"tidings/gateway"
	"tidings/metrics"
	"tidings/server"
	"tidings/streamhttp"
)

// newLogger returns the logger of a command: text (one key=value line per
// event, for people) or JSON (one object per line, for log pipelines),
// at the given level, on w.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format: %q is neither text nor json", format)
}

// observability is what a serving process tells the platform it runs on:
// Prometheus metrics, liveness and readiness.
type observability struct {
	registry *prometheus.Registry
	metrics  *metrics.Metrics
	ready    atomic.Bool // the directory is scanned
	stopping atomic.Bool // shutting down: take no new traffic
	late     lateMiddleware
	// bus, with --bus, reports the bus's health to /readyz and /metrics.
	bus func() bus.Stats
	// sessions, over HTTP, reports the 2025-11-25 sessions to /metrics.
	sessions func() streamhttp.SessionStats
	// parked, over HTTP, reports the listens parked (--park-listens).
	parked func() int
	// upstreams, for a gateway, reports its upstreams to /readyz.
	upstreams func() []gateway.UpstreamStats
}

// upstreamLines is /readyz's word on a gateway's upstreams, a line each,
// and whether none is up (of at least one).
func (o *observability) upstreamLines() (lines string, noneUp bool) {
	if o.upstreams == nil {
		return "", false
	}
	st := o.upstreams()
	up := 0
	var b strings.Builder
	for _, s := range st {
		if s.Up {
			up++
			fmt.Fprintf(&b, "upstream %s: up\n", s.ID)
			continue
		}
		fmt.Fprintf(&b, "upstream %s: down", s.ID)
		if s.Problem != "" {
			fmt.Fprintf(&b, " (%s)", strings.ReplaceAll(s.Problem, "\n", " "))
		}
		b.WriteString("\n")
	}
	if up < len(st) {
		return "degraded: " + strconv.Itoa(len(st)-up) + " of " + strconv.Itoa(len(st)) + " upstreams down\n" + b.String(), up == 0
	}
	return b.String(), false
}

// watchBus reports b's health in /metrics and /readyz.
func (o *observability) watchBus(b bus.Bus) error {
	o.bus = b.Stats
	return metrics.RegisterBus(o.registry, b.Stats)
}

// lateMiddleware is a place in the server's middleware chain for one that
// exists only once the server listens: the authorization check, whose
// audience is the listening address. Until it is set, requests pass.
type lateMiddleware struct {
	next server.MethodHandler
	h    atomic.Pointer[server.MethodHandler]
}

func (l *lateMiddleware) wrap(next server.MethodHandler) server.MethodHandler {
	l.next = next // server.New builds its chain once, before serving
	return func(ctx context.Context, req *server.Request) error {
		if h := l.h.Load(); h != nil {
			return (*h)(ctx, req)
		}
		return next(ctx, req)
	}
}

// set puts mw in place; call it before the server takes requests.
func (l *lateMiddleware) set(mw server.Middleware) {
	h := mw(l.next)
	l.h.Store(&h)
}

// busLine is /readyz's word on the bus ("" without one).
func (o *observability) busLine() string {
	if o.bus == nil {
		return ""
	}
	st := o.bus()
	line := "bus: disconnected\n"
	if st.Connected {
		line = "bus: connected\n"
	}
	if st.Node != "" {
		line += "bus server: " + st.Node + "\n"
	}
	return line
}

func newObservability() (*observability, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m, err := metrics.New(reg)
	if err != nil {
		return nil, err
	}
	return &observability{registry: reg, metrics: m}, nil
}

// serverOptions feeds the metrics and the debug request log from srv,
// and leaves room for the authorization middleware (see lateMiddleware).
func (o *observability) serverOptions(log *slog.Logger) []server.Option {
	return append(o.metrics.ServerOptions(), server.WithMiddleware(server.LogRequests(log), o.late.wrap))
}

// mount adds /metrics, /healthz and /readyz to mux. /healthz answers 200
// while the process serves at all; /readyz answers 200 once the directory
// is scanned and until shutdown begins, and 503 otherwise, so that a
// balancer sends traffic only where lists are complete.
//
// With a bus, /readyz also says "bus: connected" or "bus: disconnected",
// and which server of the broker the bus is on, when it knows ("bus
// server: n1 (nats://10.0.0.1:4222)" for a node of a NATS cluster, "bus
// server: 10.0.0.2:6379" for the primary a Redis Sentinel named), but
// the bus does not change its status: a replica whose bus is down
// still answers correctly from its own directory and only hears of the
// others' changes late (re-notifying its listeners once the bus is back),
// and every replica loses the bus at once when the broker goes down, so
// failing readiness then would empty the balancer's pool for the sake of
// notifications. Operators who want such a replica out of rotation alert
// on tidings_bus_connected.
func (o *observability) mount(mux *http.ServeMux) {
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		switch {
		case o.stopping.Load():
			http.Error(w, "shutting down", http.StatusServiceUnavailable)
		case !o.ready.Load():
			http.Error(w, "scanning the directory", http.StatusServiceUnavailable)
		default:
			// A gateway with some upstreams down still serves the others'
			// items, told as partial: taking it out of rotation would
			// lose those too. With none up it has nothing to serve.
			lines, noneUp := o.upstreamLines()
			if noneUp {
				http.Error(w, "no upstream is up\n"+lines+o.busLine(), http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, "ready\n"+lines+o.busLine())
		}
	})
}

// watchServe reports the connections and HTTP/2 streams of front in
// /metrics.
func (o *observability) watchServe(front *streamhttp.Server) error {
	err := metrics.RegisterConns(o.registry, func() metrics.ConnStats {
		s := front.Stats()
		return metrics.ConnStats{
			Open: s.Open, Idle: s.Idle, MaxPerAddress: s.MaxPerAddress, MaxTotal: s.MaxTotal,
			RefusedPerAddress: s.RefusedPerAddress, RefusedTotal: s.RefusedTotal,
			EvictedPerAddress: s.EvictedPerAddress, EvictedTotal: s.EvictedTotal,
			BodyTimeouts: s.BodyTimeouts, WriteTimeouts: s.WriteTimeouts,
			Refusing: s.Refusing, MaxRefusing: s.MaxRefusing, RefusedUntold: s.RefusedUntold,
		}
	})
	if err != nil {
		return err
	}
	return metrics.RegisterHTTP2(o.registry, func() metrics.HTTP2Stats {
		s := front.Stats()
		return metrics.HTTP2Stats{Streams: s.HTTP2Streams, Parked: s.HTTP2Parked, Refused: s.HTTP2Refused, MaxStreams: s.HTTP2MaxStreams,
			WritesGathered: s.WritesGathered, WritesToSockets: s.WritesToSockets}
	})
}
