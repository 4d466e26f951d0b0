package server

import (
	"errors"
	"fmt"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/jsonrpc"
)

// maxToolNameLen is the longest tool name AddTool accepts, in bytes; since
// every accepted character is ASCII, bytes and characters agree.
const maxToolNameLen = 128

// CheckToolName reports whether name is a tool name the specification
// allows: 1 to 128 characters, each an ASCII letter or digit, '_', '-'
// or '.'. Names are compared exactly, so "Search" and "search" are two
// tools. Clients put the name in the Mcp-Name header, in model prompts and
// in their own identifiers; a restricted alphabet keeps it the same
// everywhere without quoting. AddTool refuses names that fail this check;
// the function is exported so that a caller that builds names from data
// (a file or a remote catalogue) can test them first.
func CheckToolName(name string) error {
	switch {
	case name == "":
		return errors.New("tool name is empty")
	case len(name) > maxToolNameLen:
		return fmt.Errorf("tool name is %d bytes long; at most %d are allowed", len(name), maxToolNameLen)
	}
	for i := 0; i < len(name); i++ {
		if !toolNameByte(name[i]) {
			// Report the character, not the byte, so a non-ASCII name
			// reads as the author wrote it.
			r := []rune(name[i:])[0]
			return fmt.Errorf("tool name %q has %q at byte %d; only A-Z, a-z, 0-9, '_', '-' and '.' are allowed", name, r, i)
		}
	}
	return nil
}

func toolNameByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.'
}

// checkInputSchema verifies that a tool's input schema has an object
// schema at its root, as the Tool definition requires: tool arguments are
// always a JSON object, so a schema that could accept anything else ({},
// true, {"type":"string"}, {"type":["object","null"]}) describes calls
// that can never happen and is refused rather than sent to clients.
func checkInputSchema(doc jsontext.Value) error {
	members, err := schemaMembers("input", doc)
	if err != nil {
		return err
	}
	typ, ok := members["type"]
	if !ok {
		return errors.New(`input schema has no "type"; its root must say "type": "object"`)
	}
	var s string
	if err := jsonrpc.UnmarshalParams(typ, &s); err != nil || s != "object" {
		return fmt.Errorf(`input schema has "type": %s; its root must be "type": "object"`, typ)
	}
	return nil
}

// checkOutputSchema verifies that a tool's output schema is a schema
// object. The 2026-07-28 Tool definition allows any keywords there, but
// the schema itself must be a JSON object, so the boolean schemas true
// and false are refused.
func checkOutputSchema(doc jsontext.Value) error {
	_, err := schemaMembers("output", doc)
	return err
}

// schemaMembers decodes the top level of a schema document, which must be
// a JSON object whose $schema, when present, is a string.
func schemaMembers(which string, doc jsontext.Value) (map[string]jsontext.Value, error) {
	if k := jsontext.Value(doc).Kind(); k != '{' {
		return nil, fmt.Errorf("%s schema must be a JSON object, not %s", which, kindWord(k))
	}
	var members map[string]jsontext.Value
	if err := jsonrpc.UnmarshalParams(doc, &members); err != nil {
		return nil, fmt.Errorf("%s schema: %w", which, err)
	}
	if v, ok := members["$schema"]; ok && v.Kind() != '"' {
		return nil, fmt.Errorf(`%s schema has "$schema": %s; it must be a string`, which, v)
	}
	return members, nil
}

func kindWord(k jsontext.Kind) string {
	switch k {
	case 'n':
		return "null"
	case 't', 'f':
		return "a boolean"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case '[':
		return "an array"
	}
	return "invalid JSON"
}
