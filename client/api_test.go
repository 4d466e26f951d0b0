package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// pagedServer has more tools, prompts, resources and templates than fit
// on one page (page size 2), registered in shuffled order.
func pagedServer(t testing.TB) *fixture {
	t.Helper()
	f := newFixture(t, nil, fixtureOpts{sopts: []server.Option{server.WithPageSize(2), server.WithInstructions("be kind")}})
	tools := []string{"t1", "t2", "t3", "t4", "t5", "t6", "t7"}
	rand.Shuffle(len(tools), func(i, j int) { tools[i], tools[j] = tools[j], tools[i] })
	addTools(t, f.srv, tools...)
	for _, p := range []string{"p3", "p1", "p5", "p2", "p4"} {
		must(t, f.srv.AddPrompt(mcp.Prompt{Name: p, Arguments: []mcp.PromptArgument{{Name: "who", Required: true}}},
			func(_ context.Context, r *server.PromptRequest) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{Messages: []mcp.PromptMessage{{Role: "user", Content: mcp.TextContent(r.Name + " for " + r.Arguments["who"])}}}, nil
			}))
	}
	for _, u := range []string{"res://e", "res://a", "res://d", "res://c", "res://b"} {
		r := &textResource{body: "body of " + u}
		must(t, f.srv.AddResource(mcp.Resource{URI: u}, r.handler))
	}
	for _, u := range []string{"tpl://{z}", "tpl://{x}", "tpl://{y}"} {
		must(t, f.srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: u},
			func(_ context.Context, r *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(r.URI, "", "templated")}}, nil
			}))
	}
	f.srv.SetCompletionHandler(func(_ context.Context, r *server.CompleteRequest) (*mcp.Completion, error) {
		var vals []string
		for _, v := range []string{"alice", "albert", "bob"} {
			if strings.HasPrefix(v, r.Argument.Value) {
				vals = append(vals, v)
			}
		}
		return &mcp.Completion{Values: vals}, nil
	})
	return f
}

