package tracectx_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"tidings/internal/tracectx"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// TestRoundTrip: a trace context extracted into a context comes out as
// it went in, state included.
func TestRoundTrip(t *testing.T) {
	ctx := tracectx.Extract(context.Background(), parent, "vendor=1")
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() || !sc.IsRemote() {
		t.Fatalf("span context %v, want a valid remote one", sc)
	}
	if got := tracectx.Of(ctx); got.Parent != parent || got.State != "vendor=1" {
		t.Fatalf("out came %+v, want what went in", got)
	}
}

// TestMalformedIsIgnored: what is not a traceparent leaves the context
// as it was.
func TestMalformedIsIgnored(t *testing.T) {
	for _, bad := range []string{"", "00-zz", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-00000000000000000000000000000000-00f067aa0ba902b7-01"} {
		ctx := tracectx.Extract(context.Background(), bad, "")
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			t.Errorf("%q became %v", bad, sc)
		}
		if got := tracectx.Of(ctx); got.Parent != "" {
			t.Errorf("%q came out as %q", bad, got.Parent)
		}
	}
}

// TestRequestNames: a request is named by its method and, for a tool, a
// prompt or a resource, what it names; nothing else is appended.
func TestRequestNames(t *testing.T) {
	for _, c := range []struct{ method, name, want string }{
		{"tools/call", "get_weather", "tools/call get_weather"},
		{"resources/read", "file:///a", "resources/read file:///a"},
		{"tools/list", "", "tools/list"},
		{"tasks/get", "task-1", "tasks/get"},
	} {
		if got, _ := tracectx.Request(c.method, c.name, ""); got != c.want {
			t.Errorf("Request(%q, %q) is named %q, want %q", c.method, c.name, got, c.want)
		}
	}
}
