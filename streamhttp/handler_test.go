package streamhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"tidings/internal/xheader"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// TestBadInput sends one malformed or mismatched request per case, checks
// the exact status and JSON-RPC code the transport defines for it, and
// then checks that the server still answers a well-formed request.
func TestBadInput(t *testing.T) {
	f := newFixture(t, nil)
	call := func(name, args string) []byte {
		return request(1, mcp.MethodToolsCall, `"name":`+quote(name)+`,"arguments":`+args)
	}
	with := func(h http.Header, kv ...string) http.Header {
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				h.Del(kv[i])
			} else {
				h.Set(kv[i], kv[i+1])
			}
		}
		return h
	}
	deep := func(n int) []byte {
		var b bytes.Buffer
		b.WriteString(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":` + stdMeta + `,"x":`)
		b.WriteString(strings.Repeat("[", n))
		b.WriteString(strings.Repeat("]", n))
		b.WriteString("}}")
		return b.Bytes()
	}
	cases := []struct {
		name   string
		body   []byte
		hdr    http.Header
		status int
		code   jsonrpc.Code
		check  func(t *testing.T, e envelope)
	}{
		{name: "malformed JSON", body: []byte(`{"jsonrpc":"2.0","id":1,"method":`),
			hdr: headers(mcp.MethodToolsList, ""), status: 400, code: jsonrpc.CodeParseError},
		{name: "trailing garbage", body: append(request(1, mcp.MethodToolsList, ""), " x"...),
			hdr: headers(mcp.MethodToolsList, ""), status: 400, code: jsonrpc.CodeParseError},
		{name: "batch array", body: []byte(`[` + string(request(1, mcp.MethodToolsList, "")) + `]`),
			hdr: headers(mcp.MethodToolsList, ""), status: 400, code: jsonrpc.CodeInvalidRequest},
		{name: "100k-deep nesting", body: deep(100_000),
			hdr: headers(mcp.MethodToolsList, ""), status: 400, code: jsonrpc.CodeParseError},
		{name: "response object", body: []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`),
			hdr: headers(mcp.MethodToolsList, ""), status: 400, code: jsonrpc.CodeInvalidRequest},
		{name: "case-variant Method", body: []byte(`{"jsonrpc":"2.0","id":1,"Method":"tools/list","params":{"_meta":` + stdMeta + `}}`),
			hdr: headers(mcp.MethodToolsList, ""), status: 400, code: jsonrpc.CodeInvalidRequest},
		{name: "case-variant method next to the real one", body: []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list","METHOD":"tools/call","params":{"_meta":` + stdMeta + `}}`),
			hdr: headers(mcp.MethodToolsList, ""), status: 400, code: jsonrpc.CodeInvalidRequest},
		{name: "missing MCP-Protocol-Version", body: request(1, mcp.MethodToolsList, ""),
			hdr: with(headers(mcp.MethodToolsList, ""), mcp.HeaderProtocolVersion, ""), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "missing Mcp-Method", body: request(1, mcp.MethodToolsList, ""),
			hdr: with(headers(mcp.MethodToolsList, ""), mcp.HeaderMethod, ""), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "Mcp-Method mismatch", body: request(1, mcp.MethodToolsList, ""),
			hdr: headers(mcp.MethodPromptsList, ""), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "Mcp-Method differs in case", body: request(1, mcp.MethodToolsList, ""),
			hdr: headers("Tools/List", ""), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "tools/call without Mcp-Name", body: call("echo", `{}`),
			hdr: headers(mcp.MethodToolsCall, ""), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "tools/call Mcp-Name mismatch", body: call("echo", `{}`),
			hdr: headers(mcp.MethodToolsCall, "progress"), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "tools/call base64 Mcp-Name of another value", body: call("echo", `{}`),
			hdr: headers(mcp.MethodToolsCall, "=?base64?ZWNobzI=?="), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "tools/call broken base64 sentinel", body: call("echo", `{}`),
			hdr: headers(mcp.MethodToolsCall, "=?base64?!!!?="), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "prompts/get without Mcp-Name", body: request(1, mcp.MethodPromptsGet, `"name":"greet"`),
			hdr: headers(mcp.MethodPromptsGet, ""), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "prompts/get Mcp-Name mismatch", body: request(1, mcp.MethodPromptsGet, `"name":"greet"`),
			hdr: headers(mcp.MethodPromptsGet, "Greet"), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "resources/read without Mcp-Name", body: request(1, mcp.MethodResourcesRead, `"uri":"res://doc"`),
			hdr: headers(mcp.MethodResourcesRead, ""), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "resources/read Mcp-Name mismatch", body: request(1, mcp.MethodResourcesRead, `"uri":"res://doc"`),
			hdr: headers(mcp.MethodResourcesRead, "res://other"), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "Mcp-Param string missing while argument present", body: call("echo", `{"region":"eu-west"}`),
			hdr: headers(mcp.MethodToolsCall, "echo"), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "Mcp-Param string mismatch", body: call("echo", `{"region":"eu-west"}`),
			hdr: with(headers(mcp.MethodToolsCall, "echo"), "Mcp-Param-Region", "us-east"), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "Mcp-Param integer missing while argument present", body: call("echo", `{"count":42}`),
			hdr: headers(mcp.MethodToolsCall, "echo"), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "Mcp-Param integer mismatch", body: call("echo", `{"count":42}`),
			hdr: with(headers(mcp.MethodToolsCall, "echo"), "Mcp-Param-Count", "43"), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "Mcp-Param integer beyond 2^53-1 (XH-3)", body: call("echo", `{"count":9007199254740993}`),
			hdr: with(headers(mcp.MethodToolsCall, "echo"), "Mcp-Param-Count", "9007199254740993"), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "Mcp-Param integer not a number", body: call("echo", `{"count":42}`),
			hdr: with(headers(mcp.MethodToolsCall, "echo"), "Mcp-Param-Count", "forty-two"), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "header version differs from _meta version",
			body: requestMeta(1, mcp.MethodToolsList, `{"io.modelcontextprotocol/protocolVersion":"2025-11-25","io.modelcontextprotocol/clientCapabilities":{}}`, ""),
			hdr:  headers(mcp.MethodToolsList, ""), status: 400, code: mcp.CodeHeaderMismatch},
		{name: "unknown version",
			body: requestMeta(1, mcp.MethodToolsList, `{"io.modelcontextprotocol/protocolVersion":"1999-01-01","io.modelcontextprotocol/clientCapabilities":{}}`, ""),
			hdr:  with(headers(mcp.MethodToolsList, ""), mcp.HeaderProtocolVersion, "1999-01-01"), status: 400, code: mcp.CodeUnsupportedProtocolVersion,
			check: func(t *testing.T, e envelope) {
				var data struct {
					Supported []string `json:"supported"`
					Requested string   `json:"requested"`
				}
				if err := json.Unmarshal(e.Error.Data, &data); err != nil {
					t.Fatalf("data: %v (%s)", err, e.Error.Data)
				}
				if data.Requested != "1999-01-01" || len(data.Supported) == 0 || data.Supported[0] != mcp.Version {
					t.Fatalf("data = %s, want supported [%s] and requested 1999-01-01", e.Error.Data, mcp.Version)
				}
			}},
		{name: "unknown method", body: request(1, "tools/frobnicate", ""),
			hdr: headers("tools/frobnicate", ""), status: 404, code: jsonrpc.CodeMethodNotFound},
		{name: "forged cursor", body: request(1, mcp.MethodToolsList, `"cursor":"AQNmb3JnZWQtY3Vyc29yLXh4eHh4eHh4eHh4eHh4eHh4"`),
			hdr: headers(mcp.MethodToolsList, ""), status: 200, code: jsonrpc.CodeInvalidParams},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			r := f.post(t, tc.body, tc.hdr)
			elapsed := time.Since(start)
			e := wantError(t, r, tc.status, tc.code)
			if e.Error.Message == "" {
				t.Errorf("error has an empty message")
			}
			if tc.check != nil {
				tc.check(t, e)
			}
			if tc.name == "100k-deep nesting" && elapsed > 2*time.Second {
				t.Errorf("deep nesting took %v; it must be refused before any recursive work", elapsed)
			}
			f.alive(t)
		})
	}
}