func TestDiscover(t *testing.T) {
	f := pagedServer(t)
	c := f.client(t)
	ctx := context.Background()
	d, err := c.Discover(ctx)
	must(t, err)
	if !slices.Equal(d.SupportedVersions, []string{mcp.Version}) {
		t.Errorf("supportedVersions = %v", d.SupportedVersions)
	}
	if d.Capabilities.Tools == nil || d.Capabilities.Prompts == nil || d.Capabilities.Resources == nil || d.Capabilities.Completions == nil {
		t.Errorf("capabilities = %+v, want tools, prompts, resources and completions", d.Capabilities)
	}
	if d.Instructions != "be kind" {
		t.Errorf("instructions = %q", d.Instructions)
	}
	if d.ServerInfo == nil || d.ServerInfo.Name != "fixture" {
		t.Errorf("serverInfo = %+v", d.ServerInfo)
	}
	// server/discover carries ttlMs (a minute by default): later calls are
	// answered from the cache. (The first Discover may also have sent the
	// client's era probe, which is not cached.)
	before := f.rec.count(mcp.MethodDiscover)
	for range 3 {
		if _, err := c.Discover(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.rec.count(mcp.MethodDiscover); n != before {
		t.Errorf("server/discover reached the server %d more times within its TTL, want 0", n-before)
	}
	if era, err := c.Era(ctx); err != nil || era != EraModern {
		t.Errorf("Era = %v, %v, want the modern era", era, err)
	}
}

// TestWholeLists checks that every list method walks all pages, passing
// each page's nextCursor on, and returns the items in the server's
// deterministic order.
func TestWholeLists(t *testing.T) {
	f := pagedServer(t)
	c := f.client(t)
	ctx := context.Background()

	tools, err := c.Tools(ctx)
	must(t, err)
	if got, want := names(tools), []string{"t1", "t2", "t3", "t4", "t5", "t6", "t7"}; !slices.Equal(got, want) {
		t.Errorf("Tools = %v, want %v", got, want)
	}
	prompts, err := c.Prompts(ctx)
	must(t, err)
	var pn []string
	for _, p := range prompts {
		pn = append(pn, p.Name)
	}
	if want := []string{"p1", "p2", "p3", "p4", "p5"}; !slices.Equal(pn, want) {
		t.Errorf("Prompts = %v, want %v", pn, want)
	}
	if len(prompts) > 0 && (len(prompts[0].Arguments) != 1 || !prompts[0].Arguments[0].Required) {
		t.Errorf("prompt arguments lost: %+v", prompts[0])
	}
	res, err := c.Resources(ctx)
	must(t, err)
	var rn []string
	for _, r := range res {
		rn = append(rn, r.URI)
	}
	if want := []string{"res://a", "res://b", "res://c", "res://d", "res://e"}; !slices.Equal(rn, want) {
		t.Errorf("Resources = %v, want %v", rn, want)
	}
	tpls, err := c.ResourceTemplates(ctx)
	must(t, err)
	var tn []string
	for _, tp := range tpls {
		tn = append(tn, tp.URITemplate)
	}
	if want := []string{"tpl://{x}", "tpl://{y}", "tpl://{z}"}; !slices.Equal(tn, want) {
		t.Errorf("ResourceTemplates = %v, want %v", tn, want)
	}

	// Four pages of tools: the first without a cursor, each later one with
	// the cursor the page before it handed out.
	pages := f.rec.requests(mcp.MethodToolsList)
	if len(pages) != 4 {
		t.Fatalf("tools/list requests = %d, want 4 pages", len(pages))
	}
	if _, ok := pages[0].Params["cursor"]; ok {
		t.Errorf("first page request carries a cursor: %s", pages[0].Body)
	}
	for i, p := range pages[1:] {
		if _, ok := p.Params["cursor"]; !ok {
			t.Errorf("page %d request carries no cursor: %s", i+2, p.Body)
		}
	}
	if n := f.rec.count(mcp.MethodPromptsList); n != 3 {
		t.Errorf("prompts/list requests = %d, want 3", n)
	}
	if n := f.rec.count(mcp.MethodResourcesTemplates); n != 2 {
		t.Errorf("resources/templates/list requests = %d, want 2", n)
	}
}

func TestCallsAndRequest(t *testing.T) {
	f := pagedServer(t)
	must(t, f.srv.AddTool(mcp.Tool{Name: "fails"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return nil, errors.New("disk full")
	}))
	var logs []string
	var mu sync.Mutex
	must(t, f.srv.AddTool(mcp.Tool{Name: "chatty"}, func(_ context.Context, r *server.ToolRequest) (*mcp.CallToolResult, error) {
		total := 2.0
		_ = r.Progress(1, &total, "half")
		_ = r.Log("info", "chatty", "working")
		return text("done"), nil
	}))
	c := f.client(t, WithServerLogs("debug", func(level mcp.LogLevel, logger string, data jsontext.Value) {
		mu.Lock()
		logs = append(logs, fmt.Sprintf("%s/%s/%s", level, logger, data))
		mu.Unlock()
	}))
	ctx := context.Background()

	res, err := c.CallTool(ctx, "t3", map[string]any{})
	must(t, err)
	if len(res.Content) != 1 || *res.Content[0].Text != "t3" || res.IsError {
		t.Errorf("CallTool t3 = %+v", res)
	}
	// A tool failure is a result for the model, not a Go error.
	res, err = c.CallTool(ctx, "fails", nil)
	must(t, err)
	if !res.IsError || *res.Content[0].Text != "disk full" {
		t.Errorf("CallTool fails = %+v, want isError with the message", res)
	}
	// An unknown tool is a protocol error.
	_, err = c.CallTool(ctx, "nope", nil)
	var rpc *RPCError
	if !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("CallTool nope: err = %v, want -32602", err)
	}

	var progress []float64
	_, err = c.CallTool(ctx, "chatty", nil, WithProgress(func(p float64, total *float64, msg string) {
		progress = append(progress, p)
		if total == nil || *total != 2 || msg != "half" {
			t.Errorf("progress total=%v msg=%q", total, msg)
		}
	}))
	must(t, err)
	if !slices.Equal(progress, []float64{1}) {
		t.Errorf("progress = %v, want [1]", progress)
	}
	mu.Lock()
	if !slices.Equal(logs, []string{`info/chatty/"working"`}) {
		t.Errorf("logs = %v", logs)
	}
	mu.Unlock()

	pr, err := c.GetPrompt(ctx, "p2", map[string]string{"who": "ann"})
	must(t, err)
	if len(pr.Messages) != 1 || *pr.Messages[0].Content.Text != "p2 for ann" {
		t.Errorf("GetPrompt = %+v", pr)
	}
	if _, err := c.GetPrompt(ctx, "p2", nil); !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("GetPrompt without a required argument: err = %v, want -32602", err)
	}

	rr, err := c.ReadResource(ctx, "res://c")
	must(t, err)
	if got := contentText(t, rr); got != "body of res://c" {
		t.Errorf("ReadResource = %q", got)
	}
	rr, err = c.ReadResource(ctx, "tpl://anything")
	must(t, err)
	if got := contentText(t, rr); got != "templated" {
		t.Errorf("ReadResource via template = %q", got)
	}
	if _, err := c.ReadResource(ctx, "res://missing"); !errors.As(err, &rpc) || rpc.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("ReadResource missing: err = %v, want -32602", err)
	}

	comp, err := c.Complete(ctx, mcp.CompleteRef{Type: "ref/prompt", Name: "p1"}, mcp.CompleteArgument{Name: "who", Value: "al"}, nil)
	must(t, err)
	if !slices.Equal(comp.Values, []string{"alice", "albert"}) {
		t.Errorf("Complete = %v", comp.Values)
	}

	raw, err := c.Request(ctx, mcp.MethodToolsCall, map[string]any{"name": "t1"})
	must(t, err)
	var loose struct {
		ResultType string        `json:"resultType"`
		Content    []mcp.Content `json:"content"`
	}
	must(t, json.Unmarshal(raw, &loose))
	if loose.ResultType != mcp.ResultComplete || len(loose.Content) != 1 || *loose.Content[0].Text != "t1" {
		t.Errorf("Request tools/call = %s", raw)
	}
	raw, err = c.Request(ctx, mcp.MethodToolsList, nil)
	must(t, err)
	var page struct {
		Tools      []mcp.Tool `json:"tools"`
		NextCursor string     `json:"nextCursor"`
	}
	must(t, json.Unmarshal(raw, &page))
	if len(page.Tools) != 2 || page.NextCursor == "" {
		t.Errorf("Request tools/list = %s, want one page of two with a cursor", raw)
	}
}

