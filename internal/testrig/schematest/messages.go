package schematest

import (
	"encoding/json"
	"fmt"
	"testing"
)

// ResponseDef returns the definition of the success response to method.
func ResponseDef(method string) (string, bool) {
	switch method {
	case "server/discover":
		return "DiscoverResultResponse", true
	case "tools/list":
		return "ListToolsResultResponse", true
	case "tools/call":
		return "CallToolResultResponse", true
	case "prompts/list":
		return "ListPromptsResultResponse", true
	case "prompts/get":
		return "GetPromptResultResponse", true
	case "resources/list":
		return "ListResourcesResultResponse", true
	case "resources/templates/list":
		return "ListResourceTemplatesResultResponse", true
	case "resources/read":
		return "ReadResourceResultResponse", true
	case "completion/complete":
		return "CompleteResultResponse", true
	case "subscriptions/listen":
		return "SubscriptionsListenResultResponse", true
	}
	return "", false
}

// errorDef returns the definition that describes an error code: a
// whole-message definition when the schema has one (the MCP codes), else
// the definition of the error object inside a JSONRPCErrorResponse.
func errorDef(code int) (message, object string, ok bool) {
	switch code {
	case -32700:
		return "", "ParseError", true
	case -32600:
		return "", "InvalidRequestError", true
	case -32601:
		return "", "MethodNotFoundError", true
	case -32602:
		return "", "InvalidParamsError", true
	case -32603:
		return "", "InternalError", true
	case -32020:
		return "HeaderMismatchError", "", true
	case -32021:
		return "MissingRequiredClientCapabilityError", "", true
	case -32022:
		return "UnsupportedProtocolVersionError", "", true
	}
	return "", "", false
}

// NotificationDef returns the definition of a notification a server may
// send.
func NotificationDef(method string) (string, bool) {
	switch method {
	case "notifications/subscriptions/acknowledged":
		return "SubscriptionsAcknowledgedNotification", true
	case "notifications/tools/list_changed":
		return "ToolListChangedNotification", true
	case "notifications/prompts/list_changed":
		return "PromptListChangedNotification", true
	case "notifications/resources/list_changed":
		return "ResourceListChangedNotification", true
	case "notifications/resources/updated":
		return "ResourceUpdatedNotification", true
	case "notifications/progress":
		return "ProgressNotification", true
	case "notifications/message":
		return "LoggingMessageNotification", true
	case "notifications/cancelled":
		return "CancelledNotification", true
	}
	return "", false
}

// CheckResponse validates a response to a request of the given method:
// a result against the method's response definition, an error against
// the definition of its code. Codes outside the protocol's own are held
// to the generic error shape.
func CheckResponse(method string, msg []byte) error {
	v, err := Default()
	if err != nil {
		return err
	}
	var env struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code int `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg, &env); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	switch {
	case env.Error != nil:
		message, object, ok := errorDef(env.Error.Code)
		switch {
		case !ok:
			return v.Check("JSONRPCErrorResponse", msg)
		case message != "":
			return v.Check(message, msg)
		default:
			return v.CheckMember("JSONRPCErrorResponse", "error", object, msg)
		}
	case env.Result != nil && isTasksMethod(method):
		return checkTasksResult(v, method, msg)
	case env.Result != nil && method == "tools/call" && isTaskHandle(env.Result):
		return checkCreateTaskResult(v, msg)
	case env.Result != nil:
		def, ok := ResponseDef(method)
		if !ok {
			return fmt.Errorf("no response definition for method %q", method)
		}
		return v.Check(def, msg)
	}
	return fmt.Errorf("neither result nor error: %s", clip(msg))
}

// CheckNotification validates a message a server sent as a notification,
// choosing the definition by its method. Anything that is not a
// notification a server may send fails.
func CheckNotification(msg []byte) error {
	v, err := Default()
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
	if env.ID != nil {
		return fmt.Errorf("expected a notification, got a message with an id: %s", clip(msg))
	}
	if env.Method == "notifications/tasks" {
		return checkTaskNotification(v, msg)
	}
	def, ok := NotificationDef(env.Method)
	if !ok {
		return fmt.Errorf("%q is not a notification a server may send", env.Method)
	}
	return v.Check(def, msg)
}

// ValidateResponse reports a test error when msg is not a valid response
// to a request of the given method.
func ValidateResponse(t testing.TB, method string, msg []byte) {
	t.Helper()
	if err := CheckResponse(method, msg); err != nil {
		t.Errorf("response to %s: %v\nmessage: %s", method, err, clip(msg))
	}
}

// ValidateNotification reports a test error when msg is not a valid
// server notification.
func ValidateNotification(t testing.TB, msg []byte) {
	t.Helper()
	if err := CheckNotification(msg); err != nil {
		t.Errorf("notification: %v\nmessage: %s", err, clip(msg))
	}
}
