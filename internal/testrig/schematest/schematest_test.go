package schematest

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonschema "github.com/santhosh-tekuri/jsonschema/v6"
)

// TestExamplesAccepted checks that the validator accepts the official
// examples kept in testdata/examples/<Def>/: if it rejected correct
// messages, every other test built on it would be meaningless.
func TestExamplesAccepted(t *testing.T) {
	v, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	dirs, err := os.ReadDir(filepath.Join("testdata", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range dirs {
		def := d.Name()
		files, err := filepath.Glob(filepath.Join("testdata", "examples", def, "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := v.Check(def, b); err != nil {
				t.Errorf("%s: official example rejected: %v", f, err)
			}
			n++
		}
	}
	if n < 20 {
		t.Fatalf("only %d examples found; testdata/examples is incomplete", n)
	}
}

// TestMembersAccepted covers the result and error definitions that appear
// inside a JSON-RPC envelope.
func TestMembersAccepted(t *testing.T) {
	v, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ def, member, memberDef, msg string }{
		{"JSONRPCResultResponse", "result", "InputRequiredResult",
			`{"jsonrpc":"2.0","id":3,"result":{"resultType":"input_required","requestState":"abc"}}`},
		{"JSONRPCErrorResponse", "error", "InvalidParamsError",
			`{"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"Invalid cursor"}}`},
		{"JSONRPCErrorResponse", "error", "ParseError",
			`{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"}}`},
	} {
		if err := v.CheckMember(tc.def, tc.member, tc.memberDef, []byte(tc.msg)); err != nil {
			t.Errorf("%s: %v", tc.memberDef, err)
		}
	}
}

// TestBrokenRejected proves the validator can fail: each message breaks
// one rule of its definition.
func TestBrokenRejected(t *testing.T) {
	v, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	const serverInfo = `"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":"1"}}`
	for _, tc := range []struct{ name, def, msg string }{
		{"discover without ttlMs", "DiscoverResultResponse",
			`{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{},"cacheScope":"public",` + serverInfo + `}}`},
		{"discover with a bad cacheScope", "DiscoverResultResponse",
			`{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"capabilities":{},"ttlMs":1,"cacheScope":"shared"}}`},
		{"list without resultType", "ListToolsResultResponse",
			`{"jsonrpc":"2.0","id":1,"result":{"tools":[],"ttlMs":0,"cacheScope":"public"}}`},
		{"negative ttlMs", "ListToolsResultResponse",
			`{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","tools":[],"ttlMs":-1,"cacheScope":"public"}}`},
		{"fractional id", "ListToolsResultResponse",
			`{"jsonrpc":"2.0","id":1.5,"result":{"resultType":"complete","tools":[],"ttlMs":0,"cacheScope":"public"}}`},
		{"ack without notifications", "SubscriptionsAcknowledgedNotification",
			`{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":1}}}`},
		{"listen result without subscriptionId", "SubscriptionsListenResultResponse",
			`{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","_meta":{}}}`},
		{"-32022 without data", "UnsupportedProtocolVersionError",
			`{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"Unsupported protocol version"}}`},
		{"wrong method", "ToolListChangedNotification",
			`{"jsonrpc":"2.0","method":"notifications/prompts/list_changed"}`},
		{"updated without uri", "ResourceUpdatedNotification",
			`{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{}}`},
		{"call result that claims complete but has no content", "CallToolResultResponse",
			`{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","isError":true}}`},
		{"read result that claims complete but has no ttlMs", "ReadResourceResultResponse",
			`{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","contents":[{"uri":"mem://a","text":"x"}],"cacheScope":"public"}}`},
		// MCP types an unreadable id as absent, never null.
		{"error with a null id", "JSONRPCErrorResponse",
			`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}`},
		{"unknown definition", "NoSuchDefinition", `{}`},
		{"not JSON", "JSONRPCErrorResponse", `{"jsonrpc":`},
	} {
		if err := v.Check(tc.def, []byte(tc.msg)); err == nil {
			t.Errorf("%s: accepted, want rejection", tc.name)
		}
	}
	if err := v.CheckMember("JSONRPCErrorResponse", "error", "InvalidParamsError",
		[]byte(`{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}`)); err == nil {
		t.Error("CheckMember accepted -32601 as InvalidParamsError")
	}
}

// TestUnionDispatch documents why Check dispatches on resultType: the
// official example of a read without cache hints passes the bare union
// (through its InputRequiredResult branch) but is not a valid final read
// result, which a server must never send.
func TestUnionDispatch(t *testing.T) {
	v, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("testdata", "quirks", "read-resource-result-response-without-ttl.json"))
	if err != nil {
		t.Fatal(err)
	}
	inst := mustUnmarshal(t, b)
	if err := v.defs["ReadResourceResultResponse"].Validate(inst); err != nil {
		t.Fatalf("bare union rejected the example (the schema changed?): %v", err)
	}
	err = v.Check("ReadResourceResultResponse", b)
	if err == nil || !strings.Contains(err.Error(), "ReadResourceResult") {
		t.Fatalf("Check = %v, want a ReadResourceResult mismatch", err)
	}
	if got := v.unions["CallToolResultResponse"]; got != "CallToolResult" {
		t.Errorf("union of CallToolResultResponse = %q, want CallToolResult", got)
	}
}

