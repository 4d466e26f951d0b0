package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// The tools in this file follow the multi-round-trip request pattern: a
// first call answers input_required with requests for the client; the
// retry carries the answers (and the sealed state) and completes.

func elicitRequest(message, properties string, required ...string) mcp.InputRequest {
	req, _ := json.Marshal(map[string]any{
		"mode":    "form",
		"message": message,
		"requestedSchema": map[string]any{
			"type":       "object",
			"properties": jsontext.Value(properties),
			"required":   required,
		},
	}, json.Deterministic(true))
	return mcp.InputRequest{Method: mcp.MethodElicit, Params: req}
}

func samplingRequest(question string, maxTokens int) mcp.InputRequest {
	req, _ := json.Marshal(map[string]any{
		"messages":  []any{map[string]any{"role": "user", "content": map[string]any{"type": "text", "text": question}}},
		"maxTokens": maxTokens,
	}, json.Deterministic(true))
	return mcp.InputRequest{Method: mcp.MethodCreateMessage, Params: req}
}

func rootsRequest() mcp.InputRequest {
	return mcp.InputRequest{Method: mcp.MethodRootsList, Params: jsontext.Value(`{}`)}
}

func invalidResponse(key string) error {
	return jsonrpc.NewError(jsonrpc.CodeInvalidParams, "Invalid params: inputResponses."+key+" is not a valid response", nil)
}

// elicited returns the accepted content of the elicitation answer under
// key; ok is false when the client has not answered it yet.
func elicited(req *server.Request, key string) (content map[string]jsontext.Value, ok bool, err error) {
	raw, present := req.InputResponses[key]
	if !present {
		return nil, false, nil
	}
	var res mcp.ElicitResult
	if err := jsonrpc.UnmarshalParams(raw, &res); err != nil || raw[0] != '{' || res.Action == "" {
		return nil, false, invalidResponse(key)
	}
	if res.Action != "accept" {
		return nil, true, nil
	}
	return res.Content, true, nil
}

func field(content map[string]jsontext.Value, name string) string {
	var s string
	if json.Unmarshal(content[name], &s) != nil {
		return string(content[name])
	}
	return s
}

// sampled returns the text of a sampling answer under key.
func sampled(req *server.Request, key string) (string, bool, error) {
	raw, present := req.InputResponses[key]
	if !present {
		return "", false, nil
	}
	var res struct {
		Content struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
	}
	if err := jsonrpc.UnmarshalParams(raw, &res); err != nil || raw[0] != '{' {
		return "", false, invalidResponse(key)
	}
	return res.Content.Text, true, nil
}

// rooted returns the roots of a roots answer under key.
func rooted(req *server.Request, key string) ([]mcp.Root, bool, error) {
	raw, present := req.InputResponses[key]
	if !present {
		return nil, false, nil
	}
	var res mcp.ListRootsResult
	if err := jsonrpc.UnmarshalParams(raw, &res); err != nil || raw[0] != '{' {
		return nil, false, invalidResponse(key)
	}
	return res.Roots, true, nil
}

const nameProps = `{"name":{"type":"string","description":"Your name"}}`

func mrtrElicitation(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	content, ok, err := elicited(&req.Request, "user_name")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{
			"user_name": elicitRequest("What is your name?", nameProps, "name"),
		}}
	}
	if content == nil {
		return text("The user declined to give a name."), nil
	}
	return text("Hello, " + field(content, "name") + "!"), nil
}

func mrtrSampling(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	answer, ok, err := sampled(&req.Request, "capital_question")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{
			"capital_question": samplingRequest("What is the capital of France?", 100),
		}}
	}
	return text("The model answered: " + answer), nil
}

func mrtrRoots(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	roots, ok, err := rooted(&req.Request, "client_roots")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"client_roots": rootsRequest()}}
	}
	return text(fmt.Sprintf("Found %d root(s)", len(roots))), nil
}

