package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

func contentText(t testing.TB, res map[string]any) string {
	t.Helper()
	content, _ := res["content"].([]any)
	var sb strings.Builder
	for _, c := range content {
		m := c.(map[string]any)
		if m["type"] == "text" {
			sb.WriteString(m["text"].(string))
		}
	}
	return sb.String()
}

// TestToolCalls covers TOOL-4/5/6: unknown and hidden tools are -32602,
// schema violations and handler failures are isError results the model
// can read, structuredContent is checked against outputSchema, and a
// handler's own JSON-RPC error reaches the client as is.
func TestToolCalls(t *testing.T) {
	h := newHarness(t)
	var gotArgs jsontext.Value
	mustAddTool(t, h.srv, mcp.Tool{
		Name:         "add",
		InputSchema:  jsontext.Value(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"],"additionalProperties":false}`),
		OutputSchema: jsontext.Value(`{"type":"object","properties":{"sum":{"type":"integer"}},"required":["sum"]}`),
	}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		gotArgs = req.Arguments
		var in struct{ A, B int }
		if err := json.Unmarshal(req.Arguments, &in); err != nil {
			return nil, err
		}
		out := fmt.Sprintf(`{"sum":%d}`, in.A+in.B)
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(out)}, StructuredContent: jsontext.Value(out)}, nil
	})
	mustAddTool(t, h.srv, mcp.Tool{
		Name:         "liar",
		OutputSchema: jsontext.Value(`{"type":"object","properties":{"sum":{"type":"integer"}},"required":["sum"]}`),
	}, func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{}, StructuredContent: jsontext.Value(`{"sum":"many"}`)}, nil
	})
	mustAddTool(t, h.srv, textTool("fails"), func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return nil, errors.New("disk on fire")
	})
	mustAddTool(t, h.srv, textTool("rpcerr"), func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return nil, jsonrpc.NewError(-32602, "Invalid params: bad widget", map[string]string{"widget": "w"})
	})
	mustAddTool(t, h.srv, textTool("empty"), func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return nil, nil
	})
	mustAddTool(t, h.srv, textTool("hidden"), echoHandler("h"))
	if err := h.srv.Disable(t.Context(), server.Tool("hidden")); err != nil {
		t.Fatal(err)
	}

	// Success, with structuredContent that matches the output schema.
	r, _ := h.call(1, mcp.MethodToolsCall, P{"name": "add", "arguments": P{"a": 2, "b": 3}})
	res := r.ok(t)
	if sc, _ := res["structuredContent"].(map[string]any); fmt.Sprint(sc["sum"]) != "5" {
		t.Errorf("structuredContent = %v", res["structuredContent"])
	}
	if res["isError"] == true {
		t.Error("successful call marked isError")
	}
	if string(gotArgs) != `{"a":2,"b":3}` {
		t.Errorf("handler got arguments %s", gotArgs)
	}

	// Unknown, hidden, nameless: protocol errors.
	for _, params := range []P{{"name": "nope"}, {"name": "hidden"}, {}, {"name": "add", "arguments": []int{1}}} {
		r, _ := h.call("u", mcp.MethodToolsCall, params)
		r.fails(t, -32602)
	}

	// Input that violates the schema: an isError result, handler not run.
	for _, args := range []P{{"a": 1}, {"a": "1", "b": 2}, {"a": 1, "b": 2, "c": 3}} {
		gotArgs = nil
		r, _ := h.call(2, mcp.MethodToolsCall, P{"name": "add", "arguments": args})
		res := r.ok(t)
		if res["isError"] != true {
			t.Errorf("args %v: isError = %v, want true (TOOL-6)", args, res["isError"])
		}
		if contentText(t, res) == "" {
			t.Errorf("args %v: no text explaining the failure", args)
		}
		if gotArgs != nil {
			t.Errorf("args %v: handler ran on invalid input", args)
		}
	}

	// Output that violates the output schema never reaches the client.
	r, _ = h.call(3, mcp.MethodToolsCall, P{"name": "liar"})
	r.fails(t, -32603)
	if strings.Contains(string(r.raw), "many") {
		t.Errorf("non-conforming structuredContent leaked: %s", r.raw)
	}

	// A handler error becomes an isError result with its text.
	r, _ = h.call(4, mcp.MethodToolsCall, P{"name": "fails"})
	res = r.ok(t)
	if res["isError"] != true || !strings.Contains(contentText(t, res), "disk on fire") {
		t.Errorf("handler error result = %s", r.raw)
	}

	// A *jsonrpc.Error passes through.
	r, _ = h.call(5, mcp.MethodToolsCall, P{"name": "rpcerr"})
	r.fails(t, -32602)
	if !strings.Contains(string(r.Error.Data), "widget") {
		t.Errorf("error data lost: %s", r.raw)
	}

	// A nil result is still a valid result (content is required).
	r, _ = h.call(6, mcp.MethodToolsCall, P{"name": "empty"})
	if c, ok := r.ok(t)["content"].([]any); !ok || len(c) != 0 {
		t.Errorf("nil result gave content %v", r.Result["content"])
	}
}