// TestEveryRequestCarriesMetaAndHeaders checks, at the server, that every
// request the client sends - list pages, calls, reads, completions, the
// listen - carries the _meta fields and the Streamable HTTP headers the
// protocol requires, and that they agree with the body.
func TestEveryRequestCarriesMetaAndHeaders(t *testing.T) {
	f := pagedServer(t)
	cafe := &textResource{body: "coffee"}
	must(t, f.srv.AddResource(mcp.Resource{URI: "res://café au lait"}, cafe.handler))
	info := mcp.Implementation{Name: "meta-test", Version: "9.9.9"}
	c := f.client(t, WithClientInfo(info),
		WithElicitation(func(context.Context, jsontext.Value) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "decline"}, nil
		}),
		WithRoots(func(context.Context) (*mcp.ListRootsResult, error) { return &mcp.ListRootsResult{}, nil }))
	ctx := context.Background()
	_, err := c.Discover(ctx)
	must(t, err)
	_, err = c.Tools(ctx)
	must(t, err)
	_, err = c.Prompts(ctx)
	must(t, err)
	_, err = c.Resources(ctx)
	must(t, err)
	_, err = c.ResourceTemplates(ctx)
	must(t, err)
	_, err = c.CallTool(ctx, "t1", nil)
	must(t, err)
	_, err = c.GetPrompt(ctx, "p1", map[string]string{"who": "x"})
	must(t, err)
	_, err = c.ReadResource(ctx, "res://café au lait")
	must(t, err)
	_, err = c.Complete(ctx, mcp.CompleteRef{Type: "ref/prompt", Name: "p1"}, mcp.CompleteArgument{Name: "who", Value: ""}, nil)
	must(t, err)
	_, log := watch(t, c, WatchOptions{Tools: true})
	log.waitFor(t, "connected", kindIs(Connected))

	reqs := f.rec.requests("")
	methods := map[string]bool{}
	for _, r := range reqs {
		methods[r.Method] = true
		m := r.meta(t)
		var pv string
		if err := json.Unmarshal(m[mcp.MetaProtocolVersion], &pv); err != nil || pv != mcp.Version {
			t.Errorf("%s: _meta protocolVersion = %s", r.Method, m[mcp.MetaProtocolVersion])
		}
		var caps map[string]json.RawMessage
		if err := json.Unmarshal(m[mcp.MetaClientCapabilities], &caps); err != nil {
			t.Errorf("%s: _meta clientCapabilities = %s", r.Method, m[mcp.MetaClientCapabilities])
		}
		if _, ok := caps["elicitation"]; !ok {
			t.Errorf("%s: clientCapabilities lacks elicitation: %s", r.Method, m[mcp.MetaClientCapabilities])
		}
		if _, ok := caps["roots"]; !ok {
			t.Errorf("%s: clientCapabilities lacks roots: %s", r.Method, m[mcp.MetaClientCapabilities])
		}
		if _, ok := caps["sampling"]; ok {
			t.Errorf("%s: clientCapabilities declares sampling without a handler", r.Method)
		}
		var ci mcp.Implementation
		if err := json.Unmarshal(m[mcp.MetaClientInfo], &ci); err != nil || ci.Name != info.Name || ci.Version != info.Version {
			t.Errorf("%s: _meta clientInfo = %s", r.Method, m[mcp.MetaClientInfo])
		}

		if got := r.Header.Values(mcp.HeaderProtocolVersion); !slices.Equal(got, []string{mcp.Version}) {
			t.Errorf("%s: %s = %v", r.Method, mcp.HeaderProtocolVersion, got)
		}
		if got := r.Header.Values(mcp.HeaderMethod); !slices.Equal(got, []string{r.Method}) {
			t.Errorf("%s: %s = %v", r.Method, mcp.HeaderMethod, got)
		}
		var wantName string
		switch r.Method {
		case mcp.MethodToolsCall, mcp.MethodPromptsGet:
			_ = json.Unmarshal(r.Params["name"], &wantName)
		case mcp.MethodResourcesRead:
			_ = json.Unmarshal(r.Params["uri"], &wantName)
		}
		got := r.Header.Values(mcp.HeaderName)
		switch {
		case wantName == "" && len(got) != 0:
			t.Errorf("%s: unexpected %s %v", r.Method, mcp.HeaderName, got)
		case wantName != "" && len(got) != 1:
			t.Errorf("%s: %s = %v, want one", r.Method, mcp.HeaderName, got)
		case wantName != "":
			dec, err := decodeSentinel(got[0])
			if err != nil || dec != wantName {
				t.Errorf("%s: %s = %q decodes to %q (%v), want %q", r.Method, mcp.HeaderName, got[0], dec, err, wantName)
			}
		}
		if a := r.Header.Get("Accept"); !strings.Contains(a, "application/json") || !strings.Contains(a, "text/event-stream") {
			t.Errorf("%s: Accept = %q", r.Method, a)
		}
	}
	for _, m := range []string{mcp.MethodDiscover, mcp.MethodToolsList, mcp.MethodPromptsList, mcp.MethodResourcesList,
		mcp.MethodResourcesTemplates, mcp.MethodToolsCall, mcp.MethodPromptsGet, mcp.MethodResourcesRead, mcp.MethodComplete, mcp.MethodListen} {
		if !methods[m] {
			t.Errorf("no %s request was recorded", m)
		}
	}
	// The non-ASCII URI went out base64-sentinel encoded.
	for _, r := range f.rec.requests(mcp.MethodResourcesRead) {
		if got := r.Header.Get(mcp.HeaderName); got != "=?base64?cmVzOi8vY2Fmw6kgYXUgbGFpdA==?=" {
			t.Errorf("Mcp-Name for a non-ASCII URI = %q", got)
		}
	}
}

