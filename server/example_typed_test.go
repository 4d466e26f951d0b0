package server_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

type greetArgs struct {
	Name     string `json:"name" jsonschema:"Who to greet."`
	Greeting string `json:"greeting,omitempty" jsonschema:"What to say (default Hello)."`
}

type greeting struct {
	Message string `json:"message"`
}

func hello(_ context.Context, _ *server.ToolRequest, in greetArgs) (greeting, error) {
	if in.Greeting == "" {
		in.Greeting = "Hello"
	}
	return greeting{Message: in.Greeting + ", " + in.Name + "!"}, nil
}

// A typed tool: its input and output schemas come from greetArgs and
// greeting, the arguments arrive decoded, and the result is returned as
// structuredContent with the same JSON in a text block. The client here
// is plain HTTP on a loopback listener.
func ExampleAddTypedTool() {
	srv := server.New(mcp.Implementation{Name: "example", Version: "1.0.0"})
	if err := server.AddTypedTool(srv, mcp.Tool{Name: "hello", Description: "Greets someone."}, hello); err != nil {
		panic(err)
	}
	ts := httptest.NewServer(streamhttp.New(srv))
	defer ts.Close()

	// post sends one 2026-07-28 request and returns the response body.
	post := func(method, name, params string) string {
		body := `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":{"_meta":{` +
			`"io.modelcontextprotocol/protocolVersion":"2026-07-28",` +
			`"io.modelcontextprotocol/clientCapabilities":{}}` + params + `}}`
		req, err := http.NewRequest(http.MethodPost, ts.URL, strings.NewReader(body))
		if err != nil {
			panic(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", method)
		if name != "" {
			req.Header.Set("Mcp-Name", name)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			panic(err)
		}
		return string(b)
	}

	// The tool as clients see it: name is required, greeting is not
	// (omitempty), and no other members are allowed.
	fmt.Println(post("tools/list", "", ""))
	// The result is the greeting, structured and as text.
	fmt.Println(post("tools/call", "hello", `,"name":"hello","arguments":{"name":"Ada"}`))
	// A misspelt argument is refused before the handler runs, as a tool
	// error the model can read and correct.
	fmt.Println(post("tools/call", "hello", `,"name":"hello","arguments":{"name":"Ada","greting":"Hi"}`))
	// Output:
	// {"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"hello","description":"Greets someone.","inputSchema":{"type":"object","properties":{"name":{"type":"string","description":"Who to greet."},"greeting":{"type":"string","description":"What to say (default Hello)."}},"required":["name"],"additionalProperties":false},"outputSchema":{"type":"object","properties":{"message":{"type":"string"}},"required":["message"],"additionalProperties":false}}],"resultType":"complete","ttlMs":10000,"cacheScope":"public","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"example","version":"1.0.0"}}}}
	// {"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"{\"message\":\"Hello, Ada!\"}"}],"structuredContent":{"message":"Hello, Ada!"},"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"example","version":"1.0.0"}}}}
	// {"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"Invalid arguments for tool \"hello\": jsonschema validation failed with 'urn:tidings:tool:hello:input#'\n- at '': additional properties 'greting' not allowed"}],"isError":true,"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"example","version":"1.0.0"}}}}
}
