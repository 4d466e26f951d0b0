package client

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"tidings/mcp"
)

// silentListenServer answers every listen with an acknowledgement, sends
// keep-alive comments for keepFor, then goes silent without closing, the
// way a connection that died without a reset looks. keptAlive is closed
// when the first listen's keep-alive period is over; listens counts
// listens.
func silentListenServer(t *testing.T, keepFor time.Duration) (url string, keptAlive chan struct{}, listens *atomic.Int32) {
	t.Helper()
	keptAlive = make(chan struct{})
	listens = new(atomic.Int32)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(mcp.HeaderMethod) != mcp.MethodListen {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{"tools":{"listChanged":true}},"ttlMs":0,"cacheScope":"public","tools":[]}}`)
			return
		}
		n := listens.Add(1)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/subscriptions/acknowledged\",\"params\":{\"notifications\":{\"toolsListChanged\":true}}}\n\n")
		w.(http.Flusher).Flush()
		if n == 1 {
			tick := time.NewTicker(keepFor / 20)
			stop := time.After(keepFor)
		loop:
			for {
				select {
				case <-tick.C:
					fmt.Fprint(w, ": keep-alive\n\n")
					w.(http.Flusher).Flush()
				case <-stop:
					// Only the end of the keep-alive period counts, not
					// the client hanging up early.
					close(keptAlive)
					break loop
				case <-r.Context().Done():
					break loop
				}
			}
			tick.Stop()
		}
		<-r.Context().Done()
	})
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
	})
	return ts.URL, keptAlive, listens
}

// TestListenIdleTimeout covers SUB-19: a listen that stays silent past
// the idle timeout is taken for dead (an abrupt drop) and reopened, while
// keep-alive comments alone keep it alive.
func TestListenIdleTimeout(t *testing.T) {
	url, keptAlive, listens := silentListenServer(t, 900*time.Millisecond)
	c := NewHTTP(url, WithLogger(quietLogger()), WithTimeout(waitTimeout), WithListenIdleTimeout(250*time.Millisecond))
	defer c.Close()
	events := make(chan Event, 64)
	w := c.Watch(context.Background(), WatchOptions{Tools: true, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond,
		OnEvent: func(e Event) { events <- e }})
	defer w.Close()
	deadline := time.After(waitTimeout)
	for {
		select {
		case e := <-events:
			if e.Kind != Disconnected {
				continue
			}
			select {
			case <-keptAlive:
			default:
				t.Fatalf("listen cut while keep-alives were still arriving: %v", e.Err)
			}
			if e.Graceful || e.Err == nil || !strings.Contains(e.Err.Error(), "nothing received") {
				t.Fatalf("Disconnected = graceful %v, err %v; want an abrupt idle drop", e.Graceful, e.Err)
			}
			for listens.Load() < 2 {
				select {
				case <-events:
				case <-deadline:
					t.Fatal("no new listen after the idle drop")
				}
			}
			return
		case <-deadline:
			t.Fatal("a silent listen was never taken for dead")
		}
	}
}