// decodeSentinel undoes the =?base64?...?= form, independently of the
// package under test.
func decodeSentinel(v string) (string, error) {
	if strings.HasPrefix(v, "=?base64?") && strings.HasSuffix(v, "?=") {
		var b []byte
		err := json.Unmarshal([]byte(`"`+v[len("=?base64?"):len(v)-2]+`"`), &b)
		return string(b), err
	}
	return v, nil
}

const geoSchema = `{"type":"object","properties":{
	"region":{"type":"string","x-mcp-header":"Region"},
	"count":{"type":"integer","x-mcp-header":"Count"},
	"flag":{"type":"boolean","x-mcp-header":"Flag"},
	"where":{"type":"object","properties":{"zone":{"type":"string","x-mcp-header":"Zone"}}},
	"note":{"type":"string"}}}`

// TestParamHeaders checks x-mcp-header mirroring as the server sees it:
// values as they are when header-safe, the base64 sentinel for non-ASCII,
// padded, tab-carrying or sentinel-looking values, and no header at all
// for absent arguments (null ones: TestParamHeadersNullArgument, since
// our server's schema validation refuses null for a string property). The server validates the headers against
// the body, so every call also has to succeed.
func TestParamHeaders(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	must(t, f.srv.AddTool(mcp.Tool{Name: "geo", InputSchema: jsontext.Value(geoSchema)}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return text("ok"), nil
	}))
	c := f.client(t)
	ctx := context.Background()
	b64 := func(s string) string {
		b, _ := json.Marshal([]byte(s))
		return "=?base64?" + strings.Trim(string(b), `"`) + "?="
	}
	cases := []struct {
		name string
		args string
		want map[string]string // header → value; others must be absent
	}{
		{"plain", `{"region":"eu-west","count":42,"flag":true,"where":{"zone":"z1"},"note":"n"}`,
			map[string]string{"Region": "eu-west", "Count": "42", "Flag": "true", "Zone": "z1"}},
		{"integer-as-float", `{"count":42.0,"flag":false}`, map[string]string{"Count": "42", "Flag": "false"}},
		{"non-ascii", `{"region":"café"}`, map[string]string{"Region": b64("café")}},
		{"padded", `{"region":" eu "}`, map[string]string{"Region": b64(" eu ")}},
		{"tab", `{"region":"a\tb"}`, map[string]string{"Region": b64("a\tb")}},
		{"newline", `{"region":"a\nb"}`, map[string]string{"Region": b64("a\nb")}},
		{"looks-like-sentinel", `{"region":"=?base64?eA==?="}`, map[string]string{"Region": b64("=?base64?eA==?=")}},
		{"inner-space", `{"region":"eu west"}`, map[string]string{"Region": "eu west"}},
		{"absent", `{}`, map[string]string{}},
		{"no-arguments", ``, map[string]string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := f.rec.count(mcp.MethodToolsCall)
			var args any
			if tc.args != "" {
				args = jsonValue(tc.args)
			}
			res, err := c.CallTool(ctx, "geo", args)
			if err != nil {
				t.Fatalf("CallTool: %v", err)
			}
			if res.IsError {
				t.Fatalf("CallTool: isError %s", *res.Content[0].Text)
			}
			calls := f.rec.requests(mcp.MethodToolsCall)
			if len(calls) != before+1 {
				t.Fatalf("tools/call requests = %d, want %d", len(calls), before+1)
			}
			h := calls[len(calls)-1].Header
			for _, name := range []string{"Region", "Count", "Flag", "Zone"} {
				got := h.Values("Mcp-Param-" + name)
				want, ok := tc.want[name]
				switch {
				case !ok && len(got) != 0:
					t.Errorf("Mcp-Param-%s = %v, want absent", name, got)
				case ok && !slices.Equal(got, []string{want}):
					t.Errorf("Mcp-Param-%s = %v, want %q", name, got, want)
				}
			}
		})
	}
}

