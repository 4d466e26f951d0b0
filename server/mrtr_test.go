package server_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/engine"
	"tidings/internal/testrig/schematest"
	"tidings/mcp"
	"tidings/server"
)

var elicitName = mcp.InputRequest{
	Method: mcp.MethodElicit,
	Params: jsontext.Value(`{"mode":"form","message":"Your name?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}`),
}

// askName is a handler step shared by a tool and a resource: without an
// answer it asks for one and stores the step in its state; with one, it
// checks the state and greets.
func askName(req *server.Request, stateSeen *[]byte) (string, error) {
	ans, ok := req.InputResponses["name"]
	if !ok {
		return "", &server.InputRequired{Requests: map[string]mcp.InputRequest{"name": elicitName}, State: []byte("step-1:secret-internal")}
	}
	*stateSeen = req.State()
	var er mcp.ElicitResult
	if err := json.Unmarshal(ans, &er); err != nil {
		return "", err
	}
	var c struct{ Name string }
	_ = json.Unmarshal(er.Content["name"], &c.Name)
	return "hello " + c.Name, nil
}

func mrtrServer(t testing.TB, opts ...server.Option) (*harness, *[]byte) {
	h := newHarness(t, opts...)
	var mu sync.Mutex
	var seen []byte
	greet := func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		mu.Lock()
		defer mu.Unlock()
		s, err := askName(&req.Request, &seen)
		if err != nil {
			return nil, err
		}
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(s)}}, nil
	}
	mustAddTool(t, h.srv, textTool("greet"), greet)
	mustAddTool(t, h.srv, textTool("greet2"), greet)
	mustAddTool(t, h.srv, textTool("sample"), func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{
			"s": {Method: mcp.MethodCreateMessage, Params: jsontext.Value(`{"messages":[],"maxTokens":10}`)},
			"r": {Method: mcp.MethodRootsList},
		}}
	})
	mustAddResource(t, h.srv, "mem://profile", func(ctx context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		mu.Lock()
		defer mu.Unlock()
		s, err := askName(&req.Request, &seen)
		if err != nil {
			return nil, err
		}
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "", s)}}, nil
	})
	intro := func(ctx context.Context, req *server.PromptRequest) (*mcp.GetPromptResult, error) {
		mu.Lock()
		defer mu.Unlock()
		s, err := askName(&req.Request, &seen)
		if err != nil {
			return nil, err
		}
		return &mcp.GetPromptResult{Messages: []mcp.PromptMessage{{Role: "user", Content: mcp.TextContent(s)}}}, nil
	}
	mustAddPrompt(t, h.srv, mcp.Prompt{Name: "intro"}, intro)
	// A prompt with a tool's name, to show state is bound to the method.
	mustAddPrompt(t, h.srv, mcp.Prompt{Name: "greet"}, intro)
	return h, &seen
}

var withElicitation = P{mcp.MetaClientCapabilities: P{"elicitation": P{}}}

var nameAnswer = P{"name": P{"action": "accept", "content": P{"name": "Ada"}}}

// inputRequired asserts an input_required result (ENV-5, MRTR-1), checks
// it against InputRequiredResult, and returns its requestState.
func inputRequired(t testing.TB, r *response) string {
	t.Helper()
	if r.Error != nil {
		t.Fatalf("error %d %s, want input_required", r.Error.Code, r.Error.Message)
	}
	if r.Result["resultType"] != mcp.ResultInputRequired {
		t.Fatalf("resultType = %v, want input_required: %s", r.Result["resultType"], r.raw)
	}
	schematest.ValidateResult(t, "InputRequiredResult", r.raw)
	noCache(t, "input_required result", r.Result)
	ir, _ := r.Result["inputRequests"].(map[string]any)
	if req, _ := ir["name"].(map[string]any); req["method"] != mcp.MethodElicit {
		t.Errorf("inputRequests = %v", r.Result["inputRequests"])
	}
	state, _ := r.Result["requestState"].(string)
	if state == "" {
		t.Fatalf("no requestState: %s", r.raw)
	}
	raw, err := base64.RawURLEncoding.DecodeString(state)
	if err != nil {
		t.Fatalf("requestState is not base64url: %v", err)
	}
	if bytes.Contains(raw, []byte("secret-internal")) || strings.Contains(string(r.raw), "secret-internal") {
		t.Errorf("requestState exposes the handler's state in clear: %q", raw)
	}
	return state
}

// TestMRTRRoundTrip covers MRTR-1/4/5 for tools/call, prompts/get and
// resources/read: the interim result, then a retry with inputResponses and
// the echoed state that completes, with the handler seeing its own state.
func TestMRTRRoundTrip(t *testing.T) {
	h, seen := mrtrServer(t)
	for _, c := range []struct {
		method string
		params P
	}{
		{mcp.MethodToolsCall, P{"name": "greet"}},
		{mcp.MethodPromptsGet, P{"name": "intro"}},
		{mcp.MethodResourcesRead, P{"uri": "mem://profile"}},
	} {
		first := P{"_meta": withElicitation}
		for k, v := range c.params {
			first[k] = v
		}
		r, _ := h.call("first", c.method, first)
		state := inputRequired(t, r)

		retry := P{"inputResponses": nameAnswer, "requestState": state}
		for k, v := range first {
			retry[k] = v
		}
		*seen = nil
		r, _ = h.call("retry", c.method, retry)
		res := r.ok(t)
		if string(*seen) != "step-1:secret-internal" {
			t.Errorf("%s: handler saw state %q", c.method, *seen)
		}
		if !strings.Contains(string(r.raw), "hello Ada") {
			t.Errorf("%s: final result %s", c.method, r.raw)
		}
		if c.method == mcp.MethodResourcesRead {
			checkCache(t, "final read after MRTR", res, 0, mcp.ScopePublic)
		}
	}
}

