package schematest

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain keeps this package to the house rule: no test leaves a
// goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestLegacySchema checks that the 2025-11-25 validator accepts messages of
// that wire and rejects broken ones, so the legacy tests built on it can
// fail.
func TestLegacySchema(t *testing.T) {
	good := []struct{ method, msg string }{
		{"initialize", `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"s","version":"1"}}}`},
		{"ping", `{"jsonrpc":"2.0","id":1,"result":{}}`},
		{"tools/list", `{"jsonrpc":"2.0","id":"a","result":{"tools":[{"name":"t","inputSchema":{"type":"object"}}]}}`},
		{"tools/call", `{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text","text":"hi"}]}}`},
		{"tools/call", `{"jsonrpc":"2.0","id":3,"error":{"code":-32602,"message":"bad"}}`},
	}
	for _, g := range good {
		if err := CheckLegacyResponse(g.method, []byte(g.msg)); err != nil {
			t.Errorf("%s: valid message rejected: %v", g.method, err)
		}
	}
	bad := []struct{ method, msg string }{
		{"initialize", `{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-11-25","capabilities":{}}}`}, // no serverInfo
		{"tools/list", `{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"t"}]}}`},                           // no inputSchema
		{"tools/call", `{"jsonrpc":"2.0","id":2,"result":{"content":[{"type":"text"}]}}`},                      // text without text
		{"ping", `{"jsonrpc":"2.0","result":{}}`},                                                              // no id
		{"tools/frobnicate", `{"jsonrpc":"2.0","id":3,"result":{}}`},                                           // unknown method
	}
	for _, b := range bad {
		if err := CheckLegacyResponse(b.method, []byte(b.msg)); err == nil {
			t.Errorf("%s: invalid message accepted: %s", b.method, b.msg)
		}
	}

	msgs := []string{
		`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`,
		`{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"uri":"res://a"}}`,
		`{"jsonrpc":"2.0","id":"s-1","method":"elicitation/create","params":{"message":"ok?","requestedSchema":{"type":"object","properties":{}}}}`,
	}
	for _, m := range msgs {
		if err := CheckLegacyServerMessage([]byte(m)); err != nil {
			t.Errorf("valid server message rejected: %v\n%s", err, m)
		}
	}
	for _, m := range []string{
		`{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{}}`,                // no uri
		`{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{}}`,       // not of this era
		`{"jsonrpc":"2.0","id":1,"method":"elicitation/create","params":{"message":"no schema"}}`, // no requestedSchema
	} {
		if err := CheckLegacyServerMessage([]byte(m)); err == nil {
			t.Errorf("invalid server message accepted: %s", m)
		}
	}
}
