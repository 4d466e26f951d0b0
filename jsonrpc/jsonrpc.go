// Package jsonrpc reads and writes JSON-RPC 2.0 messages as MCP uses them.
//
// Decoding is strict on purpose: member names match case-sensitively
// ("Method" is not "method"), duplicate names are rejected, batches are
// rejected, and nesting depth is bounded before any allocation happens.
// Lenient decoders that fold case have let attackers smuggle a second
// "method" past validating proxies; this package refuses such input with a
// clear error instead of guessing.
package jsonrpc

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/jsonscan"
)

// version is the only JSON-RPC version MCP speaks.
const version = "2.0"

// Code is a JSON-RPC error code: the standard ones below, MCP's (in
// package mcp), or a server's own.
type Code int

// Standard JSON-RPC error codes.
const (
	CodeParseError     Code = -32700
	CodeInvalidRequest Code = -32600
	CodeMethodNotFound Code = -32601
	CodeInvalidParams  Code = -32602
	CodeInternalError  Code = -32603
)

// String names a standard code ("invalid params"), or gives its number.
func (c Code) String() string {
	switch c {
	case CodeParseError:
		return "parse error"
	case CodeInvalidRequest:
		return "invalid request"
	case CodeMethodNotFound:
		return "method not found"
	case CodeInvalidParams:
		return "invalid params"
	case CodeInternalError:
		return "internal error"
	}
	return strconv.Itoa(int(c))
}

// DefaultMaxDepth bounds object/array nesting in a decoded message. MCP
// messages are shallow; deep nesting is an attack on recursive decoders.
const DefaultMaxDepth = 128

// ID is a JSON-RPC request id: a string or an integer, kept as its raw JSON
// text so that it is echoed back exactly as the peer sent it (2 stays 2,
// "2" stays "2"). The zero ID means "absent".
type ID struct{ raw string }

// StringID returns an ID holding the string s.
func StringID(s string) ID {
	b, _ := jsontext.AppendQuote(nil, s)
	return ID{raw: string(b)}
}

// IntID returns an ID holding the integer n.
func IntID(n int64) ID { return ID{raw: strconv.FormatInt(n, 10)} }

// IsZero reports whether the id is absent.
func (id ID) IsZero() bool { return id.raw == "" }

// Raw returns the id's JSON text ("" when absent).
func (id ID) Raw() string { return id.raw }

// String returns a readable form for logs and map keys.
func (id ID) String() string { return id.raw }

// MarshalJSON writes the id as it was received.
func (id ID) MarshalJSON() ([]byte, error) {
	if id.raw == "" {
		return []byte("null"), nil
	}
	return []byte(id.raw), nil
}

// UnmarshalJSON accepts a string or an integer and rejects everything else,
// including null, fractions and exponents.
func (id *ID) UnmarshalJSON(b []byte) error {
	v, err := parseID(b)
	if err != nil {
		return err
	}
	*id = v
	return nil
}

func parseID(b []byte) (ID, error) {
	b = bytes.TrimSpace(b)
	if len(b) == 0 {
		return ID{}, errors.New("empty id")
	}
	switch b[0] {
	case '"':
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return ID{}, fmt.Errorf("id: %w", err)
		}
		return StringID(s), nil
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		n, err := strconv.ParseInt(string(b), 10, 64)
		if err != nil {
			return ID{}, fmt.Errorf("id must be a string or an integer, got %s", truncate(b))
		}
		return IntID(n), nil
	default:
		return ID{}, fmt.Errorf("id must be a string or an integer, got %s", truncate(b))
	}
}

// Error is a JSON-RPC error object. It implements error so handlers can
// return it directly and have its code reach the peer.
type Error struct {
	Code    Code           `json:"code"`
	Message string         `json:"message"`
	Data    jsontext.Value `json:"data,omitempty"`
	// cause is what went wrong underneath (Wrap), for errors.Is and
	// errors.As on this side; the peer is told only Message.
	cause error
}

// Error renders the code, message and (shortened) data, for logs: the
// peer receives the object itself, not this text.
func (e *Error) Error() string {
	if len(e.Data) > 0 {
		return fmt.Sprintf("jsonrpc error %d: %s (%s)", e.Code, e.Message, truncate(e.Data))
	}
	return fmt.Sprintf("jsonrpc error %d: %s", e.Code, e.Message)
}

// Unwrap returns the error's cause, if Wrap gave it one.
func (e *Error) Unwrap() error { return e.cause }

