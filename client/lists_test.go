package client

import (
	"bytes"
	"strings"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/mcp"
)

// FuzzSplitPage holds the scan of a list page to the decoder's reading
// of it: for every valid JSON value, the same cursor, the same items
// byte for byte, and an error exactly where the decoder has one.
func FuzzSplitPage(f *testing.F) {
	for _, s := range []string{
		`{"tools":[{"name":"a","inputSchema":{"type":"object"}},{"name":"b"}],"nextCursor":"c1"}`,
		` { "tools" : [ 1 , "x" , [ ] ] , "ttlMs" : 5 } `,
		`{"tools":null,"nextCursor":null}`,
		`{"tools":{"name":"a"}}`,
		`{"tool\u0073":[1],"next\u0043ursor":"x"}`,
		`{"nextCursor":"a\"b"}`,
		`{"nextCursor":5}`,
		`[]`,
		`"tools"`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if !jsontext.Value(in).IsValid() {
			return
		}
		in = bytes.Trim(in, " \t\r\n") // as the message decoder hands a result
		next, items, err := splitPage(in, "tools")
		wantNext, wantItems, wantErr := decodePage(in, "tools")
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("error %v, the decoder's %v, for %s", err, wantErr, in)
		}
		if err != nil {
			return
		}
		if (next == nil) != (wantNext == nil) || (next != nil && *next != *wantNext) {
			t.Fatalf("cursor %v, the decoder's %v, for %s", next, wantNext, in)
		}
		if len(items) != len(wantItems) {
			t.Fatalf("%d items, the decoder's %d, for %s", len(items), len(wantItems), in)
		}
		for i := range items {
			if !bytes.Equal(items[i], wantItems[i]) {
				t.Fatalf("item %d is %s, the decoder's %s, for %s", i, items[i], wantItems[i], in)
			}
		}
	})
}

// TestDecodeItemsKeepsSchemasInPlace: a decoded tool's schemas are the
// bytes of the item it came from, not copies, and are exactly what a
// plain decode gives; appending to one cannot write over its neighbour.
func TestDecodeItemsKeepsSchemasInPlace(t *testing.T) {
	raw := []jsontext.Value{ // written over below
		jsontext.Value(`{"name":"a","inputSchema":{"type":"object","properties":{"x":{"type":"string"}}},"outputSchema":{"type":"object"}}`),
		jsontext.Value(`{"name":"b","inputSchema": {"type" : "object"} }`),
		jsontext.Value(`{"name":5}`), // not a tool: skipped
	}
	got := decodeItems[mcp.Tool](raw)
	if len(got) != 2 {
		t.Fatalf("%d tools, want 2", len(got))
	}
	for i, tool := range got {
		var want mcp.Tool
		if err := json.Unmarshal(raw[i], &want); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(tool.InputSchema, want.InputSchema) || !bytes.Equal(tool.OutputSchema, want.OutputSchema) {
			t.Fatalf("tool %d: schemas %s and %s, want %s and %s", i, tool.InputSchema, tool.OutputSchema, want.InputSchema, want.OutputSchema)
		}
		if cap(tool.InputSchema) != len(tool.InputSchema) {
			t.Errorf("tool %d: the input schema has room for %d more bytes, which are the item's", i, cap(tool.InputSchema)-len(tool.InputSchema))
		}
		// Written over, the item shows through the schema: they are
		// the same bytes.
		copy(raw[i], bytes.Repeat([]byte("#"), len(raw[i])))
		if strings.Trim(string(tool.InputSchema), "#") != "" {
			t.Errorf("tool %d: the input schema is a copy, not the item's own bytes", i)
		}
	}
}
