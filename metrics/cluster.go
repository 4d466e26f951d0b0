package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"tidings/bus"
	"tidings/server"
)

// RegisterBus registers the health of a replica's bus with reg, read
// from stats (usually Bus.Stats) at each scrape, so that the series never
// disagree with what the bus itself reports:
//
//	tidings_bus_connected                 1 while the broker connection is up
//	tidings_bus_peers                     other replicas heard from
//	tidings_bus_reconnects_total          connections regained after a loss
//	tidings_bus_failovers_total           of those, the ones that landed on another server of the broker:
//	                                      another node of a NATS cluster, or the primary Sentinel promoted
//	tidings_bus_events_published_total    events handed to the broker
//	tidings_bus_events_received_total     events from other replicas told here
//	tidings_bus_events_dropped_total      events not sent (queue full, broker down, too large)
//	tidings_bus_events_stale_total        repeated or late events ignored
//	tidings_bus_messages_invalid_total    messages that could not be read
//	tidings_bus_messages_refused_total    messages not signed with the bus key, by reason:
//	                                      "unsigned" (no MAC) or "bad_mac" (another key's, or forged)
//	tidings_bus_gaps_total                sequence gaps seen (events lost on the way here)
//	tidings_bus_resyncs_total             re-notifications of every listener (gaps, reconnects)
//	tidings_bus_lag_seconds               sender-to-here delay of the last event received
//	tidings_bus_lag_max_seconds           the longest such delay so far
//
// The lag leaves out events whose sender's clock is more than a minute
// ahead or an hour behind (see bus.Stats.Lag). A replica whose bus is
// down still serves correct answers, but hears of other replicas'
// changes late; alert on connected, dropped and gaps, and on refused:
// a replica started without the others' secret, or someone else
// publishing on the broker.
func RegisterBus(reg prometheus.Registerer, stats func() bus.Stats) error {
	c := &statsCollector[bus.Stats]{stats: stats, series: []series[bus.Stats]{
		gauge("tidings_bus_connected", "1 while this replica's connection to the bus broker is up, else 0.",
			func(s bus.Stats) float64 { return boolValue(s.Connected) }),
		gauge("tidings_bus_peers", "Other replicas heard from on the bus.", func(s bus.Stats) float64 { return float64(s.Peers) }),
		counter("tidings_bus_reconnects_total", "Bus connections regained after a loss.", func(s bus.Stats) int64 { return s.Reconnects }),
		counter("tidings_bus_failovers_total", "Bus connections that moved to another server of the broker: another node of a NATS cluster, or the primary Sentinel promoted.",
			func(s bus.Stats) int64 { return s.Failovers }),
		counter("tidings_bus_events_published_total", "Change events handed to the bus broker.", func(s bus.Stats) int64 { return s.Published }),
		counter("tidings_bus_events_received_total", "Change events from other replicas told to local listeners.", func(s bus.Stats) int64 { return s.Received }),
		counter("tidings_bus_events_dropped_total", "Change events not sent: queue full, broker down or too large (peers re-notify).", func(s bus.Stats) int64 { return s.Dropped }),
		counter("tidings_bus_events_stale_total", "Repeated or late change events that were not told again.", func(s bus.Stats) int64 { return s.Stale }),
		counter("tidings_bus_messages_invalid_total", "Bus messages that could not be read.", func(s bus.Stats) int64 { return s.Invalid }),
		labelled(counter("tidings_bus_messages_refused_total", refusedHelp, func(s bus.Stats) int64 { return s.Unsigned }), "reason", "unsigned"),
		labelled(counter("tidings_bus_messages_refused_total", refusedHelp, func(s bus.Stats) int64 { return s.BadMAC }), "reason", "bad_mac"),
		counter("tidings_bus_gaps_total", "Sequence gaps seen: events of another replica lost on the way here.", func(s bus.Stats) int64 { return s.Gaps }),
		counter("tidings_bus_resyncs_total", "Times every local listener was told everything may have changed (after gaps, reconnects, unreadable messages).", func(s bus.Stats) int64 { return s.Resyncs }),
		gauge("tidings_bus_lag_seconds", "Delay of the last event received, from its sender's clock to this replica's.", func(s bus.Stats) float64 { return s.Lag.Seconds() }),
		gauge("tidings_bus_lag_max_seconds", "Longest delay of an event received so far.", func(s bus.Stats) float64 { return s.MaxLag.Seconds() }),
	}}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("metrics: bus: %w", err)
	}
	return nil
}

