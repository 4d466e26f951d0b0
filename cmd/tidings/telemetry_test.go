//go:build unix

package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"tidings/internal/testrig/testkit"
	"tidings/mcp"
)

// The trace a test's caller is in, as the traceparent it sends.
const (
	testTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
	testSpan   = "00f067aa0ba902b7"
	testParent = "00-" + testTrace + "-" + testSpan + "-01"
)

// tracedList sends a tools/list whose _meta carries testParent.
func tracedList(t *testing.T, url string) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": mcp.MethodToolsList, "params": map[string]any{
		"_meta": map[string]any{
			mcp.MetaProtocolVersion:    mcp.Version,
			mcp.MetaClientCapabilities: map[string]any{},
			mcp.MetaTraceParent:        testParent,
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{DisableKeepAlives: true}
	defer tr.CloseIdleConnections()
	resp := mcpPost(context.Background(), t, &http.Client{Transport: tr}, url, mcp.MethodToolsList, body)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"tools"`) {
		t.Fatalf("tools/list: %d %s", resp.StatusCode, b)
	}
}

func tracedDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a.txt"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestServeExportsSpansOverOTLP: with the standard OTLP environment,
// tidings serve sends its spans to a real OTLP/HTTP endpoint (this test's,
// which decodes what the exporter sent), and a request's span is in the
// trace its _meta named, the caller's span its parent.
func TestServeExportsSpansOverOTLP(t *testing.T) {
	bin := buildBinary(t)
	recvURL, spans := otlpReceiver(t)
	cmd := exec.Command(bin, "serve", tracedDir(t), "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=otlp", "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT="+recvURL, "OTEL_BSP_SCHEDULE_DELAY=20", "OTEL_SERVICE_NAME=tidings-under-test")
	p := startListening(t, cmd)
	tracedList(t, p.url)
	got := collect(t, spans, "a tools/list span", func(got []exportedSpan) bool {
		return slices.ContainsFunc(got, func(s exportedSpan) bool { return s.name == mcp.MethodToolsList })
	})
	for _, s := range got {
		if s.name != mcp.MethodToolsList {
			continue
		}
		if s.trace != testTrace || s.parent != testSpan {
			t.Fatalf("span %s in trace %s under %s, want trace %s under %s", s.name, s.trace, s.parent, testTrace, testSpan)
		}
		if s.service != "tidings-under-test" {
			t.Errorf("service.name %q, want OTEL_SERVICE_NAME's", s.service)
		}
		return
	}
}

// TestServeConsoleExporterPrintsTheSpan: OTEL_TRACES_EXPORTER=console
// prints a request's span, in its caller's trace, on standard output.
func TestServeConsoleExporterPrintsTheSpan(t *testing.T) {
	bin := buildBinary(t)
	cmd := exec.Command(bin, "serve", tracedDir(t), "--addr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=console")
	var stdout testkit.SyncBuffer
	cmd.Stdout = &stdout
	p := startListening(t, cmd)
	tracedList(t, p.url)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exit(t); code != 0 {
		t.Fatalf("exit status %d", code)
	}
	var span struct {
		Name        string
		SpanContext struct{ TraceID string }
		Parent      struct{ SpanID string }
	}
	for line := range strings.SplitSeq(stdout.String(), "\n") {
		if json.Unmarshal([]byte(line), &span) == nil && span.Name == mcp.MethodToolsList {
			if span.SpanContext.TraceID != testTrace || span.Parent.SpanID != testSpan {
				t.Fatalf("span in trace %s under %s, want %s under %s", span.SpanContext.TraceID, span.Parent.SpanID, testTrace, testSpan)
			}
			return
		}
	}
	t.Fatalf("no tools/list span on stdout:\n%s", stdout.String())
}

// TestStdioRefusesTheConsoleExporter: the console exporter would write
// spans among the MCP messages of --stdio; serve refuses, saying why.
func TestStdioRefusesTheConsoleExporter(t *testing.T) {
	bin := buildBinary(t)
	cmd := exec.Command(bin, "serve", tracedDir(t), "--stdio")
	cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=console")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--stdio uses for MCP messages") {
		t.Fatalf("serve --stdio with the console exporter: %v\n%s", err, out)
	}
}

// TestTelemetryOnlyWhenAsked: nothing in the environment, nothing is
// exported (not even to OTLP's default endpoint); an exporter or an
// endpoint named turns a signal on; OTEL_SDK_DISABLED and none turn it off.
func TestTelemetryOnlyWhenAsked(t *testing.T) {
	for _, c := range []struct {
		env             map[string]string
		traces, metrics bool
	}{
		{env: nil},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, traces: true},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, metrics: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, traces: true, metrics: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://x"}, metrics: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x", "OTEL_SDK_DISABLED": "true"}},
	} {
		env := func(k string) string { return c.env[k] }
		if got := wantsTraces(env); got != c.traces {
			t.Errorf("%v: traces %v, want %v", c.env, got, c.traces)
		}
		if got := wantsMetrics(env); got != c.metrics {
			t.Errorf("%v: metrics %v, want %v", c.env, got, c.metrics)
		}
	}
}

// otlpReceiver is an OTLP/HTTP endpoint for traces: it decodes what an
// exporter sends, as a collector would, and hands each export on.
func otlpReceiver(t *testing.T) (string, <-chan *coltrace.ExportTraceServiceRequest) {
	t.Helper()
	spans := make(chan *coltrace.ExportTraceServiceRequest, 256)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/traces" || r.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "not an OTLP/HTTP protobuf export", http.StatusBadRequest)
			return
		}
		b, err := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if err != nil || proto.Unmarshal(b, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		select {
		case spans <- &req:
		default:
			t.Errorf("the test's OTLP receiver is full")
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(recv.Close)
	return recv.URL, spans
}

// exportedSpan is one span as an OTLP export carried it.
type exportedSpan struct {
	name, trace, parent, service string
	attrs                        map[string]string
}

// collect reads exports until have holds of what arrived so far.
func collect(t *testing.T, spans <-chan *coltrace.ExportTraceServiceRequest, what string, have func([]exportedSpan) bool) []exportedSpan {
	t.Helper()
	var got []exportedSpan
	deadline := time.After(wait)
	for !have(got) {
		select {
		case req := <-spans:
			for _, rs := range req.ResourceSpans {
				service := ""
				for _, a := range rs.Resource.GetAttributes() {
					if a.Key == "service.name" {
						service = a.Value.GetStringValue()
					}
				}
				for _, ss := range rs.ScopeSpans {
					for _, s := range ss.Spans {
						e := exportedSpan{name: s.Name, trace: hex.EncodeToString(s.TraceId), parent: hex.EncodeToString(s.ParentSpanId),
							service: service, attrs: map[string]string{}}
						for _, a := range s.Attributes {
							e.attrs[a.Key] = a.Value.GetStringValue()
						}
						got = append(got, e)
					}
				}
			}
		case <-deadline:
			t.Fatalf("no %s exported in time; got %+v", what, got)
		}
	}
	return got
}

// TestFileChangeIsOneTraceToWatch: with OTLP set in the environment, a
// file created under tidings serve is a change trace (a producer span
// named by the notification), the notification reaches a listening
// tidings watch with that trace's context and the change's time in _meta
// (watch --json prints both), and the re-read it prompts — the watch's client span and the
// server's span of it — are spans of the same trace.
func TestFileChangeIsOneTraceToWatch(t *testing.T) {
	bin := buildBinary(t)
	recvURL, spans := otlpReceiver(t)
	for k, v := range map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
		"OTEL_EXPORTER_OTLP_ENDPOINT": recvURL, "OTEL_BSP_SCHEDULE_DELAY": "20"} {
		t.Setenv(k, v)
	}
	dir := tracedDir(t)
	_, url := startServe(t, bin, dir)
	js := start(t, "watch --json", bin, false, "watch", "--json", url)
	js.expect("connected event", isJSON(t, "connected"))
	js.expect("first resources read", isJSON(t, "resources_changed"))

	if err := os.WriteFile(filepath.Join(dir, "new.txt"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	added := fileURI(t, dir, "new.txt")
	var ev struct {
		Time        time.Time `json:"time"`
		Event       string    `json:"event"`
		Added       []string  `json:"added"`
		TraceParent string    `json:"traceparent"`
		ChangedAt   time.Time `json:"changedAt"`
	}
	js.expect("resources_changed adding "+added+" with a trace", func(l string) bool {
		ev.Added, ev.TraceParent = nil, ""
		return json.Unmarshal([]byte(l), &ev) == nil && ev.Event == "resources_changed" && slices.Contains(ev.Added, added) && ev.TraceParent != ""
	})
	// Server and watch share this machine's clock: the change happened
	// before the watch reported it.
	if ev.ChangedAt.IsZero() || ev.ChangedAt.After(ev.Time.Add(time.Second)) {
		t.Errorf("the change happened at %v by the event, which was reported at %v", ev.ChangedAt, ev.Time)
	}
	trace := traceID(ev.TraceParent)
	collect(t, spans, "the change's span and the re-read's two spans in trace "+trace, func(got []exportedSpan) bool {
		change, rereads := false, 0
		for _, s := range got {
			switch {
			case s.trace != trace:
			case s.name == mcp.NotifyResourcesListChanged && s.parent == "" && s.attrs["tidings.change.road"] == "local":
				change = true
			case s.name == mcp.MethodResourcesList && s.parent != "":
				rereads++ // the watch's client span, and the server's under it
			}
		}
		return change && rereads >= 2
	})
}