// TestHeaderValuesAccepted covers header forms that must be accepted: the
// base64 sentinel for Mcp-Name, integers compared numerically, and
// absent arguments with no header.
func TestHeaderValuesAccepted(t *testing.T) {
	f := newFixture(t, nil)
	call := func(name, args string) []byte {
		return request(1, mcp.MethodToolsCall, `"name":`+quote(name)+`,"arguments":`+args)
	}
	hdr := func(name string, kv ...string) http.Header {
		h := headers(mcp.MethodToolsCall, name)
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	cases := []struct {
		name string
		body []byte
		hdr  http.Header
	}{
		{"plain Mcp-Name", call("echo", `{}`), hdr("echo")},
		{"base64 Mcp-Name of an ASCII name", call("echo", `{}`), hdr("=?base64?ZWNobw==?=")},
		{"base64 Mcp-Name of a non-ASCII name", request(1, mcp.MethodPromptsGet, `"name":"café"`),
			headers(mcp.MethodPromptsGet, xheader.Encode("café"))},
		{"string param", call("echo", `{"region":"eu-west"}`), hdr("echo", "Mcp-Param-Region", "eu-west")},
		{"string param in base64", call("echo", `{"region":" padded "}`), hdr("echo", "Mcp-Param-Region", xheader.Encode(" padded "))},
		{"integer 42 vs header 42.0", call("echo", `{"count":42}`), hdr("echo", "Mcp-Param-Count", "42.0")},
		{"integer 42 vs header 42", call("echo", `{"count":42}`), hdr("echo", "Mcp-Param-Count", "42")},
		{"absent arguments, no headers", call("echo", `{"note":"x"}`), hdr("echo")},
		{"resources/read", request(1, mcp.MethodResourcesRead, `"uri":"res://doc"`), headers(mcp.MethodResourcesRead, "res://doc")},
		{"prompts/get", request(1, mcp.MethodPromptsGet, `"name":"greet"`), headers(mcp.MethodPromptsGet, "greet")},
		{"loopback Origin", request(1, mcp.MethodToolsList, ""), func() http.Header {
			h := headers(mcp.MethodToolsList, "")
			h.Set("Origin", "http://localhost:5173")
			return h
		}()},
		{"loopback IP Origin", request(1, mcp.MethodToolsList, ""), func() http.Header {
			h := headers(mcp.MethodToolsList, "")
			h.Set("Origin", "http://127.0.0.1:8080")
			return h
		}()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := f.post(t, tc.body, tc.hdr)
			res := wantResult(t, r)
			if ct := r.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			if isErr := string(res["isError"]); isErr == "true" {
				t.Errorf("tool reported an error: %s", r.body)
			}
		})
	}
	// A null argument needs no header either. The schema refuses null, so
	// the call ends as a tool error; what matters is that it is not -32020.
	r := f.post(t, call("echo", `{"region":null,"count":null}`), hdr("echo"))
	if res := wantResult(t, r); string(res["isError"]) != "true" {
		t.Fatalf("null arguments passed a schema that refuses null: %s", r.body)
	}
}

