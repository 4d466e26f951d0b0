// Package h2sched serves HTTP/2 with a write scheduler whose cost
// follows the streams that have something to write, not the streams
// that are open.
//
// net/http's own HTTP/2 server picks the next frame to write by walking
// a ring of every open stream until it finds one with a frame waiting,
// and walks the whole ring again when none has: on a connection that
// carries a thousand listens, each frame of a change costs a thousand
// looks, most of them at idle streams. The server of golang.org/x/net's
// http2 package, installed in its place on the same http.Server, takes
// the scheduler as an option; the one chosen here keeps only the
// streams with frames waiting, so a frame costs a look or two.
package h2sched

import (
	"fmt"
	"net/http"

	"golang.org/x/net/http2"
)

// Configure has hs serve HTTP/2 (over TLS, and without TLS where
// hs.Protocols allows it) with that scheduler, and with hs.HTTP2's
// settings. Call it after hs.Protocols, hs.HTTP2 and hs.TLSConfig are
// set, and before hs serves.
//
// Both calls below are marked deprecated in x/net, in favour of
// net/http's own server and its one scheduler; that scheduler is the
// cost this package exists to avoid (see the package doc). Pinning
// x/net's version in go.mod does not keep them working: x/net v0.62,
// built with a Go toolchain of 1.27 or later and without the
// http2legacy build tag, compiles server_wrap.go instead of its own
// server, so that ConfigureServer hands connections to net/http's and
// NewRandomWriteScheduler returns a scheduler that schedules nothing.
// What keeps this package's scheduler today is the toolchain the
// module is built with, Go 1.26; go.mod's go 1.26.8 line is only a
// floor, which a newer go satisfies. Building with 1.27 or later needs
// -tags http2legacy, or going back to net/http's scheduler, whose cost
// the harness's floor-h2 run shows. The switch does not fail the
// build: TestStreamsAreServedByTheConfiguredServer catches it, as the
// streams are then answered by net/http's server.
func Configure(hs *http.Server) error {
	//lint:ignore SA1019 net/http offers no choice of scheduler; see above.
	s := &http2.Server{NewWriteScheduler: func() http2.WriteScheduler { return http2.NewRandomWriteScheduler() }}
	//lint:ignore SA1019 the only way to install x/net's server on an http.Server.
	if err := http2.ConfigureServer(hs, s); err != nil {
		return fmt.Errorf("serving HTTP/2: %w", err)
	}
	return nil
}
