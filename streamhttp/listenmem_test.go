package streamhttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"tidings/internal/sse"
	"tidings/mcp"
	"tidings/metrics"
	"tidings/server"
)

// followCost opens listens listens over loopback HTTP, each following
// uris resource URIs of uriLen bytes (the same URIs in every listen when
// shared, distinct ones otherwise), on a server with metrics, as serve
// runs it. It returns the live heap they hold per followed URI, once
// every acknowledgement has been read.
func followCost(t testing.TB, listens, uris, uriLen int, shared bool) float64 {
	t.Helper()
	m, err := metrics.New(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, append(m.ServerOptions(), server.WithListenLimits(server.ListenLimits{
		PerPrincipal: server.Allowance{URIs: (listens + 1) * uris},
	})))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	body := func(l int) []byte {
		set := l
		if shared {
			set = 0
		}
		var b strings.Builder
		b.WriteString(`{"resourceSubscriptions":[`)
		for i := range uris {
			if i > 0 {
				b.WriteByte(',')
			}
			u := fmt.Sprintf("file:///srv/%d/%d/", set, i)
			fmt.Fprintf(&b, "%q", u+strings.Repeat("x", uriLen-len(u)))
		}
		b.WriteString(`]}`)
		return listenBody(l+1, b.String())
	}
	open := func(l int) *stream {
		s := f.openReader(t, ctx, &dropReader{b: body(l)}, headers(mcp.MethodListen, ""))
		if ack := s.next(t); ack.Method != mcp.NotifyAcknowledged {
			t.Fatalf("listen %d: first event %q, want the acknowledgement", l, ack.Method)
		}
		return s
	}
	// The first listen warms up what every listen shares (connections,
	// pools, the hub's maps), so that it is not counted; in the shared
	// case, its URIs are the ones every listen follows.
	warm := open(listens)
	before := liveHeap()
	streams := make([]*stream, 0, listens)
	for l := range listens {
		streams = append(streams, open(l))
	}
	after := liveHeap()
	runtime.KeepAlive(streams)
	runtime.KeepAlive(warm)
	return float64(int64(after)-int64(before)) / float64(listens*uris)
}

// liveHeap returns the bytes of live heap objects after a full collection.
func liveHeap() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// dropReader is a request body that lets go of its bytes once read, so
// that the client's side of a listen holds none of them.
type dropReader struct{ b []byte }

func (r *dropReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		r.b = nil
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	if len(r.b) == 0 {
		r.b = nil
	}
	return n, nil
}

// openReader is open with a body read from r.
func (f *fixture) openReader(t testing.TB, ctx context.Context, r io.Reader, hdr http.Header) *stream {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.ts.URL, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr
	resp, err := f.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status = %d, want 200; body %s", resp.StatusCode, b)
	}
	return &stream{resp: resp, r: sse.NewReader(resp.Body, 0)}
}

// TestFollowedURICost: while a listen is open, a URI it follows costs
// its string once, however many listens follow it, and some bytes for
// each listen that does — neither the request's copies of it, nor the
// acknowledgement's, nor a buffer its size.
func TestFollowedURICost(t *testing.T) {
	const listens, uris, uriLen = 4, 5000, 400
	shared := followCost(t, listens, uris, uriLen, true)
	distinct := followCost(t, listens, uris, uriLen, false)
	t.Logf("per followed URI of %d bytes: %.0f bytes shared by %d listens, %.0f bytes followed by one", uriLen, shared, listens+1, distinct)
	if shared > 100 {
		t.Errorf("a URI every listen follows costs %.0f bytes per listen, want at most 100", shared)
	}
	if distinct > uriLen+200 {
		t.Errorf("a URI of %d bytes one listen follows costs %.0f bytes, want at most %d", uriLen, distinct, uriLen+200)
	}
}

// BenchmarkFollowedURI reports the heap a followed resource URI costs
// while its listen is open: 10 listens of 10,000 URIs of 400 bytes (a
// long file path), distinct or the same in every listen.
func BenchmarkFollowedURI(b *testing.B) {
	for _, c := range []struct {
		name   string
		shared bool
	}{{"distinct", false}, {"shared", true}} {
		b.Run(c.name, func(b *testing.B) {
			var per float64
			for range b.N {
				per = followCost(b, 10, 10000, 400, c.shared)
			}
			b.ReportMetric(per, "B/uri")
		})
	}
}
