package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/hub"
	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// Fixed payloads the suite checks for.
const (
	pngBase64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
	wavBase64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="

	jsonSchema202012 = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
		`"$defs":{"address":{"$anchor":"addressDef","type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}},` +
		`"properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"},` +
		`"contactMethod":{"type":"string","enum":["phone","email"]},"phone":{"type":"string"},"email":{"type":"string"}},` +
		`"allOf":[{"anyOf":[{"required":["phone"]},{"required":["email"]}]}],` +
		`"if":{"properties":{"contactMethod":{"const":"phone"}},"required":["contactMethod"]},` +
		`"then":{"required":["phone"]},"else":{"required":["email"]},` +
		`"additionalProperties":false}`
)

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(s)}}
}

func fixed(res *mcp.CallToolResult) server.ToolHandler {
	return func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) { return res, nil }
}

// newServer builds the target's server; extra options (from the flags)
// come after its own.
func newServer(log *slog.Logger, extra ...server.Option) (*server.Server, error) {
	opts := append([]server.Option{
		server.WithLogger(log),
		server.WithInstructions("Conformance target for the official MCP suite."),
		server.WithCachePolicy(server.ReadResource, server.CachePolicy{TTL: 5 * time.Minute, Scope: mcp.ScopePrivate}),
	}, extra...)
	srv := server.New(mcp.Implementation{Name: "tidings-conformance-everything", Version: "0.1.0"}, opts...)
	add := func(name, desc, schema string, h server.ToolHandler) error {
		if schema == "" {
			schema = `{"type":"object"}`
		}
		return srv.AddTool(mcp.Tool{Name: name, Description: desc, InputSchema: jsontext.Value(schema)}, h)
	}
	tools := []struct {
		name, desc, schema string
		h                  server.ToolHandler
	}{
		{"test_simple_text", "Returns a simple text response.", "", fixed(text("This is a simple text response for testing."))},
		{"test_image_content", "Returns an image.", "", fixed(&mcp.CallToolResult{Content: []mcp.Content{mcp.ImageContent(pngBase64, "image/png")}})},
		{"test_audio_content", "Returns an audio clip.", "", fixed(&mcp.CallToolResult{Content: []mcp.Content{mcp.AudioContent(wavBase64, "audio/wav")}})},
		{"test_embedded_resource", "Returns an embedded resource.", "", fixed(&mcp.CallToolResult{Content: []mcp.Content{
			mcp.EmbeddedResource(mcp.TextContents("test://embedded-resource", "text/plain", "This is an embedded resource content.")),
		}})},
		{"test_multiple_content_types", "Returns text, an image and a resource.", "", fixed(&mcp.CallToolResult{Content: []mcp.Content{
			mcp.TextContent("Multiple content types test:"),
			mcp.ImageContent(pngBase64, "image/png"),
			mcp.EmbeddedResource(mcp.TextContents("test://mixed-content-resource", "application/json", `{"test":"data","value":123}`)),
		}})},
		{"test_error_handling", "Always fails, as a tool execution error.", "", fixed(&mcp.CallToolResult{IsError: true,
			Content: []mcp.Content{mcp.TextContent("This tool intentionally returns an error for testing")}})},
		{"test_tool_with_progress", "Reports progress three times before answering.", "", progressTool},
		{"test_missing_capability", "Needs the client's sampling capability.", "", missingCapabilityTool},
		{"test_streaming_elicitation", "Answers on a stream without sending requests.", "", streamingTool},
		{"test_logging_tool", "Logs at several levels, only when asked to.", "", loggingTool},
		{"test_trigger_tool_change", "Announces a tools list change to listeners.", "", triggerTool(srv, hub.ToolsList)},
		{"test_trigger_prompt_change", "Announces a prompts list change to listeners.", "", triggerTool(srv, hub.PromptsList)},
		{"test_custom_header", "Echoes a value mirrored into the Mcp-Param-Region header.",
			`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`, echoRegion},
		{"json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", jsonSchema202012, fixed(text("ok"))},
		{"test_tool_with_logging", "Logs three messages while it runs.", "", loggingSteps},
		{"test_sampling", "Asks the client's model to answer a prompt.",
			`{"type":"object","properties":{"prompt":{"type":"string","description":"The prompt to send"}},"required":["prompt"]}`, samplingTool},
		{"test_elicitation", "Asks the user for information.",
			`{"type":"object","properties":{"message":{"type":"string","description":"What to ask"}},"required":["message"]}`,
			elicitWith("", userProps, []string{"username", "email"}, "User response: action=%s, content=%s")},
		{"test_elicitation_sep1034_defaults", "Asks with a form whose fields have defaults.", "",
			elicitWith("Please review and update the form fields with defaults", defaultsProps, []string{}, "Elicitation completed: action=%s, content=%s")},
		{"test_elicitation_sep1330_enums", "Asks with every kind of enum field.", "",
			elicitWith("Please select options from the enum fields", enumProps, []string{}, "Elicitation completed: action=%s, content=%s")},
		{"test_input_required_result_elicitation", "Asks the user for their name (MRTR).", "", mrtrElicitation},
		{"test_input_required_result_sampling", "Asks the client's model a question (MRTR).", "", mrtrSampling},
		{"test_input_required_result_list_roots", "Asks for the client's roots (MRTR).", "", mrtrRoots},
		{"test_input_required_result_request_state", "Round-trips request state (MRTR).", "", mrtrRequestState},
		{"test_input_required_result_multiple_inputs", "Asks for three inputs at once (MRTR).", "", mrtrMultiple},
		{"test_input_required_result_multi_round", "Asks in two rounds (MRTR).", "", mrtrMultiRound},
		{"test_input_required_result_tampered_state", "Rejects tampered request state (MRTR).", "", mrtrRequestState},
		{"test_input_required_result_capabilities", "Asks only for what the client declared (MRTR).", "", mrtrCapabilities},
	}
	for _, t := range tools {
		if err := add(t.name, t.desc, t.schema, t.h); err != nil {
			return nil, err
		}
	}
	if err := addTaskTools(srv); err != nil {
		return nil, err
	}
	if err := addResources(srv); err != nil {
		return nil, err
	}
	if err := addPrompts(srv); err != nil {
		return nil, err
	}
	srv.SetCompletionHandler(func(_ context.Context, req *server.CompleteRequest) (*mcp.Completion, error) {
		var vals []string
		for _, v := range []string{"test", "testing", "tested", "value1", "value2"} {
			if strings.HasPrefix(v, req.Argument.Value) {
				vals = append(vals, v)
			}
		}
		total := len(vals)
		return &mcp.Completion{Values: vals, Total: &total}, nil
	})
	return srv, nil
}

