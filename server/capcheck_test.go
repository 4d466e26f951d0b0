package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/mcp"
	"tidings/server"
)

// askFor returns a tool handler that asks for the one input request.
func askFor(r mcp.InputRequest) server.ToolHandler {
	return func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"k": r}}
	}
}

var (
	urlElicit = mcp.InputRequest{Method: mcp.MethodElicit,
		Params: jsontext.Value(`{"mode":"url","message":"Sign in","url":"https://example.com/login","elicitationId":"e1"}`)}
	formElicit = mcp.InputRequest{Method: mcp.MethodElicit,
		Params: jsontext.Value(`{"message":"Name?","requestedSchema":{"type":"object","properties":{}}}`)}
	toolSampling = mcp.InputRequest{Method: mcp.MethodCreateMessage,
		Params: jsontext.Value(`{"messages":[],"maxTokens":10,"tools":[{"name":"t","inputSchema":{"type":"object"}}]}`)}
)

// TestMissingCapabilityIsPrecise covers MRTR-3 and CAP-1 per mode: URL
// elicitation needs elicitation.url, form elicitation needs form (or the
// empty object), and sampling with tools needs sampling.tools; the -32021
// names exactly the missing capability.
func TestMissingCapabilityIsPrecise(t *testing.T) {
	h := newHarness(t)
	mustAddTool(t, h.srv, textTool("url"), askFor(urlElicit))
	mustAddTool(t, h.srv, textTool("form"), askFor(formElicit))
	mustAddTool(t, h.srv, textTool("sample"), askFor(toolSampling))
	for _, tc := range []struct {
		tool string
		caps P
		want string // requiredCapabilities, or "" for an input_required result
	}{
		{"url", P{"elicitation": P{}}, `{"elicitation":{"url":{}}}`},
		{"url", P{"elicitation": P{"form": P{}}}, `{"elicitation":{"url":{}}}`},
		{"url", P{"elicitation": P{"url": P{}}}, ""},
		{"form", P{"elicitation": P{"url": P{}}}, `{"elicitation":{"form":{}}}`},
		{"form", P{"elicitation": P{}}, ""},
		{"sample", P{"sampling": P{}}, `{"sampling":{"tools":{}}}`},
		{"sample", P{}, `{"sampling":{"tools":{}}}`},
		{"sample", P{"sampling": P{"tools": P{}}}, ""},
	} {
		r, _ := h.call(1, mcp.MethodToolsCall, P{"name": tc.tool, "_meta": P{mcp.MetaClientCapabilities: tc.caps}})
		if tc.want == "" {
			if r.Error != nil || r.Result["resultType"] != mcp.ResultInputRequired {
				t.Errorf("%s with %v: %s, want input_required", tc.tool, tc.caps, r.raw)
			}
			continue
		}
		if r.Error == nil || r.Error.Code != mcp.CodeMissingRequiredCapability {
			t.Errorf("%s with %v: %s, want -32021", tc.tool, tc.caps, r.raw)
			continue
		}
		var data struct {
			Required json.RawMessage `json:"requiredCapabilities"`
		}
		if err := json.Unmarshal(r.Error.Data, &data); err != nil || string(data.Required) != tc.want {
			t.Errorf("%s with %v: requiredCapabilities %s, want %s", tc.tool, tc.caps, data.Required, tc.want)
		}
	}
}

// TestLegacyAskChecksMode: a 2025-11-25 session that declared only form
// elicitation is not sent a URL elicitation; the call fails with -32021
// naming elicitation.url, and nothing is asked of the client.
func TestLegacyAskChecksMode(t *testing.T) {
	srv := legacyServer(t)
	mustAddTool(t, srv.Server, textTool("url"), askFor(urlElicit))
	mustAddTool(t, srv.Server, textTool("sample"), askFor(toolSampling))
	ss := openSession(t, srv, map[string]any{"elicitation": map[string]any{}, "sampling": map[string]any{}})
	for _, tc := range []struct{ tool, want string }{
		{"url", `{"elicitation":{"url":{}}}`},
		{"sample", `{"sampling":{"tools":{}}}`},
	} {
		r, out := serve(t, srv, ss, 1, mcp.MethodToolsCall, map[string]any{"name": tc.tool})
		r.fails(t, mcp.CodeMissingRequiredCapability)
		var body struct {
			Error struct {
				Data struct {
					Required json.RawMessage `json:"requiredCapabilities"`
				} `json:"data"`
			} `json:"error"`
		}
		if err := json.Unmarshal(r.raw, &body); err != nil || string(body.Error.Data.Required) != tc.want {
			t.Errorf("%s: %s, want requiredCapabilities %s", tc.tool, r.raw, tc.want)
		}
		if n := len(out.all()); n != 0 {
			t.Errorf("%s: %d messages sent to the client, want none: %s", tc.tool, n, out.dump())
		}
	}
}

// TestCompletionCannotAskForInput covers MRTR-1: only tools/call,
// prompts/get and resources/read may answer input_required, so a
// completion handler asking for input is an internal error.
func TestCompletionCannotAskForInput(t *testing.T) {
	h := newHarness(t)
	mustAddPrompt(t, h.srv, mcp.Prompt{Name: "greet"}, simplePrompt)
	h.srv.SetCompletionHandler(func(ctx context.Context, req *server.CompleteRequest) (*mcp.Completion, error) {
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"k": formElicit}}
	})
	r, _ := h.call(1, mcp.MethodComplete, P{
		"ref":      P{"type": "ref/prompt", "name": "greet"},
		"argument": P{"name": "who", "value": ""},
		"_meta":    P{mcp.MetaClientCapabilities: P{"elicitation": P{}}},
	})
	r.fails(t, -32603)
}

// TestCancelledHandlerNotAnswered covers CAN-2 for prompts, resources and
// completions: a handler that gives up because its request was cancelled
// gets no response, whatever error it returns.
func TestCancelledHandlerNotAnswered(t *testing.T) {
	h := newHarness(t)
	gaveUp := errors.New("gave up")
	mustAddPrompt(t, h.srv, mcp.Prompt{Name: "p"}, func(ctx context.Context, req *server.PromptRequest) (*mcp.GetPromptResult, error) {
		<-ctx.Done()
		return nil, gaveUp
	})
	mustAddResource(t, h.srv, "mem://r", func(ctx context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		<-ctx.Done()
		return nil, gaveUp
	})
	h.srv.SetCompletionHandler(func(ctx context.Context, req *server.CompleteRequest) (*mcp.Completion, error) {
		<-ctx.Done()
		return nil, gaveUp
	})
	for _, tc := range []struct {
		method string
		params P
	}{
		{mcp.MethodPromptsGet, P{"name": "p"}},
		{mcp.MethodResourcesRead, P{"uri": "mem://r"}},
		{mcp.MethodComplete, P{"ref": P{"type": "ref/prompt", "name": "p"}, "argument": P{"name": "a", "value": ""}}},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		rec := newRecorder(t)
		rep := h.serveRaw(ctx, encodeRequest(t, 1, tc.method, tc.params), rec)
		rec.end()
		if rep.Body != nil {
			t.Errorf("%s cancelled: answered %s, want no response", tc.method, rep.Body)
		}
	}
}
