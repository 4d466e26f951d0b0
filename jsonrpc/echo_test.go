package jsonrpc_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"tidings/jsonrpc"
)

// errorCode decodes an encoded error response and returns its code and
// message.
func errorCode(t *testing.T, b []byte) (jsonrpc.Code, string) {
	t.Helper()
	var r struct {
		Error struct {
			Code    jsonrpc.Code `json:"code"`
			Message string       `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("error response is not JSON: %v\n%s", err, b)
	}
	return r.Error.Code, r.Error.Message
}

// TestTruncatedEchoKeepsUTF8: an id that is echoed back shortened is cut
// at a rune boundary, so the -32600 can be encoded and is not replaced by
// an internal error.
func TestTruncatedEchoKeepsUTF8(t *testing.T) {
	// `{"xy":"` is 7 bytes and é is 2, so byte 64 falls inside an é.
	msg := `{"jsonrpc":"2.0","id":{"xy":"` + strings.Repeat("é", 60) + `"},"method":"ping"}`
	_, err := jsonrpc.Decode([]byte(msg), 0)
	var de *jsonrpc.DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("Decode: %v, want a DecodeError", err)
	}
	if !utf8.ValidString(de.Error()) {
		t.Errorf("message is not valid UTF-8: %q", de.Error())
	}
	code, text := errorCode(t, jsonrpc.AppendErrorResponse(nil, de.ID, de.RPCError()))
	if code != jsonrpc.CodeInvalidRequest || !strings.Contains(text, "éé…") {
		t.Errorf("error response: %d %q, want -32600 echoing the start of the id", code, text)
	}
}

// TestPointerEchoBounded: a member name that does not decode is named in
// the error by its JSON pointer, shortened, not echoed whole.
func TestPointerEchoBounded(t *testing.T) {
	key := strings.Repeat("k", 100<<10)
	var m map[string]string
	err := jsonrpc.UnmarshalParams([]byte(`{"`+key+`":1}`), &m)
	if err == nil {
		t.Fatal("a number decoded into a string")
	}
	if len(err.Error()) > 200 || !strings.Contains(err.Error(), "/kkkk") {
		t.Errorf("error is %d bytes, want the pointer shortened: %.120q…", len(err.Error()), err.Error())
	}
	key = strings.Repeat("ü", 100)
	err = jsonrpc.UnmarshalParams([]byte(`{"x`+key+`":1}`), &m)
	if err == nil || !utf8.ValidString(err.Error()) || len(err.Error()) > 200 {
		t.Errorf("multi-byte pointer: %q, want it shortened at a rune boundary", err)
	}
}