// recorder is a testing.TB that records failures instead of failing, to
// check that Validate reports through the TB it is given.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, format)
}

func TestValidateReports(t *testing.T) {
	r := &recorder{TB: t}
	Validate(r, "ToolListChangedNotification", []byte(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`))
	if len(r.errors) != 0 {
		t.Fatalf("valid message reported: %v", r.errors)
	}
	Validate(r, "ToolListChangedNotification", []byte(`{"jsonrpc":"1.0","method":"notifications/tools/list_changed"}`))
	ValidateError(r, "ParseError", []byte(`{"jsonrpc":"2.0","error":{"code":-32600,"message":"Invalid Request"}}`))
	ValidateResult(r, "InputRequiredResult", []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`))
	if len(r.errors) != 3 {
		t.Fatalf("got %d reports, want 3", len(r.errors))
	}
}

func mustUnmarshal(t *testing.T, b []byte) any {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestServerMessages checks the definition chosen by method and error
// code, accepting good messages and rejecting bad ones.
func TestServerMessages(t *testing.T) {
	const si = `"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":"1"}}`
	good := []struct{ method, msg string }{
		{"tools/list", `{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","tools":[],"ttlMs":0,"cacheScope":"public",` + si + `}}`},
		{"tools/call", `{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":"x"}}`},
		{"subscriptions/listen", `{"jsonrpc":"2.0","id":"l","result":{"resultType":"complete","_meta":{"io.modelcontextprotocol/subscriptionId":"l"}}}`},
		{"tools/list", `{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Invalid cursor"}}`},
		{"", `{"jsonrpc":"2.0","error":{"code":-32700,"message":"Parse error"}}`},
		{"tools/call", `{"jsonrpc":"2.0","id":1,"error":{"code":-32021,"message":"Missing","data":{"requiredCapabilities":{"elicitation":{}}}}}`},
		{"tools/call", `{"jsonrpc":"2.0","id":1,"error":{"code":1234,"message":"application error"}}`},
	}
	for _, g := range good {
		if err := CheckResponse(g.method, []byte(g.msg)); err != nil {
			t.Errorf("%s %s: %v", g.method, g.msg, err)
		}
	}
	bad := []struct{ method, msg string }{
		{"tools/list", `{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","tools":[]}}`},
		{"no/such", `{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete"}}`},
		{"tools/call", `{"jsonrpc":"2.0","id":1,"error":{"code":-32021,"message":"Missing"}}`},
		{"tools/call", `{"jsonrpc":"2.0","id":1,"error":{"code":-32022,"message":"v","data":{"supported":"2026-07-28","requested":"x"}}}`},
		{"tools/call", `{"jsonrpc":"2.0","id":1}`},
	}
	for _, b := range bad {
		if err := CheckResponse(b.method, []byte(b.msg)); err == nil {
			t.Errorf("%s %s: accepted", b.method, b.msg)
		}
	}
	if err := CheckNotification([]byte(`{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"mem://a","_meta":{"io.modelcontextprotocol/subscriptionId":3}}}`)); err != nil {
		t.Error(err)
	}
	for _, msg := range []string{
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":1,"method":"notifications/tools/list_changed"}`,
		`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}`,
		`{"jsonrpc":"2.0","id":2,"method":"elicitation/create","params":{}}`,
	} {
		if err := CheckNotification([]byte(msg)); err == nil {
			t.Errorf("accepted %s", msg)
		}
	}
}
