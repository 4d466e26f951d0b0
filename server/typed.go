package server

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/jsonschema-go/jsonschema"

	"tidings/jsonrpc"
	"tidings/mcp"
)

// TypedToolHandler runs a tool call whose arguments were decoded into In.
// It returns Out, which becomes the result's structuredContent and its
// text; errors follow ToolHandler's rules (*jsonrpc.Error is a protocol
// error, *InputRequired asks the client for input, anything else is a
// result with isError set that the model can read).
type TypedToolHandler[In, Out any] func(ctx context.Context, req *ToolRequest, in In) (Out, error)

// AddTypedTool registers (or replaces) a tool whose arguments and result
// are Go types, so that the schemas clients see and the values the
// handler works with cannot drift apart. It is a function rather than a
// method because Go methods cannot have type parameters; (*Server).AddTool
// stays the form for authors who bring their own schema and parse the
// arguments themselves.
//
// Schemas are inferred from the types unless t already has them:
//
//   - In must describe a JSON object: a struct (or pointer to one) or a
//     map with string keys; anything else is a registration error,
//     because tool arguments are always an object. A struct's properties
//     are its exported fields under their json names; a field without
//     "omitempty" or "omitzero" in its json tag is required (a pointer
//     field without them is required but may be null), and unknown
//     members are refused. A field's `jsonschema:"..."` tag becomes its
//     description, and a type that implements SchemaDescriber supplies its
//     own schema (an enum, a range, a pattern).
//   - When Out describes an object, its schema becomes the tool's
//     outputSchema, and every result carries Out's JSON as
//     structuredContent plus a text block holding the same JSON, for
//     clients that only read text (an Out implementing ToolTexter chooses
//     that text instead). When Out is anything else (a string, a number, a
//     slice, an interface), the tool declares no outputSchema and results
//     carry only the text block: a string as it is, any other value as
//     JSON. Clients of 2025-11-25, which this server also serves, accept
//     only object output schemas and object structured content, so a
//     definition that is valid for both protocol revisions leaves it out.
//     Wrap the value in a struct to give clients its schema.
//
// Before the handler runs, the arguments are validated against the input
// schema and then decoded into In strictly (member names match exactly;
// duplicates are refused). Arguments that pass the schema but do not fit
// In, which can only happen with a hand-written schema, end as an isError
// result for the model to correct. A nil pointer returned for an object
// Out with a nil error, or an Out that cannot be encoded, is a fault of
// the server and answers -32603.
//
// The json tag options that change the encoding beyond names and
// omission ("inline", "unknown", "string", "format:...") are refused, and
// so is an embedded struct given a json name, because the inferred schema
// would not describe what the JSON package reads and writes.
func AddTypedTool[In, Out any](s *Server, t mcp.Tool, h TypedToolHandler[In, Out], opts ...ItemOption) error {
	if h == nil {
		return fmt.Errorf("server: tool %q needs a handler", t.Name)
	}
	if len(t.InputSchema) == 0 {
		doc, root, err := inferSchema(reflect.TypeFor[In]())
		if err != nil {
			return fmt.Errorf("server: tool %q input type: %w", t.Name, err)
		}
		if root.Type != "object" {
			return fmt.Errorf("server: tool %q input type %s is not a struct or a map with string keys: tool arguments are a JSON object", t.Name, reflect.TypeFor[In]())
		}
		t.InputSchema = doc
	}
	structured := len(t.OutputSchema) > 0
	if !structured {
		doc, root, err := inferSchema(reflect.TypeFor[Out]())
		if err != nil {
			return fmt.Errorf("server: tool %q output type: %w", t.Name, err)
		}
		if root.Type == "object" {
			t.OutputSchema, structured = doc, true
		}
	}
	name := t.Name
	return s.AddTool(t, func(ctx context.Context, req *ToolRequest) (*mcp.CallToolResult, error) {
		var in In
		if err := jsonrpc.UnmarshalParams(req.Arguments, &in); err != nil {
			return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{
				mcp.TextContent(fmt.Sprintf("Invalid arguments for tool %q: %v", name, err)),
			}}, nil
		}
		out, err := h(ctx, req, in)
		if err != nil {
			return nil, err
		}
		res, err := typedResult(out, structured)
		if err != nil {
			s.log.Error("mcp: internal error", "err", fmt.Errorf("tool %q: %w", name, err))
			return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "Internal error", nil)
		}
		return res, nil
	}, opts...)
}