// TestParamHeadersNullArgument checks that a null argument sends no
// header, with a schema that allows null so that the call itself is valid.
func TestParamHeadersNullArgument(t *testing.T) {
	ts, rec := rawServer(t, func(_ int, r rawRequest) (string, string) {
		switch r.Method {
		case mcp.MethodToolsList:
			return `{"tools":[{"name":"geo","inputSchema":{"type":"object","properties":{
				"region":{"type":"string","x-mcp-header":"Region"},"zone":{"type":"string","x-mcp-header":"Zone"}}}}],"resultType":"complete","ttlMs":60000,"cacheScope":"public"}`, ""
		default:
			return `{"content":[],"resultType":"complete"}`, ""
		}
	})
	c := rawClient(t, ts.URL)
	_, err := c.CallTool(context.Background(), "geo", jsonValue(`{"region":null,"zone":"z"}`))
	must(t, err)
	calls := rec.requests(mcp.MethodToolsCall)
	if len(calls) != 1 {
		t.Fatalf("tools/call requests = %d", len(calls))
	}
	if v := calls[0].Header.Values("Mcp-Param-Region"); len(v) != 0 {
		t.Errorf("Mcp-Param-Region = %v for a null argument, want absent", v)
	}
	if v := calls[0].Header.Get("Mcp-Param-Zone"); v != "z" {
		t.Errorf("Mcp-Param-Zone = %q, want z", v)
	}
}

