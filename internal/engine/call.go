package engine

import (
	"errors"
	"fmt"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/jsonrpc"
	"tidings/mcp"
)

// Call is a decoded request, ready to be served. Only Parse makes one.
type Call struct {
	// Msg is the message as decoded.
	Msg *jsonrpc.Message
	// P holds the members of params the method reads.
	P Params
	// MetaErr and ParamErr keep what was wrong with _meta and with the
	// method's own members, reported in their turn (after the envelope's
	// checks, which take precedence) as -32602.
	MetaErr  error
	ParamErr error
}

// Params is the union of every method's params; one strict decode serves
// all methods, and each method reads the members it owns.
type Params struct {
	Meta           *mcp.RequestMeta          `json:"_meta"`
	Cursor         *string                   `json:"cursor"`
	Name           *string                   `json:"name"`
	URI            *string                   `json:"uri"`
	Arguments      jsontext.Value            `json:"arguments,omitzero"`
	InputResponses map[string]jsontext.Value `json:"inputResponses"`
	RequestState   *string                   `json:"requestState"`
	Notifications  *mcp.SubscriptionFilter   `json:"notifications"`
	Ref            *mcp.CompleteRef          `json:"ref"`
	Argument       *mcp.CompleteArgument     `json:"argument"`
	Context        *mcp.CompleteContext      `json:"context"`
	RequestID      jsontext.Value            `json:"requestId,omitzero"`
	// TaskID names the task of tasks/get, tasks/update and tasks/cancel.
	TaskID *string `json:"taskId"`
}

// Parse decodes a request's params. It returns a ready error reply when
// the params are not an object.
//
// Only the members the method uses are decoded, so a stray member of
// another method's shape cannot make a request fail.
func Parse(m *jsonrpc.Message) (*Call, *Reply) {
	c := &Call{Msg: m}
	var fields map[string]jsontext.Value
	if err := jsonrpc.UnmarshalParams(m.Params, &fields); err != nil {
		r := Fail(m.ID, jsonrpc.CodeInvalidParams, "Invalid params: "+err.Error(), nil)
		return nil, &r
	}
	if raw, ok := fields["_meta"]; ok && string(raw) != "null" {
		var meta mcp.RequestMeta
		if err := jsonrpc.UnmarshalParams(raw, &meta); err != nil || raw[0] != '{' {
			c.MetaErr = errors.New("_meta must be an object of the defined shape")
		} else {
			c.P.Meta = &meta
		}
	}
	for _, name := range paramFields(m.Method) {
		raw, ok := fields[name]
		if !ok || c.ParamErr != nil {
			continue
		}
		if err := c.P.decode(name, raw); err != nil {
			c.ParamErr = fmt.Errorf("%s: %w", name, err)
		}
	}
	return c, nil
}

// paramFields lists the members of params a method reads.
func paramFields(method string) []string {
	switch method {
	case mcp.MethodToolsList, mcp.MethodPromptsList, mcp.MethodResourcesList, mcp.MethodResourcesTemplates:
		return []string{"cursor"}
	case mcp.MethodToolsCall, mcp.MethodPromptsGet:
		return []string{"name", "arguments", "inputResponses", "requestState"}
	case mcp.MethodResourcesRead:
		return []string{"uri", "inputResponses", "requestState"}
	case mcp.MethodResourcesSubscribe, mcp.MethodResourcesUnsubscribe:
		return []string{"uri"}
	case mcp.MethodListen:
		return []string{"notifications"}
	case mcp.MethodComplete:
		return []string{"ref", "argument", "context"}
	case mcp.NotifyCancelled:
		return []string{"requestId"}
	case mcp.MethodTasksGet, mcp.MethodTasksCancel:
		return []string{"taskId"}
	case mcp.MethodTasksUpdate:
		return []string{"taskId", "inputResponses"}
	}
	return nil
}

// decode reads one member of params, strictly.
func (p *Params) decode(name string, raw jsontext.Value) error {
	var v any
	switch name {
	case "cursor":
		v = &p.Cursor
	case "name":
		v = &p.Name
	case "uri":
		v = &p.URI
	case "arguments":
		p.Arguments = raw
		return nil
	case "inputResponses":
		v = &p.InputResponses
	case "requestState":
		v = &p.RequestState
	case "notifications":
		v = &p.Notifications
	case "ref":
		v = &p.Ref
	case "argument":
		v = &p.Argument
	case "context":
		v = &p.Context
	case "requestId":
		p.RequestID = raw
		return nil
	case "taskId":
		v = &p.TaskID
	default:
		return nil
	}
	return jsonrpc.UnmarshalParams(raw, v)
}

// Method returns the call's method.
func (c *Call) Method() string { return c.Msg.Method }

// Version returns the protocol version the request's _meta declares.
// A request that declares one belongs to 2026-07-28 or later, whatever
// session it may also name: the version the request declares wins.
func (c *Call) Version() (string, bool) {
	if c.P.Meta == nil || c.P.Meta.ProtocolVersion == nil {
		return "", false
	}
	return *c.P.Meta.ProtocolVersion, true
}

// NameParam returns what Mcp-Name must carry for this call: the tool or
// prompt name, the resource URI, or the task id of the tasks extension's
// methods (which a balancer routes on). ok is false for other methods.
func (c *Call) NameParam() (value string, ok bool) {
	switch c.Msg.Method {
	case mcp.MethodToolsCall, mcp.MethodPromptsGet:
		if c.P.Name != nil {
			return *c.P.Name, true
		}
		return "", true
	case mcp.MethodResourcesRead:
		if c.P.URI != nil {
			return *c.P.URI, true
		}
		return "", true
	case mcp.MethodTasksGet, mcp.MethodTasksUpdate, mcp.MethodTasksCancel:
		if c.P.TaskID != nil {
			return *c.P.TaskID, true
		}
		return "", true
	}
	return "", false
}
