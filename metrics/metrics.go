// Package metrics exports what a tidings server does as Prometheus
// series: requests by method and outcome with their latency, open
// listens, change notifications sent and coalesced, streams cut off
// because their reader stopped reading, and tasks failed because the
// replica running them stopped; what listens and 2025-11-25 sessions
// hold against their limits (RegisterListens, RegisterSessions); the
// connection limits of an HTTP server (RegisterConns); for a replica of
// several, the health of its bus (RegisterBus) and of its shared state
// (RegisterState); and, for a served directory, how its limits bite
// (RegisterFiles).
//
// The series are cheap enough for the hot path: labels come from small
// fixed sets (an unknown method is "other", an uncommon error code
// "other"), so a hostile client cannot grow the series without bound.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// Metrics holds the series of one server. It implements
// server.RefusalObserver, so requests refused before they are served
// (a header mismatch, an unsupported version) are counted too, and
// server.TaskObserver, so tasks whose lease lapsed are.
type Metrics struct {
	requests      *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	listens       prometheus.Gauge
	sent          prometheus.Counter
	coalesced     prometheus.Counter
	cutoffs       prometheus.Counter
	leaseLapsed   prometheus.Counter
	knownMethods  map[string]*methodSeries
	knownOutcomes map[jsonrpc.Code]string
}

// methodSeries are one method's hot series, looked up once: finding a
// labelled child on every request would cost allocations.
type methodSeries struct {
	ok       prometheus.Counter
	duration prometheus.Observer
}

// New registers the series with reg (for example prometheus.NewRegistry()
// or prometheus.DefaultRegisterer).
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tidings_requests_total",
			Help: "MCP requests served, by method and outcome (ok, or the JSON-RPC error).",
		}, []string{"method", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tidings_request_duration_seconds",
			Help: "Time to serve an MCP request, by method; a listen counts until it ends.",
			// From a cached list page (tens of microseconds) to a slow tool.
			Buckets: []float64{.0001, .0005, .001, .005, .01, .05, .1, .5, 1, 5, 30},
		}, []string{"method"}),
		listens: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tidings_listens_open",
			Help: "subscriptions/listen requests open now.",
		}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidings_notifications_sent_total",
			Help: "Change notifications written to listen and session streams.",
		}),
		coalesced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidings_notifications_coalesced_total",
			Help: "Changes folded into a notification already pending for the same stream, instead of sent on their own.",
		}),
		cutoffs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidings_stream_cutoffs_total",
			Help: "Streams cut because their reader stopped reading for longer than the write timeout.",
		}),
		leaseLapsed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tidings_tasks_lease_lapsed_total",
			Help: "Unfinished tasks failed by this replica because their lease lapsed: the replica running them stopped, or lost the task store.",
		}),
		knownMethods: map[string]*methodSeries{},
		knownOutcomes: map[jsonrpc.Code]string{
			jsonrpc.CodeInvalidParams:          "invalid_params",
			jsonrpc.CodeMethodNotFound:         "method_not_found",
			jsonrpc.CodeInternalError:          "internal_error",
			jsonrpc.CodeInvalidRequest:         "invalid_request",
			mcp.CodeMissingRequiredCapability:  "missing_capability",
			mcp.CodeUnsupportedProtocolVersion: "unsupported_version",
			mcp.CodeHeaderMismatch:             "header_mismatch",
		},
	}
	for _, method := range []string{
		mcp.MethodDiscover, mcp.MethodListen, mcp.MethodToolsList, mcp.MethodToolsCall,
		mcp.MethodPromptsList, mcp.MethodPromptsGet, mcp.MethodResourcesList, mcp.MethodResourcesTemplates,
		mcp.MethodResourcesRead, mcp.MethodComplete,
		"other",
	} {
		m.knownMethods[method] = &methodSeries{
			ok:       m.requests.WithLabelValues(method, "ok"),
			duration: m.duration.WithLabelValues(method),
		}
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration, m.listens, m.sent, m.coalesced, m.cutoffs, m.leaseLapsed} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metrics: %w", err)
		}
	}
	return m, nil
}

// ServerOptions returns the options that feed m from a server.
func (m *Metrics) ServerOptions() []server.Option {
	return []server.Option{server.WithMiddleware(m.Middleware()), server.WithStreamObserver(m)}
}

// Middleware counts and times every request.
func (m *Metrics) Middleware() server.Middleware {
	return func(next server.MethodHandler) server.MethodHandler {
		return func(ctx context.Context, req *server.Request) error {
			method, series := m.series(req.Method)
			listen := req.Method == mcp.MethodListen
			if listen {
				m.listens.Inc()
			}
			start := time.Now()
			parked := false
			defer func() {
				if listen && !parked {
					m.listens.Dec()
				}
			}()
			err := next(ctx, req)
			// A parked listen goes on after next returns: it is counted
			// and timed when it ends. Only a listen is ever parked, and
			// the end function is built for it alone, as it costs an
			// allocation.
			parked = listen && req.AfterEnd(func(end error) {
				if listen {
					m.listens.Dec()
				}
				m.done(method, series, start, m.outcome(context.Background(), end))
			})
			if !parked {
				m.done(method, series, start, m.outcome(ctx, err))
			}
			return err
		}
	}
}

// done counts and times one request that ended with outcome.
func (m *Metrics) done(method string, series *methodSeries, start time.Time, outcome string) {
	series.duration.Observe(time.Since(start).Seconds())
	if outcome == "ok" {
		series.ok.Inc()
	} else {
		m.requests.WithLabelValues(method, outcome).Inc()
	}
}

// series returns the method label for method, "other" for one a client
// made up, and its series.
func (m *Metrics) series(method string) (string, *methodSeries) {
	if ms, ok := m.knownMethods[method]; ok {
		return method, ms
	}
	return "other", m.knownMethods["other"]
}

// outcome names err for the outcome label.
func (m *Metrics) outcome(ctx context.Context, err error) string {
	if err == nil {
		if ctx.Err() != nil {
			return "cancelled" // a listen the client left, a call it gave up
		}
		return "ok"
	}
	if errors.Is(err, context.Canceled) {
		return "cancelled" // a parked listen the client left (server.Request.AfterEnd)
	}
	var je *jsonrpc.Error
	if errors.As(err, &je) {
		if name, ok := m.knownOutcomes[je.Code]; ok {
			return name
		}
		if je.Code <= -32000 && je.Code >= -32099 {
			return "server_error_" + strconv.Itoa(int(-je.Code))
		}
		return "other"
	}
	if ctx.Err() != nil {
		return "cancelled"
	}
	return "other"
}

// Notified counts the notifications of one flush and the changes merged
// into them.
func (m *Metrics) Notified(sent, merged int) {
	m.sent.Add(float64(sent))
	if merged > 0 {
		m.coalesced.Add(float64(merged))
	}
}

// Refused counts a request refused before it was served.
func (m *Metrics) Refused(method string, code jsonrpc.Code) {
	method, _ = m.series(method)
	m.requests.WithLabelValues(method, m.outcome(context.Background(), jsonrpc.NewError(code, "", nil))).Inc()
}

// CutOff counts a stream cut for a stuck reader.
func (m *Metrics) CutOff() { m.cutoffs.Inc() }

// TaskLeaseLapsed counts a task failed because its lease lapsed.
func (m *Metrics) TaskLeaseLapsed() { m.leaseLapsed.Inc() }
