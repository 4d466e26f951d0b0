package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"tidings/server"
	"tidings/streamhttp"
)

// listenLimitNames are the limits of server.WithListenLimits, as
// ListenStats.Refused names them: a fixed set, so that the label cannot
// grow.
var listenLimitNames = []string{
	"urisPerListen", "listensPerConnection", "urisPerConnection",
	"listensPerPrincipal", "urisPerPrincipal", "listens", "uris",
}

// RegisterListens registers what a server's listens hold against the
// bounds of server.WithListenLimits with reg, read from stats (usually
// Server.ListenStats) at each scrape:
//
//	tidings_listen_uris_followed                 resource URIs followed by listens and sessions now
//	tidings_listen_refusals_total{limit="..."}   listens and subscribes refused, by the limit they would pass
//
// The limit label is one of urisPerListen, listensPerConnection,
// urisPerConnection, listensPerPrincipal, urisPerPrincipal, listens
// and uris; tidings_listens_open (New) counts the open listens. A
// steady rate of refusals for a per-principal limit is one caller at
// its allowance; for listens or uris, the server at its own.
func RegisterListens(reg prometheus.Registerer, stats func() server.ListenStats) error {
	c := &statsCollector[server.ListenStats]{stats: stats, series: []series[server.ListenStats]{
		gauge("tidings_listen_uris_followed", "Resource URIs followed now by listens and 2025-11-25 sessions, counted per follower.",
			func(s server.ListenStats) float64 { return float64(s.URIs) }),
	}}
	for _, name := range listenLimitNames {
		c.series = append(c.series, labelledCounter("tidings_listen_refusals_total",
			"Listens and resource subscriptions refused, by the limit of WithListenLimits they would pass.",
			prometheus.Labels{"limit": name}, func(s server.ListenStats) int64 { return s.Refused[name] }))
	}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("metrics: listens: %w", err)
	}
	return nil
}

// RegisterParked registers how many listens a handler has parked (see
// streamhttp.WithParking) with reg, read from parked (usually
// Handler.ParkedListens) at each scrape:
//
//	tidings_listens_parked    listens carried by the shared poller now, with no goroutine of their own
//
// Every parked listen is an open one (tidings_listens_open); the
// difference is listens on goroutines: over HTTP/2 or TLS, following
// tasks, or of 2025-11-25 sessions.
func RegisterParked(reg prometheus.Registerer, parked func() int) error {
	c := &statsCollector[int]{stats: parked, series: []series[int]{
		gauge("tidings_listens_parked", "Listens carried by the shared poller now, with no goroutine of their own.",
			func(n int) float64 { return float64(n) }),
	}}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("metrics: parked listens: %w", err)
	}
	return nil
}

// RegisterSessions registers what a handler's 2025-11-25 sessions hold
// and how they ended with reg, read from stats (usually
// Handler.SessionStats) at each scrape:
//
//	tidings_sessions_open             2025-11-25 sessions live now
//	tidings_sessions_evicted_total    sessions ended for a newer one of the same principal at its quota
//	tidings_sessions_expired_total    sessions ended for being idle
//	tidings_sessions_refused_total    initialize refused because the session table was full
//
// Refusals mean the table is full (streamhttp.WithSessionLimits): new
// clients of that era are turned away until sessions end or expire.
func RegisterSessions(reg prometheus.Registerer, stats func() streamhttp.SessionStats) error {
	c := &statsCollector[streamhttp.SessionStats]{stats: stats, series: []series[streamhttp.SessionStats]{
		gauge("tidings_sessions_open", "2025-11-25 sessions live now.", func(s streamhttp.SessionStats) float64 { return float64(s.Open) }),
		counter("tidings_sessions_evicted_total", "2025-11-25 sessions ended to admit a newer one of the same principal at its quota.",
			func(s streamhttp.SessionStats) int64 { return s.Evicted }),
		counter("tidings_sessions_expired_total", "2025-11-25 sessions ended for being idle.", func(s streamhttp.SessionStats) int64 { return s.Expired }),
		counter("tidings_sessions_refused_total", "initialize requests refused because the session table was full.",
			func(s streamhttp.SessionStats) int64 { return s.Refused }),
	}}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("metrics: sessions: %w", err)
	}
	return nil
}