// Wrap builds an Error of code whose message is prefix and then cause's
// text, keeping cause for errors.Is and errors.As: "upstream a failed: "
// and the upstream's own error, say.
func Wrap(code Code, prefix string, cause error) *Error {
	return &Error{Code: code, Message: prefix + cause.Error(), cause: cause}
}

// CodeOf returns the code of the first *Error in err's chain, or
// CodeInternalError when there is none (err is not a protocol error, so
// what a peer is told of it is an internal one); 0 for a nil err.
func CodeOf(err error) Code {
	if err == nil {
		return 0
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e.Code
	}
	return CodeInternalError
}

// NewError builds an Error; data, when not nil, is marshalled as JSON.
func NewError(code Code, message string, data any) *Error {
	e := &Error{Code: code, Message: message}
	if data != nil {
		b, err := json.Marshal(data, json.Deterministic(true))
		if err == nil {
			e.Data = b
		}
	}
	return e
}

// Message is any one JSON-RPC message. Exactly one of the shapes holds:
// a request (Method and ID), a notification (Method, no ID), or a response
// (ID with Result or Error).
type Message struct {
	ID     ID
	Method string
	Params jsontext.Value
	Result jsontext.Value
	Error  *Error
}

// IsRequest reports whether m is a request (it has a method and an id).
func (m *Message) IsRequest() bool { return m.Method != "" && !m.ID.IsZero() }

// IsNotification reports whether m is a notification.
func (m *Message) IsNotification() bool { return m.Method != "" && m.ID.IsZero() }

// IsResponse reports whether m is a response.
func (m *Message) IsResponse() bool { return m.Method == "" }

// wire is the strict on-the-wire envelope. Names match case-sensitively.
type wire struct {
	JSONRPC *string        `json:"jsonrpc"`
	ID      jsontext.Value `json:"id,omitzero"`
	Method  *string        `json:"method"`
	Params  jsontext.Value `json:"params,omitzero"`
	Result  jsontext.Value `json:"result,omitzero"`
	Error   *Error         `json:"error"`
	Unknown jsontext.Value `json:",embed"`
}

// DecodeError says why a message could not be decoded. Code is the JSON-RPC
// code the peer should get; ID is set when the id could be read.
type DecodeError struct {
	Code Code
	ID   ID
	Err  error
}

// Error returns the reason alone; RPCError adds the JSON-RPC wording.
func (e *DecodeError) Error() string { return e.Err.Error() }

// Unwrap exposes the reason, so callers can match it with errors.Is.
func (e *DecodeError) Unwrap() error { return e.Err }

// RPCError turns the decode failure into the error object to send back.
func (e *DecodeError) RPCError() *Error {
	msg := "Parse error"
	if e.Code == CodeInvalidRequest {
		msg = "Invalid Request"
	}
	return &Error{Code: e.Code, Message: msg + ": " + e.Err.Error(), cause: e.Err}
}

// Decode parses one JSON-RPC message. maxDepth <= 0 means DefaultMaxDepth.
func Decode(b []byte, maxDepth int) (*Message, error) {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	// Only JSON's own whitespace: bytes.TrimSpace would also strip
	// Unicode spaces such as U+00A0 and accept text that is not JSON.
	b = bytes.Trim(b, " \t\r\n")
	if len(b) == 0 {
		return nil, &DecodeError{Code: CodeParseError, Err: errors.New("empty message")}
	}
	if err := checkDepth(b, maxDepth); err != nil {
		return nil, &DecodeError{Code: CodeParseError, Err: err}
	}
	switch b[0] {
	case '[':
		if !jsontext.Value(b).IsValid() {
			return nil, &DecodeError{Code: CodeParseError, Err: errors.New("not valid JSON")}
		}
		return nil, &DecodeError{Code: CodeInvalidRequest, Err: errors.New("batches are not supported; send one message per request")}
	case '{':
	default:
		if !jsontext.Value(b).IsValid() {
			return nil, &DecodeError{Code: CodeParseError, Err: errors.New("not valid JSON")}
		}
		return nil, &DecodeError{Code: CodeInvalidRequest, Err: errors.New("a message must be a JSON object")}
	}
	if m, ok := decodeRequest(b); ok {
		return m, nil
	}
	return decodeStrict(b)
}