// ToolTexter is implemented by a typed tool's Out that reads better as
// prose than as JSON, such as a list of matches printed one per line. Its
// ToolText replaces the JSON in the result's text block; structuredContent
// still holds the JSON. The specification asks for the JSON in the text
// block so that clients without structured output lose nothing, so
// implement it only when the text says everything the JSON does.
type ToolTexter interface {
	ToolText() string
}

// typedResult builds the result of a typed tool from its Out value.
func typedResult(out any, structured bool) (*mcp.CallToolResult, error) {
	b, err := jsonrpc.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("result does not encode as JSON: %w", err)
	}
	text := string(b)
	if structured && text == "null" {
		return nil, errors.New("handler returned a nil result and no error")
	}
	if v := reflect.ValueOf(out); !structured && v.Kind() == reflect.String {
		text = v.String()
	}
	if tt, ok := out.(ToolTexter); ok && !isNilPointer(out) {
		text = tt.ToolText()
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(text)}}
	if structured {
		res.StructuredContent = jsontext.Value(b)
	}
	return res, nil
}

func isNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// SchemaDescriber is implemented by a type that knows its JSON Schema
// better than its Go kind does: a string with a fixed set of values (an
// enum), a number with a range, a string with a pattern. Typed tools use
// the returned schema wherever the type appears in In or Out, in place of
// the one inferred from the kind; a field's description tag still applies
// on top. The method must have a value receiver, because it is called on
// the type's zero value.
type SchemaDescriber interface {
	JSONSchema() *jsonschema.Schema
}

var describerType = reflect.TypeFor[SchemaDescriber]()

// inferSchema infers the JSON Schema of t, returning it encoded and as the
// root schema. A pointer at the root is followed without allowing null:
// the root of tool arguments or results is never null.
func inferSchema(t reflect.Type) (jsontext.Value, *jsonschema.Schema, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	own := map[reflect.Type]*jsonschema.Schema{}
	if err := collectSchemas(t, own, map[reflect.Type]bool{}); err != nil {
		return nil, nil, err
	}
	sch, err := jsonschema.ForType(t, &jsonschema.ForOptions{TypeSchemas: own})
	if err != nil {
		return nil, nil, err
	}
	b, err := jsonrpc.Marshal(sch)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding the schema of %s: %w", t, err)
	}
	return jsontext.Value(b), sch, nil
}

