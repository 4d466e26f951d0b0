package streamhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/sse"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// stdMeta is the _meta every well-formed request in these tests carries.
const stdMeta = `{"io.modelcontextprotocol/protocolVersion":"` + mcp.Version + `","io.modelcontextprotocol/clientCapabilities":{}}`

// echoSchema mirrors two arguments into Mcp-Param-* headers, one string
// and one integer, so the header checks have something to compare.
const echoSchema = `{"type":"object","properties":{` +
	`"region":{"type":"string","x-mcp-header":"Region"},` +
	`"count":{"type":"integer","x-mcp-header":"Count"},` +
	`"note":{"type":"string"}}}`

// fixture is one server behind a real loopback HTTP listener.
type fixture struct {
	srv *server.Server
	h   *streamhttp.Handler
	ts  *httptest.Server
	c   *http.Client

	// blockStarted is closed when the "block" tool has started streaming;
	// blockCancelled receives the handler's ctx error once it is cancelled.
	blockStarted   chan struct{}
	blockCancelled chan error
}

// newFixture starts a server with a few tools, a prompt and a resource and
// serves it over loopback HTTP. Everything is torn down at test end.
func newFixture(t testing.TB, sopts []server.Option, hopts ...streamhttp.Option) *fixture {
	t.Helper()
	f := &fixture{
		srv:            server.New(mcp.Implementation{Name: "fixture", Version: "1.0.0"}, sopts...),
		blockStarted:   make(chan struct{}),
		blockCancelled: make(chan error, 1),
	}
	text := func(s string) *mcp.CallToolResult {
		return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(s)}}
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(f.srv.AddTool(mcp.Tool{Name: "echo", InputSchema: jsontext.Value(echoSchema)},
		func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			return text(string(req.Arguments)), nil
		}))
	must(f.srv.AddTool(mcp.Tool{Name: "coffee"},
		func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) { return text("coffee"), nil }))
	must(f.srv.AddTool(mcp.Tool{Name: "progress"},
		func(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			total := 2.0
			if err := req.Progress(1, &total, "half way"); err != nil {
				return nil, err
			}
			return text("done"), nil
		}))
	must(f.srv.AddTool(mcp.Tool{Name: "block"},
		func(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
			if err := req.Progress(1, nil, "started"); err != nil {
				return nil, err
			}
			close(f.blockStarted)
			<-ctx.Done()
			f.blockCancelled <- ctx.Err()
			return nil, ctx.Err()
		}))
	greet := func(context.Context, *server.PromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []mcp.PromptMessage{{Role: "user", Content: mcp.TextContent("hi")}}}, nil
	}
	must(f.srv.AddPrompt(mcp.Prompt{Name: "greet"}, greet))
	// Tool names are ASCII only; a prompt name may be anything, so a prompt
	// is what puts a non-ASCII name into Mcp-Name.
	must(f.srv.AddPrompt(mcp.Prompt{Name: "café"}, greet))
	must(f.srv.AddResource(mcp.Resource{URI: "res://doc", Name: "doc"},
		func(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "text/plain", "body")}}, nil
		}))
	f.h = streamhttp.New(f.srv, hopts...)
	f.ts = httptest.NewServer(f.h)
	f.c = f.ts.Client()
	t.Cleanup(func() {
		f.ts.CloseClientConnections()
		f.ts.Close()
	})
	return f
}

// request builds a request whose params hold the standard _meta plus the
// given extra members (a JSON fragment without braces, may be empty).
func request(id int, method, extra string) []byte {
	return requestMeta(id, method, stdMeta, extra)
}

// requestMeta is request with a caller-chosen _meta object.
func requestMeta(id int, method, meta, extra string) []byte {
	params := `"_meta":` + meta
	if extra != "" {
		params += "," + extra
	}
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":{%s}}`, id, method, params)
}

// headers returns the transport headers a conforming client sends; name
// is the Mcp-Name value ("" to leave it out).
func headers(method, name string) http.Header {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("Accept", "application/json, text/event-stream")
	h.Set(mcp.HeaderProtocolVersion, mcp.Version)
	h.Set(mcp.HeaderMethod, method)
	if name != "" {
		h.Set(mcp.HeaderName, name)
	}
	return h
}

// reply is a fully read HTTP response.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// newRequest builds a POST with the given body and headers.
func (f *fixture) newRequest(t testing.TB, ctx context.Context, body []byte, hdr http.Header) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, f.ts.URL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header = hdr
	return req
}