func progressTool(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	total := 100.0
	for i, p := range []float64{0, 50, 100} {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		if err := req.Progress(p, &total, fmt.Sprintf("step %d of 3", i+1)); err != nil {
			return nil, err
		}
	}
	return text("Progress complete"), nil
}

func missingCapabilityTool(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	if req.Capabilities.Sampling == nil {
		return nil, jsonrpc.NewError(mcp.CodeMissingRequiredCapability, "Missing required client capability: sampling",
			map[string]any{"requiredCapabilities": map[string]any{"sampling": map[string]any{}}})
	}
	return text("Success"), nil
}

func streamingTool(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	_ = req.Log(mcp.LogLevel("info"), "everything", "streaming tool called")
	return text("Streaming tool finished without server-to-client requests"), nil
}

func loggingTool(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	for _, l := range []mcp.LogLevel{"debug", "info", "warning", "error"} {
		_ = req.Log(l, "everything", "log at "+string(l))
	}
	return text("Logging tool finished"), nil
}

func triggerTool(srv *server.Server, kind hub.Kind) server.ToolHandler {
	return func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		engine.Of(srv).Hub().ListChanged(kind)
		return text("Mutation triggered"), nil
	}
}

func echoRegion(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	var args struct {
		Region string `json:"region"`
	}
	_ = json.Unmarshal(req.Arguments, &args)
	return text("region: " + args.Region), nil
}

