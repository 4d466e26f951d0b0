package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/mcp"
	"tidings/server"
)

// mrtrClient answers every kind of input request and records what it was
// asked.
func mrtrClient(t testing.TB, f *fixture, opts ...HTTPOption) (*Client, *[]string) {
	t.Helper()
	var mu sync.Mutex
	asked := []string{}
	note := func(s string) {
		mu.Lock()
		asked = append(asked, s)
		mu.Unlock()
	}
	c := primed(t, f, append([]HTTPOption{
		WithElicitation(func(_ context.Context, p jsontext.Value) (*mcp.ElicitResult, error) {
			note("elicit " + string(p))
			return &mcp.ElicitResult{Action: "accept", Content: map[string]jsontext.Value{"ok": jsontext.Value("true")}}, nil
		}),
		WithSampling(func(_ context.Context, p jsontext.Value) (jsontext.Value, error) {
			note("sample")
			return jsontext.Value(`{"role":"assistant","content":{"type":"text","text":"sampled"},"model":"m"}`), nil
		}),
		WithRoots(func(context.Context) (*mcp.ListRootsResult, error) {
			note("roots")
			return &mcp.ListRootsResult{Roots: []mcp.Root{{URI: "file:///work", Name: "work"}}}, nil
		}),
	}, opts...)...)
	return c, &asked
}

// TestMRTRRoundTrips: a tool asks for input twice (elicitation, then
// roots and sampling together) before it answers. The client fulfils each
// request through its handlers and retries with the original arguments
// plus inputResponses, echoing the server's requestState exactly, under a
// new id each time.
func TestMRTRRoundTrips(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	must(t, f.srv.AddTool(mcp.Tool{Name: "book"}, func(_ context.Context, r *server.ToolRequest) (*mcp.CallToolResult, error) {
		switch string(r.State()) {
		case "":
			return nil, &server.InputRequired{State: []byte("step1"), Requests: map[string]mcp.InputRequest{
				"confirm": {Method: mcp.MethodElicit, Params: jsontext.Value(`{"mode":"form","message":"Book it?","requestedSchema":{"type":"object","properties":{"ok":{"type":"boolean"}}}}`)},
			}}
		case "step1":
			var e mcp.ElicitResult
			if err := json.Unmarshal(r.InputResponses["confirm"], &e); err != nil || e.Action != "accept" {
				return nil, fmt.Errorf("bad confirm answer %s", r.InputResponses["confirm"])
			}
			return nil, &server.InputRequired{State: []byte("step2"), Requests: map[string]mcp.InputRequest{
				"where": {Method: mcp.MethodRootsList, Params: jsontext.Value(`{}`)},
				"llm":   {Method: mcp.MethodCreateMessage, Params: jsontext.Value(`{"messages":[{"role":"user","content":{"type":"text","text":"hi"}}],"maxTokens":5}`)},
			}}
		case "step2":
			var roots mcp.ListRootsResult
			var msg struct {
				Content mcp.Content `json:"content"`
			}
			if json.Unmarshal(r.InputResponses["where"], &roots) != nil || json.Unmarshal(r.InputResponses["llm"], &msg) != nil {
				return nil, fmt.Errorf("bad answers %v", r.InputResponses)
			}
			return text(fmt.Sprintf("booked in %s after %s (args %s)", roots.Roots[0].URI, *msg.Content.Text, r.Arguments)), nil
		}
		return nil, fmt.Errorf("unexpected state %q", r.State())
	}))
	c, asked := mrtrClient(t, f)
	res, err := c.CallTool(context.Background(), "book", map[string]any{"seat": "12A"})
	must(t, err)
	if res.IsError || *res.Content[0].Text != `booked in file:///work after sampled (args {"seat":"12A"})` {
		t.Errorf("result = %+v", res.Content)
	}
	if got := *asked; len(got) != 3 || !strings.HasPrefix(got[0], "elicit ") || !slices.Contains(got, "roots") || !slices.Contains(got, "sample") {
		t.Errorf("handlers asked = %v", got)
	}

	calls := f.rec.requests(mcp.MethodToolsCall)
	if len(calls) != 3 {
		t.Fatalf("tools/call requests = %d, want 3", len(calls))
	}
	ids := map[string]bool{}
	for i, call := range calls {
		if ids[call.ID] {
			t.Errorf("round %d reused id %s", i, call.ID)
		}
		ids[call.ID] = true
		if string(call.Params["arguments"]) != `{"seat":"12A"}` || string(call.Params["name"]) != `"book"` {
			t.Errorf("round %d changed the original params: %s", i, call.Body)
		}
		if i == 0 {
			if _, ok := call.Params["inputResponses"]; ok {
				t.Errorf("first round carries inputResponses")
			}
			if _, ok := call.Params["requestState"]; ok {
				t.Errorf("first round carries requestState")
			}
			continue
		}
		// The state the server handed out with the previous answer comes
		// back unchanged.
		var prev struct {
			Result struct {
				ResultType   string                     `json:"resultType"`
				RequestState string                     `json:"requestState"`
				Inputs       map[string]json.RawMessage `json:"inputRequests"`
			} `json:"result"`
		}
		if err := json.Unmarshal(calls[i-1].Response, &prev); err != nil {
			t.Fatalf("round %d answer: %v (%s)", i-1, err, calls[i-1].Response)
		}
		if prev.Result.ResultType != mcp.ResultInputRequired || prev.Result.RequestState == "" {
			t.Fatalf("round %d answer = %s", i-1, calls[i-1].Response)
		}
		var echoed string
		if err := json.Unmarshal(call.Params["requestState"], &echoed); err != nil || echoed != prev.Result.RequestState {
			t.Errorf("round %d requestState = %s, want %q", i, call.Params["requestState"], prev.Result.RequestState)
		}
		var responses map[string]json.RawMessage
		must(t, json.Unmarshal(call.Params["inputResponses"], &responses))
		for key := range prev.Result.Inputs {
			if _, ok := responses[key]; !ok {
				t.Errorf("round %d lacks an answer for %q", i, key)
			}
		}
		if len(responses) != len(prev.Result.Inputs) {
			t.Errorf("round %d answers %d input requests, %d were asked", i, len(responses), len(prev.Result.Inputs))
		}
	}
}