// TestToolCallCancelled: a call whose context ends while the handler runs
// gets no response.
func TestToolCallCancelled(t *testing.T) {
	h := newHarness(t)
	started := make(chan struct{})
	mustAddTool(t, h.srv, textTool("wait"), func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan engine.Reply, 1)
	rec := newRecorder(t)
	go func() { done <- h.serveRaw(ctx, encodeRequest(t, 1, mcp.MethodToolsCall, P{"name": "wait"}), rec) }()
	<-started
	cancel()
	if rep := <-done; rep.Body != nil {
		t.Errorf("cancelled call answered: %s", rep.Body)
	}
}

// TestResourceNotFound covers RES-4: -32602 with data.uri, whether no
// resource matches, the handler says not found, or it has no contents.
func TestResourceNotFound(t *testing.T) {
	h := newHarness(t)
	mustAddResource(t, h.srv, "mem://gone", func(ctx context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		return nil, fmt.Errorf("looking up %s: %w", req.URI, server.ErrResourceNotFound)
	})
	mustAddResource(t, h.srv, "mem://empty", func(ctx context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{}, nil
	})
	mustAddResource(t, h.srv, "mem://nil", func(ctx context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		return nil, nil
	})
	if err := h.srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "mem://users/{id}"},
		func(ctx context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			return nil, server.ErrResourceNotFound
		}); err != nil {
		t.Fatal(err)
	}
	for _, uri := range []string{"mem://none", "mem://gone", "mem://empty", "mem://nil", "mem://users/9", "file:///etc/../etc/passwd"} {
		r, _ := h.call("rd", mcp.MethodResourcesRead, P{"uri": uri})
		r.fails(t, -32602)
		if r.Error.Code == mcp.CodeLegacyResourceNotFound {
			t.Errorf("%s: legacy -32002 sent", uri)
		}
		if d := r.data(t); d["uri"] != uri {
			t.Errorf("%s: data.uri = %v", uri, d["uri"])
		}
	}
	r, _ := h.call("rd", mcp.MethodResourcesRead, P{})
	r.fails(t, -32602)
}

// TestResourceTemplates: a read matched by a template reaches its handler
// with the variables; a registered resource wins over a template.
func TestResourceTemplates(t *testing.T) {
	h := newHarness(t)
	var vars map[string]string // handlers run on the calling goroutine
	if err := h.srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "mem://users/{id}/files/{name}", Name: "file"},
		func(ctx context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			vars = req.Vars
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{
				mcp.TextContents(req.URI, "text/plain", "file "+req.Vars["name"]),
				mcp.BlobContents(req.URI+"#raw", "application/octet-stream", "AAEC"),
			}}, nil
		}); err != nil {
		t.Fatal(err)
	}
	mustAddResource(t, h.srv, "mem://users/1/files/fixed", textResource("", "fixed"))

	r, _ := h.call(1, mcp.MethodResourcesRead, P{"uri": "mem://users/42/files/notes"})
	res := r.ok(t)
	if vars["id"] != "42" || vars["name"] != "notes" {
		t.Errorf("Vars = %v", vars)
	}
	if len(res["contents"].([]any)) != 2 {
		t.Errorf("contents = %v", res["contents"])
	}
	vars = nil
	r, _ = h.call(2, mcp.MethodResourcesRead, P{"uri": "mem://users/1/files/fixed"})
	c := r.ok(t)["contents"].([]any)[0].(map[string]any)
	if c["text"] != "fixed" || vars != nil {
		t.Errorf("fixed resource not preferred: %v, template vars %v", c, vars)
	}
	r, _ = h.call(3, mcp.MethodResourcesTemplates, P{})
	tmpls := r.ok(t)["resourceTemplates"].([]any)
	if len(tmpls) != 1 || tmpls[0].(map[string]any)["uriTemplate"] != "mem://users/{id}/files/{name}" {
		t.Errorf("templates = %v", tmpls)
	}
}