// decodeStrict reads b, a JSON object within the depth limit, into a
// message, or says why it is none.
func decodeStrict(b []byte) (*Message, error) {
	var w wire
	if err := json.Unmarshal(b, &w); err != nil {
		if !jsontext.Value(b).IsValid() {
			return nil, &DecodeError{Code: CodeParseError, Err: fmt.Errorf("not valid JSON: %w", cleanErr(err))}
		}
		return nil, &DecodeError{Code: CodeInvalidRequest, Err: cleanErr(err)}
	}
	m := &Message{Params: w.Params, Result: w.Result, Error: w.Error}
	var idErr error
	if len(w.ID) > 0 && string(w.ID) != "null" {
		m.ID, idErr = parseID(w.ID)
	}
	fail := func(err error) (*Message, error) {
		return nil, &DecodeError{Code: CodeInvalidRequest, ID: m.ID, Err: err}
	}
	if name := caseVariant(w.Unknown); name != "" {
		return fail(fmt.Errorf("member names are case-sensitive: %q is not a JSON-RPC member", name))
	}
	if w.JSONRPC == nil || *w.JSONRPC != version {
		return fail(errors.New(`"jsonrpc" must be "2.0"`))
	}
	if idErr != nil {
		return fail(idErr)
	}
	if w.Method != nil {
		if *w.Method == "" {
			return fail(errors.New(`"method" must not be empty`))
		}
		if w.Result != nil || w.Error != nil {
			return fail(errors.New("a request must not carry result or error"))
		}
		if len(w.Params) > 0 && w.Params[0] != '{' {
			return fail(errors.New(`"params" must be an object`))
		}
		m.Method = *w.Method
		if len(w.ID) > 0 && string(w.ID) == "null" {
			return fail(errors.New("id must not be null"))
		}
		return m, nil
	}
	if (w.Result != nil) == (w.Error != nil) {
		return fail(errors.New("a response needs exactly one of result or error"))
	}
	return m, nil
}

// decodeRequest reads the common message, a well-formed request or
// notification, without reflection: members jsonrpc "2.0", method, id
// and params alone, none of their names escaped. ok is false for
// anything else, which Decode then reads strictly, and refuses with the
// reason; a message it reads means what the strict reading would make
// of it.
func decodeRequest(b []byte) (_ *Message, ok bool) {
	if !jsontext.Value(b).IsValid() {
		return nil, false
	}
	var ver, method, id, params []byte
	o := jsonscan.NewObject(b)
	for {
		name, v, more := o.Next()
		if !more {
			break
		}
		switch string(name) {
		case "jsonrpc":
			ver = v
		case "method":
			method = v
		case "id":
			id = v
		case "params":
			params = v
		default:
			return nil, false
		}
	}
	if v, ok := jsonscan.String(ver); !ok || string(v) != version {
		return nil, false
	}
	name, ok := jsonscan.String(method)
	if !ok || len(name) == 0 || (params != nil && params[0] != '{') {
		return nil, false
	}
	m := &Message{Method: string(name)}
	if id != nil {
		var err error
		if string(id) == "null" {
			return nil, false
		}
		if m.ID, err = parseID(id); err != nil {
			return nil, false
		}
	}
	if params != nil {
		// A copy: the message outlives b, which a transport may reuse.
		m.Params = bytes.Clone(params)
	}
	return m, true
}

// caseVariant returns the first unknown member name that differs from a
// JSON-RPC member only by case, so the peer learns why it was refused.
func caseVariant(unknown jsontext.Value) string {
	if len(unknown) == 0 {
		return ""
	}
	var m map[string]jsontext.Value
	if json.Unmarshal(unknown, &m) != nil {
		return ""
	}
	for name := range m {
		// EqualFold, not ToLower: lenient decoders fold with Unicode
		// rules, so "paramſ" (long s) is "params" to them.
		for _, member := range [...]string{"jsonrpc", "id", "method", "params", "result", "error"} {
			if strings.EqualFold(name, member) {
				return name
			}
		}
	}
	return ""
}

// checkDepth returns an error when b nests objects or arrays deeper than max.
// It scans bytes without allocating, so it is safe to run on hostile input
// before any real decoding.
func checkDepth(b []byte, max int) error {
	depth := 0
	inString := false
	for i := 0; i < len(b); i++ {
		c := b[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '{', '[':
			depth++
			if depth > max {
				return fmt.Errorf("nesting deeper than %d levels", max)
			}
		case '}', ']':
			depth--
		}
	}
	return nil
}