const refusedHelp = "Bus messages dropped for not being signed with this replica's bus key (bus.WithSecret), by reason."

// RegisterState registers what a server did with its shared state (see
// server.WithSharedState) with reg, read from stats (usually
// Server.StateStats) at each scrape:
//
//	tidings_state_loaded                        1 once the shared state was loaded
//	tidings_state_loads_total                   loads of the shared state
//	tidings_state_load_failures_total           loads that failed (retried)
//	tidings_state_writes_total                  writes to the store
//	tidings_state_write_failures_total          writes that failed (retried)
//	tidings_state_unwritten                     local changes not yet in the store
//	tidings_state_last_load_timestamp_seconds   when the last load succeeded
//
// While unwritten is above zero this replica serves something the others
// may not: alert on it staying so.
func RegisterState(reg prometheus.Registerer, stats func() server.StateStats) error {
	c := &statsCollector[server.StateStats]{stats: stats, series: []series[server.StateStats]{
		gauge("tidings_state_loaded", "1 once the shared state has been loaded at least once, else 0.",
			func(s server.StateStats) float64 { return boolValue(s.Loaded) }),
		counter("tidings_state_loads_total", "Loads of the shared state.", func(s server.StateStats) int64 { return s.Loads }),
		counter("tidings_state_load_failures_total", "Loads of the shared state that failed (each is retried).", func(s server.StateStats) int64 { return s.LoadFailures }),
		counter("tidings_state_writes_total", "Writes to the shared state.", func(s server.StateStats) int64 { return s.Writes }),
		counter("tidings_state_write_failures_total", "Writes to the shared state that failed (each is retried).", func(s server.StateStats) int64 { return s.WriteFailures }),
		gauge("tidings_state_unwritten", "Changes made on this replica that are not yet in the shared state.",
			func(s server.StateStats) float64 { return float64(s.Unwritten) }),
		gauge("tidings_state_last_load_timestamp_seconds", "When the shared state was last loaded, in seconds since the epoch (0 never).",
			func(s server.StateStats) float64 {
				if s.LastLoad.IsZero() {
					return 0
				}
				return float64(s.LastLoad.UnixNano()) / 1e9
			}),
	}}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("metrics: shared state: %w", err)
	}
	return nil
}

// statsCollector turns one snapshot of stats per scrape into series: the
// counters live in the bus or server, and are only read here.
type statsCollector[S any] struct {
	stats  func() S
	series []series[S]
}

type series[S any] struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(S) float64
	// name and help are kept for labelled, which makes desc again.
	name, help string
}

// labelled is s with one constant label: several series of one name that
// differ by it are one metric to Prometheus.
func labelled[S any](s series[S], label, value string) series[S] {
	s.desc = prometheus.NewDesc(s.name, s.help, nil, prometheus.Labels{label: value})
	return s
}

func gauge[S any](name, help string, value func(S) float64) series[S] {
	return series[S]{prometheus.NewDesc(name, help, nil, nil), prometheus.GaugeValue, value, name, help}
}

func counter[S any](name, help string, value func(S) int64) series[S] {
	return labelledCounter(name, help, nil, value)
}

// labelledCounter is a counter of one series of a family told apart by
// constant labels.
func labelledCounter[S any](name, help string, labels prometheus.Labels, value func(S) int64) series[S] {
	return series[S]{prometheus.NewDesc(name, help, nil, labels), prometheus.CounterValue,
		func(s S) float64 { return float64(value(s)) }, name, help}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c *statsCollector[S]) Describe(ch chan<- *prometheus.Desc) {
	for _, s := range c.series {
		ch <- s.desc
	}
}

func (c *statsCollector[S]) Collect(ch chan<- prometheus.Metric) {
	st := c.stats()
	for _, s := range c.series {
		ch <- prometheus.MustNewConstMetric(s.desc, s.kind, s.value(st))
	}
}
