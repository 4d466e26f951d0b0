package server_test

import (
	"context"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/mcp"
	"tidings/server"
)

func noopTool(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{}, nil
}

// TestToolNames checks AddTool against the specification's tool name
// rules: 1 to 128 characters from A-Z, a-z, 0-9, '_', '-' and '.'.
func TestToolNames(t *testing.T) {
	good := []string{
		"a", "search", "get_weather", "file-info", "v2.list", "A.b-C_9",
		"Search", // case matters: a second tool, not a clash with "search"
		strings.Repeat("x", 128),
	}
	bad := map[string]string{
		"":                       "empty",
		strings.Repeat("x", 129): "129 bytes",
		"has space":              `' '`,
		"café":                   `'é'`,
		"a/b":                    `'/'`,
		"a:b":                    `':'`,
		"tab\tname":              `'\t'`,
		"emoji😀":                 `'😀'`,
		"comma,name":             `','`,
		"at@host":                `'@'`,
	}
	srv := server.New(testInfo)
	for _, name := range good {
		if err := srv.AddTool(mcp.Tool{Name: name}, noopTool); err != nil {
			t.Errorf("AddTool(%q) = %v, want it accepted", name, err)
		}
		if err := server.CheckToolName(name); err != nil {
			t.Errorf("CheckToolName(%q) = %v", name, err)
		}
	}
	for name, want := range bad {
		err := srv.AddTool(mcp.Tool{Name: name}, noopTool)
		if err == nil {
			t.Errorf("AddTool(%q) accepted a name the specification does not allow", name)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("AddTool(%q) = %q, want it to mention %s", name, err, want)
		}
		if server.CheckToolName(name) == nil {
			t.Errorf("CheckToolName(%q) accepted it", name)
		}
	}
	// Refused tools never reach the list.
	tools := listTools(t, srv)
	if len(tools) != len(good) {
		t.Errorf("tools/list has %d tools, want %d", len(tools), len(good))
	}
}

// TestInputSchemaRoot checks that a tool's input schema must be an object
// schema whose root says "type": "object", and that an output schema must
// at least be a schema object.
func TestInputSchemaRoot(t *testing.T) {
	srv := server.New(testInfo)
	refused := map[string]string{
		`{}`:                            `no "type"`,
		`true`:                          "a boolean",
		`false`:                         "a boolean",
		`null`:                          "null",
		`[]`:                            "an array",
		`"object"`:                      "a string",
		`{"type":"string"}`:             `"type": "string"`,
		`{"type":["object","null"]}`:    `"type": ["object","null"]`,
		`{"type":"Object"}`:             `"type": "Object"`,
		`{"properties":{}}`:             `no "type"`,
		`{"type":"object","type":"x"}`:  "duplicate",
		`{"type":"object","$schema":1}`: `"$schema": 1`,
	}
	for doc, want := range refused {
		err := srv.AddTool(mcp.Tool{Name: "t", InputSchema: jsontext.Value(doc)}, noopTool)
		if err == nil {
			t.Errorf("input schema %s was accepted", doc)
			continue
		}
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), `tool "t"`) {
			t.Errorf("input schema %s: error %q, want it to name the tool and mention %s", doc, err, want)
		}
	}
	accepted := []string{
		`{"type":"object"}`,
		`{"type":"object","properties":{"a":{"type":"string"}},"required":["a"],"additionalProperties":false}`,
		`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","oneOf":[{"required":["a"]},{"required":["b"]}]}`,
	}
	for _, doc := range accepted {
		if err := srv.AddTool(mcp.Tool{Name: "t", InputSchema: jsontext.Value(doc)}, noopTool); err != nil {
			t.Errorf("input schema %s: %v", doc, err)
		}
	}
	for _, doc := range []string{`true`, `null`, `"x"`, `{"$schema":false}`} {
		if err := srv.AddTool(mcp.Tool{Name: "t", OutputSchema: jsontext.Value(doc)}, noopTool); err == nil {
			t.Errorf("output schema %s was accepted", doc)
		}
	}
	if err := srv.AddTool(mcp.Tool{Name: "t", OutputSchema: jsontext.Value(`{"type":"object"}`)}, noopTool); err != nil {
		t.Errorf("object output schema: %v", err)
	}
}