// UnmarshalParams decodes params strictly into v: case-sensitive names,
// no duplicates, unknown members allowed (the spec lets peers add fields).
func UnmarshalParams(params jsontext.Value, v any) error {
	if len(params) == 0 {
		params = jsontext.Value("{}")
	}
	if err := json.Unmarshal(params, v); err != nil {
		return cleanErr(err)
	}
	return nil
}

// Marshal encodes v the way every tidings message is encoded: compact,
// deterministic map order, no HTML escaping surprises.
func Marshal(v any) ([]byte, error) {
	return json.Marshal(v, json.Deterministic(true))
}

// AppendResponse appends a complete success response with the given raw
// result to dst. It is the allocation-free path for hot methods.
func AppendResponse(dst []byte, id ID, result []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = appendID(dst, id)
	dst = append(dst, `,"result":`...)
	dst = append(dst, result...)
	return append(dst, '}')
}

// AppendErrorResponse appends an error response to dst. A zero id (one
// that could not be read) is left out rather than written as null: plain
// JSON-RPC 2.0 asks for null, but MCP's schema types the member as an
// optional string or integer, and strict MCP clients reject a null id
// before the application ever sees the error.
func AppendErrorResponse(dst []byte, id ID, e *Error) []byte {
	dst = append(dst, `{"jsonrpc":"2.0",`...)
	if !id.IsZero() {
		dst = append(dst, `"id":`...)
		dst = append(dst, id.raw...)
		dst = append(dst, ',')
	}
	dst = append(dst, `"error":`...)
	b, err := json.Marshal(e, json.Deterministic(true))
	if err != nil {
		b = []byte(`{"code":-32603,"message":"Internal error"}`)
	}
	dst = append(dst, b...)
	return append(dst, '}')
}

// AppendNotification appends a notification with raw params to dst.
func AppendNotification(dst []byte, method string, params []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","method":`...)
	dst, _ = jsontext.AppendQuote(dst, method)
	if len(params) > 0 {
		dst = append(dst, `,"params":`...)
		dst = append(dst, params...)
	}
	return append(dst, '}')
}

// AppendRequest appends a request with raw params to dst.
func AppendRequest(dst []byte, id ID, method string, params []byte) []byte {
	dst = append(dst, `{"jsonrpc":"2.0","id":`...)
	dst = appendID(dst, id)
	dst = append(dst, `,"method":`...)
	dst, _ = jsontext.AppendQuote(dst, method)
	if len(params) > 0 {
		dst = append(dst, `,"params":`...)
		dst = append(dst, params...)
	}
	return append(dst, '}')
}

func appendID(dst []byte, id ID) []byte {
	if id.IsZero() {
		return append(dst, "null"...)
	}
	return append(dst, id.raw...)
}

// cleanErr strips the decoder's Go type names so messages read well on the
// wire, and never echoes large chunks of the offending input.
func cleanErr(err error) error {
	var se *json.SemanticError
	if errors.As(err, &se) {
		if se.JSONPointer != "" {
			// The pointer holds the peer's member names, which may be
			// arbitrarily long: echo only the start of it.
			ptr := clip(string(se.JSONPointer))
			if se.Err != nil {
				return fmt.Errorf("invalid value at %s: %v", ptr, se.Err)
			}
			return fmt.Errorf("invalid value at %s: expected %s", ptr, kindName(se.JSONKind))
		}
		if se.Err != nil {
			return se.Err
		}
	}
	var syn *jsontext.SyntacticError
	if errors.As(err, &syn) {
		return fmt.Errorf("syntax error at byte %d: %v", syn.ByteOffset, syn.Err)
	}
	return err
}

func kindName(k jsontext.Kind) string {
	switch k {
	case '"':
		return "a different type than string"
	case '0':
		return "a different type than number"
	case 't', 'f':
		return "a different type than boolean"
	case '{':
		return "a different type than object"
	case '[':
		return "a different type than array"
	case 'n':
		return "a non-null value"
	}
	return "another type"
}

func truncate(b []byte) string { return clip(string(b)) }

// maxEcho bounds how much of the peer's own input an error message
// repeats back.
const maxEcho = 64

// clip shortens s to at most maxEcho bytes, cutting at a rune boundary and
// replacing invalid UTF-8, so that the message can always be marshalled
// (a split rune would make the error response itself fail to encode).
func clip(s string) string {
	if len(s) > maxEcho {
		n := maxEcho
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n] + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}
