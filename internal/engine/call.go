package engine

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/jsonscan"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// Call is a decoded request, ready to be served. Only Parse makes one.
type Call struct {
	// Msg is the message as decoded.
	Msg *jsonrpc.Message
	// M is the method's entry in the method table; its zero value (no
	// handler, no era) for a method the server does not know.
	M Method
	// P holds the members of params the method reads.
	P Params
	// MetaErr and ParamErr keep what was wrong with _meta and with the
	// method's own members, reported in their turn (after the envelope's
	// checks, which take precedence) as -32602.
	MetaErr  error
	ParamErr error

	// declared is the protocol version _meta declares, read even from a
	// _meta that is otherwise malformed: it decides the era.
	declared *string
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

// Parse decodes a request's params, once, and the protocol era it
// belongs to (see Era). It returns a ready error reply when the params
// are not an object; the call is returned even then, knowing its method
// and nothing of its params, so that a transport can decide the era
// before it reports the error in its turn.
//
// Only the members the method uses are decoded, so a stray member of
// another method's shape cannot make a request fail.
func Parse(m *jsonrpc.Message) (*Call, *Reply) { return parse(m, true) }

// parse is Parse; scan false has every params decoded into a map, the
// reading scanParams is held to.
func parse(m *jsonrpc.Message, scan bool) (*Call, *Reply) {
	c := &Call{Msg: m}
	c.M, _ = Lookup(m.Method)
	var fields fields
	ok := false
	if scan {
		fields, ok = scanParams(m.Params)
	}
	if !ok {
		var all map[string]jsontext.Value
		if err := jsonrpc.UnmarshalParams(m.Params, &all); err != nil {
			r := Fail(m.ID, jsonrpc.CodeInvalidParams, "Invalid params: "+err.Error(), nil)
			return c, &r
		}
		fields = fieldsOf(all)
	}
	if raw, ok := fields.get("_meta"); ok && string(raw) != "null" {
		var meta mcp.RequestMeta
		if scan && scanMeta(raw, &meta) {
			c.P.Meta = &meta
			c.declared = meta.ProtocolVersion
		} else if err := jsonrpc.UnmarshalParams(raw, &meta); err != nil || raw[0] != '{' {
			c.MetaErr = errors.New("_meta must be an object of the defined shape")
			var v struct {
				Version *string `json:"io.modelcontextprotocol/protocolVersion"`
			}
			_ = jsonrpc.UnmarshalParams(raw, &v)
			c.declared = v.Version
		} else {
			c.P.Meta = &meta
			c.declared = meta.ProtocolVersion
		}
	}
	for _, name := range c.M.Params {
		raw, ok := fields.get(name)
		if !ok || c.ParamErr != nil {
			continue
		}
		if err := c.P.decode(name, raw); err != nil {
			c.ParamErr = fmt.Errorf("%s: %w", name, err)
		}
	}
	return c, nil
}

// maxScanned is the most members of params scanParams reads; params
// with more are decoded into a map.
const maxScanned = 12

// member is one member of params: its name and its value as received.
type member struct {
	name []byte
	raw  jsontext.Value
}

// fields are the members of params.
type fields struct {
	n    int
	list [maxScanned]member
	// more holds the members past the first maxScanned, if any.
	more []member
}

func (f *fields) get(name string) (jsontext.Value, bool) {
	for _, m := range f.list[:f.n] {
		if string(m.name) == name {
			return m.raw, true
		}
	}
	for _, m := range f.more {
		if string(m.name) == name {
			return m.raw, true
		}
	}
	return nil, false
}

func (f *fields) add(name []byte, raw jsontext.Value) {
	if f.n < maxScanned {
		f.list[f.n] = member{name, raw}
		f.n++
		return
	}
	f.more = append(f.more, member{name, raw})
}

// fieldsOf holds the members of params the strict decoder read.
func fieldsOf(all map[string]jsontext.Value) fields {
	var f fields
	for name, raw := range all {
		f.add([]byte(name), raw)
	}
	return f
}

// scanParams reads the members of params as slices of it, without a
// map: params of a request as the hot path sees it (an object of a few
// members with plain names). ok is false for params it leaves to the
// strict decoder: not valid JSON, not an object, a name with an escape.
func scanParams(params jsontext.Value) (f fields, ok bool) {
	if len(params) == 0 {
		return f, true // as the strict decoder reads absent params: {}
	}
	if !params.IsValid() || params.Kind() != '{' {
		return f, false
	}
	o := jsonscan.NewObject(params)
	for {
		name, raw, more := o.Next()
		if !more {
			return f, true
		}
		if bytes.IndexByte(name, '\\') >= 0 {
			return fields{}, false
		}
		f.add(name, raw)
	}
}

// scanMeta reads the common _meta, the members RequestMeta names with
// values of their types, without decoding the object by reflection. It
// returns false for a _meta it leaves to the strict decoder (one with a
// member of its own, an escaped name, a null), having read nothing
// that matters: meta is then decoded afresh.
func scanMeta(raw jsontext.Value, meta *mcp.RequestMeta) bool {
	if raw.Kind() != '{' {
		return false
	}
	o := jsonscan.NewObject(raw)
	for {
		name, v, more := o.Next()
		if !more {
			return true
		}
		if string(v) == "null" {
			return false
		}
		switch string(name) {
		case "io.modelcontextprotocol/protocolVersion":
			s, ok := jsonscan.String(v)
			if !ok {
				return false
			}
			version := mcp.Version // the common case, without a copy
			if string(s) != version {
				version = string(s)
			}
			meta.ProtocolVersion = &version
		case "io.modelcontextprotocol/clientCapabilities":
			caps := new(mcp.ClientCaps)
			if string(v) != "{}" && (v[0] != '{' || jsonrpc.UnmarshalParams(v, caps) != nil) {
				return false
			}
			meta.ClientCapabilities = caps
		case "io.modelcontextprotocol/clientInfo":
			info := new(mcp.Implementation)
			if v[0] != '{' || jsonrpc.UnmarshalParams(v, info) != nil {
				return false
			}
			meta.ClientInfo = info
		case "io.modelcontextprotocol/logLevel":
			s, ok := jsonscan.String(v)
			if !ok {
				return false
			}
			level := mcp.LogLevel(s)
			meta.LogLevel = &level
		case "progressToken":
			meta.ProgressToken = v
		case mcp.MetaTraceParent, mcp.MetaTraceState:
			s, ok := jsonscan.String(v)
			if !ok {
				return false
			}
			if string(name) == mcp.MetaTraceParent {
				meta.TraceParent = string(s)
			} else {
				meta.TraceState = string(s)
			}
		default:
			return false
		}
	}
}

// decode reads one member of params, strictly.
func (p *Params) decode(name string, raw jsontext.Value) error {
	var v any
	switch name {
	case "cursor":
		return decodeString(&p.Cursor, raw)
	case "name":
		return decodeString(&p.Name, raw)
	case "uri":
		return decodeString(&p.URI, raw)
	case "arguments":
		p.Arguments = raw
		return nil
	case "inputResponses":
		v = &p.InputResponses
	case "requestState":
		return decodeString(&p.RequestState, raw)
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
		return decodeString(&p.TaskID, raw)
	default:
		return nil
	}
	return jsonrpc.UnmarshalParams(raw, v)
}

// decodeString reads a string member strictly: a string without escapes
// as it is, anything else through the strict decoder.
func decodeString(dst **string, raw jsontext.Value) error {
	if s, ok := jsonscan.String(raw); ok {
		v := string(s)
		*dst = &v
		return nil
	}
	return jsonrpc.UnmarshalParams(raw, dst)
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

// Era returns the protocol era the request belongs to. The version a
// request declares wins: one whose _meta declares a version, or whose
// transport declares (beside the body) a version that is not of an
// earlier era, is a 2026-07-28 request, even if it also names a session;
// any other is a 2025-11-25 session's, or an initialize. declared is the
// transport's version, "" when it has none (stdio) or the request carries
// none.
func (c *Call) Era(declared string) Eras {
	if declared != "" && !IsLegacyVersion(declared) {
		return Modern
	}
	if c.declared != nil {
		return Modern
	}
	return Legacy
}

// LegacyVersions are the earlier protocol versions served through
// 2025-11-25 sessions.
func LegacyVersions() []string { return []string{mcp.LegacyVersion, "2025-06-18", "2025-03-26"} }

// IsLegacyVersion reports whether v is served through sessions.
func IsLegacyVersion(v string) bool { return slices.Contains(LegacyVersions(), v) }

// NameParam returns what Mcp-Name must carry for this call: the tool or
// prompt name, the resource URI, or the task id of the tasks extension's
// methods (which a balancer routes on), as the method table says. ok is
// false for methods without one.
func (c *Call) NameParam() (value string, ok bool) {
	var v *string
	switch c.M.MCPName {
	case NoName:
		return "", false
	case FromName:
		v = c.P.Name
	case FromURI:
		v = c.P.URI
	case FromTaskID:
		v = c.P.TaskID
	}
	if v == nil {
		return "", true
	}
	return *v, true
}
