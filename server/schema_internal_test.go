package server

import (
	"bytes"
	"reflect"
	"testing"

	jsonschema "github.com/santhosh-tekuri/jsonschema/v6"
)

// FuzzSchemaValue holds schemaValue to jsonschema.UnmarshalJSON: every
// doc it reads, it reads to the same value, numbers as written.
func FuzzSchemaValue(f *testing.F) {
	for _, s := range []string{
		`{"path":"src","query":"TODO","limit":10}`,
		`{"a":[1,-2.5e10,0.1,1E400,{"b":null}],"c":true,"d":false,"e":"\u00e9\ud83d\ude00","f":{},"g":[]}`,
		`[1,"x",[[]],{"":""}]`,
		`"s"`, `12345678901234567890`, `null`, ` {"a" : 1} `,
		`{"a":1,"a":2}`, `{"a":{"b":1,"b":{"c":2}},"a":[3]}`,
		"{\"a\":\"\xff\"}",
		`{"a":1} {"b":2}`,
		`{"a":`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		got, ok := schemaValue(doc)
		if !ok {
			return
		}
		want, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
		if err != nil {
			t.Fatalf("read %s, which jsonschema refuses: %v", doc, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("read %s as %#v, jsonschema as %#v", doc, got, want)
		}
	})
}

// TestSchemaValueReadsArguments: common arguments are read by the one
// pass, with fewer allocations than jsonschema.UnmarshalJSON makes.
func TestSchemaValueReadsArguments(t *testing.T) {
	doc := []byte(`{"path":"src","query":"TODO","limit":10,"tags":["a","b"],"deep":{"x":null,"y":true}}`)
	if _, ok := schemaValue(doc); !ok {
		t.Fatal("schemaValue left common arguments to jsonschema.UnmarshalJSON")
	}
	one := testing.AllocsPerRun(20, func() { schemaValue(doc) })
	two := testing.AllocsPerRun(20, func() { _, _ = jsonschema.UnmarshalJSON(bytes.NewReader(doc)) })
	if one >= two {
		t.Errorf("schemaValue allocates %.0f times, jsonschema.UnmarshalJSON %.0f", one, two)
	}
}
