package jsonrpc_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/jsonrpc"
)

// decodeSeeds cover every shape and the tricks a hostile peer would try:
// case variants (including Unicode folds), duplicates, escapes, odd ids,
// batches, deep nesting and non-JSON whitespace.
var decodeSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
	`{"jsonrpc":"2.0","id":"abc","method":"tools/call","params":{"name":"x","arguments":{"a":[1,2,{"b":null}]}}}`,
	`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`,
	`{"jsonrpc":"2.0","id":7,"result":{"resultType":"complete"}}`,
	`{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error","data":{"x":1}}}`,
	`{"jsonrpc":"2.0","id":8,"error":{"code":-32600,"message":"m","data":null}}`,
	` {"jsonrpc":"2.0","id":-0,"method":"m"}` + "\r\n",
	`{"jsonrpc":"2.0","id":1.5,"method":"m"}`,
	`{"jsonrpc":"2.0","id":1e3,"method":"m"}`,
	`{"jsonrpc":"2.0","id":true,"method":"m"}`,
	`{"jsonrpc":"2.0","id":null,"method":"m"}`,
	`{"jsonrpc":"2.0","id":99999999999999999999,"method":"m"}`,
	`{"jsonrpc":"2.0","id":"\u0041\ud83d\ude00","method":"m"}`,
	`{"jsonrpc":"2.0","id":1,"Method":"m"}`,
	`{"jsonrpc":"2.0","id":1,"method":"a","METHOD":"b"}`,
	`{"jsonrpc":"2.0","id":1,"method":"a","params":{},"paramſ":{"x":1}}`,
	`{"jſonrpc":"1.0","jsonrpc":"2.0","id":1,"method":"m"}`,
	`{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}`,
	`{"jsonrpc":"2.0","id":1,"\u006dethod":"m"}`,
	`{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}`,
	`{"jsonrpc":"2.0","id":1,"method":"m","params":null}`,
	`{"jsonrpc":"2.0","id":1,"method":"","params":{}}`,
	`{"jsonrpc":"1.0","id":1,"method":"m"}`,
	`{"id":1,"method":"m"}`,
	`{"jsonrpc":"2.0","id":1,"result":1,"error":{"code":1,"message":"m"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"m","result":1}`,
	`{"jsonrpc":"2.0","id":1}`,
	`[{"jsonrpc":"2.0","id":1,"method":"m"}]`,
	`[1,`,
	`"just a string"`,
	`null`,
	`{"jsonrpc":"2.0","id":1,"method":"m"`,
	"\u00a0{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\"}",
	"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\"}",
	`{"jsonrpc":"2.0","id":1,"method":"m","params":{"x":` + strings.Repeat("[", 200) + strings.Repeat("]", 200) + `}}`,
	`{"jsonrpc":"2.0","id":1,"method":"m","params":{"s":"` + strings.Repeat(`\"[{`, 100) + `"}}`,
	``,
}

// FuzzDecode checks that Decode never panics, that every refusal carries
// a JSON-RPC code matching the kind of fault, that an accepted message
// re-encodes to something that decodes to the same message, and that no
// member name differing from a JSON-RPC member only by case (in any
// Unicode folding) is ever accepted.
func FuzzDecode(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := jsonrpc.Decode(in, 0)
		trimmed := bytes.Trim(in, " \t\r\n")
		valid := jsontext.Value(trimmed).IsValid()
		names, strictErr := topLevelNames(trimmed)

		if err != nil {
			var de *jsonrpc.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("error %T is not a *DecodeError: %v", err, err)
			}
			switch {
			case de.Code != jsonrpc.CodeParseError && de.Code != jsonrpc.CodeInvalidRequest:
				t.Fatalf("code %d, want -32700 or -32600", de.Code)
			case !valid && de.Code != jsonrpc.CodeParseError:
				t.Fatalf("invalid JSON refused with %d, want -32700: %v", de.Code, err)
			case valid && de.Code == jsonrpc.CodeParseError && jsonrpc.CheckDepth(trimmed, jsonrpc.DefaultMaxDepth) == nil:
				t.Fatalf("valid, shallow JSON refused as a parse error: %v", err)
			}
			if de.RPCError() == nil || de.RPCError().Code != de.Code {
				t.Fatalf("RPCError does not carry the code %d", de.Code)
			}
			return
		}

		// Accepted: the input is strict JSON, an object, with exact names.
		if !valid || strictErr != nil {
			t.Fatalf("accepted input that is not strict JSON (%v)", strictErr)
		}
		for _, n := range names {
			for _, member := range []string{"jsonrpc", "id", "method", "params", "result", "error"} {
				if n != member && strings.EqualFold(n, member) {
					t.Fatalf("accepted a message with member %q, a case variant of %q", n, member)
				}
			}
		}
		shapes := 0
		for _, ok := range []bool{m.IsRequest(), m.IsNotification(), m.IsResponse()} {
			if ok {
				shapes++
			}
		}
		if shapes != 1 {
			t.Fatalf("message has %d shapes: %+v", shapes, m)
		}
		if m.IsResponse() && (m.Result == nil) == (m.Error == nil) {
			t.Fatalf("response with neither or both of result and error: %+v", m)
		}

		re := reencode(m)
		m2, err := jsonrpc.Decode(re, 0)
		if err != nil {
			t.Fatalf("re-encoded message does not decode: %v\n%s", err, re)
		}
		if m.ID.Raw() != m2.ID.Raw() || m.Method != m2.Method {
			t.Fatalf("id/method changed: %q %q → %q %q", m.ID.Raw(), m.Method, m2.ID.Raw(), m2.Method)
		}
		if m.IsResponse() != m2.IsResponse() || m.IsRequest() != m2.IsRequest() {
			t.Fatalf("shape changed through re-encoding:\n%s", re)
		}
		if !m.IsResponse() && !sameJSON(m.Params, m2.Params) {
			t.Fatalf("params changed: %s → %s", m.Params, m2.Params)
		}
		if m.IsResponse() {
			if !sameJSON(m.Result, m2.Result) {
				t.Fatalf("result changed: %s → %s", m.Result, m2.Result)
			}
			if (m.Error == nil) != (m2.Error == nil) {
				t.Fatalf("error presence changed:\n%s", re)
			}
			if m.Error != nil && (m.Error.Code != m2.Error.Code || m.Error.Message != m2.Error.Message || !sameJSON(dataOf(m.Error), dataOf(m2.Error))) {
				t.Fatalf("error changed: %+v → %+v", m.Error, m2.Error)
			}
		}
	})
}

