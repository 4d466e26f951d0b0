package jsonscan

import (
	"bytes"
	"testing"

	"github.com/go-json-experiment/json/jsontext"
)

// FuzzObject holds Object to a strict tokenizer: for every valid JSON
// object, the same members, names and values byte for byte, in order.
func FuzzObject(f *testing.F) {
	for _, s := range []string{
		`{}`,
		` { "a" : 1 , "b" : [ 1 , { "c" : "]}" } ] , "d\"e" : "x\\" , "f" : -1.5e3 }`,
		`{"a":true,"b":false,"c":null,"d":{"e":{"f":[[],{}]}}}`,
		`{"\u0041":"\ud83d\ude00","s":"\\\"","t":"\/"}`,
		"{\"a\":\t1\r\n,\"b\":2}",
		`[1,2]`,
		`"s"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if !jsontext.Value(in).IsValid() || jsontext.Value(in).Kind() != '{' {
			return
		}
		d := jsontext.NewDecoder(bytes.NewReader(in))
		if _, err := d.ReadToken(); err != nil {
			t.Fatal(err)
		}
		o := NewObject(in)
		for d.PeekKind() != '}' {
			tok, err := d.ReadToken()
			if err != nil {
				t.Fatal(err)
			}
			want := tok.String()
			wantValue, err := d.ReadValue()
			if err != nil {
				t.Fatal(err)
			}
			name, value, ok := o.Next()
			if !ok {
				t.Fatalf("Object ended before member %q of %s", want, in)
			}
			got, err := jsontext.AppendUnquote(nil, append(append([]byte{'"'}, name...), '"'))
			if err != nil || string(got) != want {
				t.Fatalf("name %q, want %q (%v) in %s", name, want, err, in)
			}
			if !bytes.Equal(value, wantValue) {
				t.Fatalf("value %s, want %s in %s", value, wantValue, in)
			}
			if s, ok := String(value); ok {
				u, err := jsontext.AppendUnquote(nil, value)
				if err != nil || string(s) != string(u) {
					t.Fatalf("String(%s) = %q, want %q (%v)", value, s, u, err)
				}
			}
		}
		if _, _, ok := o.Next(); ok {
			t.Fatalf("Object went on past the last member of %s", in)
		}
	})
}

// FuzzArray holds Array to a strict tokenizer: for every valid JSON
// array, the same elements byte for byte, in order; anything else has
// none.
func FuzzArray(f *testing.F) {
	for _, s := range []string{
		`[]`,
		` [ 1 , "a\"]" , { "b" : [ 2 , 3 ] } , [ ] , null , -0.5e-2 ] `,
		"[\t{}\r\n,[[]]]",
		`[{"name":"a","inputSchema":{"type":"object"}},{"name":"b"}]`,
		`{"a":1}`,
		`"["`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if !jsontext.Value(in).IsValid() {
			return
		}
		a := NewArray(in)
		if jsontext.Value(in).Kind() != '[' {
			if v, ok := a.Next(); ok {
				t.Fatalf("element %s of %s, which is no array", v, in)
			}
			return
		}
		d := jsontext.NewDecoder(bytes.NewReader(in))
		if _, err := d.ReadToken(); err != nil {
			t.Fatal(err)
		}
		for d.PeekKind() != ']' {
			want, err := d.ReadValue()
			if err != nil {
				t.Fatal(err)
			}
			got, ok := a.Next()
			if !ok {
				t.Fatalf("Array ended before element %s of %s", want, in)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("element %s, want %s in %s", got, want, in)
			}
		}
		if v, ok := a.Next(); ok {
			t.Fatalf("Array went on past the last element of %s: %s", in, v)
		}
	})
}