// TestInvalidHeaderToolsDropped checks XH-4: tools whose x-mcp-header
// annotations break the rules are left out of Tools (with a warning), the
// rest are kept.
func TestInvalidHeaderToolsDropped(t *testing.T) {
	ts, _ := rawServer(t, func(_ int, r rawRequest) (string, string) {
		return `{"tools":[
			{"name":"good","inputSchema":{"type":"object","properties":{"a":{"type":"string","x-mcp-header":"A"}}}},
			{"name":"number","inputSchema":{"type":"object","properties":{"a":{"type":"number","x-mcp-header":"A"}}}},
			{"name":"dup","inputSchema":{"type":"object","properties":{"a":{"type":"string","x-mcp-header":"X"},"b":{"type":"string","x-mcp-header":"x"}}}},
			{"name":"items","inputSchema":{"type":"object","properties":{"a":{"type":"array","items":{"type":"string","x-mcp-header":"A"}}}}},
			{"name":"anyof","inputSchema":{"type":"object","anyOf":[{"properties":{"a":{"type":"string","x-mcp-header":"A"}}}]}},
			{"name":"space","inputSchema":{"type":"object","properties":{"a":{"type":"string","x-mcp-header":"Bad Name"}}}},
			{"name":"empty","inputSchema":{"type":"object","properties":{"a":{"type":"string","x-mcp-header":""}}}},
			{"name":"plain","inputSchema":{"type":"object"}}
		],"resultType":"complete","ttlMs":0,"cacheScope":"public"}`, ""
	})
	var logBuf bytes.Buffer
	var logMu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logBuf, mu: &logMu}, nil))
	c := rawClient(t, ts.URL, WithLogger(logger))
	tools, err := c.Tools(context.Background())
	must(t, err)
	if got := names(tools); !slices.Equal(got, []string{"good", "plain"}) {
		t.Errorf("Tools = %v, want [good plain]", got)
	}
	logMu.Lock()
	out := logBuf.String()
	logMu.Unlock()
	for _, n := range []string{"number", "dup", "items", "anyof", "space", "empty"} {
		if !strings.Contains(out, "tool="+n) {
			t.Errorf("no warning names dropped tool %q:\n%s", n, out)
		}
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestVersionRetry checks VER-3: a -32022 whose supported list holds a
// version the client speaks is retried once (under a new id); one that
// does not is not retried; a second -32022 is not retried again. It is
// checked on the client's first request (the server/discover era probe)
// and on a later one.
func TestVersionRetry(t *testing.T) {
	unsupported := func(supported string) string {
		return `{"code":-32022,"message":"Unsupported protocol version","data":{"supported":` + supported + `,"requested":"2026-07-28"}}`
	}
	toolsPage := `{"tools":[{"name":"a","inputSchema":{"type":"object"}}],"resultType":"complete","ttlMs":0,"cacheScope":"public"}`
	t.Run("first request retried once", func(t *testing.T) {
		ts, rec := rawServer(t, func(n int, r rawRequest) (string, string) {
			if n == 1 {
				return "", unsupported(`["2026-07-28"]`)
			}
			if r.Method == mcp.MethodDiscover {
				return rawDiscover, ""
			}
			return toolsPage, ""
		}, true)
		c := rawClient(t, ts.URL)
		if _, err := c.Discover(context.Background()); err != nil {
			t.Fatalf("Discover: %v", err)
		}
		reqs := rec.requests("")
		if len(reqs) < 2 {
			t.Fatalf("requests = %d, want the refused one and its retry", len(reqs))
		}
		if reqs[0].ID == reqs[1].ID {
			t.Errorf("retry reused id %s", reqs[0].ID)
		}
		if reqs[0].Method != reqs[1].Method {
			t.Errorf("retry sent %s after %s", reqs[1].Method, reqs[0].Method)
		}
		if v := reqs[1].Header.Get(mcp.HeaderProtocolVersion); v != mcp.Version {
			t.Errorf("retry version header = %q", v)
		}
		if era, _ := c.Era(context.Background()); era != EraModern {
			t.Errorf("a -32022 made the client think the server is %s", era)
		}
	})
	cases := []struct {
		name      string
		refuse    func(n int) bool // which tools/list requests get -32022
		supported string
		wantCalls int
		wantErr   bool
	}{
		{"later request retried once", func(n int) bool { return n == 1 }, `["2026-07-28"]`, 2, false},
		{"no common version", func(int) bool { return true }, `["2099-01-01"]`, 1, true},
		{"only once", func(int) bool { return true }, `["2026-07-28"]`, 2, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ts, rec := rawServer(t, func(n int, r rawRequest) (string, string) {
				if tc.refuse(n) {
					return "", unsupported(tc.supported)
				}
				return toolsPage, ""
			})
			c := rawClient(t, ts.URL)
			_, err := c.Tools(context.Background())
			var rpc *RPCError
			switch {
			case tc.wantErr && (!errors.As(err, &rpc) || rpc.Code != mcp.CodeUnsupportedProtocolVersion):
				t.Errorf("err = %v, want -32022", err)
			case !tc.wantErr && err != nil:
				t.Errorf("err = %v", err)
			}
			reqs := rec.requests(mcp.MethodToolsList)
			if len(reqs) != tc.wantCalls {
				t.Fatalf("tools/list requests = %d, want %d", len(reqs), tc.wantCalls)
			}
			if len(reqs) == 2 && reqs[0].ID == reqs[1].ID {
				t.Errorf("retry reused id %s", reqs[0].ID)
			}
		})
	}
}

