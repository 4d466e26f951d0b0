package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// ConnStats is what an HTTP server's connection limits have seen: the
// numbers RegisterConns exports.
type ConnStats struct {
	// Open counts the connections open now, Idle those of them waiting
	// between requests.
	Open, Idle int
	// MaxPerAddress and MaxTotal are the caps on open connections from
	// one client address and in all (0: none).
	MaxPerAddress, MaxTotal int
	// RefusedPerAddress and RefusedTotal count connections refused at
	// each cap; EvictedPerAddress and EvictedTotal the idle connections
	// closed to make room under it.
	RefusedPerAddress, RefusedTotal int64
	EvictedPerAddress, EvictedTotal int64
	// BodyTimeouts counts requests whose body did not arrive in time,
	// WriteTimeouts answers cut off because their reader stopped reading.
	BodyTimeouts, WriteTimeouts int64
	// Refusing counts the refused connections being told why now, while
	// their client speaks first (TLS, or HTTP/2 beside HTTP/1.1), at
	// most MaxRefusing; RefusedUntold the refused connections closed
	// without being told, over TLS, because MaxRefusing were being told.
	Refusing, MaxRefusing int
	RefusedUntold         int64
}

// RegisterConns registers an HTTP server's connection limits with reg,
// read from stats at each scrape:
//
//	tidings_http_connections_open                       connections open now
//	tidings_http_connections_idle                       of them, idle between requests
//	tidings_http_connections_max{limit}                 the caps: limit="per_address" or "total"
//	tidings_http_connections_refused_total{limit}       connections refused at a cap
//	tidings_http_connections_evicted_total{limit}       idle connections closed to make room
//	tidings_http_connections_refusing                   refused connections being told why now
//	tidings_http_connections_refusing_max               the most told at once
//	tidings_http_connections_refused_untold_total       refused connections closed untold (over TLS)
//	tidings_http_body_timeouts_total                    requests whose body did not arrive in time
//	tidings_http_write_timeouts_total                   answers cut off for a reader that stopped reading
//
// Refusals at limit="per_address" from a server behind a proxy mean the
// per-address cap is below what the proxy opens; alert on open nearing
// max{limit="total"}, and on refusals. Refusing at its bound
// (refusing_max) means refusals now come faster than their clients are
// told, and over TLS the rest are closed untold: their clients see a
// reset, not a 503.
func RegisterConns(reg prometheus.Registerer, stats func() ConnStats) error {
	const (
		maxName     = "tidings_http_connections_max"
		maxHelp     = "The most connections open at once, from one client address (limit=per_address) or in all (limit=total); 0 sets no cap."
		refusedName = "tidings_http_connections_refused_total"
		refusedHelp = "Connections refused with a 503 because a cap on open connections was reached and none under it was idle."
		evictedName = "tidings_http_connections_evicted_total"
		evictedHelp = "Idle connections closed to make room for a new one under a cap on open connections."
	)
	c := &statsCollector[ConnStats]{stats: stats, series: []series[ConnStats]{
		gauge("tidings_http_connections_open", "HTTP connections open now.", func(s ConnStats) float64 { return float64(s.Open) }),
		gauge("tidings_http_connections_idle", "HTTP connections open now and idle between requests: the first closed to make room.",
			func(s ConnStats) float64 { return float64(s.Idle) }),
		labelled(gauge(maxName, maxHelp, func(s ConnStats) float64 { return float64(s.MaxPerAddress) }), "limit", "per_address"),
		labelled(gauge(maxName, maxHelp, func(s ConnStats) float64 { return float64(s.MaxTotal) }), "limit", "total"),
		labelled(counter(refusedName, refusedHelp, func(s ConnStats) int64 { return s.RefusedPerAddress }), "limit", "per_address"),
		labelled(counter(refusedName, refusedHelp, func(s ConnStats) int64 { return s.RefusedTotal }), "limit", "total"),
		labelled(counter(evictedName, evictedHelp, func(s ConnStats) int64 { return s.EvictedPerAddress }), "limit", "per_address"),
		labelled(counter(evictedName, evictedHelp, func(s ConnStats) int64 { return s.EvictedTotal }), "limit", "total"),
		gauge("tidings_http_connections_refusing", "Refused connections being told why now, while their client speaks first (TLS, or HTTP/2 beside HTTP/1.1); refusing_max at most, past which a refusal is answered at once, or over TLS closed untold.",
			func(s ConnStats) float64 { return float64(s.Refusing) }),
		gauge("tidings_http_connections_refusing_max", "The most refused connections told why at once while their client speaks first.",
			func(s ConnStats) float64 { return float64(s.MaxRefusing) }),
		counter("tidings_http_connections_refused_untold_total", "Connections refused over TLS and closed without being told why, because refusing_max refusals were being told already; counted in refused_total too.",
			func(s ConnStats) int64 { return s.RefusedUntold }),
		counter("tidings_http_body_timeouts_total", "Requests whose body did not arrive within the body timeout.",
			func(s ConnStats) int64 { return s.BodyTimeouts }),
		counter("tidings_http_write_timeouts_total", "Answers, streamed or not, cut off because a write blocked for the write timeout: their reader stopped reading.",
			func(s ConnStats) int64 { return s.WriteTimeouts }),
	}}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("metrics: connections: %w", err)
	}
	return nil
}