// TestMRTRStateEchoExact: requestState is opaque: whatever string the
// server sends (escapes, non-ASCII, separators) comes back exactly, and a
// round without requestState is retried without one.
func TestMRTRStateEchoExact(t *testing.T) {
	const state = "a\"b\\c/d é\u2028\t<>&=+?{}[]"
	encoded, _ := json.Marshal(state)
	ts, rec := rawServer(t, func(n int, r rawRequest) (string, string) {
		switch r.Method {
		case mcp.MethodToolsList:
			return `{"tools":[{"name":"x","inputSchema":{"type":"object"}}],"resultType":"complete","ttlMs":60000,"cacheScope":"public"}`, ""
		}
		ask := `"inputRequests":{"r":{"method":"roots/list","params":{}}}`
		switch n {
		case 2: // first tools/call
			return `{"resultType":"input_required",` + ask + `,"requestState":` + string(encoded) + `}`, ""
		case 3: // second: input requests only, no state
			return `{"resultType":"input_required",` + ask + `}`, ""
		}
		return `{"content":[{"type":"text","text":"done"}],"resultType":"complete"}`, ""
	})
	c := rawClient(t, ts.URL, WithRoots(func(context.Context) (*mcp.ListRootsResult, error) { return &mcp.ListRootsResult{}, nil }))
	res, err := c.CallTool(context.Background(), "x", nil)
	must(t, err)
	if *res.Content[0].Text != "done" {
		t.Errorf("result = %+v", res)
	}
	calls := rec.requests(mcp.MethodToolsCall)
	if len(calls) != 3 {
		t.Fatalf("tools/call requests = %d, want 3", len(calls))
	}
	var got string
	if err := json.Unmarshal(calls[1].Params["requestState"], &got); err != nil || got != state {
		t.Errorf("echoed requestState = %s, want %s", calls[1].Params["requestState"], encoded)
	}
	if _, ok := calls[2].Params["requestState"]; ok {
		t.Errorf("a round whose answer had no requestState sent one: %s", calls[2].Params["requestState"])
	}
	if string(calls[2].Params["inputResponses"]) != `{"r":{"roots":[]}}` {
		t.Errorf("roots answer = %s, want an empty list", calls[2].Params["inputResponses"])
	}
}

