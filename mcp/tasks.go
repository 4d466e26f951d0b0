package mcp

import "github.com/go-json-experiment/json/jsontext"

// This file is the wire vocabulary of the tasks extension
// (io.modelcontextprotocol/tasks): a tools/call may be answered with a
// task handle, which the client then follows with tasks/get or over
// subscriptions/listen until the task ends.

// ExtensionTasks names the tasks extension in capabilities.extensions,
// on the server's side and in a request's client capabilities.
const ExtensionTasks = "io.modelcontextprotocol/tasks"

// DeclaresTasks reports whether extensions, the capabilities.extensions
// of a client or of a server, declare the tasks extension. A value of
// JSON null declares nothing: it is read here once, so that a server, a
// client and a gateway in front of an upstream all read it alike.
func DeclaresTasks(extensions map[string]jsontext.Value) bool {
	v, ok := extensions[ExtensionTasks]
	return ok && string(v) != "null"
}

// The methods and the notification of the tasks extension.
const (
	MethodTasksGet    = "tasks/get"
	MethodTasksUpdate = "tasks/update"
	MethodTasksCancel = "tasks/cancel"
	NotifyTasks       = "notifications/tasks"
)

// TaskStatus is where a task is in its life.
type TaskStatus string

// The five task statuses. Completed, failed and cancelled are terminal:
// a task in one of them never changes again.
const (
	TaskWorking       TaskStatus = "working"
	TaskInputRequired TaskStatus = "input_required"
	TaskCompleted     TaskStatus = "completed"
	TaskFailed        TaskStatus = "failed"
	TaskCancelled     TaskStatus = "cancelled"
)

// Terminal reports whether a task in status s is finished for good.
func (s TaskStatus) Terminal() bool {
	return s == TaskCompleted || s == TaskFailed || s == TaskCancelled
}

// Task is a task as the server reports it: the body of a
// CreateTaskResult (with resultType "task"), of a tasks/get result and
// of a notifications/tasks. Result, Error and InputRequests are set only
// in the status they belong to, and never in a CreateTaskResult.
type Task struct {
	TaskID        string     `json:"taskId"`
	Status        TaskStatus `json:"status"`
	StatusMessage string     `json:"statusMessage,omitempty"`
	// CreatedAt and LastUpdatedAt are RFC 3339 timestamps.
	CreatedAt     string `json:"createdAt"`
	LastUpdatedAt string `json:"lastUpdatedAt"`
	// TTLMs is how long after creation the server keeps the task, in
	// milliseconds; nil means without limit (sent as null).
	TTLMs *int64 `json:"ttlMs"`
	// PollIntervalMs is how often the server would like to be polled.
	PollIntervalMs int64 `json:"pollIntervalMs,omitzero"`
	// InputRequests, in input_required, are what the task waits for,
	// keyed uniquely over the task's life.
	InputRequests map[string]InputRequest `json:"inputRequests,omitempty"`
	// Result, in completed, is the result the request would have had
	// (for tools/call, a CallToolResult, which may have isError set).
	Result jsontext.Value `json:"result,omitzero"`
	// Error, in failed, is the JSON-RPC error the request ended with.
	Error jsontext.Value `json:"error,omitzero"`
}
