// Command client is the client-side conformance target: it drives the
// tidings client against the mock servers of the official MCP conformance
// suite. The suite runs it as
//
//	client <serverURL>
//
// with the server URL as the last argument, the scenario name in
// MCP_CONFORMANCE_SCENARIO and, for some scenarios, a JSON context in
// MCP_CONFORMANCE_CONTEXT. Each scenario performs the requests the suite
// expects to observe; an authorization scenario (auth/*) connects through
// an OAuth flow (auth.go); a scenario it does not know gets a minimal
// discover and tools/list. It is a test fixture, kept out of the tidings
// binary.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/client"
	"tidings/mcp"
)

// deadline bounds one run; the suite gives a client 30 seconds.
const deadline = 25 * time.Second

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: client <serverURL>  (scenario in MCP_CONFORMANCE_SCENARIO)")
		os.Exit(2)
	}
	url := os.Args[len(os.Args)-1]
	scenario := os.Getenv("MCP_CONFORMANCE_SCENARIO")
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()

	if err := run(ctx, log, scenario, url, os.Getenv("MCP_CONFORMANCE_CONTEXT")); err != nil {
		log.Error("scenario failed", "scenario", scenario, "err", err)
		cancel()
		stop()
		os.Exit(1)
	}
	log.Info("scenario done", "scenario", scenario)
}

// scenarioFunc performs one scenario's requests. raw is the scenario's
// JSON context, or empty.
type scenarioFunc func(ctx context.Context, log *slog.Logger, url string, raw []byte) error

// scenarios maps the suite's scenario names to what this client does for
// them.
func scenarios() map[string]scenarioFunc {
	return map[string]scenarioFunc{
		"tools_call":                       toolsCall,
		"request-metadata":                 requestMetadata,
		"sep-2322-client-request-state":    requestState,
		"http-standard-headers":            standardHeaders,
		"http-custom-headers":              customHeaders,
		"http-invalid-tool-headers":        invalidToolHeaders,
		"json-schema-ref-no-deref":         listOnly,
		"json-schema-2020-12-preservation": schemaPreservation,
	}
}

func run(ctx context.Context, log *slog.Logger, scenario, url, rawCtx string) error {
	fn, ok := scenarios()[scenario]
	if !ok && strings.HasPrefix(scenario, "auth/") {
		fn, ok = authScenario(scenario), true
	}
	if !ok {
		return minimal(ctx, log, url)
	}
	return fn(ctx, log, url, []byte(rawCtx))
}

// newClient returns a client that identifies itself and logs to log.
func newClient(log *slog.Logger, url string, opts ...client.HTTPOption) *client.Client {
	base := []client.HTTPOption{
		client.WithClientInfo(mcp.Implementation{Name: "tidings-conformance-client", Version: "0.1.0"}),
		client.WithLogger(log),
		client.WithTimeout(10 * time.Second),
	}
	return client.NewHTTP(url, append(base, opts...)...)
}

// minimal is what a scenario this client does not implement gets: a
// discover and a tools/list, whose failures are only logged.
func minimal(ctx context.Context, log *slog.Logger, url string) error {
	c := newClient(log, url)
	defer c.Close()
	if _, err := c.Discover(ctx); err != nil {
		log.Warn("server/discover", "err", err)
	}
	if _, err := c.Tools(ctx); err != nil {
		log.Warn("tools/list", "err", err)
	}
	return nil
}

// toolsCall lists the tools and calls add_numbers with 2 and 3.
func toolsCall(ctx context.Context, log *slog.Logger, url string, _ []byte) error {
	c := newClient(log, url)
	defer c.Close()
	tools, err := c.Tools(ctx)
	if err != nil {
		return err
	}
	name := "add_numbers"
	if !slices.ContainsFunc(tools, func(t mcp.Tool) bool { return t.Name == name }) {
		if len(tools) == 0 {
			return errors.New("the server lists no tools")
		}
		name = tools[0].Name
	}
	res, err := c.CallTool(ctx, name, map[string]any{"a": 2, "b": 3})
	if err != nil {
		return err
	}
	log.Info("tools/call", "tool", name, "result", text(res))
	return nil
}

// requestMetadata declares every client capability, so the suite can check
// how each is declared, and sends two requests; the server refuses the
// first one's version and the client must retry with one it supports.
func requestMetadata(ctx context.Context, log *slog.Logger, url string, _ []byte) error {
	c := newClient(log, url,
		client.WithElicitation(func(context.Context, jsontext.Value) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "decline"}, nil
		}),
		client.WithSampling(func(context.Context, jsontext.Value) (jsontext.Value, error) {
			return nil, errors.New("sampling is not offered")
		}),
		client.WithRoots(func(context.Context) (*mcp.ListRootsResult, error) {
			return &mcp.ListRootsResult{}, nil
		}),
	)
	defer c.Close()
	if _, err := c.Discover(ctx); err != nil {
		return err
	}
	_, err := c.Tools(ctx)
	return err
}