func addResources(srv *server.Server) error {
	static := func(uri, name, mime string, c mcp.ResourceContents) error {
		return srv.AddResource(mcp.Resource{URI: uri, Name: name, Description: name, MimeType: mime},
			func(context.Context, *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
				return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{c}}, nil
			})
	}
	if err := static("test://static-text", "Static text resource", "text/plain",
		mcp.TextContents("test://static-text", "text/plain", "This is the content of the static text resource.")); err != nil {
		return err
	}
	if err := static("test://static-binary", "Static binary resource", "image/png",
		mcp.BlobContents("test://static-binary", "image/png", pngBase64)); err != nil {
		return err
	}
	if err := static("test://watched-resource", "Watched resource", "text/plain",
		mcp.TextContents("test://watched-resource", "text/plain", "Watched resource content")); err != nil {
		return err
	}
	return srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "test://template/{id}/data", Name: "Template resource",
		Description: "Data for an id", MimeType: "application/json"},
		func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			id := req.Vars["id"]
			body, _ := json.Marshal(map[string]any{"id": id, "templateTest": true, "data": "Data for ID: " + id}, json.Deterministic(true))
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "application/json", string(body))}}, nil
		})
}

func userMsg(c mcp.Content) mcp.PromptMessage { return mcp.PromptMessage{Role: "user", Content: c} }

func addPrompts(srv *server.Server) error {
	prompts := []struct {
		p mcp.Prompt
		h server.PromptHandler
	}{
		{mcp.Prompt{Name: "test_simple_prompt", Description: "A simple prompt without arguments"},
			func(context.Context, *server.PromptRequest) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{Messages: []mcp.PromptMessage{userMsg(mcp.TextContent("This is a simple prompt for testing."))}}, nil
			}},
		{mcp.Prompt{Name: "test_prompt_with_arguments", Description: "A prompt with two required arguments",
			Arguments: []mcp.PromptArgument{{Name: "arg1", Description: "First argument", Required: true}, {Name: "arg2", Description: "Second argument", Required: true}}},
			func(_ context.Context, req *server.PromptRequest) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{Messages: []mcp.PromptMessage{userMsg(mcp.TextContent(
					fmt.Sprintf("Prompt with arguments: arg1='%s', arg2='%s'", req.Arguments["arg1"], req.Arguments["arg2"])))}}, nil
			}},
		{mcp.Prompt{Name: "test_prompt_with_embedded_resource", Description: "A prompt that embeds a resource",
			Arguments: []mcp.PromptArgument{{Name: "resourceUri", Description: "URI of the resource to embed", Required: true}}},
			func(_ context.Context, req *server.PromptRequest) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{Messages: []mcp.PromptMessage{
					userMsg(mcp.EmbeddedResource(mcp.TextContents(req.Arguments["resourceUri"], "text/plain", "Embedded resource content for testing."))),
					userMsg(mcp.TextContent("Please process the embedded resource above.")),
				}}, nil
			}},
		{mcp.Prompt{Name: "test_prompt_with_image", Description: "A prompt that includes an image"},
			func(context.Context, *server.PromptRequest) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{Messages: []mcp.PromptMessage{
					userMsg(mcp.ImageContent(pngBase64, "image/png")),
					userMsg(mcp.TextContent("Please analyze the image above.")),
				}}, nil
			}},
		{mcp.Prompt{Name: "test_input_required_result_prompt", Description: "A prompt that asks the user for context first (MRTR)"},
			mrtrPrompt},
	}
	for _, p := range prompts {
		if err := srv.AddPrompt(p.p, p.h); err != nil {
			return err
		}
	}
	return nil
}