// mrtrRequestState needs both the answer and its own sealed state back; a
// tampered state never reaches it (the server rejects it with -32602).
func mrtrRequestState(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	_, ok, err := elicited(&req.Request, "confirm")
	if err != nil {
		return nil, err
	}
	if !ok || string(req.State()) != "awaiting-confirmation" {
		return nil, &server.InputRequired{
			Requests: map[string]mcp.InputRequest{
				"confirm": elicitRequest("Please confirm", `{"ok":{"type":"boolean"}}`, "ok"),
			},
			State: []byte("awaiting-confirmation"),
		}
	}
	return text("state-ok: requestState validated"), nil
}

func mrtrMultiple(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	name, okName, err := elicited(&req.Request, "user_name")
	if err != nil {
		return nil, err
	}
	greeting, okGreet, err := sampled(&req.Request, "greeting")
	if err != nil {
		return nil, err
	}
	roots, okRoots, err := rooted(&req.Request, "client_roots")
	if err != nil {
		return nil, err
	}
	if !okName || !okGreet || !okRoots || string(req.State()) != "multiple" {
		return nil, &server.InputRequired{
			Requests: map[string]mcp.InputRequest{
				"user_name":    elicitRequest("What is your name?", nameProps, "name"),
				"greeting":     samplingRequest("Generate a greeting", 50),
				"client_roots": rootsRequest(),
			},
			State: []byte("multiple"),
		}
	}
	return text(fmt.Sprintf("%s, %s (%d root(s))", greeting, field(name, "name"), len(roots))), nil
}

func mrtrMultiRound(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	state := string(req.State())
	if name, found := strings.CutPrefix(state, "round2:"); found {
		content, ok, err := elicited(&req.Request, "step2")
		if err != nil {
			return nil, err
		}
		if ok {
			return text(name + "'s favorite color is " + field(content, "color")), nil
		}
	}
	if state == "round1" {
		content, ok, err := elicited(&req.Request, "step1")
		if err != nil {
			return nil, err
		}
		if ok {
			return nil, &server.InputRequired{
				Requests: map[string]mcp.InputRequest{
					"step2": elicitRequest("Step 2: What is your favorite color?", `{"color":{"type":"string"}}`, "color"),
				},
				State: []byte("round2:" + field(content, "name")),
			}
		}
	}
	return nil, &server.InputRequired{
		Requests: map[string]mcp.InputRequest{"step1": elicitRequest("Step 1: What is your name?", nameProps, "name")},
		State:    []byte("round1"),
	}
}

// mrtrCapabilities asks only for kinds of input the request declared.
func mrtrCapabilities(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	caps := req.Capabilities
	asks := map[string]mcp.InputRequest{}
	answered := 0
	if caps.Elicitation != nil {
		if _, ok, err := elicited(&req.Request, "user_input"); err != nil {
			return nil, err
		} else if ok {
			answered++
		}
		asks["user_input"] = elicitRequest("Elicitation request", nameProps, "name")
	}
	if caps.Sampling != nil {
		if _, ok, err := sampled(&req.Request, "sample_input"); err != nil {
			return nil, err
		} else if ok {
			answered++
		}
		asks["sample_input"] = samplingRequest("Sample request", 50)
	}
	if caps.Roots != nil {
		if _, ok, err := rooted(&req.Request, "roots_input"); err != nil {
			return nil, err
		} else if ok {
			answered++
		}
		asks["roots_input"] = rootsRequest()
	}
	if len(asks) == 0 {
		return nil, jsonrpc.NewError(mcp.CodeMissingRequiredCapability, "Missing required client capability",
			map[string]any{"requiredCapabilities": map[string]any{"elicitation": map[string]any{}}})
	}
	if answered < len(asks) {
		return nil, &server.InputRequired{Requests: asks, State: []byte("capabilities")}
	}
	return text(fmt.Sprintf("Received %d input(s)", answered)), nil
}

func mrtrPrompt(_ context.Context, req *server.PromptRequest) (*mcp.GetPromptResult, error) {
	content, ok, err := elicited(&req.Request, "user_context")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{
			"user_context": elicitRequest("What context should the prompt use?", `{"context":{"type":"string"}}`, "context"),
		}}
	}
	return &mcp.GetPromptResult{Messages: []mcp.PromptMessage{
		userMsg(mcp.TextContent("Prompt with context: " + field(content, "context"))),
	}}, nil
}
