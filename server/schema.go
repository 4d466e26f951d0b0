package server

import (
	"bytes"
	"fmt"
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
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return err
	}
	return sch.Validate(v)
}
