package server

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/go-json-experiment/json"
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

// headerParam is one x-mcp-header annotation: the property path from the
// arguments root and the header it is mirrored into.
type headerParam struct {
	path   []string
	header string // canonical "Mcp-Param-<Name>"
	name   string // <Name> as written
	typ    string // "string", "integer" or "boolean"
}

// headerParams finds x-mcp-header annotations in an input schema and
// checks the rules that make them valid: a non-empty RFC 9110 token,
// unique ignoring case, on a string, integer or boolean property reached
// from the root through "properties" only.
func headerParams(schema jsontext.Value) ([]headerParam, error) {
	var root map[string]jsontext.Value
	if err := json.Unmarshal(schema, &root); err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	var out []headerParam
	seen := map[string]bool{}
	var walk func(node map[string]jsontext.Value, path []string) error
	walk = func(node map[string]jsontext.Value, path []string) error {
		props, ok := node["properties"]
		if !ok {
			return nil
		}
		var m map[string]jsontext.Value
		if err := json.Unmarshal(props, &m); err != nil {
			return nil
		}
		for key, raw := range m {
			var child map[string]jsontext.Value
			if err := json.Unmarshal(raw, &child); err != nil {
				continue
			}
			p := append(append([]string(nil), path...), key)
			if hv, ok := child["x-mcp-header"]; ok {
				var name string
				if err := json.Unmarshal(hv, &name); err != nil {
					return fmt.Errorf("x-mcp-header on %q must be a string", strings.Join(p, "."))
				}
				if !isToken(name) {
					return fmt.Errorf("x-mcp-header %q on %q is not a valid header token", name, strings.Join(p, "."))
				}
				low := strings.ToLower(name)
				if seen[low] {
					return fmt.Errorf("x-mcp-header %q is used twice", name)
				}
				seen[low] = true
				var typ string
				_ = json.Unmarshal(child["type"], &typ)
				switch typ {
				case "string", "integer", "boolean":
				default:
					return fmt.Errorf("x-mcp-header %q: property %q must be string, integer or boolean", name, strings.Join(p, "."))
				}
				out = append(out, headerParam{path: p, header: HeaderParamName(name), name: name, typ: typ})
			}
			if err := walk(child, p); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(root, nil); err != nil {
		return nil, err
	}
	return out, nil
}

// HeaderParamName returns the canonical header for an x-mcp-header name.
func HeaderParamName(name string) string { return "Mcp-Param-" + name }

func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

var errNoValue = errors.New("absent")

// lookupPath returns the raw JSON at path inside args.
func lookupPath(args jsontext.Value, path []string) (jsontext.Value, error) {
	cur := args
	for _, key := range path {
		var m map[string]jsontext.Value
		if len(cur) == 0 || json.Unmarshal(cur, &m) != nil {
			return nil, errNoValue
		}
		v, ok := m[key]
		if !ok {
			return nil, errNoValue
		}
		cur = v
	}
	if string(cur) == "null" {
		return nil, errNoValue
	}
	return cur, nil
}