// do sends req and reads the whole response.
func (f *fixture) do(t testing.TB, req *http.Request) reply {
	t.Helper()
	resp, err := f.c.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", req.Method, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return reply{resp.StatusCode, resp.Header, b}
}

// post sends body with hdr and reads the whole response.
func (f *fixture) post(t testing.TB, body []byte, hdr http.Header) reply {
	t.Helper()
	return f.do(t, f.newRequest(t, context.Background(), body, hdr))
}

// rpcError is the error member of a JSON-RPC response.
type rpcError struct {
	Code    jsonrpc.Code    `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

// envelope is a JSON-RPC message read loosely, for inspection.
type envelope struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   *rpcError       `json:"error"`
}

func decodeEnvelope(t testing.TB, b []byte) envelope {
	t.Helper()
	var e envelope
	if err := json.Unmarshal(b, &e); err != nil {
		t.Fatalf("body is not a JSON-RPC message: %v\n%s", err, b)
	}
	if e.JSONRPC != "2.0" {
		t.Fatalf(`jsonrpc = %q, want "2.0" in %s`, e.JSONRPC, b)
	}
	return e
}

// wantError checks an HTTP status and a JSON-RPC error code.
func wantError(t testing.TB, r reply, status int, code jsonrpc.Code) envelope {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q, want application/json; body %s", ct, r.body)
	}
	e := decodeEnvelope(t, r.body)
	if e.Error == nil {
		t.Fatalf("no error member in %s", r.body)
	}
	if e.Error.Code != code {
		t.Fatalf("error code = %d, want %d; body %s", e.Error.Code, code, r.body)
	}
	if e.Result != nil {
		t.Fatalf("error response also carries a result: %s", r.body)
	}
	return e
}

// wantResult checks a 200 JSON response with a complete result and
// returns the result object.
func wantResult(t testing.TB, r reply) map[string]json.RawMessage {
	t.Helper()
	if r.status != http.StatusOK {
		t.Fatalf("status = %d, want 200; body %s", r.status, r.body)
	}
	e := decodeEnvelope(t, r.body)
	if e.Error != nil {
		t.Fatalf("unexpected error %d %q", e.Error.Code, e.Error.Message)
	}
	var res map[string]json.RawMessage
	if err := json.Unmarshal(e.Result, &res); err != nil {
		t.Fatalf("result is not an object: %v\n%s", err, r.body)
	}
	if string(res["resultType"]) != `"complete"` {
		t.Fatalf("resultType = %s, want complete", res["resultType"])
	}
	return res
}

// alive checks that the server still answers a well-formed tools/list.
func (f *fixture) alive(t testing.TB) {
	t.Helper()
	res := wantResult(t, f.post(t, request(99, mcp.MethodToolsList, ""), headers(mcp.MethodToolsList, "")))
	var tools []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal(res["tools"], &tools); err != nil || len(tools) == 0 {
		t.Fatalf("tools/list after a bad request: %v, %s", err, res["tools"])
	}
}

// stream is an open SSE response.
type stream struct {
	resp *http.Response
	r    *sse.Reader
}

// open sends a request expected to answer with an SSE stream.
func (f *fixture) open(t testing.TB, ctx context.Context, body []byte, hdr http.Header) *stream {
	t.Helper()
	resp, err := f.c.Do(f.newRequest(t, ctx, body, hdr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status = %d, want 200; body %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q, want text/event-stream", ct)
	}
	if got := resp.Header.Get("X-Accel-Buffering"); got != "no" {
		t.Fatalf("X-Accel-Buffering = %q, want no", got)
	}
	return &stream{resp: resp, r: sse.NewReader(resp.Body, 0)}
}

// next reads the next event and decodes its JSON-RPC message.
func (s *stream) next(t testing.TB) envelope {
	t.Helper()
	ev, err := s.r.Next()
	if err != nil {
		t.Fatalf("reading event: %v", err)
	}
	if ev.Name != "" && ev.Name != "message" {
		t.Fatalf("event type %q, want message", ev.Name)
	}
	return decodeEnvelope(t, ev.Data)
}

// listenBody is a subscriptions/listen request with the given filter.
func listenBody(id int, filter string) []byte {
	return request(id, mcp.MethodListen, `"notifications":`+filter)
}

// subscriptionID extracts _meta.subscriptionId from params or a result.
func subscriptionID(t testing.TB, obj json.RawMessage) string {
	t.Helper()
	var v struct {
		Meta map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(obj, &v); err != nil {
		t.Fatalf("not an object: %s", obj)
	}
	return string(v.Meta[mcp.MetaSubscriptionID])
}

// quote returns a JSON-quoted string, for building bodies.
func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
