package schematest

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The tasks extension (io.modelcontextprotocol/tasks) is not part of the
// core schema: its shapes are checked here by hand, field by field, and
// what they embed (input requests, a tool result, a JSON-RPC error)
// against the core definitions. The checks hold a server to what the
// extension requires of every task it reports: the common fields with
// their types, the members that belong to the status and no others, and
// none of the fields the extension removed or never had (requestState, a
// nested task, ttl, pollInterval).

// taskStatuses are the extension's five statuses.
var taskStatuses = map[string]bool{"working": true, "input_required": true, "completed": true, "failed": true, "cancelled": true}

// isTasksMethod reports whether method is one of the extension's.
func isTasksMethod(method string) bool {
	return method == "tasks/get" || method == "tasks/update" || method == "tasks/cancel"
}

// checkTasksResult checks the result of a tasks/* method: a
// DetailedTask for tasks/get, an empty acknowledgement for the others;
// every one is a complete result.
func checkTasksResult(v *Validator, method string, msg []byte) error {
	if err := v.Check("JSONRPCResultResponse", msg); err != nil {
		return err
	}
	var env struct {
		Result map[string]json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(msg, &env); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	if rt := str(env.Result["resultType"]); rt != "complete" {
		return fmt.Errorf("%s result has resultType %s, want \"complete\"", method, env.Result["resultType"])
	}
	if method == "tasks/get" {
		return checkTask(v, env.Result, true)
	}
	for _, k := range []string{"taskId", "status", "result", "error", "inputRequests", "requestState"} {
		if _, ok := env.Result[k]; ok {
			return fmt.Errorf("%s acknowledgement carries %q", method, k)
		}
	}
	return nil
}

// isTaskHandle reports whether a result says it is a CreateTaskResult.
func isTaskHandle(result json.RawMessage) bool {
	var r struct {
		ResultType string `json:"resultType"`
	}
	return json.Unmarshal(result, &r) == nil && r.ResultType == "task"
}

// checkCreateTaskResult checks a tools/call answered with a task handle.
func checkCreateTaskResult(v *Validator, msg []byte) error {
	if err := v.Check("JSONRPCResultResponse", msg); err != nil {
		return err
	}
	var env struct {
		Result map[string]json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(msg, &env); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	return checkTask(v, env.Result, false)
}

// checkTaskNotification checks a notifications/tasks: its params are the
// DetailedTask.
func checkTaskNotification(v *Validator, msg []byte) error {
	if err := v.Check("JSONRPCNotification", msg); err != nil {
		return err
	}
	var env struct {
		Params map[string]json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(msg, &env); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	if env.Params == nil {
		return errors.New("notifications/tasks without params")
	}
	if meta, ok := env.Params["_meta"]; ok {
		if err := v.Check("NotificationMetaObject", meta); err != nil {
			return err
		}
	}
	return checkTask(v, env.Params, true)
}

// checkTask checks a task object: detailed for tasks/get and
// notifications/tasks, which carry what belongs to the status, and not
// for a CreateTaskResult, which carries none of it.
func checkTask(v *Validator, t map[string]json.RawMessage, detailed bool) error {
	if id := str(t["taskId"]); id == "" {
		return fmt.Errorf("taskId %s is not a non-empty string", t["taskId"])
	}
	status := str(t["status"])
	if !taskStatuses[status] {
		return fmt.Errorf("unknown status %s", t["status"])
	}
	for _, k := range []string{"createdAt", "lastUpdatedAt"} {
		if _, err := time.Parse(time.RFC3339Nano, str(t[k])); err != nil {
			return fmt.Errorf("%s %s is not an RFC 3339 timestamp", k, t[k])
		}
	}
	ttl, ok := t["ttlMs"]
	if !ok {
		return errors.New("ttlMs is missing (null means unlimited)")
	}
	if string(ttl) != "null" && !isInteger(ttl) {
		return fmt.Errorf("ttlMs %s is neither an integer nor null", ttl)
	}
	if p, ok := t["pollIntervalMs"]; ok && !isInteger(p) {
		return fmt.Errorf("pollIntervalMs %s is not an integer", p)
	}
	if m, ok := t["statusMessage"]; ok && str(m) == "" && string(m) != `""` {
		return fmt.Errorf("statusMessage %s is not a string", m)
	}
	for _, k := range []string{"requestState", "task", "ttl", "pollInterval"} {
		if _, ok := t[k]; ok {
			return fmt.Errorf("a task carries %q, which the extension does not define", k)
		}
	}
	members := map[string]string{"inputRequests": "input_required", "result": "completed", "error": "failed"}
	for k, owner := range members {
		_, has := t[k]
		switch {
		case has && (!detailed || status != owner):
			return fmt.Errorf("a %s task carries %q (detailed %v)", status, k, detailed)
		case !has && detailed && status == owner:
			return fmt.Errorf("a %s task lacks %q", status, k)
		}
	}
	if !detailed {
		return nil
	}
	switch status {
	case "input_required":
		var reqs map[string]json.RawMessage
		if err := json.Unmarshal(t["inputRequests"], &reqs); err != nil || len(reqs) == 0 {
			return fmt.Errorf("inputRequests %s is not a non-empty object", t["inputRequests"])
		}
		if err := v.Check("InputRequests", t["inputRequests"]); err != nil {
			return err
		}
	case "completed":
		// The inlined result is the tool's result without the envelope's
		// resultType, which the core definition requires.
		var res map[string]json.RawMessage
		if err := json.Unmarshal(t["result"], &res); err != nil {
			return fmt.Errorf("result %s is not an object", t["result"])
		}
		if _, ok := res["resultType"]; !ok {
			res["resultType"] = json.RawMessage(`"complete"`)
		}
		b, _ := json.Marshal(res)
		if err := v.Check("CallToolResult", b); err != nil {
			return err
		}
	case "failed":
		if err := v.Check("Error", t["error"]); err != nil {
			return err
		}
	}
	return nil
}

// str returns the JSON string raw holds, or "" when it holds none.
func str(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}

// isInteger reports whether raw is a JSON number without a fraction.
func isInteger(raw json.RawMessage) bool {
	if len(raw) == 0 || raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return false // a string would pass as a json.Number
	}
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return false
	}
	_, err := n.Int64()
	return err == nil
}