// requestState runs the multi round-trip sequence the suite checks: a
// call that needs input and carries requestState, an unrelated call made
// while that input is being gathered (it must carry neither responses nor
// state), the retry, a call whose input request carries no state, and a
// result without resultType that must count as complete.
func requestState(ctx context.Context, log *slog.Logger, url string, _ []byte) error {
	var c *client.Client
	unrelatedDone := false
	elicit := func(ctx context.Context, params jsontext.Value) (*mcp.ElicitResult, error) {
		if !unrelatedDone {
			// Another request while the first one waits for its input.
			unrelatedDone = true
			if _, err := c.CallTool(ctx, "test_mrtr_unrelated", map[string]any{}); err != nil {
				return nil, fmt.Errorf("unrelated call: %w", err)
			}
		}
		return &mcp.ElicitResult{Action: "accept", Content: map[string]jsontext.Value{"confirmed": jsontext.Value("true")}}, nil
	}
	c = newClient(log, url, client.WithElicitation(elicit))
	defer c.Close()
	if _, err := c.Tools(ctx); err != nil {
		return err
	}
	for _, name := range []string{"test_mrtr_echo_state", "test_mrtr_no_state", "test_mrtr_no_result_type"} {
		res, err := c.CallTool(ctx, name, map[string]any{})
		if err != nil {
			return err
		}
		log.Info("tools/call", "tool", name, "result", text(res))
	}
	return nil
}

// standardHeaders exercises every method that carries Mcp-Method, and
// Mcp-Name for each tool, resource and prompt the server lists.
func standardHeaders(ctx context.Context, log *slog.Logger, url string, _ []byte) error {
	c := newClient(log, url)
	defer c.Close()
	tools, err := c.Tools(ctx)
	if err != nil {
		return err
	}
	for _, t := range tools {
		if _, err := c.CallTool(ctx, t.Name, map[string]any{}); err != nil {
			return err
		}
	}
	resources, err := c.Resources(ctx)
	if err != nil {
		return err
	}
	for _, r := range resources {
		if _, err := c.ReadResource(ctx, r.URI); err != nil {
			return err
		}
	}
	prompts, err := c.Prompts(ctx)
	if err != nil {
		return err
	}
	for _, p := range prompts {
		if _, err := c.GetPrompt(ctx, p.Name, nil); err != nil {
			return err
		}
	}
	return nil
}

// toolCall is one call the suite asks for in the scenario context.
type toolCall struct {
	Name      string         `json:"name"`
	Arguments jsontext.Value `json:"arguments"`
}

// customHeaders lists the tools and makes exactly the calls of the
// context; the client mirrors annotated arguments into Mcp-Param-*.
func customHeaders(ctx context.Context, log *slog.Logger, url string, raw []byte) error {
	var sc struct {
		ToolCalls []toolCall `json:"toolCalls"`
	}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &sc); err != nil {
			return fmt.Errorf("scenario context: %w", err)
		}
	}
	c := newClient(log, url)
	defer c.Close()
	tools, err := c.Tools(ctx)
	if err != nil {
		return err
	}
	if len(sc.ToolCalls) == 0 {
		for _, t := range tools {
			sc.ToolCalls = append(sc.ToolCalls, toolCall{Name: t.Name, Arguments: jsontext.Value("{}")})
		}
	}
	for _, tc := range sc.ToolCalls {
		res, err := c.CallTool(ctx, tc.Name, tc.Arguments)
		if err != nil {
			return fmt.Errorf("call %q: %w", tc.Name, err)
		}
		log.Info("tools/call", "tool", tc.Name, "result", text(res))
	}
	return nil
}

// invalidToolHeaders calls every tool the client kept: the ones with
// invalid x-mcp-header annotations must have been dropped from the list.
func invalidToolHeaders(ctx context.Context, log *slog.Logger, url string, _ []byte) error {
	c := newClient(log, url)
	defer c.Close()
	tools, err := c.Tools(ctx)
	if err != nil {
		return err
	}
	for _, t := range tools {
		if _, err := c.CallTool(ctx, t.Name, map[string]any{"region": "us-west1"}); err != nil {
			return fmt.Errorf("call %q: %w", t.Name, err)
		}
	}
	return nil
}

// listOnly lists the tools and nothing else; schemas are data, and a $ref
// in one must never be fetched.
func listOnly(ctx context.Context, log *slog.Logger, url string, _ []byte) error {
	c := newClient(log, url)
	defer c.Close()
	tools, err := c.Tools(ctx)
	if err != nil {
		return err
	}
	for _, t := range tools {
		log.Info("tool", "name", t.Name, "inputSchema", string(t.InputSchema))
	}
	return nil
}

// schemaPreservation sends the focal tool's input schema back through the
// echo tool exactly as it was received.
func schemaPreservation(ctx context.Context, log *slog.Logger, url string, _ []byte) error {
	c := newClient(log, url)
	defer c.Close()
	tools, err := c.Tools(ctx)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(tools, func(t mcp.Tool) bool { return t.Name == "json_schema_2020_12_tool" })
	if i < 0 {
		return errors.New("json_schema_2020_12_tool is not listed")
	}
	_, err = c.CallTool(ctx, "json_schema_echo", map[string]any{"schema": tools[i].InputSchema})
	return err
}

// text joins the text blocks of a tool result, for the log.
func text(r *mcp.CallToolResult) string {
	var parts []string
	for _, b := range r.Content {
		if b.Text != nil {
			parts = append(parts, *b.Text)
		}
	}
	return strings.Join(parts, " ")
}
