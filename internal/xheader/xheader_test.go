package xheader

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// TestEncode covers XH-6: header-safe values go as they are; non-ASCII,
// control characters, leading or trailing whitespace, and values that
// look like the sentinel are base64-wrapped.
func TestEncode(t *testing.T) {
	for in, want := range map[string]string{
		"us-west1":            "us-west1",
		"us west 1":           "us west 1",
		"":                    "",
		"Hello, 世界":           "=?base64?SGVsbG8sIOS4lueVjA==?=",
		" padded ":            "=?base64?IHBhZGRlZCA=?=",
		"line1\nline2":        "=?base64?bGluZTEKbGluZTI=?=",
		"\tindented":          "=?base64?CWluZGVudGVk?=",
		"=?base64?SGVsbG8=?=": "=?base64?PT9iYXNlNjQ/U0dWc2JHOD0/PQ==?=",
	} {
		if got := Encode(in); got != want {
			t.Errorf("Encode(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestDecode covers XH-7: sentinels are decoded strictly, other values are
// taken literally, and characters no header may carry are refused.
func TestDecode(t *testing.T) {
	for in, want := range map[string]string{
		"=?base64?SGVsbG8=?=": "Hello",
		"SGVsbG8=":            "SGVsbG8=",
		"=?base64?SGVsbG8=":   "=?base64?SGVsbG8=",
	} {
		if got, err := Decode(in); err != nil || got != want {
			t.Errorf("Decode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"=?base64?SGVsbG8?=", "=?base64?SGVs!!!bG8=?=", "caf\xc3\xa9", "a\x00b"} {
		if got, err := Decode(bad); err == nil {
			t.Errorf("Decode(%q) = %q, want an error", bad, got)
		}
	}
}

// TestParams covers XH-3: what makes an annotation valid.
func TestParams(t *testing.T) {
	ps, err := Params(jsontext.Value(`{"type":"object","properties":{
		"region":{"type":"string","x-mcp-header":"Region"},
		"opts":{"type":"object","properties":{"n":{"type":"integer","x-mcp-header":"N"}}}}}`))
	if err != nil || len(ps) != 2 {
		t.Fatalf("Params = %v, %v; want two params", ps, err)
	}
	for name, schema := range map[string]string{
		"empty":          `{"properties":{"a":{"type":"string","x-mcp-header":""}}}`,
		"number":         `{"properties":{"a":{"type":"number","x-mcp-header":"A"}}}`,
		"object":         `{"properties":{"a":{"type":"object","x-mcp-header":"A"}}}`,
		"duplicate case": `{"properties":{"a":{"type":"string","x-mcp-header":"A"},"b":{"type":"string","x-mcp-header":"a"}}}`,
		"space":          `{"properties":{"a":{"type":"string","x-mcp-header":"My Region"}}}`,
		"colon":          `{"properties":{"a":{"type":"string","x-mcp-header":"A:B"}}}`,
		"non-ascii":      `{"properties":{"a":{"type":"string","x-mcp-header":"Région"}}}`,
		"under items":    `{"properties":{"a":{"type":"array","items":{"type":"string","x-mcp-header":"A"}}}}`,
		"under allOf":    `{"allOf":[{"properties":{"a":{"type":"string","x-mcp-header":"A"}}}]}`,
	} {
		if _, err := Params(jsontext.Value(schema)); err == nil {
			t.Errorf("%s: Params accepted %s", name, schema)
		}
	}
}

// FuzzHeaderValue: whatever a client encodes, a server decodes back to the
// same text, and decoding arbitrary header bytes never panics.
func FuzzHeaderValue(f *testing.F) {
	for _, s := range []string{"", "plain", " lead", "trail ", "世界", "a\r\nb", "=?base64?x?=", "\x7f", "=?base64??="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		_, _ = Decode(v)
		if !utf8.ValidString(v) {
			return
		}
		enc := Encode(v)
		if !Safe(enc) || strings.ContainsAny(enc, "\r\n") {
			t.Fatalf("Encode(%q) = %q is not a safe header value", v, enc)
		}
		got, err := Decode(enc)
		if err != nil || got != v {
			t.Fatalf("Decode(Encode(%q)) = %q, %v", v, got, err)
		}
	})
}