// TestMRTRMaxRounds: a server that never stops asking is cut off after
// WithMaxRounds requests with ErrTooManyRounds.
func TestMRTRMaxRounds(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	must(t, f.srv.AddTool(mcp.Tool{Name: "greedy"}, func(_ context.Context, r *server.ToolRequest) (*mcp.CallToolResult, error) {
		return nil, &server.InputRequired{State: append(r.State(), 'x'), Requests: map[string]mcp.InputRequest{
			"again": {Method: mcp.MethodRootsList, Params: jsontext.Value(`{}`)},
		}}
	}))
	c, _ := mrtrClient(t, f, WithMaxRounds(3))
	_, err := c.CallTool(context.Background(), "greedy", nil)
	if !errors.Is(err, ErrTooManyRounds) {
		t.Fatalf("err = %v, want ErrTooManyRounds", err)
	}
	if n := f.rec.count(mcp.MethodToolsCall); n != 3 {
		t.Errorf("tools/call requests = %d, want 3", n)
	}
}

// TestMRTRWithoutHandler: a client without an elicitation handler does
// not declare the capability, so the server refuses to ask (-32021); a
// server that asks anyway gets no retry.
func TestMRTRWithoutHandler(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	must(t, f.srv.AddTool(mcp.Tool{Name: "ask"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{
			"q": {Method: mcp.MethodElicit, Params: jsontext.Value(`{"mode":"form","message":"?","requestedSchema":{"type":"object"}}`)},
		}}
	}))
	c := primed(t, f)
	_, err := c.CallTool(context.Background(), "ask", nil)
	var rpc *RPCError
	if !errors.As(err, &rpc) || rpc.Code != mcp.CodeMissingRequiredCapability {
		t.Errorf("err = %v, want -32021", err)
	}

	ts, rec := rawServer(t, func(_ int, r rawRequest) (string, string) {
		if r.Method == mcp.MethodToolsList {
			return `{"tools":[{"name":"x","inputSchema":{"type":"object"}}],"resultType":"complete","ttlMs":60000,"cacheScope":"public"}`, ""
		}
		return `{"resultType":"input_required","inputRequests":{"q":{"method":"elicitation/create","params":{}}},"requestState":"s"}`, ""
	})
	rc := rawClient(t, ts.URL)
	_, err = rc.CallTool(context.Background(), "x", nil)
	if err == nil || !strings.Contains(err.Error(), "no elicitation handler") {
		t.Errorf("err = %v, want a missing handler error", err)
	}
	if n := rec.count(mcp.MethodToolsCall); n != 1 {
		t.Errorf("tools/call requests = %d, want 1 (nothing to retry with)", n)
	}
}

// TestMRTRPromptAndRead: prompts and resource reads can ask for input
// too; a read answered after input is never cached (CACHE-9).
func TestMRTRPromptAndRead(t *testing.T) {
	f := newFixture(t, nil, fixtureOpts{})
	must(t, f.srv.AddPrompt(mcp.Prompt{Name: "p"}, func(_ context.Context, r *server.PromptRequest) (*mcp.GetPromptResult, error) {
		if r.InputResponses == nil {
			return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"r": {Method: mcp.MethodRootsList, Params: jsontext.Value(`{}`)}}}
		}
		return &mcp.GetPromptResult{Messages: []mcp.PromptMessage{{Role: "user", Content: mcp.TextContent("with roots")}}}, nil
	}))
	must(t, f.srv.AddResource(mcp.Resource{URI: "res://gated"}, func(_ context.Context, r *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		if r.InputResponses == nil {
			return nil, &server.InputRequired{State: []byte("s"), Requests: map[string]mcp.InputRequest{"r": {Method: mcp.MethodRootsList, Params: jsontext.Value(`{}`)}}}
		}
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(r.URI, "", "unlocked")}}, nil
	}, server.WithResourceCache(server.CachePolicy{TTL: time.Hour})))
	c, _ := mrtrClient(t, f)
	ctx := context.Background()
	pr, err := c.GetPrompt(ctx, "p", nil)
	must(t, err)
	if *pr.Messages[0].Content.Text != "with roots" {
		t.Errorf("prompt = %+v", pr)
	}
	for range 2 {
		rr, err := c.ReadResource(ctx, "res://gated")
		must(t, err)
		if contentText(t, rr) != "unlocked" {
			t.Errorf("read = %q", contentText(t, rr))
		}
	}
	if n := f.rec.count(mcp.MethodResourcesRead); n != 4 {
		t.Errorf("resources/read requests = %d, want 4 (two rounds each, never cached)", n)
	}
	if st := c.Freshness(mcp.MethodResourcesRead, "res://gated").State; st != Missing {
		t.Errorf("a read answered after input is cached (%s)", st)
	}
}
