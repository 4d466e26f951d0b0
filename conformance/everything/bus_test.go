package main

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"tidings/client"
	"tidings/internal/clustertest"
	"tidings/internal/testbroker"
	"tidings/streamhttp"
)

// TestCopiesOnOneBus: two copies started with the same -bus and -secret;
// a listen on one hears the tool list change that a call through the
// other announces, over NATS and over Redis.
func TestCopiesOnOneBus(t *testing.T) {
	for _, b := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"nats", func(t *testing.T) string { return testbroker.StartNATS(t).URL() }},
		{"redis", func(t *testing.T) string { return testbroker.StartRedis(t).URL() }},
	} {
		t.Run(b.name, func(t *testing.T) {
			o := options{secret: "one secret for both", bus: b.url(t)}
			copies := make([]string, 2)
			for i := range copies {
				copies[i] = startCopy(t, o)
			}
			w := clustertest.NewWatch(t, "the watcher on the first copy", copies[0], "", client.WatchOptions{Tools: true})
			w.Ready(t, 1)
			c := client.NewHTTP(copies[1])
			defer c.Close()
			before := w.Stats().Notifications
			res, err := c.CallTool(context.Background(), "test_trigger_tool_change", map[string]any{})
			if err != nil || res.IsError {
				t.Fatalf("trigger: %+v, %v", res, err)
			}
			clustertest.WaitFor(t, "the first copy's listen to hear the second's announcement", func() bool {
				return w.Stats().Notifications > before
			})
		})
	}
}

// startCopy runs one copy with the flags o, as run does, on a loopback
// server, and returns its /mcp URL; it is stopped when t ends.
func startCopy(t *testing.T, o options) string {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	opts, closeBus, err := o.serverOptions(context.Background(), log)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(log, opts...)
	if err != nil {
		closeBus()
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", streamhttp.New(srv, streamhttp.WithLogger(log)))
	ts := httptest.NewServer(mux)
	t.Cleanup(func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		ts.Close()
	})
	return ts.URL + "/mcp"
}