// TestPrompts covers PR-2: missing required argument and unknown prompt
// are -32602; arguments reach the handler.
func TestPrompts(t *testing.T) {
	h := newHarness(t)
	mustAddPrompt(t, h.srv, mcp.Prompt{Name: "greet", Arguments: []mcp.PromptArgument{{Name: "who", Required: true}, {Name: "tone"}}}, simplePrompt)
	mustAddPrompt(t, h.srv, mcp.Prompt{Name: "broken"}, func(ctx context.Context, req *server.PromptRequest) (*mcp.GetPromptResult, error) {
		return nil, errors.New("template missing")
	})
	r, _ := h.call(1, mcp.MethodPromptsGet, P{"name": "greet", "arguments": P{"who": "Ada"}})
	msgs := r.ok(t)["messages"].([]any)
	if len(msgs) != 1 || !strings.Contains(fmt.Sprint(msgs[0]), "hi Ada") {
		t.Errorf("messages = %v", msgs)
	}
	for _, params := range []P{
		{"name": "greet"},
		{"name": "greet", "arguments": P{"tone": "warm"}},
		{"name": "nope"},
		{},
		{"name": "greet", "arguments": P{"who": 5}},
	} {
		r, _ := h.call("pr", mcp.MethodPromptsGet, params)
		r.fails(t, -32602)
	}
	r, _ = h.call(2, mcp.MethodPromptsGet, P{"name": "broken"})
	r.fails(t, -32603)
	if strings.Contains(string(r.raw), "template missing") {
		t.Errorf("internal error text leaked to the client: %s", r.raw)
	}
}

// TestCompletion covers CMP-1: values at most 100 with hasMore, bad refs
// -32602.
func TestCompletion(t *testing.T) {
	h := newHarness(t)
	mustAddPrompt(t, h.srv, mcp.Prompt{Name: "greet"}, simplePrompt)
	if err := h.srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "mem://x/{y}"}, textResource("", "x")); err != nil {
		t.Fatal(err)
	}
	var got *server.CompleteRequest
	h.srv.SetCompletionHandler(func(ctx context.Context, req *server.CompleteRequest) (*mcp.Completion, error) {
		got = req
		var vals []string
		for i := range 150 {
			vals = append(vals, fmt.Sprintf("%s%03d", req.Argument.Value, i))
		}
		total := 150
		return &mcp.Completion{Values: vals, Total: &total}, nil
	})
	r, _ := h.call(1, mcp.MethodDiscover, P{})
	if _, ok := r.ok(t)["capabilities"].(map[string]any)["completions"]; !ok {
		t.Error("completions not advertised")
	}
	r, _ = h.call(2, mcp.MethodComplete, P{
		"ref":      P{"type": "ref/prompt", "name": "greet"},
		"argument": P{"name": "who", "value": "A"},
		"context":  P{"arguments": P{"tone": "warm"}},
	})
	comp := r.ok(t)["completion"].(map[string]any)
	if n := len(comp["values"].([]any)); n != 100 {
		t.Errorf("%d values, want at most 100", n)
	}
	if comp["hasMore"] != true {
		t.Errorf("hasMore = %v, want true after trimming", comp["hasMore"])
	}
	if got.Argument.Value != "A" || got.Context.Arguments["tone"] != "warm" || got.Ref.Name != "greet" {
		t.Errorf("handler saw %+v", got)
	}
	r, _ = h.call(3, mcp.MethodComplete, P{"ref": P{"type": "ref/resource", "uri": "mem://x/{y}"}, "argument": P{"name": "y", "value": ""}})
	r.ok(t)
	for _, params := range []P{
		{"ref": P{"type": "ref/prompt", "name": "nope"}, "argument": P{"name": "a", "value": ""}},
		{"ref": P{"type": "ref/resource", "uri": "mem://nope/{z}"}, "argument": P{"name": "z", "value": ""}},
		{"ref": P{"type": "ref/tool", "name": "greet"}, "argument": P{"name": "a", "value": ""}},
		{"ref": P{"type": "ref/prompt", "name": "greet"}},
		{"argument": P{"name": "a", "value": ""}},
	} {
		r, _ := h.call("c", mcp.MethodComplete, params)
		r.fails(t, -32602)
	}
}

// progressTool reports progress 1, 2, 2 (dropped), 1.5 (dropped), 3 and
// keeps its request so the test can try to report after the end.
func progressTool(h *harness, keep **server.ToolRequest) {
	mustAddTool(h.t, h.srv, textTool("work"), func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		total := 3.0
		for _, p := range []float64{1, 2, 2, 1.5, 3} {
			if err := req.Progress(p, &total, "working"); err != nil {
				return nil, err
			}
		}
		*keep = req
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("done")}}, nil
	})
}