// TestResultType checks that an absent resultType means complete (older
// servers) and that an unknown one is an error, not a silent success.
func TestResultType(t *testing.T) {
	var rt string
	ts, _ := rawServer(t, func(_ int, r rawRequest) (string, string) {
		switch r.Method {
		case mcp.MethodToolsList:
			return `{"tools":[{"name":"a","inputSchema":{"type":"object"}}]` + rt + `}`, ""
		default:
			return `{"content":[{"type":"text","text":"hi"}]` + rt + `}`, ""
		}
	})
	ctx := context.Background()
	rt = ""
	c := rawClient(t, ts.URL)
	tools, err := c.Tools(ctx)
	if err != nil || len(tools) != 1 {
		t.Fatalf("Tools without resultType: %v, %v", tools, err)
	}
	res, err := c.CallTool(ctx, "a", nil)
	if err != nil || *res.Content[0].Text != "hi" {
		t.Fatalf("CallTool without resultType: %v, %v", res, err)
	}
	rt = `,"resultType":"bogus"`
	c2 := rawClient(t, ts.URL)
	if _, err := c2.Tools(ctx); err == nil || !strings.Contains(err.Error(), "unknown resultType") {
		t.Errorf("Tools with resultType bogus: err = %v, want unknown resultType", err)
	}
	if _, err := c2.Request(ctx, mcp.MethodToolsCall, map[string]any{"name": "a"}); err == nil || !strings.Contains(err.Error(), "unknown resultType") {
		t.Errorf("Request with resultType bogus: err = %v, want unknown resultType", err)
	}
	// A task handle is known, and valid only for a tools/call that
	// declared the tasks extension; Request hands it over as it is.
	rt = `,"resultType":"task"`
	if _, err := c2.Tools(ctx); err == nil || !strings.Contains(err.Error(), "not a valid answer") {
		t.Errorf("Tools with resultType task: err = %v, want an invalid answer", err)
	}
	if raw, err := c2.Request(ctx, mcp.MethodToolsCall, map[string]any{"name": "a"}); err != nil || !strings.Contains(string(raw), `"task"`) {
		t.Errorf("Request with resultType task: %s, %v, want the handle", raw, err)
	}
	c3 := rawClient(t, ts.URL, WithoutTasks())
	if _, err := c3.Request(ctx, mcp.MethodToolsCall, map[string]any{"name": "a"}); err == nil || !strings.Contains(err.Error(), "not a valid answer") {
		t.Errorf("WithoutTasks, Request with resultType task: err = %v, want an invalid answer", err)
	}
}

