package engine

import (
	"fmt"
	"reflect"
	"testing"

	"tidings/jsonrpc"
	"tidings/mcp"
)

const benchMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

var parseSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{` + benchMeta + `,"name":"search_files_07","arguments":{"path":"src","query":"TODO","limit":10}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + benchMeta + `,"cursor":"abc"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a\u0062c","arguments":null}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"n\u0061me":"x"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":null,"_meta":null}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":5}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":[1]}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":7}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"file:///a b","_meta":{"progressToken":"t","x":1}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{` + benchMeta + `,"notifications":{"toolsListChanged":true,"resourceSubscriptions":["a://b"]}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"a","value":"v"},"context":{"arguments":{"x":"y"}}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tasks/get","params":{"taskId":"t1","requestState":"s"}}`,
	`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"name":"late","_meta":{}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"inputResponses":{"r":{"action":"accept"}},"name":"x"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{"form":{}},"sampling":{},"roots":{},"experimental":{"x":1},"extensions":{"e":{}}},"io.modelcontextprotocol/clientInfo":{"name":"c","version":"1","icons":[{"src":"a"}]},"io.modelcontextprotocol/logLevel":"debug","progressToken":7}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026\u002d07-28","io.modelcontextprotocol/clientCapabilities":{"sampling":null},"progressToken":null}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":[],"io.modelcontextprotocol/clientInfo":{"name":1}}}}`,
	`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/logLevel":"loud","other":true,"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`,
}

// FuzzParse holds Parse's reading of params as slices to the strict
// decode into a map: the same call, member for member, and the same
// refusal.
func FuzzParse(f *testing.F) {
	for _, s := range parseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := jsonrpc.Decode(in, 0)
		if err != nil || m.IsResponse() {
			return
		}
		fast, fr := parse(m, true)
		slow, sr := parse(m, false)
		if !reflect.DeepEqual(fr, sr) {
			t.Fatalf("refusals differ:\nscan   %+v\nstrict %+v\n%s", fr, sr, in)
		}
		if !reflect.DeepEqual(fast.P, slow.P) || fast.M.Handler != slow.M.Handler ||
			fmt.Sprint(fast.MetaErr) != fmt.Sprint(slow.MetaErr) || fmt.Sprint(fast.ParamErr) != fmt.Sprint(slow.ParamErr) ||
			!reflect.DeepEqual(fast.declared, slow.declared) {
			t.Fatalf("calls differ:\nscan   %+v\nstrict %+v\n%s", fast, slow, in)
		}
	})
}

// TestParseScans: the common request is read without a map, and so
// without the allocations of one.
func TestParseScans(t *testing.T) {
	m, err := jsonrpc.Decode([]byte(parseSeeds[0]), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := scanParams(m.Params); !ok {
		t.Fatal("scanParams left the common tools/call to the strict decoder")
	}
	scanned := testing.AllocsPerRun(50, func() { Parse(m) })
	strict := testing.AllocsPerRun(50, func() { parse(m, false) })
	if scanned >= strict {
		t.Errorf("Parse allocates %.0f times, as many as the strict decode into a map (%.0f)", scanned, strict)
	}
}

// BenchmarkParse reads the params of a tools/call.
func BenchmarkParse(b *testing.B) {
	m, err := jsonrpc.Decode([]byte(parseSeeds[0]), 0)
	if err != nil {
		b.Fatal(err)
	}
	if m.Method != mcp.MethodToolsCall {
		b.Fatal(m.Method)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, r := Parse(m); r != nil {
			b.Fatal(r)
		}
	}
}
