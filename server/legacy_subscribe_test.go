package server_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"tidings/internal/legacy"
	"tidings/mcp"
	"tidings/server"
)

// subscribeMany runs resources/subscribe for uris on a session whose
// stream is open, checking each answer.
func subscribeMany(tb testing.TB, srv *lsrv, ss *legacy.Session, uris []string) {
	tb.Helper()
	out := newLegacyOut(tb)
	for i, uri := range uris {
		rep := ss.Serve(context.Background(), legacyCall(tb, srv, i, mcp.MethodResourcesSubscribe, map[string]any{"uri": uri}), out)
		if rep.Err != nil {
			tb.Fatalf("subscribe %d: %s", i, rep.Body)
		}
		rep.Release()
	}
}

// TestLegacySubscribeIsIncremental: a resources/subscribe while the
// session's stream is open adds its one URI to what the stream follows,
// so that it costs the same after thousands of subscriptions as after
// none, where making the stream's filter anew made n subscribes cost n².
func TestLegacySubscribeIsIncremental(t *testing.T) {
	srv := legacyServer(t, server.WithListenLimits(server.ListenLimits{URIsPerListen: 20000}))
	ss := openSession(t, srv, nil)
	st := openStream(t, srv, ss)
	subscribeMany(t, srv, ss, uris("before", 5000))
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	const n = 200
	subscribeMany(t, srv, ss, uris("after", n))
	runtime.ReadMemStats(&m1)
	// A subscribe's own request and answer take a few kilobytes; one
	// that copies 5000 URIs takes hundreds.
	if per := (m1.TotalAlloc - m0.TotalAlloc) / n; per > 32<<10 {
		t.Errorf("with 5000 subscriptions, a subscribe allocates %d KiB", per>>10)
	}
	// The stream hears of the last subscription and the first.
	srv.ResourceUpdated(fmt.Sprintf("mem://after/%d", n-1))
	srv.ResourceUpdated("mem://before/0")
	st.out.waitFor(t, "the update of the last URI subscribed", isUpdate(fmt.Sprintf("mem://after/%d", n-1)))
	st.out.waitFor(t, "the update of the first URI subscribed", isUpdate("mem://before/0"))
}

// BenchmarkLegacySubscribe is n resources/subscribe of distinct URIs on
// one session whose stream is open: one op is all n.
func BenchmarkLegacySubscribe(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			srv := legacyServer(b)
			list := uris("bench", n)
			b.ReportAllocs()
			for range b.N {
				b.StopTimer()
				ss := openSession(b, srv, nil)
				st := openStream(b, srv, ss)
				b.StartTimer()
				subscribeMany(b, srv, ss, list)
				b.StopTimer()
				st.stop(b)
				srv.EndSession(ss.ID())
				b.StartTimer()
			}
		})
	}
}
