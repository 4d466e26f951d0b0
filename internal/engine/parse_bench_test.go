package engine

import (
	"testing"

	"tidings/jsonrpc"
)

var benchCall = []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}},"name":"search_files_07","arguments":{"path":"src","query":"TODO","limit":10}}}`)

func BenchmarkDecode(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := jsonrpc.Decode(benchCall, 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeParse(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		m, err := jsonrpc.Decode(benchCall, 0)
		if err != nil {
			b.Fatal(err)
		}
		if _, r := Parse(m); r != nil {
			b.Fatal(r)
		}
	}
}
