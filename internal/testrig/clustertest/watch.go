package clustertest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"tidings/client"
)

// Watch is one tidings client following a cluster through its balancer
// (or one replica) with a Watcher, and the events the Watcher reported,
// for a test to take one by one.
type Watch struct {
	// Name says whose watcher it is, in failure messages.
	Name   string
	w      *client.Watcher
	events chan client.Event
}

// NewWatch starts a client of url acting as user ("" for nobody; the
// replicas read PrincipalHeader) and a Watcher on it with opts, whose
// reconnects are quick and which polls nothing unless opts say
// otherwise; both stop when t ends.
func NewWatch(t testing.TB, name, url, user string, opts client.WatchOptions) *Watch {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 4}
	copts := []client.HTTPOption{client.WithHTTPClient(&http.Client{Transport: tr})}
	if user != "" {
		copts = append(copts, client.WithHeader(PrincipalHeader, user))
	}
	c := client.NewHTTP(url, copts...)
	w := &Watch{Name: name, events: make(chan client.Event, 256)}
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

// Stats returns the Watcher's counters: how many notifications it heard
// tells of announcements that changed nothing it reports.
func (w *Watch) Stats() client.WatchStats { return w.w.Stats() }

// Next returns the Watcher's next event.
func (w *Watch) Next(t testing.TB) client.Event {
	t.Helper()
	select {
	case e := <-w.events:
		return e
	case <-time.After(Wait):
		t.Fatalf("%s reported nothing in %v", w.Name, Wait)
	}
	return client.Event{}
}

// Change returns the Watcher's next report of a change, skipping the
// news of its connection, and of failed reads, which it logs.
func (w *Watch) Change(t testing.TB) client.Event {
	t.Helper()
	for {
		e := w.Next(t)
		switch e.Kind {
		case client.Connected, client.Disconnected:
		case client.ReadFailed:
			t.Logf("%s: a read failed: %v", w.Name, e.Err)
		default:
			return e
		}
	}
}

// Ready waits until the Watcher is connected and has reported its first
// read of each of the topics it follows.
func (w *Watch) Ready(t testing.TB, topics int) {
	t.Helper()
	for e := w.Next(t); e.Kind != client.Connected; e = w.Next(t) {
		if e.Kind == client.Disconnected {
			t.Logf("%s: disconnected before it connected: %v", w.Name, e.Err)
		}
	}
	for range topics {
		if e := w.Change(t); len(e.Added) == 0 {
			t.Fatalf("%s: first read %v %+v, want what is there added", w.Name, e.Kind, e)
		}
	}
}

// ExpectUpdated checks that the Watcher's next change reports the content
// of uri changed, and nothing else.
func (w *Watch) ExpectUpdated(t testing.TB, uri string) {
	t.Helper()
	e := w.Change(t)
	if e.Kind != client.ResourceUpdated || e.URI != uri || !slices.Equal(e.Changed, []string{uri}) {
		t.Fatalf("%s: %s, want %s changed", w.Name, Describe(e), uri)
	}
}

// Describe prints an event for a failure message.
func Describe(e client.Event) string {
	return fmt.Sprintf("%v uri=%q added=%v removed=%v changed=%v", e.Kind, e.URI, e.Added, e.Removed, e.Changed)
}
