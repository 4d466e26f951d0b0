package gateway

import (
	"slices"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/mcp"
	"tidings/server"
)

func TestDecodePage(t *testing.T) {
	p, err := decodePage(jsontext.Value(`{"tools":[{"name":"a","inputSchema":{"type":"object"},"extra":1},{"inputSchema":{}}],`+
		`"nextCursor":"c","ttlMs":5,"cacheScope":"public","resultType":"complete"}`), server.ListTools)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.keys, []string{"a"}) || string(p.items[0]) != `{"name":"a","inputSchema":{"type":"object"}}` ||
		p.NextCursor != "c" || *p.TTL != 5 || p.Scope != mcp.ScopePublic {
		t.Fatalf("decoded %+v %s", p, p.items)
	}
	if _, err := decodePage(jsontext.Value(`{"Tools":[],"tools":{}}`), server.ListTools); err == nil {
		t.Fatal("tools that are not an array decoded")
	}
}

// FuzzDecodePage: no answer an upstream sends makes the gateway panic,
// and every item it keeps has its key and encodes as JSON.
func FuzzDecodePage(f *testing.F) {
	f.Add([]byte(`{"tools":[{"name":"a","inputSchema":{"type":"object"}}],"nextCursor":"x"}`), uint8(0))
	f.Add([]byte(`{"prompts":[{"name":"p","arguments":[{"name":"x","required":true}]}]}`), uint8(1))
	f.Add([]byte(`{"resources":[{"uri":"file:///a","name":"a","size":3}],"ttlMs":-1}`), uint8(2))
	f.Add([]byte(`{"resourceTemplates":[{"uriTemplate":"db://{x}","name":"t"}],"cacheScope":"private"}`), uint8(3))
	lists := []server.List{server.ListTools, server.ListPrompts, server.ListResources, server.ListTemplates}
	f.Fuzz(func(t *testing.T, b []byte, which uint8) {
		p, err := decodePage(jsontext.Value(b), lists[int(which)%len(lists)])
		if err != nil {
			return
		}
		if len(p.items) != len(p.keys) {
			t.Fatalf("%d items, %d keys", len(p.items), len(p.keys))
		}
		for i, it := range p.items {
			if p.keys[i] == "" || !jsontext.Value(it).IsValid() {
				t.Fatalf("item %d: key %q, %s", i, p.keys[i], it)
			}
		}
	})
}