// TestMRTRStateIntegrity covers MRTR-4: tampered, foreign and replayed
// state is -32602, as is state bound to another tool, method or principal,
// and expired state.
func TestMRTRStateIntegrity(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var clockMu sync.Mutex
	clock := func() time.Time {
		clockMu.Lock()
		defer clockMu.Unlock()
		return now
	}
	h, _ := mrtrServer(t, server.WithClock(clock), server.WithRequestStateTTL(time.Minute))
	r, _ := h.call(1, mcp.MethodToolsCall, P{"name": "greet", "_meta": withElicitation})
	state := inputRequired(t, r)

	b := []byte(state)
	i := len(b) / 2
	if b[i] == 'A' {
		b[i] = 'B'
	} else {
		b[i] = 'A'
	}
	tampered := string(b)

	retry := func(hh *harness, method string, params P, st string) *response {
		p := P{"_meta": withElicitation, "inputResponses": nameAnswer, "requestState": st}
		for k, v := range params {
			p[k] = v
		}
		r, _ := hh.call("retry", method, p)
		return r
	}
	greet := P{"name": "greet"}
	retry(h, mcp.MethodToolsCall, greet, tampered).fails(t, -32602)
	retry(h, mcp.MethodToolsCall, greet, "").fails(t, -32602)
	retry(h, mcp.MethodToolsCall, greet, "not-a-state").fails(t, -32602)
	// Bound to the tool name: the same handler under another name refuses it.
	retry(h, mcp.MethodToolsCall, P{"name": "greet2"}, state).fails(t, -32602)
	// Bound to the arguments: the same tool with other arguments refuses
	// it.
	retry(h, mcp.MethodToolsCall, P{"name": "greet", "arguments": P{"as": "admin"}}, state).fails(t, -32602)
	// ...while the same arguments, encoded otherwise, are the same call.
	r, _ = h.call(2, mcp.MethodToolsCall, P{"name": "greet", "arguments": P{"a": 1, "b": "x"}, "_meta": withElicitation})
	argState := inputRequired(t, r)
	retry(h, mcp.MethodToolsCall, P{"name": "greet", "arguments": jsontext.Value(`{ "b" : "x", "a" : 1.0e0 }`)}, argState).ok(t)
	retry(h, mcp.MethodToolsCall, P{"name": "greet", "arguments": P{"a": 2, "b": "x"}}, argState).fails(t, -32602)
	// Bound to the method: prompt "greet" exists and takes state too.
	retry(h, mcp.MethodPromptsGet, P{"name": "greet"}, state).fails(t, -32602)
	r, _ = h.call("p", mcp.MethodPromptsGet, P{"name": "greet", "_meta": withElicitation})
	promptState := inputRequired(t, r)
	retry(h, mcp.MethodPromptsGet, P{"name": "greet"}, promptState).ok(t)
	// Bound to the principal.
	bob := &harness{t: t, srv: h.srv, principal: "bob"}
	retry(bob, mcp.MethodToolsCall, greet, state).fails(t, -32602)
	// A server with another secret does not accept it.
	other, _ := mrtrServer(t)
	retry(other, mcp.MethodToolsCall, greet, state).fails(t, -32602)
	// Still good here before expiry...
	retry(h, mcp.MethodToolsCall, greet, state).ok(t)
	// ...and refused after.
	clockMu.Lock()
	now = now.Add(2 * time.Minute)
	clockMu.Unlock()
	retry(h, mcp.MethodToolsCall, greet, state).fails(t, -32602)
}

// TestMRTRMissingCapability covers MRTR-3 and CAP-1: asking for a kind of
// input the request did not declare is -32021 with requiredCapabilities.
func TestMRTRMissingCapability(t *testing.T) {
	h, _ := mrtrServer(t)
	r, _ := h.call(1, mcp.MethodToolsCall, P{"name": "greet"})
	r.fails(t, -32021)
	if r.reply.Outcome != engine.Refused {
		t.Errorf("outcome %d, want Refused (HTTP 400)", r.reply.Outcome)
	}
	rc, _ := r.data(t)["requiredCapabilities"].(map[string]any)
	if _, ok := rc["elicitation"]; !ok {
		t.Errorf("requiredCapabilities = %v, want elicitation", rc)
	}
	// Capabilities from an earlier request count for nothing (STL-1).
	h.call(2, mcp.MethodToolsCall, P{"name": "greet", "_meta": withElicitation})
	r, _ = h.call(3, mcp.MethodToolsCall, P{"name": "greet"})
	r.fails(t, -32021)

	r, _ = h.call(4, mcp.MethodToolsCall, P{"name": "sample", "_meta": withElicitation})
	r.fails(t, -32021)
	rc, _ = r.data(t)["requiredCapabilities"].(map[string]any)
	for _, k := range []string{"sampling", "roots"} {
		if _, ok := rc[k]; !ok {
			t.Errorf("requiredCapabilities = %v, want %s", rc, k)
		}
	}
	if _, ok := rc["elicitation"]; ok {
		t.Errorf("requiredCapabilities lists elicitation, which was declared: %v", rc)
	}
	r, _ = h.call(5, mcp.MethodToolsCall, P{"name": "sample", "_meta": P{mcp.MetaClientCapabilities: P{"sampling": P{}, "roots": P{}}}})
	if r.Result["resultType"] != mcp.ResultInputRequired {
		t.Fatalf("with sampling and roots declared: %s", r.raw)
	}
	schematest.ValidateResult(t, "InputRequiredResult", r.raw)
	noCache(t, "input_required", r.Result)
}
