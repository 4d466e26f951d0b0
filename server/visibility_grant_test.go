package server_test

import (
	"context"
	"slices"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// hideSecret lets only alice see mem://secret and the tool "secret".
func hideSecret(principal string, l server.List, key string) bool {
	switch l {
	case server.ListResources:
		return key != "mem://secret" || principal == "alice"
	case server.ListTools:
		return key != "secret" || principal == "alice"
	}
	return true
}

// TestListenGrantsOnlyVisibleResources: a listen is granted only the
// resource subscriptions its principal may see, so the grant neither
// confirms a hidden resource nor lets its updates through.
func TestListenGrantsOnlyVisibleResources(t *testing.T) {
	h := newHarness(t, server.WithVisibility(hideSecret))
	mustAddResource(t, h.srv, "mem://open", textResource("mem://open", "open"))
	mustAddResource(t, h.srv, "mem://secret", textResource("mem://secret", "secret"))
	for _, tc := range []struct {
		principal string
		want      []string
	}{
		{"bob", []string{"mem://open"}},
		{"alice", []string{"mem://open", "mem://secret"}},
	} {
		ph := &harness{t: t, srv: h.srv, principal: tc.principal}
		l := ph.startListen(tc.principal, P{"notifications": P{"resourceSubscriptions": []string{"mem://secret", "mem://open"}}})
		g := l.ack(t)
		var got []string
		subs, _ := g["resourceSubscriptions"].([]any)
		for _, s := range subs {
			got = append(got, s.(string))
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s granted %v, want %v", tc.principal, got, tc.want)
		}
		l.stop(t)
	}
}

// routeRecorder is an engine.Envelope that agrees with every request and
// keeps the mirrored parameters the server asks it to check.
type routeRecorder struct{ params []engine.HeaderParam }

func (r *routeRecorder) Version() (string, error) { return mcp.Version, nil }

func (r *routeRecorder) Route(_ *engine.Call, params []engine.HeaderParam) error {
	r.params = params
	return nil
}

// TestHeaderParamsHideHiddenTool: for a principal that may not see a tool,
// the transport is asked to check no Mcp-Param-* header, so it answers as
// for an unknown tool instead of revealing it through a header mismatch
// (-32020).
func TestHeaderParamsHideHiddenTool(t *testing.T) {
	h := newHarness(t, server.WithVisibility(hideSecret))
	tool := mcp.Tool{Name: "secret", InputSchema: jsontext.Value(`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`)}
	mustAddTool(t, h.srv, tool, echoHandler("x"))
	serveAs := func(principal string) (engine.Reply, []engine.HeaderParam) {
		msg, err := jsonrpc.Decode(encodeRequest(t, 1, mcp.MethodToolsCall, P{"name": "secret", "arguments": P{"region": "eu"}}), 0)
		if err != nil {
			t.Fatal(err)
		}
		c, rep := engine.Parse(msg)
		if rep != nil {
			t.Fatalf("Parse: %s", rep.Body)
		}
		env := &routeRecorder{}
		r := engine.Of(h.srv).Serve(context.Background(), c, principal, env, newRecorder(t))
		return r, env.params
	}
	if _, ps := serveAs("alice"); len(ps) != 1 || ps[0].Header != "Mcp-Param-Region" {
		t.Errorf("alice: header params = %+v, want Mcp-Param-Region", ps)
	}
	r, ps := serveAs("bob")
	if len(ps) != 0 {
		t.Errorf("bob: header params = %+v, want none for a tool he may not see", ps)
	}
	decodeResponse(t, mcp.MethodToolsCall, 1, r).fails(t, -32602)
}
