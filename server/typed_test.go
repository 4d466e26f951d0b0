package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/jsonschema-go/jsonschema"
	santhosh "github.com/santhosh-tekuri/jsonschema/v6"

	"tidings/internal/testrig/schematest"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// ---- a client over real loopback HTTP ----

// wire talks to a server through streamhttp over a loopback listener, as
// a 2026-07-28 client would: every request carries the protocol _meta
// and the Mcp-Method and Mcp-Name headers.
type wire struct {
	t    testing.TB
	url  string
	c    *http.Client
	caps string
	id   int
}

func serveHTTP(t testing.TB, srv *server.Server) *wire {
	t.Helper()
	ts := httptest.NewServer(streamhttp.New(srv))
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
	})
	return &wire{t: t, url: ts.URL, c: ts.Client(), caps: `{}`}
}

// wireReply is a JSON-RPC response read loosely, for inspection.
type wireReply struct {
	raw    []byte
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    jsonrpc.Code `json:"code"`
		Message string       `json:"message"`
	} `json:"error"`
}

// rpc sends one request; name goes in Mcp-Name (and, for tools/call and
// prompts/get, params.name). params must not hold _meta or name.
func (w *wire) rpc(method, name string, params map[string]any) wireReply {
	w.t.Helper()
	w.id++
	p := map[string]any{"_meta": map[string]any{
		"io.modelcontextprotocol/protocolVersion":    mcp.Version,
		"io.modelcontextprotocol/clientCapabilities": json.RawMessage(w.caps),
	}}
	for k, v := range params {
		p[k] = v
	}
	if name != "" {
		p["name"] = name
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": w.id, "method": method, "params": p})
	if err != nil {
		w.t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version)
	req.Header.Set(mcp.HeaderMethod, method)
	if name != "" {
		req.Header.Set(mcp.HeaderName, name)
	}
	resp, err := w.c.Do(req)
	if err != nil {
		w.t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		w.t.Fatalf("%s: reading the response: %v", method, err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		w.t.Fatalf("%s: Content-Type %q, body %s", method, ct, b)
	}
	r := wireReply{raw: b}
	if err := json.Unmarshal(b, &r); err != nil {
		w.t.Fatalf("%s: %v in %s", method, err, b)
	}
	return r
}

// callTool calls a tool and returns the response, checked against the
// official schema.
func (w *wire) callTool(name string, args any) wireReply {
	w.t.Helper()
	r := w.rpc(mcp.MethodToolsCall, name, map[string]any{"arguments": args})
	if r.Error == nil {
		schematest.Validate(w.t, "CallToolResultResponse", r.raw)
	}
	return r
}

// toolResult is a tools/call result as the client reads it.
type toolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
}

func (w *wire) toolResult(name string, args any) toolResult {
	w.t.Helper()
	r := w.callTool(name, args)
	if r.Error != nil {
		w.t.Fatalf("tools/call %s: error %d %s", name, r.Error.Code, r.Error.Message)
	}
	var res toolResult
	if err := json.Unmarshal(r.Result, &res); err != nil {
		w.t.Fatal(err)
	}
	return res
}

// listTools returns every tool the server lists, as raw definitions
// keyed by name, each checked against the schema's Tool definition.
func listTools(t testing.TB, srv *server.Server) map[string]json.RawMessage {
	t.Helper()
	w := serveHTTP(t, srv)
	tools := map[string]json.RawMessage{}
	cursor := ""
	for {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		r := w.rpc(mcp.MethodToolsList, "", params)
		if r.Error != nil {
			t.Fatalf("tools/list: %s", r.raw)
		}
		schematest.Validate(t, "ListToolsResultResponse", r.raw)
		var page struct {
			Tools      []json.RawMessage `json:"tools"`
			NextCursor string            `json:"nextCursor"`
		}
		if err := json.Unmarshal(r.Result, &page); err != nil {
			t.Fatal(err)
		}
		for _, def := range page.Tools {
			schematest.Validate(t, "Tool", def)
			var head struct{ Name string }
			if err := json.Unmarshal(def, &head); err != nil {
				t.Fatal(err)
			}
			tools[head.Name] = def
		}
		if page.NextCursor == "" {
			return tools
		}
		cursor = page.NextCursor
	}
}

// toolDef is the part of a listed tool these tests look into.
type toolDef struct {
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema"`
}

func listedTool(t testing.TB, srv *server.Server, name string) toolDef {
	t.Helper()
	raw, ok := listTools(t, srv)[name]
	if !ok {
		t.Fatalf("tool %q is not listed", name)
	}
	var d toolDef
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// compile compiles a schema as published, with an independent validator.
func compile(t testing.TB, doc []byte) *santhosh.Schema {
	t.Helper()
	v, err := santhosh.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	c := santhosh.NewCompiler()
	c.DefaultDraft(santhosh.Draft2020)
	if err := c.AddResource("urn:test", v); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("urn:test")
	if err != nil {
		t.Fatalf("compile %s: %v", doc, err)
	}
	return sch
}

func valid(t testing.TB, sch *santhosh.Schema, doc string) error {
	t.Helper()
	v, err := santhosh.UnmarshalJSON(strings.NewReader(doc))
	if err != nil {
		t.Fatalf("%s: %v", doc, err)
	}
	return sch.Validate(v)
}

// ---- the types of a typed tool ----

// unit is an enum: it describes itself to the schema inference.
type unit string

func (unit) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", Enum: []any{"celsius", "fahrenheit"}}
}

type place struct {
	City    string `json:"city" jsonschema:"The city, in English."`
	Country string `json:"country,omitempty"`
}

type forecastIn struct {
	Place  place    `json:"place"`
	Days   int      `json:"days" jsonschema:"How many days ahead."`
	Unit   unit     `json:"unit,omitzero"`
	Tags   []string `json:"tags,omitempty"`
	Detail *bool    `json:"detail,omitzero"`
}

type forecastOut struct {
	City  string    `json:"city"`
	Unit  unit      `json:"unit"`
	Temps []float64 `json:"temps"`
	Tags  []string  `json:"tags"`
	Note  string    `json:"note,omitempty"`
}

func forecast(_ context.Context, _ *server.ToolRequest, in forecastIn) (forecastOut, error) {
	u := in.Unit
	if u == "" {
		u = "celsius"
	}
	out := forecastOut{City: in.Place.City, Unit: u, Temps: make([]float64, in.Days), Tags: in.Tags}
	for i := range out.Temps {
		out.Temps[i] = 20.5 + float64(i)
	}
	if in.Detail != nil && *in.Detail {
		out.Note = "in " + in.Place.Country
	}
	return out, nil
}

func forecastServer(t testing.TB) *server.Server {
	t.Helper()
	srv := server.New(testInfo, server.WithoutServerInfo())
	if err := server.AddTypedTool(srv, mcp.Tool{Name: "forecast", Description: "Weather ahead."}, forecast); err != nil {
		t.Fatal(err)
	}
	return srv
}

// TestTypedToolInputSchema checks that the schema inferred from forecastIn
// (required, optional, enum, nested struct and slice fields) accepts and
// refuses what the Go types say, and that the tool definition matches the
// official Tool definition.
func TestTypedToolInputSchema(t *testing.T) {
	srv := forecastServer(t)
	def := listedTool(t, srv, "forecast")

	var in struct {
		Type                 string                     `json:"type"`
		Required             []string                   `json:"required"`
		AdditionalProperties *bool                      `json:"additionalProperties"`
		Properties           map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(def.InputSchema, &in); err != nil {
		t.Fatal(err)
	}
	if in.Type != "object" || !slices.Equal(in.Required, []string{"place", "days"}) ||
		in.AdditionalProperties == nil || *in.AdditionalProperties {
		t.Errorf("input schema root = %s; want an object requiring place and days, nothing else allowed", def.InputSchema)
	}
	if d := string(in.Properties["days"]); !strings.Contains(d, `"description":"How many days ahead."`) {
		t.Errorf("days = %s, want the jsonschema tag as its description", d)
	}
	if u := string(in.Properties["unit"]); !strings.Contains(u, `"enum":["celsius","fahrenheit"]`) {
		t.Errorf("unit = %s, want its enum", u)
	}

	sch := compile(t, def.InputSchema)
	accepted := []string{
		`{"place":{"city":"Oslo"},"days":3}`,
		`{"place":{"city":"Oslo","country":"NO"},"days":0,"unit":"fahrenheit","tags":["a","b"],"detail":true}`,
		`{"place":{"city":""},"days":-1,"tags":[],"detail":null}`,
	}
	for _, doc := range accepted {
		if err := valid(t, sch, doc); err != nil {
			t.Errorf("%s refused: %v", doc, err)
		}
	}
	refused := map[string]string{
		`{"days":3}`:                                       "place is required",
		`{"place":{"city":"Oslo"}}`:                        "days is required",
		`{"place":{},"days":3}`:                            "place.city is required",
		`{"place":{"city":"Oslo"},"days":"3"}`:             "days is an int",
		`{"place":{"city":"Oslo"},"days":1.5}`:             "days is an int",
		`{"place":{"city":"Oslo"},"days":3,"unit":"K"}`:    "unit is an enum",
		`{"place":{"city":"Oslo"},"days":3,"tags":[1]}`:    "tags are strings",
		`{"place":{"city":"Oslo"},"days":3,"tags":"a"}`:    "tags are a slice",
		`{"place":{"city":"Oslo"},"days":3,"extra":1}`:     "unknown member",
		`{"place":{"city":"Oslo","zip":"1"},"days":3}`:     "unknown nested member",
		`{"Place":{"city":"Oslo"},"days":3}`:               "names are case-sensitive",
		`{"place":"Oslo","days":3}`:                        "place is a struct",
		`{"place":{"city":"Oslo"},"days":3,"detail":"no"}`: "detail is a bool",
	}
	for doc, why := range refused {
		if valid(t, sch, doc) == nil {
			t.Errorf("%s accepted, but %s", doc, why)
		}
	}

	// Over the wire, a refused call never reaches the handler: it ends as
	// a tool error the model can read.
	w := serveHTTP(t, srv)
	res := w.toolResult("forecast", json.RawMessage(`{"place":{"city":"Oslo"},"days":3,"unit":"kelvin"}`))
	if !res.IsError || len(res.StructuredContent) != 0 || !strings.Contains(res.Content[0].Text, "Invalid arguments") {
		t.Errorf("bad unit: %+v", res)
	}
}

// TestTypedToolResult checks that Out becomes structuredContent, that it
// matches the inferred output schema, and that the text block holds the
// same JSON.
func TestTypedToolResult(t *testing.T) {
	srv := forecastServer(t)
	def := listedTool(t, srv, "forecast")
	if len(def.OutputSchema) == 0 {
		t.Fatal("no outputSchema inferred from forecastOut")
	}
	out := compile(t, def.OutputSchema)
	for doc, why := range map[string]string{
		`{"city":"Oslo","unit":"celsius","temps":[1]}`:                    "tags is required",
		`{"city":"Oslo","unit":"kelvin","temps":[1],"tags":[]}`:           "unit is an enum",
		`{"city":"Oslo","unit":"celsius","temps":[1],"tags":[],"x":true}`: "unknown member",
	} {
		if valid(t, out, doc) == nil {
			t.Errorf("output schema accepted %s, but %s", doc, why)
		}
	}

	w := serveHTTP(t, srv)
	res := w.toolResult("forecast", map[string]any{"place": map[string]any{"city": "Oslo", "country": "NO"}, "days": 2, "tags": []string{"x"}, "detail": true})
	if res.IsError {
		t.Fatalf("isError: %+v", res)
	}
	want := `{"city":"Oslo","unit":"celsius","temps":[20.5,21.5],"tags":["x"],"note":"in NO"}`
	if got := string(res.StructuredContent); got != want {
		t.Errorf("structuredContent = %s, want %s", got, want)
	}
	if err := valid(t, out, string(res.StructuredContent)); err != nil {
		t.Errorf("structuredContent does not match the output schema: %v", err)
	}
	if len(res.Content) != 1 || res.Content[0].Type != "text" || res.Content[0].Text != string(res.StructuredContent) {
		t.Errorf("content = %+v, want one text block holding %s", res.Content, res.StructuredContent)
	}

	// Optional fields left out decode as zero values; a nil slice in Out
	// is still an array, as the schema says.
	res = w.toolResult("forecast", map[string]any{"place": map[string]any{"city": "Rome"}, "days": 0})
	if got := string(res.StructuredContent); got != `{"city":"Rome","unit":"celsius","temps":[],"tags":[]}` {
		t.Errorf("structuredContent = %s", got)
	}
	if err := valid(t, out, string(res.StructuredContent)); err != nil {
		t.Errorf("structuredContent does not match the output schema: %v", err)
	}
}

// TestTypedToolErrors checks that a typed handler's errors keep the
// meaning ToolHandler gives them.
func TestTypedToolErrors(t *testing.T) {
	srv := server.New(testInfo)
	type in struct {
		Kind string `json:"kind"`
	}
	type out struct {
		OK bool `json:"ok"`
	}
	err := server.AddTypedTool(srv, mcp.Tool{Name: "fail"}, func(_ context.Context, req *server.ToolRequest, a in) (out, error) {
		switch a.Kind {
		case "protocol":
			return out{}, jsonrpc.NewError(jsonrpc.CodeInvalidParams, "Invalid params: no such kind", nil)
		case "plain":
			return out{}, errors.New("the disk is full")
		case "input":
			if _, ok := req.InputResponses["name"]; !ok {
				return out{}, &server.InputRequired{Requests: map[string]mcp.InputRequest{"name": elicitName}}
			}
		}
		return out{OK: true}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	w := serveHTTP(t, srv)
	if r := w.callTool("fail", map[string]any{"kind": "protocol"}); r.Error == nil || r.Error.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("protocol error: %s", r.raw)
	}
	if res := w.toolResult("fail", map[string]any{"kind": "plain"}); !res.IsError || res.Content[0].Text != "the disk is full" || len(res.StructuredContent) != 0 {
		t.Errorf("plain error: %+v", res)
	}
	w.caps = `{"elicitation":{"form":{}}}`
	r := w.callTool("fail", map[string]any{"kind": "input"})
	if r.Error != nil || !strings.Contains(string(r.Result), `"resultType":"input_required"`) {
		t.Errorf("input required: %s", r.raw)
	}
	if res := w.toolResult("fail", map[string]any{"kind": "none"}); res.IsError || string(res.StructuredContent) != `{"ok":true}` {
		t.Errorf("success: %+v", res)
	}
}

// TestTypedToolDecoding checks the strict decoding of arguments into In
// behind a hand-written schema, which the typed tool keeps: names match
// exactly, and a value the schema lets through but In cannot hold ends as
// a tool error.
func TestTypedToolDecoding(t *testing.T) {
	srv := server.New(testInfo)
	type in struct {
		Name  string `json:"name"`
		Count int8   `json:"count"`
	}
	type out struct {
		Name  string `json:"name"`
		Count int8   `json:"count"`
	}
	own := `{"type":"object","properties":{"name":{"type":"string","minLength":1}}}`
	echo := func(_ context.Context, _ *server.ToolRequest, a in) (out, error) { return out(a), nil }
	if err := server.AddTypedTool(srv, mcp.Tool{Name: "echo", InputSchema: jsontext.Value(own)}, echo); err != nil {
		t.Fatal(err)
	}
	if got := string(listedTool(t, srv, "echo").InputSchema); got != own {
		t.Errorf("inputSchema = %s, want the author's %s", got, own)
	}
	w := serveHTTP(t, srv)
	if res := w.toolResult("echo", map[string]any{"NAME": "x", "Count": 1}); res.IsError || string(res.StructuredContent) != `{"name":"","count":0}` {
		t.Errorf("differently cased names were matched: %+v", res)
	}
	for _, args := range []string{`{"count":300}`, `{"count":"1"}`, `{"name":7}`} {
		if res := w.toolResult("echo", json.RawMessage(args)); !res.IsError || !strings.Contains(res.Content[0].Text, `Invalid arguments for tool "echo"`) {
			t.Errorf("%s: %+v", args, res)
		}
	}
}

// TestTypedToolPlainOut checks Out types that are not objects: the tool
// declares no outputSchema, and the result is a text block alone.
func TestTypedToolPlainOut(t *testing.T) {
	srv := server.New(testInfo)
	type none struct{}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(server.AddTypedTool(srv, mcp.Tool{Name: "say"}, func(context.Context, *server.ToolRequest, none) (string, error) {
		return `he said "hi"`, nil
	}))
	must(server.AddTypedTool(srv, mcp.Tool{Name: "primes"}, func(context.Context, *server.ToolRequest, map[string]int) ([]int, error) {
		return []int{2, 3, 5}, nil
	}))
	must(server.AddTypedTool(srv, mcp.Tool{Name: "empty"}, func(context.Context, *server.ToolRequest, *none) (none, error) {
		return none{}, nil
	}))
	for _, name := range []string{"say", "primes"} {
		if d := listedTool(t, srv, name); len(d.OutputSchema) != 0 {
			t.Errorf("%s: outputSchema %s for a non-object Out", name, d.OutputSchema)
		}
	}
	if d := listedTool(t, srv, "empty"); string(d.InputSchema) != `{"type":"object","additionalProperties":false}` || string(d.OutputSchema) != `{"type":"object","additionalProperties":false}` {
		t.Errorf("empty struct: %s %s", d.InputSchema, d.OutputSchema)
	}
	w := serveHTTP(t, srv)
	if res := w.toolResult("say", map[string]any{}); len(res.StructuredContent) != 0 || res.Content[0].Text != `he said "hi"` {
		t.Errorf("say: %+v", res)
	}
	if res := w.toolResult("primes", map[string]any{"a": 1}); len(res.StructuredContent) != 0 || res.Content[0].Text != `[2,3,5]` {
		t.Errorf("primes: %+v", res)
	}
	if res := w.toolResult("empty", map[string]any{}); string(res.StructuredContent) != `{}` || res.Content[0].Text != `{}` {
		t.Errorf("empty: %+v", res)
	}
}

// matches is an Out with its own reading for people.
type matches struct {
	Lines []string `json:"lines"`
}

func (m matches) ToolText() string { return strings.Join(m.Lines, "\n") }

// TestTypedToolPointers checks pointer In and Out: the root schemas are
// objects (never null), a nil Out is a server fault, and ToolTexter
// replaces the JSON text.
func TestTypedToolPointers(t *testing.T) {
	srv := server.New(testInfo, server.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil))))
	err := server.AddTypedTool(srv, mcp.Tool{Name: "grep"}, func(_ context.Context, _ *server.ToolRequest, in *place) (*matches, error) {
		if in.City == "nil" {
			return nil, nil
		}
		return &matches{Lines: []string{"a:1: " + in.City, "b:2: " + in.Country}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	d := listedTool(t, srv, "grep")
	for _, doc := range []json.RawMessage{d.InputSchema, d.OutputSchema} {
		var root struct{ Type any }
		if err := json.Unmarshal(doc, &root); err != nil || root.Type != "object" {
			t.Errorf("root of %s is not type object", doc)
		}
	}
	w := serveHTTP(t, srv)
	res := w.toolResult("grep", map[string]any{"city": "x", "country": "y"})
	if string(res.StructuredContent) != `{"lines":["a:1: x","b:2: y"]}` || res.Content[0].Text != "a:1: x\nb:2: y" {
		t.Errorf("grep: %+v", res)
	}
	if r := w.callTool("grep", map[string]any{"city": "nil"}); r.Error == nil || r.Error.Code != jsonrpc.CodeInternalError {
		t.Errorf("nil Out: %s, want -32603", r.raw)
	}
}

type badDescriber int

func (*badDescriber) JSONSchema() *jsonschema.Schema { return &jsonschema.Schema{Type: "integer"} }

// TestTypedToolRefused checks the types a typed tool cannot be built on.
func TestTypedToolRefused(t *testing.T) {
	srv := server.New(testInfo)
	handler := func(context.Context, *server.ToolRequest, struct{}) (struct{}, error) { return struct{}{}, nil }
	cases := map[string]error{
		"string In": server.AddTypedTool(srv, mcp.Tool{Name: "a"}, func(context.Context, *server.ToolRequest, string) (struct{}, error) {
			return struct{}{}, nil
		}),
		"slice In": server.AddTypedTool(srv, mcp.Tool{Name: "b"}, func(context.Context, *server.ToolRequest, []int) (struct{}, error) {
			return struct{}{}, nil
		}),
		"interface In": server.AddTypedTool(srv, mcp.Tool{Name: "c"}, func(context.Context, *server.ToolRequest, any) (struct{}, error) {
			return struct{}{}, nil
		}),
		"int-keyed map In": server.AddTypedTool(srv, mcp.Tool{Name: "d"}, func(context.Context, *server.ToolRequest, map[int]string) (struct{}, error) {
			return struct{}{}, nil
		}),
		"channel Out": server.AddTypedTool(srv, mcp.Tool{Name: "e"}, func(context.Context, *server.ToolRequest, struct{}) (chan int, error) {
			return nil, nil
		}),
		"string option": server.AddTypedTool(srv, mcp.Tool{Name: "f"}, func(context.Context, *server.ToolRequest, struct {
			N int `json:"n,string"`
		}) (struct{}, error) {
			return struct{}{}, nil
		}),
		"inline option": server.AddTypedTool(srv, mcp.Tool{Name: "g"}, func(context.Context, *server.ToolRequest, struct {
			P place `json:",inline"`
		}) (struct{}, error) {
			return struct{}{}, nil
		}),
		"named embedded struct": server.AddTypedTool(srv, mcp.Tool{Name: "k"}, func(context.Context, *server.ToolRequest, struct {
			place `json:"where"`
		}) (struct{}, error) {
			return struct{}{}, nil
		}),
		"pointer describer": server.AddTypedTool(srv, mcp.Tool{Name: "h"}, func(context.Context, *server.ToolRequest, struct {
			N badDescriber `json:"n"`
		}) (struct{}, error) {
			return struct{}{}, nil
		}),
		"bad name":                 server.AddTypedTool(srv, mcp.Tool{Name: "a b"}, handler),
		"nil handler":              server.AddTypedTool[struct{}, struct{}](srv, mcp.Tool{Name: "i"}, nil),
		"non-object author schema": server.AddTypedTool(srv, mcp.Tool{Name: "j", InputSchema: jsontext.Value(`{"type":"string"}`)}, handler),
	}
	for what, err := range cases {
		if err == nil {
			t.Errorf("%s: registered", what)
		} else if !strings.HasPrefix(err.Error(), "server: tool ") {
			t.Errorf("%s: error %q does not say which tool", what, err)
		}
	}
	if err := server.AddTypedTool(srv, mcp.Tool{Name: "ok"}, handler); err != nil {
		t.Fatal(err)
	}
	if tools := listTools(t, srv); len(tools) != 1 {
		t.Errorf("refused tools were listed: %v", slices.Collect(maps.Keys(tools)))
	}
}

// ---- typed prompts ----

type reviewArgs struct {
	Code     string `json:"code" jsonschema:"The code to review."`
	Language string `json:"language,omitempty" jsonschema:"Its programming language."`
	Focus    unit   `json:"focus,omitzero"`
	Internal string `json:"-"`
}

// TestTypedPrompt checks that a struct's fields become the prompt's
// arguments and that the handler receives the client's values in them.
func TestTypedPrompt(t *testing.T) {
	srv := server.New(testInfo)
	var got reviewArgs
	err := server.AddTypedPrompt(srv, mcp.Prompt{Name: "review"}, func(_ context.Context, _ *server.PromptRequest, a reviewArgs) (*mcp.GetPromptResult, error) {
		got = a
		return &mcp.GetPromptResult{Messages: []mcp.PromptMessage{{Role: "user", Content: mcp.TextContent("Review this " + a.Language + ": " + a.Code)}}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	w := serveHTTP(t, srv)
	r := w.rpc(mcp.MethodPromptsList, "", nil)
	schematest.Validate(t, "ListPromptsResultResponse", r.raw)
	var list struct {
		Prompts []mcp.Prompt `json:"prompts"`
	}
	if err := json.Unmarshal(r.Result, &list); err != nil || len(list.Prompts) != 1 {
		t.Fatalf("prompts/list: %s", r.raw)
	}
	want := []mcp.PromptArgument{
		{Name: "code", Description: "The code to review.", Required: true},
		{Name: "language", Description: "Its programming language."},
		{Name: "focus"},
	}
	if !reflect.DeepEqual(list.Prompts[0].Arguments, want) {
		t.Errorf("arguments = %+v, want %+v", list.Prompts[0].Arguments, want)
	}

	if r := w.rpc(mcp.MethodPromptsGet, "review", map[string]any{"arguments": map[string]string{"language": "Go"}}); r.Error == nil || r.Error.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("missing required argument: %s", r.raw)
	}
	r = w.rpc(mcp.MethodPromptsGet, "review", map[string]any{"arguments": map[string]string{"code": "x := 1", "focus": "celsius", "Internal": "no", "hidden": "no"}})
	if r.Error != nil {
		t.Fatalf("prompts/get: %s", r.raw)
	}
	schematest.Validate(t, "GetPromptResultResponse", r.raw)
	if (got != reviewArgs{Code: "x := 1", Focus: "celsius"}) {
		t.Errorf("handler got %+v", got)
	}
}

// TestTypedPromptRefused checks the argument types a typed prompt cannot
// be built on.
func TestTypedPromptRefused(t *testing.T) {
	srv := server.New(testInfo)
	h := func(context.Context, *server.PromptRequest, reviewArgs) (*mcp.GetPromptResult, error) {
		return nil, nil
	}
	cases := map[string]error{
		"int field": server.AddTypedPrompt(srv, mcp.Prompt{Name: "a"}, func(context.Context, *server.PromptRequest, struct{ N int }) (*mcp.GetPromptResult, error) {
			return nil, nil
		}),
		"not a struct": server.AddTypedPrompt(srv, mcp.Prompt{Name: "b"}, func(context.Context, *server.PromptRequest, map[string]string) (*mcp.GetPromptResult, error) {
			return nil, nil
		}),
		"duplicate name": server.AddTypedPrompt(srv, mcp.Prompt{Name: "c"}, func(context.Context, *server.PromptRequest, struct {
			A string
			B string `json:"A"`
		}) (*mcp.GetPromptResult, error) {
			return nil, nil
		}),
		"arguments given": server.AddTypedPrompt(srv, mcp.Prompt{Name: "d", Arguments: []mcp.PromptArgument{{Name: "code"}}}, h),
		"nil handler":     server.AddTypedPrompt[reviewArgs](srv, mcp.Prompt{Name: "e"}, nil),
	}
	for what, err := range cases {
		if err == nil {
			t.Errorf("%s: registered", what)
		}
	}
}

// TestTypedToolEncodingSchemas checks the schemas of Go types whose JSON
// encoding differs from what their kind suggests: bytes are one base64
// string, and a nil slice is written as [] (never null), so a slice's
// schema is an array and nothing else.
func TestTypedToolEncodingSchemas(t *testing.T) {
	type in struct {
		Data   []byte   `json:"data"`
		Places []place  `json:"places"`
		Maybe  *[]int   `json:"maybe,omitzero"`
		Fixed  [2]int   `json:"fixed,omitzero"`
		Names  []string `json:"names,omitempty"`
	}
	type out struct {
		Places []place `json:"places"`
		Data   []byte  `json:"data"`
	}
	srv := server.New(testInfo)
	err := server.AddTypedTool(srv, mcp.Tool{Name: "enc"}, func(_ context.Context, _ *server.ToolRequest, a in) (out, error) {
		return out{Places: a.Places, Data: a.Data}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	d := listedTool(t, srv, "enc")
	const wantIn = `{"type":"object","properties":{` +
		`"data":{"type":"string","contentEncoding":"base64"},` +
		`"places":{"type":"array","items":{"type":"object","properties":{"city":{"type":"string","description":"The city, in English."},"country":{"type":"string"}},"required":["city"],"additionalProperties":false}},` +
		`"maybe":{"type":["null","array"],"items":{"type":"integer"}},` +
		`"fixed":{"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":2},` +
		`"names":{"type":"array","items":{"type":"string"}}},` +
		`"required":["data","places"],"additionalProperties":false}`
	if string(d.InputSchema) != wantIn {
		t.Errorf("inputSchema\n got %s\nwant %s", d.InputSchema, wantIn)
	}
	w := serveHTTP(t, srv)
	res := w.toolResult("enc", map[string]any{"data": "aGk=", "places": nil})
	if !res.IsError {
		t.Errorf("null places accepted: %+v", res)
	}
	res = w.toolResult("enc", map[string]any{"data": "aGk=", "places": []any{}})
	if string(res.StructuredContent) != `{"places":[],"data":"aGk="}` {
		t.Errorf("structuredContent = %s", res.StructuredContent)
	}
	if err := valid(t, compile(t, d.OutputSchema), string(res.StructuredContent)); err != nil {
		t.Errorf("structuredContent does not match the output schema: %v", err)
	}
}