// TestParamHeadersThroughViews: a view made with As shares the cached
// tool list; calls through it must still mirror x-mcp-header arguments,
// whoever fetched the list.
func TestParamHeadersThroughViews(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{sopts: []server.Option{
		server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: time.Hour}),
	}})
	must(t, f.srv.AddTool(mcp.Tool{Name: "geo", InputSchema: jsontext.Value(geoSchema)}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return text("ok"), nil
	}))
	base := primed(t, f)
	ctx := context.Background()
	_, err := base.Tools(ctx) // the list is cached by the base client
	must(t, err)
	for _, c := range []*Client{base.As("Bearer a"), base.As("Bearer b"), base} {
		res, err := c.CallTool(ctx, "geo", map[string]any{"region": "eu"})
		if err != nil {
			t.Fatalf("CallTool through a view: %v", err)
		}
		if res.IsError {
			t.Fatalf("CallTool: %s", *res.Content[0].Text)
		}
		calls := f.rec.requests(mcp.MethodToolsCall)
		if got := calls[len(calls)-1].Header.Get("Mcp-Param-Region"); got != "eu" {
			t.Errorf("Mcp-Param-Region = %q, want eu", got)
		}
	}
	if n := f.rec.count(mcp.MethodToolsList); n != 1 {
		t.Errorf("tools/list requests = %d, want 1 (the views share the public list)", n)
	}
}

// TestHeaderMismatchRefetchesAndRetries checks XH-8: the server added an
// x-mcp-header annotation the client's cached list does not know, so the
// first call lacks the header and gets -32020; the client re-reads
// tools/list and retries once, with the header.
func TestHeaderMismatchRefetchesAndRetries(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{sopts: []server.Option{
		server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: time.Hour}),
	}})
	ok := func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) { return text("ok"), nil }
	must(t, f.srv.AddTool(mcp.Tool{Name: "geo", InputSchema: jsontext.Value(`{"type":"object","properties":{"region":{"type":"string"}}}`)}, ok))
	c := primed(t, f)
	ctx := context.Background()
	_, err := c.Tools(ctx)
	must(t, err)
	must(t, f.srv.AddTool(mcp.Tool{Name: "geo", InputSchema: jsontext.Value(geoSchema)}, ok))
	res, err := c.CallTool(ctx, "geo", map[string]any{"region": "eu"})
	if err != nil {
		t.Fatalf("CallTool after the annotation changed: %v", err)
	}
	if res.IsError {
		t.Fatalf("CallTool: %s", *res.Content[0].Text)
	}
	calls := f.rec.requests(mcp.MethodToolsCall)
	if len(calls) != 2 {
		t.Fatalf("tools/call requests = %d, want 2 (refused, then retried)", len(calls))
	}
	if got := calls[1].Header.Get("Mcp-Param-Region"); got != "eu" {
		t.Errorf("retry Mcp-Param-Region = %q, want eu", got)
	}
	if calls[0].ID == calls[1].ID {
		t.Errorf("retry reused id %s", calls[0].ID)
	}
	if n := f.rec.count(mcp.MethodToolsList); n != 2 {
		t.Errorf("tools/list requests = %d, want 2 (the re-fetch)", n)
	}
	// A mismatch that persists is returned, not retried forever.
	ts, rec := rawServer(t, func(_ int, r rawRequest) (string, string) {
		if r.Method == mcp.MethodToolsList {
			return `{"tools":[{"name":"x","inputSchema":{"type":"object"}}],"resultType":"complete","ttlMs":0,"cacheScope":"public"}`, ""
		}
		return "", `{"code":-32020,"message":"Header mismatch"}`
	})
	rc := rawClient(t, ts.URL)
	_, err = rc.CallTool(ctx, "x", nil)
	var rpc *RPCError
	if !errors.As(err, &rpc) || rpc.Code != mcp.CodeHeaderMismatch {
		t.Errorf("persistent mismatch: err = %v, want -32020", err)
	}
	if n := rec.count(mcp.MethodToolsCall); n != 2 {
		t.Errorf("tools/call requests for a persistent mismatch = %d, want 2", n)
	}
}
