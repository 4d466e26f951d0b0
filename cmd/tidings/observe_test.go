package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"tidings/bus"
	"tidings/gateway"
	"tidings/server"
)

// TestLogFormats: --log-format json writes one JSON object per line, text
// writes key=value lines, and anything else is refused.
func TestLogFormats(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(&buf, "json", "info")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("hello", "k", "v")
	var obj map[string]any
	if err := json.Unmarshal(buf.Bytes(), &obj); err != nil || obj["msg"] != "hello" || obj["k"] != "v" {
		t.Errorf("json log line %q (%v)", buf.String(), err)
	}
	buf.Reset()
	if log, err = newLogger(&buf, "text", "debug"); err != nil {
		t.Fatal(err)
	}
	log.Debug("hello", "k", "v")
	if !bytes.Contains(buf.Bytes(), []byte("msg=hello k=v")) {
		t.Errorf("text log line %q", buf.String())
	}
	if _, err := newLogger(&buf, "xml", "info"); err == nil {
		t.Error("--log-format xml was accepted")
	}
	if _, err := newLogger(&buf, "text", "loud"); err == nil {
		t.Error("--log-level loud was accepted")
	}
}

// TestReadiness: /readyz is 503 until the directory is scanned and again
// once shutdown begins; /healthz is 200 throughout.
func TestReadiness(t *testing.T) {
	obs, err := newObservability()
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	obs.mount(mux)
	status := func(path string) int {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		return w.Code
	}
	for _, step := range []struct {
		name        string
		set         func()
		ready, live int
	}{
		{"scanning", func() {}, 503, 200},
		{"ready", func() { obs.ready.Store(true) }, 200, 200},
		{"stopping", func() { obs.stopping.Store(true) }, 503, 200},
	} {
		step.set()
		if got := status("/readyz"); got != step.ready {
			t.Errorf("%s: /readyz %d, want %d", step.name, got, step.ready)
		}
		if got := status("/healthz"); got != step.live {
			t.Errorf("%s: /healthz %d, want %d", step.name, got, step.live)
		}
	}
}

// TestLateMiddleware: until the authorization check is set, requests go
// straight to the handler; once set, through it.
func TestLateMiddleware(t *testing.T) {
	var l lateMiddleware
	served := 0
	h := l.wrap(func(context.Context, *server.Request) error { served++; return nil })
	if err := h(context.Background(), &server.Request{}); err != nil || served != 1 {
		t.Fatalf("before set: err %v, served %d", err, served)
	}
	refuse := errors.New("refused")
	l.set(func(next server.MethodHandler) server.MethodHandler {
		return func(context.Context, *server.Request) error { return refuse }
	})
	if err := h(context.Background(), &server.Request{}); !errors.Is(err, refuse) || served != 1 {
		t.Fatalf("after set: err %v, served %d; want the middleware's refusal", err, served)
	}
}

// TestBusLine: /readyz says whether the bus is connected and, on a line
// of its own when the connection says, to which server of the broker.
func TestBusLine(t *testing.T) {
	for _, c := range []struct {
		st   bus.Stats
		want string
	}{
		{bus.Stats{}, "bus: disconnected\n"},
		{bus.Stats{Connected: true}, "bus: connected\n"},
		{bus.Stats{Connected: true, Node: "n1 (nats://10.0.0.1:4222)"}, "bus: connected\nbus server: n1 (nats://10.0.0.1:4222)\n"},
		{bus.Stats{Node: "127.0.0.1:6380", Failovers: 1}, "bus: disconnected\nbus server: 127.0.0.1:6380\n"},
	} {
		o := &observability{bus: func() bus.Stats { return c.st }}
		if got := o.busLine(); got != c.want {
			t.Errorf("stats %+v: %q, want %q", c.st, got, c.want)
		}
	}
	if got := (&observability{}).busLine(); got != "" {
		t.Errorf("without a bus: %q", got)
	}
}

// TestReadinessNamesUpstreams: a gateway's /readyz names each upstream's
// state; with one down it is still ready, saying degraded and why; with
// none up it is not ready.
func TestReadinessNamesUpstreams(t *testing.T) {
	obs, err := newObservability()
	if err != nil {
		t.Fatal(err)
	}
	obs.ready.Store(true)
	stats := []gateway.UpstreamStats{{ID: "a", Up: true}, {ID: "b", Problem: "client: HTTP 400: bad"}}
	obs.upstreams = func() []gateway.UpstreamStats { return stats }
	mux := http.NewServeMux()
	obs.mount(mux)
	get := func() (int, string) {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return w.Code, w.Body.String()
	}
	code, body := get()
	if want := "ready\ndegraded: 1 of 2 upstreams down\nupstream a: up\nupstream b: down (client: HTTP 400: bad)\n"; code != 200 || body != want {
		t.Errorf("one down: %d %q, want 200 %q", code, body, want)
	}
	stats[0].Up = false
	if code, body = get(); code != 503 || !strings.Contains(body, "no upstream is up") {
		t.Errorf("none up: %d %q, want 503", code, body)
	}
	stats[0].Up, stats[1].Up = true, true
	if code, body = get(); code != 200 || body != "ready\nupstream a: up\nupstream b: up\n" {
		t.Errorf("all up: %d %q", code, body)
	}
}
