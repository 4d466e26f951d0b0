package metrics

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// HTTP2Stats is what an HTTP server's HTTP/2 connections have seen: the
// numbers RegisterHTTP2 exports.
type HTTP2Stats struct {
	// Streams counts the streams open over HTTP/2, listens among them;
	// Parked counts the listens among them that hold no goroutine;
	// MaxStreams is the most one connection may hold at once, and
	// Refused counts the streams refused for it.
	Streams, Parked int64
	MaxStreams      int
	Refused         int64
	// WritesGathered counts the writes HTTP/2 connections handed their
	// gathering buffers, WritesToSockets the writes those made to the
	// sockets: the first divided by the second is how many writes shared
	// one system call.
	WritesGathered, WritesToSockets int64
}

// RegisterHTTP2 registers an HTTP server's HTTP/2 figures with reg, read
// from stats at each scrape:
//
//	tidings_http2_streams_open                 streams open over HTTP/2
//	tidings_http2_listens_parked               listens among them holding no goroutine
//	tidings_http2_streams_max                  the most one connection holds at once
//	tidings_http2_streams_refused_total        streams refused for that bound
//	tidings_http2_writes_gathered_total        writes taken into the connections' buffers
//	tidings_http2_socket_writes_total          writes made to the sockets
//
// A client that needs more streams than the cap opens more connections,
// which the connection caps count.
func RegisterHTTP2(reg prometheus.Registerer, stats func() HTTP2Stats) error {
	c := &statsCollector[HTTP2Stats]{stats: stats, series: []series[HTTP2Stats]{
		gauge("tidings_http2_streams_open", "Streams open over HTTP/2, listens among them.",
			func(s HTTP2Stats) float64 { return float64(s.Streams) }),
		gauge("tidings_http2_listens_parked", "Listens over HTTP/2 that hold no goroutine, among the open streams.",
			func(s HTTP2Stats) float64 { return float64(s.Parked) }),
		counter("tidings_http2_streams_refused_total", "HTTP/2 streams refused because their connection held --http2-max-streams.",
			func(s HTTP2Stats) int64 { return s.Refused }),
		gauge("tidings_http2_streams_max", "The most requests one HTTP/2 connection holds at once (--http2-max-streams).",
			func(s HTTP2Stats) float64 { return float64(s.MaxStreams) }),
		counter("tidings_http2_writes_gathered_total", "Writes of HTTP/2 connections taken into their gathering buffers.",
			func(s HTTP2Stats) int64 { return s.WritesGathered }),
		counter("tidings_http2_socket_writes_total", "Writes HTTP/2 connections made to their sockets, each carrying what was gathered.",
			func(s HTTP2Stats) int64 { return s.WritesToSockets }),
	}}
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("metrics: http2: %w", err)
	}
	return nil
}
