package client

import (
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/tracectx"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// mapEncode is how a request's body was built before encode: every member
// in maps, marshaled with sorted names. encode must build the same JSON.
func mapEncode(c *Client, id jsonrpc.ID, method string, params map[string]any, token string, o *callOpts) ([]byte, error) {
	meta := map[string]any{
		mcp.MetaProtocolVersion:    c.currentVersion(),
		mcp.MetaClientCapabilities: c.requestCaps(method),
		mcp.MetaClientInfo:         c.cfg.info,
	}
	if o != nil && o.caps != nil {
		meta[mcp.MetaClientCapabilities] = *o.caps
	}
	if c.cfg.logLevel != "" {
		meta[mcp.MetaLogLevel] = c.cfg.logLevel
	}
	if o != nil && o.onLog != nil {
		meta[mcp.MetaLogLevel] = o.logLevel
	}
	if token != "" {
		meta[mcp.MetaProgressToken] = jsontext.Value(token)
	}
	if o != nil {
		addTrace(meta, o.trace)
	}
	p := make(map[string]any, len(params)+1)
	for k, v := range params {
		p[k] = v
	}
	p["_meta"] = meta
	pb, err := json.Marshal(p, json.Deterministic(true))
	if err != nil {
		return nil, err
	}
	return jsonrpc.AppendRequest(nil, id, method, pb), nil
}

// TestEncodeIsTheMapsEncoding: encode writes, byte for byte, the body the
// maps made, for every member _meta may have and params of every kind.
func TestEncodeIsTheMapsEncoding(t *testing.T) {
	onLog := func(mcp.LogLevel, string, jsontext.Value) {}
	empty := jsontext.Value("{}")
	for _, tc := range []struct {
		name   string
		opts   []Option
		method string
		params map[string]any
		token  string
		o      *callOpts
	}{
		{name: "discover", method: mcp.MethodDiscover},
		{name: "call", method: mcp.MethodToolsCall, params: map[string]any{"name": "grep", "arguments": jsontext.Value(`{ "b": [1, 2], "a": "x\u00e9" }`)}, token: `"p-1"`},
		{name: "list with cursor", method: mcp.MethodToolsList, params: map[string]any{"cursor": "c\"1 <&> \u2028 é \x01"}},
		{name: "values of every kind", method: mcp.MethodPromptsGet, params: map[string]any{"name": "p", "arguments": map[string]string{"z": "1", "a": "2"}, "n": 3, "Upper": true, "zeta": nil}},
		{name: "options", opts: []Option{WithClientInfo(mcp.Implementation{Name: "host", Version: "2.0", Title: "Host <&>"}), WithoutTasks()},
			method: mcp.MethodToolsCall, params: map[string]any{"name": "t"}},
		{name: "log level", opts: []Option{WithServerLogs(mcp.LogLevel("debug"), onLog)}, method: mcp.MethodToolsList},
		{name: "call options", method: mcp.MethodToolsCall, params: map[string]any{"name": "t"}, token: "7",
			o: &callOpts{caps: &mcp.ClientCaps{Roots: &empty}, onLog: onLog, logLevel: "warning",
				trace: &tracectx.Carrier{Parent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", State: "k=v"}}},
		{name: "trace without state", method: mcp.MethodResourcesRead, params: map[string]any{"uri": "file:///a"},
			o: &callOpts{trace: &tracectx.Carrier{Parent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(nil, tc.opts...)
			want, err := mapEncode(c, jsonrpc.IntID(7), tc.method, tc.params, tc.token, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			got, err := c.encode(jsonrpc.IntID(7), tc.method, tc.params, tc.token, tc.o)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("encode wrote\n%s\nthe maps\n%s", got, want)
			}
		})
	}
}

// TestEncodeRefusesInvalidJSON: raw JSON that is not valid, and a string
// that is not UTF-8, are refused with the member named, not sent, as
// the maps' encoding refused them.
func TestEncodeRefusesInvalidJSON(t *testing.T) {
	c := New(nil)
	for _, params := range []map[string]any{
		{"name": "t", "arguments": jsontext.Value(`{"a":`)},
		{"name": "t\xff"},
	} {
		if _, err := mapEncode(c, jsonrpc.IntID(1), mcp.MethodToolsCall, params, "", nil); err == nil {
			t.Fatalf("the maps took %v", params)
		}
		_, err := c.encode(jsonrpc.IntID(1), mcp.MethodToolsCall, params, "", nil)
		if err == nil {
			t.Fatalf("encode took %v", params)
		}
		t.Log(err)
	}
}