// TestProgress covers PROG-1: notifications only with a progressToken,
// the token echoed with its JSON type, progress strictly increasing, all
// before the response and none after it.
func TestProgress(t *testing.T) {
	h := newHarness(t)
	var kept *server.ToolRequest
	progressTool(h, &kept)
	for _, token := range []any{"tok-1", 42} {
		r, rec := h.call(1, mcp.MethodToolsCall, P{"name": "work", "_meta": P{mcp.MetaProgressToken: token}})
		r.ok(t)
		ns := decodeNotifs(t, rec.messages())
		var vals []float64
		for _, n := range ns {
			if n.Method != mcp.NotifyProgress {
				t.Errorf("unexpected %s on a call's stream", n.Method)
				continue
			}
			var p struct {
				Params struct {
					Token    json.RawMessage `json:"progressToken"`
					Progress float64         `json:"progress"`
					Meta     map[string]any  `json:"_meta"`
				} `json:"params"`
			}
			_ = json.Unmarshal(n.raw, &p)
			want, _ := json.Marshal(token)
			if string(p.Params.Token) != string(want) {
				t.Errorf("progressToken = %s, want %s", p.Params.Token, want)
			}
			if _, ok := p.Params.Meta[mcp.MetaSubscriptionID]; ok {
				t.Error("progress carries a subscriptionId (META-7)")
			}
			vals = append(vals, p.Params.Progress)
		}
		if fmt.Sprint(vals) != "[1 2 3]" {
			t.Errorf("progress values %v, want [1 2 3] (strictly increasing)", vals)
		}
		// After the response, progress is silent (the recorder reports any
		// send after end as an error).
		if err := kept.Progress(10, nil, ""); err != nil {
			t.Errorf("late progress: %v", err)
		}
	}
	r, rec := h.call(2, mcp.MethodToolsCall, P{"name": "work"})
	r.ok(t)
	if n := len(rec.messages()); n != 0 {
		t.Errorf("%d progress notifications without a progressToken", n)
	}
}

// TestLogging covers LOG-1: notifications/message only when the request
// set a level, only at or above it, on its own stream; an unknown level is
// -32602.
func TestLogging(t *testing.T) {
	h := newHarness(t)
	var kept *server.ToolRequest
	mustAddTool(t, h.srv, textTool("chatty"), func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		for _, l := range []mcp.LogLevel{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency", "bogus"} {
			if err := req.Log(l, "test", map[string]string{"level": string(l)}); err != nil {
				return nil, err
			}
		}
		kept = req
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("ok")}}, nil
	})
	for level, want := range map[string]string{
		"debug":     "debug info notice warning error critical alert emergency",
		"warning":   "warning error critical alert emergency",
		"emergency": "emergency",
	} {
		r, rec := h.call(1, mcp.MethodToolsCall, P{"name": "chatty", "_meta": P{mcp.MetaLogLevel: level}})
		r.ok(t)
		var got []string
		for _, n := range decodeNotifs(t, rec.messages()) {
			if n.Method != mcp.NotifyMessage {
				t.Errorf("unexpected %s", n.Method)
				continue
			}
			got = append(got, n.Params["level"].(string))
		}
		if strings.Join(got, " ") != want {
			t.Errorf("level %s: sent %v, want %s", level, got, want)
		}
		if err := kept.Log("emergency", "late", "x"); err != nil {
			t.Errorf("late log: %v", err)
		}
	}
	r, rec := h.call(2, mcp.MethodToolsCall, P{"name": "chatty"})
	r.ok(t)
	if n := len(rec.messages()); n != 0 {
		t.Errorf("%d log messages without a requested level", n)
	}
	r, _ = h.call(3, mcp.MethodToolsCall, P{"name": "chatty", "_meta": P{mcp.MetaLogLevel: "loud"}})
	r.fails(t, -32602)
	r, _ = h.call(3, mcp.MethodToolsList, P{"_meta": P{mcp.MetaLogLevel: "Warning"}})
	r.fails(t, -32602)
}

// TestCompletionResourceRefVisibility covers CMP-1 with WithVisibility: a
// resource template the caller may not see is a bad ref, told as for one
// that does not exist, and its handler never runs.
func TestCompletionResourceRefVisibility(t *testing.T) {
	visible := func(principal string, l server.List, key string) bool {
		return l != server.ListTemplates || key != "mem://secret/{id}" || principal == "alice"
	}
	h := newHarness(t, server.WithVisibility(visible))
	if err := h.srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "mem://secret/{id}"}, textResource("", "s")); err != nil {
		t.Fatal(err)
	}
	ran := 0
	h.srv.SetCompletionHandler(func(context.Context, *server.CompleteRequest) (*mcp.Completion, error) {
		ran++
		return &mcp.Completion{Values: []string{"1"}}, nil
	})
	params := P{"ref": P{"type": "ref/resource", "uri": "mem://secret/{id}"}, "argument": P{"name": "id", "value": ""}}
	h.principal = "alice"
	r, _ := h.call(1, mcp.MethodComplete, params)
	r.ok(t)
	h.principal = "bob"
	r, _ = h.call(2, mcp.MethodComplete, params)
	r.fails(t, -32602)
	if ran != 1 {
		t.Errorf("completion handler ran %d times, want once (for alice only)", ran)
	}
}
