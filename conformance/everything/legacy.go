package main

import (
	"context"
	"fmt"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/mcp"
	"tidings/server"
)

// Tools the 2025-11-25 scenarios call. They ask for input the same way as
// the multi round-trip tools: on a 2025-11-25 session the server turns the
// request into a server-to-client request and runs the handler again with
// the answer.

func loggingSteps(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	for i, msg := range []string{"Tool execution started", "Tool processing data", "Tool execution completed"} {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		_ = req.Log("info", "everything", msg)
	}
	return text("Tool with logging executed successfully"), nil
}

func samplingTool(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	var args struct {
		Prompt string `json:"prompt"`
	}
	_ = json.Unmarshal(req.Arguments, &args)
	answer, ok, err := sampled(&req.Request, "llm")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"llm": samplingRequest(args.Prompt, 100)}}
	}
	return text("LLM response: " + answer), nil
}

// elicitWith asks with an arbitrary form and reports what came back.
func elicitWith(message, properties string, required []string, report string) server.ToolHandler {
	return func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
		ask := message
		if ask == "" {
			var args struct {
				Message string `json:"message"`
			}
			_ = json.Unmarshal(req.Arguments, &args)
			ask = args.Message
		}
		raw, ok := req.InputResponses["form"]
		if !ok {
			return nil, &server.InputRequired{Requests: map[string]mcp.InputRequest{"form": elicitRequest(ask, properties, required...)}}
		}
		var res mcp.ElicitResult
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, invalidResponse("form")
		}
		content, _ := json.Marshal(res.Content, json.Deterministic(true))
		return text(fmt.Sprintf(report, res.Action, jsontext.Value(content))), nil
	}
}

const (
	userProps = `{"username":{"type":"string","description":"User's response"},` +
		`"email":{"type":"string","description":"User's email address"}}`
	defaultsProps = `{"name":{"type":"string","description":"User name","default":"John Doe"},` +
		`"age":{"type":"integer","description":"User age","default":30},` +
		`"score":{"type":"number","description":"User score","default":95.5},` +
		`"status":{"type":"string","description":"User status","enum":["active","inactive","pending"],"default":"active"},` +
		`"verified":{"type":"boolean","description":"Verification status","default":true}}`
	enumProps = `{"untitledSingle":{"type":"string","description":"Choose an option","enum":["option1","option2","option3"]},` +
		`"titledSingle":{"type":"string","description":"Choose a titled option","oneOf":[{"const":"value1","title":"First Option"},{"const":"value2","title":"Second Option"},{"const":"value3","title":"Third Option"}]},` +
		`"legacyEnum":{"type":"string","description":"Choose a legacy option","enum":["opt1","opt2","opt3"],"enumNames":["Option One","Option Two","Option Three"]},` +
		`"untitledMulti":{"type":"array","description":"Choose multiple options","minItems":1,"maxItems":3,"items":{"type":"string","enum":["option1","option2","option3"]}},` +
		`"titledMulti":{"type":"array","description":"Choose multiple titled options","minItems":1,"maxItems":3,"items":{"anyOf":[{"const":"value1","title":"First Choice"},{"const":"value2","title":"Second Choice"},{"const":"value3","title":"Third Choice"}]}}}`
)