// reencode writes m back with the package's own encoders.
func reencode(m *jsonrpc.Message) []byte {
	switch {
	case m.IsRequest():
		return jsonrpc.AppendRequest(nil, m.ID, m.Method, m.Params)
	case m.IsNotification():
		return jsonrpc.AppendNotification(nil, m.Method, m.Params)
	case m.Error != nil:
		return jsonrpc.AppendErrorResponse(nil, m.ID, m.Error)
	default:
		return jsonrpc.AppendResponse(nil, m.ID, m.Result)
	}
}

// dataOf treats an explicit null data like an absent one.
func dataOf(e *jsonrpc.Error) jsontext.Value {
	if string(e.Data) == "null" {
		return nil
	}
	return e.Data
}

// sameJSON compares two raw values ignoring insignificant whitespace.
func sameJSON(a, b jsontext.Value) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	ca, cb := a.Clone(), b.Clone()
	if ca.Compact() != nil || cb.Compact() != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(ca, cb)
}

// topLevelNames returns the unescaped member names of a JSON object,
// read with a strict tokenizer (no duplicates, valid UTF-8).
func topLevelNames(b []byte) ([]string, error) {
	d := jsontext.NewDecoder(bytes.NewReader(b))
	tok, err := d.ReadToken()
	if err != nil {
		return nil, err
	}
	if tok.Kind() != '{' {
		return nil, errors.New("not an object")
	}
	var names []string
	for d.PeekKind() != '}' {
		name, err := d.ReadToken()
		if err != nil {
			return nil, err
		}
		names = append(names, name.String())
		if err := d.SkipValue(); err != nil {
			return nil, err
		}
	}
	if _, err := d.ReadToken(); err != nil {
		return nil, err
	}
	return names, nil
}

// FuzzDecodeRequest holds the fast reading of a request to the strict
// one: whatever it accepts, the strict reading accepts too, as the same
// message, params byte for byte.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range decodeSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"method":"m","jsonrpc":"2.0","params":{"a":"}"},"id":"x\"y"}`))
	f.Add([]byte(`{ "jsonrpc" : "2.0" , "id" : 12 , "method" : "m" , "params" : { "k" : [ 1 , "]" ] } }`))
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"m\u0041"}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		b := bytes.Trim(in, " \t\r\n")
		if len(b) == 0 || b[0] != '{' || jsonrpc.CheckDepth(b, jsonrpc.DefaultMaxDepth) != nil {
			return
		}
		fast, ok := jsonrpc.DecodeRequest(b)
		if !ok {
			return
		}
		strict, err := jsonrpc.DecodeStrict(b)
		if err != nil {
			t.Fatalf("fast reading accepted what the strict one refuses (%v):\n%s", err, b)
		}
		if fast.ID != strict.ID || fast.Method != strict.Method || !bytes.Equal(fast.Params, strict.Params) ||
			(fast.Params == nil) != (strict.Params == nil) || fast.Result != nil || fast.Error != nil {
			t.Fatalf("readings differ:\nfast   %+v\nstrict %+v\n%s", fast, strict, b)
		}
	})
}
