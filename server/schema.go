package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	jsonschema "github.com/santhosh-tekuri/jsonschema/v6"
)

// noNetworkLoader refuses every external $ref: schemas from peers must
// never make the server fetch anything.
type noNetworkLoader struct{}

func (noNetworkLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema references are not loaded: %s", url)
}

// compileSchema compiles a JSON Schema document (draft 2020-12 unless its
// $schema says otherwise). Each schema gets its own compiler, so one
// tool's $defs can never leak into another's.
func (s *Server) compileSchema(name string, doc jsontext.Value) (*jsonschema.Schema, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noNetworkLoader{})
	url := "urn:tidings:" + strings.ReplaceAll(name, " ", "_")
	if err := c.AddResource(url, v); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// validateJSON checks raw JSON against a compiled schema.
func validateJSON(sch *jsonschema.Schema, doc jsontext.Value) error {
	v, ok := schemaValue(doc)
	if !ok {
		var err error
		if v, err = jsonschema.UnmarshalJSON(bytes.NewReader(doc)); err != nil {
			return err
		}
	}
	return sch.Validate(v)
}

// schemaValue reads doc into the values the validator works on, as
// jsonschema.UnmarshalJSON does (maps, slices, json.Number, strings,
// bools, nil), in one pass of a tokenizer, where that reads it twice
// through encoding/json. A repeated name keeps its last value, as there.
// ok is false for a doc that is not JSON or holds invalid UTF-8, which
// is left to jsonschema.UnmarshalJSON to read or refuse in its own way.
func schemaValue(doc jsontext.Value) (_ any, ok bool) {
	// Names are not checked for repeats: arguments were checked with the
	// whole request, and the check costs allocations.
	d := jsontext.NewDecoder(bytes.NewBuffer(doc), jsontext.AllowDuplicateNames(true))
	v, err := readSchemaValue(d)
	if err != nil {
		return nil, false
	}
	if _, err := d.ReadToken(); err != io.EOF {
		return nil, false
	}
	return v, true
}

func readSchemaValue(d *jsontext.Decoder) (any, error) {
	tok, err := d.ReadToken()
	if err != nil {
		return nil, err
	}
	switch tok.Kind() {
	case 'n':
		return nil, nil
	case 't', 'f':
		return tok.Bool(), nil
	case '"':
		return tok.String(), nil
	case '0':
		return json.Number(tok.String()), nil
	case '{':
		m := make(map[string]any)
		for d.PeekKind() != '}' {
			name, err := d.ReadToken()
			if err != nil {
				return nil, err
			}
			key := name.String()
			if m[key], err = readSchemaValue(d); err != nil {
				return nil, err
			}
		}
		_, err := d.ReadToken()
		return m, err
	case '[':
		a := []any{}
		for d.PeekKind() != ']' {
			v, err := readSchemaValue(d)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := d.ReadToken()
		return a, err
	}
	return nil, fmt.Errorf("unexpected %v", tok.Kind())
}
