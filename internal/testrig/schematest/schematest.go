// Package schematest checks messages against the official MCP 2026-07-28
// JSON Schema (testdata/schema-2026-07-28.json at the module root).
//
// Tests use it so that every byte the server emits is judged by the
// published schema rather than by the same structs that produced it: a
// field the encoder forgets, misnames or types wrongly fails here even
// when the Go round trip looks fine.
//
// Several response definitions in the schema accept a union of the final
// result and InputRequiredResult. Because InputRequiredResult requires
// nothing but resultType, the union would let a final result without its
// required fields (ttlMs, content, ...) pass. Validate therefore also
// dispatches on result.resultType, as a client must, and checks the result
// against the one branch it claims to be.
package schematest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/go-json-experiment/json/jsontext"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	jsonschema "github.com/santhosh-tekuri/jsonschema/v6"
)

// SchemaFile is the schema's path relative to the module root.
const SchemaFile = "testdata/schema-2026-07-28.json"

// schemaURL names the schema document inside the compiler. The document
// has no $id of its own; any absolute URL works.
const schemaURL = "urn:mcp:schema:2026-07-28"

// Validator holds every $def of the schema, compiled. It is immutable once
// built and safe for concurrent use.
type Validator struct {
	defs map[string]*jsonschema.Schema
	// unions maps a response def whose result is "InputRequiredResult or X"
	// to X, so that results can be checked against the branch they claim.
	unions map[string]string
}

// shared is built once per test binary: compiling the whole schema takes
// far longer than validating a message, and the result never changes.
var shared = sync.OnceValues(func() (*Validator, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	return Load(filepath.Join(root, SchemaFile))
})

// Default returns the validator for the module's schema, loading it on
// first use.
func Default() (*Validator, error) { return shared() }

// ModuleRoot walks up from the working directory to the directory that
// holds go.mod. Tests run in their package directory, so this finds the
// repository whatever package the test lives in.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("schematest: working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("schematest: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Load reads a schema document and compiles every definition in $defs
// with draft 2020-12 and format assertions on.
func Load(path string) (*Validator, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("schematest: %w", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("schematest: parse %s: %w", path, err)
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("schematest: %s is not a JSON object", path)
	}
	defs, ok := top["$defs"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("schematest: %s has no $defs", path)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("schematest: %w", err)
	}
	v := &Validator{defs: make(map[string]*jsonschema.Schema, len(defs)), unions: map[string]string{}}
	for name, def := range defs {
		sch, err := c.Compile(schemaURL + "#/$defs/" + name)
		if err != nil {
			return nil, fmt.Errorf("schematest: compile %s: %w", name, err)
		}
		v.defs[name] = sch
		if other, ok := inputRequiredUnion(def); ok {
			v.unions[name] = other
		}
	}
	return v, nil
}

// inputRequiredUnion reports whether def is a response whose result is
// anyOf [InputRequiredResult, X], and returns X.
func inputRequiredUnion(def any) (string, bool) {
	obj, _ := def.(map[string]any)
	props, _ := obj["properties"].(map[string]any)
	result, _ := props["result"].(map[string]any)
	anyOf, _ := result["anyOf"].([]any)
	if len(anyOf) != 2 {
		return "", false
	}
	var names []string
	for _, alt := range anyOf {
		m, _ := alt.(map[string]any)
		ref, _ := m["$ref"].(string)
		names = append(names, strings.TrimPrefix(ref, "#/$defs/"))
	}
	switch {
	case names[0] == "InputRequiredResult":
		return names[1], true
	case names[1] == "InputRequiredResult":
		return names[0], true
	}
	return "", false
}

// Defs returns the names of all definitions, sorted.
func (v *Validator) Defs() []string {
	out := make([]string, 0, len(v.defs))
	for name := range v.defs {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

// Check validates msg against #/$defs/def and returns why it fails.
// For a response def whose result is a union with InputRequiredResult, the
// result is also checked against the branch its resultType selects.
func (v *Validator) Check(def string, msg []byte) error {
	sch, ok := v.defs[def]
	if !ok {
		return fmt.Errorf("schematest: no definition %q in the schema", def)
	}
	// The schema sees a parsed value, in which a repeated member name has
	// quietly collapsed into one; strict peers refuse such text outright.
	if !jsontext.Value(msg).IsValid() {
		return fmt.Errorf("not strictly valid JSON (a repeated member name, or bad UTF-8): %s", clip(msg))
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(msg))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	if err := sch.Validate(inst); err != nil {
		return fmt.Errorf("does not match %s: %w", def, err)
	}
	if other, ok := v.unions[def]; ok {
		obj, _ := inst.(map[string]any)
		result, _ := obj["result"].(map[string]any)
		branch := other
		if rt, _ := result["resultType"].(string); rt == "input_required" {
			branch = "InputRequiredResult"
		}
		if err := v.defs[branch].Validate(result); err != nil {
			return fmt.Errorf("result of %s does not match %s: %w", def, branch, err)
		}
	}
	return nil
}

// CheckMember validates msg against the envelope def and then its member
// (for example "result" or "error") against memberDef. It suits the
// result and error definitions that have no message-level wrapper, such as
// an InputRequiredResult inside a JSONRPCResultResponse, or an
// InvalidParamsError inside a JSONRPCErrorResponse.
func (v *Validator) CheckMember(def, member, memberDef string, msg []byte) error {
	if err := v.Check(def, msg); err != nil {
		return err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(msg, &obj); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	inner, ok := obj[member]
	if !ok {
		return fmt.Errorf("message has no %q member", member)
	}
	return v.Check(memberDef, inner)
}

// Check validates msg against #/$defs/def with the module's schema.
func Check(def string, msg []byte) error {
	v, err := Default()
	if err != nil {
		return err
	}
	return v.Check(def, msg)
}

// Validate reports a test error when msg does not match #/$defs/def of
// the official schema.
func Validate(t testing.TB, def string, msg []byte) {
	t.Helper()
	if err := Check(def, msg); err != nil {
		t.Errorf("schema %s: %v\nmessage: %s", def, err, clip(msg))
	}
}

// ValidateResult validates msg as a JSONRPCResultResponse whose result
// matches resultDef (for example "InputRequiredResult").
func ValidateResult(t testing.TB, resultDef string, msg []byte) {
	t.Helper()
	validateMember(t, "JSONRPCResultResponse", "result", resultDef, msg)
}

// ValidateError validates msg as a JSONRPCErrorResponse whose error
// matches errorDef (for example "InvalidParamsError" or "ParseError").
func ValidateError(t testing.TB, errorDef string, msg []byte) {
	t.Helper()
	validateMember(t, "JSONRPCErrorResponse", "error", errorDef, msg)
}

func validateMember(t testing.TB, def, member, memberDef string, msg []byte) {
	t.Helper()
	v, err := Default()
	if err != nil {
		t.Errorf("schematest: %v", err)
		return
	}
	if err := v.CheckMember(def, member, memberDef, msg); err != nil {
		t.Errorf("schema %s.%s as %s: %v\nmessage: %s", def, member, memberDef, err, clip(msg))
	}
}

func clip(b []byte) string {
	if len(b) > 2048 {
		return string(b[:2048]) + "…"
	}
	return string(b)
}