// collectSchemas walks the types reachable from t, gathering the schemas
// of types that describe themselves and refusing json tag options that
// the inferred schema would contradict.
func collectSchemas(t reflect.Type, own map[reflect.Type]*jsonschema.Schema, seen map[reflect.Type]bool) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if seen[t] {
		return nil
	}
	seen[t] = true
	if t.Kind() != reflect.Interface && t.Implements(describerType) {
		sch := reflect.Zero(t).Interface().(SchemaDescriber).JSONSchema()
		if sch == nil {
			return fmt.Errorf("%s.JSONSchema returned nil", t)
		}
		own[t] = sch
		return nil
	}
	if reflect.PointerTo(t).Implements(describerType) {
		return fmt.Errorf("%s has JSONSchema on its pointer; give it a value receiver so that the zero value can answer", t)
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		// The JSON package writes bytes as one base64 string and a nil
		// slice as [], never null; the inference library assumes
		// encoding/json's null for nil slices and an array of numbers
		// for bytes, so both get their schema here.
		if t.Elem().Kind() == reflect.Uint8 {
			own[t] = &jsonschema.Schema{Type: "string", ContentEncoding: "base64"}
			return nil
		}
		if err := collectSchemas(t.Elem(), own, seen); err != nil {
			return err
		}
		if t.Kind() == reflect.Slice {
			items, err := jsonschema.ForType(t.Elem(), &jsonschema.ForOptions{TypeSchemas: own})
			if err != nil {
				return err
			}
			own[t] = &jsonschema.Schema{Type: "array", Items: items}
		}
	case reflect.Map:
		return collectSchemas(t.Elem(), own, seen)
	case reflect.Struct:
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() && !f.Anonymous {
				continue
			}
			if err := checkJSONTag(t, f); err != nil {
				return err
			}
			if err := collectSchemas(f.Type, own, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkJSONTag refuses json tag options under which the JSON package
// would read or write something other than what the inferred schema
// describes.
func checkJSONTag(t reflect.Type, f reflect.StructField) error {
	tag, ok := f.Tag.Lookup("json")
	if !ok || tag == "-" {
		return nil
	}
	name, opts, _ := strings.Cut(tag, ",")
	if f.Anonymous && name != "" {
		// The JSON package nests a named embedded struct under its
		// name; the inference library would list its fields flat.
		return fmt.Errorf("field %s.%s: an embedded field with a json name is not supported by schema inference; make it a named field", t, f.Name)
	}
	for opt := range strings.SplitSeq(opts, ",") {
		switch {
		case opt == "inline", opt == "unknown", opt == "string", strings.HasPrefix(opt, "format:"):
			return fmt.Errorf("field %s.%s: the json tag option %q is not supported by schema inference", t, f.Name, opt)
		}
	}
	return nil
}

// ---- prompts ----

// TypedPromptHandler renders a prompt whose arguments were decoded into
// Args. Errors follow PromptHandler's rules.
type TypedPromptHandler[Args any] func(ctx context.Context, req *PromptRequest, args Args) (*mcp.GetPromptResult, error)

// promptField is one argument of a typed prompt: its name and where it
// goes in Args.
type promptField struct {
	name  string
	index int
}

// AddTypedPrompt registers (or replaces) a prompt whose arguments are the
// fields of the struct Args, so that the arguments clients are told about
// and the ones the handler reads are the same list. Every exported field
// must be a string (or a named string type): prompt arguments are strings
// on the wire. A field's json name is the argument's name; it is required
// unless its json tag says "omitempty" or "omitzero"; its
// `jsonschema:"..."` tag, as for typed tools, is the argument's
// description. A field tagged json:"-" is not an argument.
//
// p.Arguments must be left empty, since Args is where the arguments are
// declared. The server refuses a call that misses a required argument
// before the handler runs; arguments the client sends beyond the fields
// of Args are ignored.
func AddTypedPrompt[Args any](s *Server, p mcp.Prompt, h TypedPromptHandler[Args], opts ...ItemOption) error {
	if h == nil {
		return fmt.Errorf("server: prompt %q needs a handler", p.Name)
	}
	if len(p.Arguments) > 0 {
		return fmt.Errorf("server: prompt %q: Arguments are declared by the fields of %s; leave them empty", p.Name, reflect.TypeFor[Args]())
	}
	args, fields, err := promptArguments(reflect.TypeFor[Args]())
	if err != nil {
		return fmt.Errorf("server: prompt %q: %w", p.Name, err)
	}
	p.Arguments = args
	return s.AddPrompt(p, func(ctx context.Context, req *PromptRequest) (*mcp.GetPromptResult, error) {
		var a Args
		v := reflect.ValueOf(&a).Elem()
		for _, f := range fields {
			if s, ok := req.Arguments[f.name]; ok {
				v.Field(f.index).SetString(s)
			}
		}
		return h(ctx, req, a)
	}, opts...)
}

// promptArguments derives prompt arguments from the fields of a struct.
func promptArguments(t reflect.Type) ([]mcp.PromptArgument, []promptField, error) {
	if t.Kind() != reflect.Struct {
		return nil, nil, fmt.Errorf("argument type %s is not a struct", t)
	}
	var (
		args   []mcp.PromptArgument
		fields []promptField
		names  = map[string]string{}
	)
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			return nil, nil, fmt.Errorf("field %s.%s: embedded fields are not supported; name the arguments one by one", t, f.Name)
		}
		if !f.IsExported() {
			continue
		}
		tag, hasTag := f.Tag.Lookup("json")
		if tag == "-" {
			continue
		}
		if f.Type.Kind() != reflect.String {
			return nil, nil, fmt.Errorf("field %s.%s is %s; prompt arguments are strings", t, f.Name, f.Type)
		}
		name, opts, _ := strings.Cut(tag, ",")
		if !hasTag || name == "" {
			name = f.Name
		}
		if strings.HasPrefix(name, "'") {
			return nil, nil, fmt.Errorf("field %s.%s: quoted json names are not supported for prompt arguments", t, f.Name)
		}
		if other, dup := names[name]; dup {
			return nil, nil, fmt.Errorf("fields %s.%s and %s.%s both name the argument %q", t, other, t, f.Name, name)
		}
		names[name] = f.Name
		required := true
		for opt := range strings.SplitSeq(opts, ",") {
			if opt == "omitempty" || opt == "omitzero" {
				required = false
			}
		}
		args = append(args, mcp.PromptArgument{Name: name, Description: f.Tag.Get("jsonschema"), Required: required})
		fields = append(fields, promptField{name: name, index: i})
	}
	return args, fields, nil
}