// TestTransportRefusals covers checks that happen before the body is
// looked at: Origin, Host, method, media type and body size.
func TestTransportRefusals(t *testing.T) {
	f := newFixture(t, nil)
	good := request(1, mcp.MethodToolsList, "")

	t.Run("foreign Origin", func(t *testing.T) {
		h := headers(mcp.MethodToolsList, "")
		h.Set("Origin", "https://evil.example")
		wantError(t, f.post(t, good, h), http.StatusForbidden, jsonrpc.CodeInvalidRequest)
		f.alive(t)
	})
	t.Run("non-loopback Host", func(t *testing.T) {
		req := f.newRequest(t, context.Background(), good, headers(mcp.MethodToolsList, ""))
		req.Host = "evil.example"
		wantError(t, f.do(t, req), http.StatusForbidden, jsonrpc.CodeInvalidRequest)
		f.alive(t)
	})
	for _, method := range []string{http.MethodGet, http.MethodDelete} {
		t.Run(method, func(t *testing.T) {
			req, err := http.NewRequest(method, f.ts.URL, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header = headers(mcp.MethodToolsList, "")
			r := f.do(t, req)
			if r.status != http.StatusMethodNotAllowed {
				t.Fatalf("status = %d, want 405", r.status)
			}
			if got := r.header.Get("Allow"); got != http.MethodPost {
				t.Fatalf("Allow = %q, want POST", got)
			}
			f.alive(t)
		})
	}
	t.Run("text/plain", func(t *testing.T) {
		h := headers(mcp.MethodToolsList, "")
		h.Set("Content-Type", "text/plain")
		r := f.post(t, good, h)
		if r.status != http.StatusUnsupportedMediaType {
			t.Fatalf("status = %d, want 415; body %s", r.status, r.body)
		}
		f.alive(t)
	})
	t.Run("notification", func(t *testing.T) {
		body := []byte(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`)
		r := f.post(t, body, headers(mcp.NotifyCancelled, ""))
		if r.status != http.StatusAccepted {
			t.Fatalf("status = %d, want 202; body %s", r.status, r.body)
		}
		if len(r.body) != 0 {
			t.Fatalf("202 carries a body: %q", r.body)
		}
		f.alive(t)
	})
	t.Run("20 MB body", func(t *testing.T) {
		// A syntactically plausible message padded far past the limit.
		big := make([]byte, 0, 20<<20+64)
		big = append(big, `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"pad":"`...)
		big = append(big, bytes.Repeat([]byte("a"), 20<<20)...)
		big = append(big, `"}}`...)
		req := f.newRequest(t, context.Background(), big, headers(mcp.MethodToolsList, ""))
		resp, err := f.c.Do(req)
		if err != nil {
			t.Fatalf("oversized POST got no response: %v", err)
		}
		wantError(t, readAll(t, resp), http.StatusRequestEntityTooLarge, jsonrpc.CodeInvalidRequest)
		f.alive(t)
	})
}

// TestAllowedHosts checks that WithAllowedHosts admits a named host.
func TestAllowedHosts(t *testing.T) {
	f := newFixture(t, nil, streamhttp.WithAllowedHosts("evil.example"))
	req := f.newRequest(t, context.Background(), request(1, mcp.MethodToolsList, ""), headers(mcp.MethodToolsList, ""))
	req.Host = "evil.example"
	wantResult(t, f.do(t, req))
	req = f.newRequest(t, context.Background(), request(1, mcp.MethodToolsList, ""), headers(mcp.MethodToolsList, ""))
	req.Host = "other.example:8080"
	wantError(t, f.do(t, req), http.StatusForbidden, jsonrpc.CodeInvalidRequest)
}

// TestJSONOrSSE checks that a request with nothing to stream is answered
// with plain JSON, and one whose handler reports progress switches to SSE
// with the progress event before the response.
func TestJSONOrSSE(t *testing.T) {
	f := newFixture(t, nil)
	t.Run("tools/list is JSON", func(t *testing.T) {
		r := f.post(t, request(5, mcp.MethodToolsList, ""), headers(mcp.MethodToolsList, ""))
		wantResult(t, r)
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type = %q, want application/json", ct)
		}
		if id := string(decodeEnvelope(t, r.body).ID); id != "5" {
			t.Fatalf("id = %s, want 5", id)
		}
	})
	t.Run("progress switches to SSE", func(t *testing.T) {
		meta := `{"io.modelcontextprotocol/protocolVersion":"` + mcp.Version + `","io.modelcontextprotocol/clientCapabilities":{},"progressToken":"tok-1"}`
		body := requestMeta(6, mcp.MethodToolsCall, meta, `"name":"progress","arguments":{}`)
		s := f.open(t, context.Background(), body, headers(mcp.MethodToolsCall, "progress"))
		prog := s.next(t)
		if prog.Method != mcp.NotifyProgress {
			t.Fatalf("first event is %q, want %s", prog.Method, mcp.NotifyProgress)
		}
		var p struct {
			ProgressToken json.RawMessage `json:"progressToken"`
			Progress      float64         `json:"progress"`
			Total         float64         `json:"total"`
		}
		if err := json.Unmarshal(prog.Params, &p); err != nil {
			t.Fatal(err)
		}
		if string(p.ProgressToken) != `"tok-1"` || p.Progress != 1 || p.Total != 2 {
			t.Fatalf("progress params = %s", prog.Params)
		}
		res := s.next(t)
		if string(res.ID) != "6" || res.Result == nil {
			t.Fatalf("second event is not the response to 6: %+v", res)
		}
		if _, err := s.r.Next(); err == nil {
			t.Fatal("stream continues after the response")
		}
	})
}

// TestClosedStreamCancels checks HCAN-1: when the client closes an SSE
// response stream, the handler's context is cancelled.
func TestClosedStreamCancels(t *testing.T) {
	f := newFixture(t, nil)
	meta := `{"io.modelcontextprotocol/protocolVersion":"` + mcp.Version + `","io.modelcontextprotocol/clientCapabilities":{},"progressToken":1}`
	body := requestMeta(7, mcp.MethodToolsCall, meta, `"name":"block","arguments":{}`)
	s := f.open(t, context.Background(), body, headers(mcp.MethodToolsCall, "block"))
	if ev := s.next(t); ev.Method != mcp.NotifyProgress {
		t.Fatalf("first event is %q, want progress", ev.Method)
	}
	select {
	case <-f.blockStarted:
	case <-time.After(10 * time.Second):
		t.Fatal("handler did not start")
	}
	select {
	case err := <-f.blockCancelled:
		t.Fatalf("handler cancelled before the stream closed: %v", err)
	default:
	}
	s.resp.Body.Close()
	select {
	case err := <-f.blockCancelled:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("ctx error = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("closing the SSE stream did not cancel the handler's context")
	}
	f.alive(t)
}

func readAll(t testing.TB, resp *http.Response) reply {
	t.Helper()
	defer resp.Body.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(resp.Body); err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return reply{resp.StatusCode, resp.Header, b.Bytes()}
}

// TestHandlerPanicAnswered: over HTTP a panicking handler is answered with
// -32603 (not a cut connection), and the server serves the next request.
func TestHandlerPanicAnswered(t *testing.T) {
	f := newFixture(t, []server.Option{server.WithLogger(slog.New(slog.NewTextHandler(t.Output(), nil)))})
	if err := f.srv.AddTool(mcp.Tool{Name: "boom"}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
		panic("a bug in the handler")
	}); err != nil {
		t.Fatal(err)
	}
	wantError(t, f.post(t, request(1, mcp.MethodToolsCall, `"name":"boom"`), headers(mcp.MethodToolsCall, "boom")), http.StatusOK, -32603)
	wantResult(t, f.post(t, request(2, mcp.MethodToolsList, ""), headers(mcp.MethodToolsList, "")))
}
