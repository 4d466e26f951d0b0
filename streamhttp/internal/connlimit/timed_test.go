package connlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"tidings/streamhttp/internal/connlimit"
)

// timedWriter is an HTTP/2 ResponseWriter that bounds its writes itself,
// as tidings' HTTP/2 server does (writecut.Timed); its writes take slow
// to return, on the bubble's clock, and it records write deadlines set.
type timedWriter struct {
	*httptest.ResponseRecorder
	timeout   time.Duration
	slow      time.Duration
	deadlines []time.Time
}

func (w *timedWriter) WriteTimeout() time.Duration { return w.timeout }

func (w *timedWriter) Write(p []byte) (int, error) {
	time.Sleep(w.slow) // waiting for a core, or for the server's own queue
	return w.ResponseRecorder.Write(p)
}

func (w *timedWriter) SetWriteDeadline(t time.Time) error {
	w.deadlines = append(w.deadlines, t)
	return nil
}

// TestTimedWritersAreLeftToTimeThemselves: over a server that bounds
// its streams' writes by what waits on the client, the guard does not
// also time each write by the clock — which would cut, after the write
// timeout, a write that only waited for the server (a burst of listens
// on a busy machine) — and counts no timeout.
func TestTimedWritersAreLeftToTimeThemselves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := connlimit.New(connlimit.Config{WriteTimeout: time.Second, HTTP2: true})
		h := g.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := w.Write([]byte("ok")); err != nil {
				t.Errorf("Write: %v", err)
			}
		}))
		w := &timedWriter{ResponseRecorder: httptest.NewRecorder(), timeout: time.Second, slow: 3 * time.Second}
		r := httptest.NewRequest("GET", "/", nil)
		r.ProtoMajor, r.ProtoMinor, r.Proto = 2, 0, "HTTP/2.0"
		h.ServeHTTP(w, r)
		if len(w.deadlines) > 0 {
			t.Errorf("the guard set write deadlines %v on a writer that times itself", w.deadlines)
		}
		if n := g.Stats().WriteTimeouts; n != 0 {
			t.Errorf("%d write timeouts counted", n)
		}
	})
}
