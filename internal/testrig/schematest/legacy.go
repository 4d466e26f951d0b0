package schematest

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

// LegacySchemaFile is the 2025-11-25 schema's path relative to the module
// root. Sessions of that era are judged by it: the 2026-07-28 schema
// requires fields (resultType, ttlMs) the older wire never carries.
const LegacySchemaFile = "testdata/schema-2025-11-25.json"

// sharedLegacy is built once per test binary, like shared.
var sharedLegacy = sync.OnceValues(func() (*Validator, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	return Load(filepath.Join(root, LegacySchemaFile))
})

// Legacy returns the validator for the 2025-11-25 schema, loading it on
// first use.
func Legacy() (*Validator, error) { return sharedLegacy() }

// LegacyResultDef returns the definition of the result of a 2025-11-25
// request: the result objects only, since that schema has no per-method
// response envelopes.
func LegacyResultDef(method string) (string, bool) {
	switch method {
	case "initialize":
		return "InitializeResult", true
	case "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe":
		return "EmptyResult", true
	case "tools/list":
		return "ListToolsResult", true
	case "tools/call":
		return "CallToolResult", true
	case "prompts/list":
		return "ListPromptsResult", true
	case "prompts/get":
		return "GetPromptResult", true
	case "resources/list":
		return "ListResourcesResult", true
	case "resources/templates/list":
		return "ListResourceTemplatesResult", true
	case "resources/read":
		return "ReadResourceResult", true
	case "completion/complete":
		return "CompleteResult", true
	case "elicitation/create":
		return "ElicitResult", true
	case "sampling/createMessage":
		return "CreateMessageResult", true
	case "roots/list":
		return "ListRootsResult", true
	}
	return "", false
}

// legacyServerMessageDef returns the definition of a message a 2025-11-25
// server may send on its own: a notification, or a request for the
// client.
func legacyServerMessageDef(method string, request bool) (string, bool) {
	if request {
		switch method {
		case "elicitation/create":
			return "ElicitRequest", true
		case "sampling/createMessage":
			return "CreateMessageRequest", true
		case "roots/list":
			return "ListRootsRequest", true
		case "ping":
			return "PingRequest", true
		}
		return "", false
	}
	// The same notifications as 2026-07-28, less the listen
	// acknowledgement, which 2025-11-25 does not have.
	if method == "notifications/subscriptions/acknowledged" {
		return "", false
	}
	return NotificationDef(method)
}

// CheckLegacyResponse validates a response of the 2025-11-25 wire to a
// request of the given method: the envelope, then a result against the
// method's result definition (an error against the generic error shape).
func CheckLegacyResponse(method string, msg []byte) error {
	v, err := Legacy()
	if err != nil {
		return err
	}
	var env struct {
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(msg, &env); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	switch {
	case env.Error != nil:
		return v.Check("JSONRPCErrorResponse", msg)
	case env.Result != nil:
		def, ok := LegacyResultDef(method)
		if !ok {
			return fmt.Errorf("no 2025-11-25 result definition for method %q", method)
		}
		return v.CheckMember("JSONRPCResultResponse", "result", def, msg)
	}
	return fmt.Errorf("neither result nor error: %s", clip(msg))
}

// CheckLegacyServerMessage validates a message a 2025-11-25 server sent on
// its own (not a response): a notification or a server-to-client request,
// chosen by its method. Anything else fails.
func CheckLegacyServerMessage(msg []byte) error {
	v, err := Legacy()
	if err != nil {
		return err
	}
	var env struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if err := json.Unmarshal(msg, &env); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	def, ok := legacyServerMessageDef(env.Method, env.ID != nil)
	if !ok {
		return fmt.Errorf("%q is not a message a 2025-11-25 server may send (id %s)", env.Method, env.ID)
	}
	return v.Check(def, msg)
}

// ValidateLegacyResponse reports a test error when msg is not a valid
// 2025-11-25 response to a request of the given method.
func ValidateLegacyResponse(t testing.TB, method string, msg []byte) {
	t.Helper()
	if err := CheckLegacyResponse(method, msg); err != nil {
		t.Errorf("2025-11-25 response to %s: %v\nmessage: %s", method, err, clip(msg))
	}
}

// ValidateLegacyServerMessage reports a test error when msg is not a valid
// 2025-11-25 server notification or server-to-client request.
func ValidateLegacyServerMessage(t testing.TB, msg []byte) {
	t.Helper()
	if err := CheckLegacyServerMessage(msg); err != nil {
		t.Errorf("2025-11-25 server message: %v\nmessage: %s", err, clip(msg))
	}
}
