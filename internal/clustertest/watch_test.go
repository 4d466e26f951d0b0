package clustertest_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"tidings/client"
	"tidings/internal/clustertest"
)

// watch is one tidings client following a cluster through its balancer
// (or one replica) with a Watcher, and the events the Watcher reported.
type watch struct {
	name   string
	w      *client.Watcher
	events chan client.Event
}

// newWatch starts a client of url acting as user ("" for nobody) and a
// Watcher on it with opts; both stop when t ends.
func newWatch(t *testing.T, name, url, user string, opts client.WatchOptions) *watch {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	copts := []client.Option{client.WithHTTPClient(&http.Client{Transport: tr})}
	if user != "" {
		copts = append(copts, client.WithHeader(clustertest.PrincipalHeader, user))
	}
	c := client.NewHTTP(url, copts...)
	w := &watch{name: name, events: make(chan client.Event, 256)}
	if opts.MinBackoff == 0 {
		opts.MinBackoff, opts.MaxBackoff = 5*time.Millisecond, 100*time.Millisecond
	}
	if opts.PollInterval == 0 {
		opts.PollInterval = time.Hour // every kind is granted; nothing should be polled
	}
	opts.OnEvent = func(e client.Event) {
		select {
		case w.events <- e:
		default:
			t.Errorf("%s: event %v not taken", name, e.Kind)
		}
	}
	w.w = c.Watch(context.Background(), opts)
	t.Cleanup(func() {
		w.w.Close()
		c.Close()
		tr.CloseIdleConnections()
	})
	return w
}

// next returns the Watcher's next event.
func (w *watch) next(t *testing.T) client.Event {
	t.Helper()
	select {
	case e := <-w.events:
		return e
	case <-time.After(clustertest.Wait):
		t.Fatalf("%s reported nothing in %v", w.name, clustertest.Wait)
	}
	return client.Event{}
}

// change returns the Watcher's next report of a change, skipping the
// news of its connection and of failed reads (which are retried).
func (w *watch) change(t *testing.T) client.Event {
	t.Helper()
	for {
		e := w.next(t)
		switch e.Kind {
		case client.Connected, client.Disconnected:
		case client.ReadFailed:
			t.Logf("%s: a read failed: %v", w.name, e.Err)
		default:
			return e
		}
	}
}

// ready waits until the Watcher is connected and has reported its first
// read of each of the topics it follows.
func (w *watch) ready(t *testing.T, topics int) {
	t.Helper()
	for e := w.next(t); e.Kind != client.Connected; e = w.next(t) {
		if e.Kind == client.Disconnected {
			t.Logf("%s: disconnected before it connected: %v", w.name, e.Err)
		}
	}
	for range topics {
		if e := w.change(t); len(e.Added) == 0 {
			t.Fatalf("%s: first read %v %+v, want what is there added", w.name, e.Kind, e)
		}
	}
}

// expectUpdated checks that the Watcher's next change reports the content
// of uri changed, and nothing else.
func (w *watch) expectUpdated(t *testing.T, uri string) {
	t.Helper()
	e := w.change(t)
	if e.Kind != client.ResourceUpdated || e.URI != uri || !slices.Equal(e.Changed, []string{uri}) {
		t.Fatalf("%s: %s, want %s changed", w.name, describe(e), uri)
	}
}

func describe(e client.Event) string {
	return fmt.Sprintf("%v uri=%q added=%v removed=%v changed=%v", e.Kind, e.URI, e.Added, e.Removed, e.Changed)
}
