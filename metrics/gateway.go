package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"tidings/gateway"
)

// RegisterGateway registers a gateway's upstreams with reg, read from
// stats (usually Gateway.Stats) at each scrape, each series labelled by
// the upstream's id:
//
//	tidings_gateway_upstream_up{upstream="..."}                1 while its listen is up, 0 while it is down
//	tidings_gateway_upstream_listens{upstream="..."}           listens the gateway holds on it: 1, however many callers listen
//	tidings_gateway_upstream_requests_total{upstream="..."}    lists and reads the gateway asked of it
//	tidings_gateway_cache_hits_total{upstream="..."}           answers served from what the gateway kept: upstream requests saved
//	tidings_gateway_cache_misses_total{upstream="..."}         answers the gateway had to ask for
//	tidings_gateway_upstream_failures_total{upstream="..."}    asks that failed
//	tidings_gateway_lists_cut_total{upstream="..."}            lists cut at max_items, the rest of their items left out
//	tidings_gateway_notification_lag_seconds{upstream="..."}   the latest change's time from the upstream's word to the gateway's listeners
//
// tidings_listens_open (New) counts the callers' listens on the gateway
// itself, to set against tidings_gateway_upstream_listens.
func RegisterGateway(reg prometheus.Registerer, stats func() []gateway.UpstreamStats) error {
	if err := reg.Register(gatewayCollector(stats)); err != nil {
		return fmt.Errorf("metrics: gateway: %w", err)
	}
	return nil
}

// gatewayCollector reads a gateway's stats at each scrape.
type gatewayCollector func() []gateway.UpstreamStats

var gatewaySeries = []struct {
	desc  *prometheus.Desc
	kind  prometheus.ValueType
	value func(gateway.UpstreamStats) float64
}{
	{gatewayDesc("tidings_gateway_upstream_up", "1 while the upstream's listen is up, 0 while it is down and its items are left out."),
		prometheus.GaugeValue, func(s gateway.UpstreamStats) float64 { return boolValue(s.Up) }},
	{gatewayDesc("tidings_gateway_upstream_listens", "Listens the gateway holds on the upstream: one, however many callers listen on the gateway."),
		prometheus.GaugeValue, func(s gateway.UpstreamStats) float64 { return float64(s.Listens) }},
	{gatewayDesc("tidings_gateway_upstream_requests_total", "Lists and reads the gateway asked of the upstream."),
		prometheus.CounterValue, func(s gateway.UpstreamStats) float64 { return float64(s.Requests) }},
	{gatewayDesc("tidings_gateway_cache_hits_total", "Answers served from what the gateway kept of the upstream: upstream requests saved."),
		prometheus.CounterValue, func(s gateway.UpstreamStats) float64 { return float64(s.Hits) }},
	{gatewayDesc("tidings_gateway_cache_misses_total", "Answers the gateway had to ask the upstream for."),
		prometheus.CounterValue, func(s gateway.UpstreamStats) float64 { return float64(s.Misses) }},
	{gatewayDesc("tidings_gateway_upstream_failures_total", "Lists and reads of the upstream that failed."),
		prometheus.CounterValue, func(s gateway.UpstreamStats) float64 { return float64(s.Failures) }},
	{gatewayDesc("tidings_gateway_lists_cut_total", "Lists of the upstream cut at the configuration's max_items, the rest of their items left out."),
		prometheus.CounterValue, func(s gateway.UpstreamStats) float64 { return float64(s.Cut) }},
	{gatewayDesc("tidings_gateway_token_exchanges_total", "Token exchanges the gateway asked for the upstream's callers (token_exchange)."),
		prometheus.CounterValue, func(s gateway.UpstreamStats) float64 { return float64(s.Exchanges) }},
	{gatewayDesc("tidings_gateway_token_exchange_failures_total", "Token exchanges for the upstream's callers the authorization server refused, or that failed."),
		prometheus.CounterValue, func(s gateway.UpstreamStats) float64 { return float64(s.ExchangeFailures) }},
	{gatewayDesc("tidings_gateway_exchanged_tokens", "Exchanged tokens the gateway keeps for the upstream's callers (at most max_exchanged_tokens)."),
		prometheus.GaugeValue, func(s gateway.UpstreamStats) float64 { return float64(s.ExchangedTokens) }},
	{gatewayDesc("tidings_gateway_exchanged_tokens_evicted_total", "Exchanged tokens dropped, least recently used first, at max_exchanged_tokens."),
		prometheus.CounterValue, func(s gateway.UpstreamStats) float64 { return float64(s.ExchangedEvicted) }},
	{gatewayDesc("tidings_gateway_kept_read_bytes", "Bytes of the upstream's resources/read answers the gateway keeps (all upstreams' within max_kept_bytes)."),
		prometheus.GaugeValue, func(s gateway.UpstreamStats) float64 { return float64(s.KeptReadBytes) }},
	{gatewayDesc("tidings_gateway_kept_reads_evicted_total", "The upstream's kept resources/read answers dropped to stay within max_kept_bytes."),
		prometheus.CounterValue, func(s gateway.UpstreamStats) float64 { return float64(s.KeptReadsEvicted) }},
	{gatewayDesc("tidings_gateway_upstream_restarts_total", "New processes of a spawned upstream started after one died."),
		prometheus.CounterValue, func(s gateway.UpstreamStats) float64 { return float64(s.Restarts) }},
	{gatewayDesc("tidings_gateway_upstream_downs_total", "Times the upstream was found down and its items left the lists."),
		prometheus.CounterValue, func(s gateway.UpstreamStats) float64 { return float64(s.Downs) }},
	{gatewayDesc("tidings_gateway_notification_lag_seconds", "The latest change's time from the upstream's word to the gateway's listeners being told."),
		prometheus.GaugeValue, func(s gateway.UpstreamStats) float64 { return s.Lag.Seconds() }},
}

func gatewayDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, []string{"upstream"}, nil)
}

// Describe sends every series' description.
func (c gatewayCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, s := range gatewaySeries {
		ch <- s.desc
	}
}

// Collect reads the stats once and sends every series of every upstream.
func (c gatewayCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c() {
		for _, s := range gatewaySeries {
			ch <- prometheus.MustNewConstMetric(s.desc, s.kind, s.value(st), st.ID)
		}
	}
}
