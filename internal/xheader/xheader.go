// Package xheader implements the x-mcp-header annotation of tool input
// schemas: which arguments a client mirrors into Mcp-Param-* headers, how
// their values are written into a header, and how a server reads them back.
// Server and client share it so that both sides apply the same rules.
package xheader

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Prefix starts every mirrored parameter header.
const Prefix = "Mcp-Param-"

// Param is one annotated property.
type Param struct {
	// Path leads from the arguments object to the property, through
	// "properties" keys only.
	Path []string
	// Name is the annotation's value; the header is Prefix+Name.
	Name string
	// Type is "string", "integer" or "boolean".
	Type string
}

// Header returns the header name the parameter is mirrored into.
func (p Param) Header() string { return Prefix + p.Name }

// Params finds the x-mcp-header annotations of an input schema and checks
// the rules that make them valid: each name is a non-empty RFC 9110 token,
// unique ignoring case, placed on a string, integer or boolean property
// that is reached from the root through "properties" only. An error means
// the whole tool is invalid.
func Params(schema jsontext.Value) ([]Param, error) {
	// Most schemas declare no header: without the annotation's name, and
	// without an escape that could spell it, there is none to find, and
	// the schema need not be decoded (every caller has checked it is JSON).
	if !bytes.Contains(schema, []byte("x-mcp-header")) && bytes.IndexByte(schema, '\\') < 0 {
		return nil, nil
	}
	var root any
	if err := json.Unmarshal(schema, &root); err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	var out []Param
	seen := map[string]bool{}
	var walk func(node any, path []string, direct bool) error
	walk = func(node any, path []string, direct bool) error {
		switch n := node.(type) {
		case []any:
			for _, v := range n {
				if err := walk(v, path, false); err != nil {
					return err
				}
			}
		case map[string]any:
			if hv, ok := n["x-mcp-header"]; ok && len(path) > 0 {
				where := strings.Join(path, ".")
				if !direct {
					return fmt.Errorf("x-mcp-header on %q is not reached through properties alone", where)
				}
				name, ok := hv.(string)
				if !ok || !IsToken(name) {
					return fmt.Errorf("x-mcp-header on %q must be a non-empty header token", where)
				}
				low := strings.ToLower(name)
				if seen[low] {
					return fmt.Errorf("x-mcp-header %q is used more than once", name)
				}
				seen[low] = true
				typ, _ := n["type"].(string)
				switch typ {
				case "string", "integer", "boolean":
				default:
					return fmt.Errorf("x-mcp-header %q: property %q must be string, integer or boolean", name, where)
				}
				out = append(out, Param{Path: append([]string(nil), path...), Name: name, Type: typ})
			}
			for key, v := range n {
				if key == "properties" && direct {
					props, ok := v.(map[string]any)
					if !ok {
						continue
					}
					for pk, pv := range props {
						if err := walk(pv, append(append([]string(nil), path...), pk), true); err != nil {
							return err
						}
					}
					continue
				}
				if err := walk(v, append(append([]string(nil), path...), "~"+key), false); err != nil {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(root, nil, true); err != nil {
		return nil, err
	}
	return out, nil
}

// IsToken reports whether s is an RFC 9110 token: a header name, or an
// auth-scheme such as Bearer.
func IsToken(s string) bool {
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

// ErrAbsent reports that an argument is absent or null.
var ErrAbsent = errors.New("xheader: argument absent")

// Lookup returns the raw JSON at path inside args, or ErrAbsent when it is
// missing or null.
func Lookup(args jsontext.Value, path []string) (jsontext.Value, error) {
	cur := args
	for _, key := range path {
		var m map[string]jsontext.Value
		if len(cur) == 0 || json.Unmarshal(cur, &m) != nil {
			return nil, ErrAbsent
		}
		v, ok := m[key]
		if !ok {
			return nil, ErrAbsent
		}
		cur = v
	}
	if len(cur) == 0 || string(cur) == "null" {
		return nil, ErrAbsent
	}
	return cur, nil
}

// Safe reports whether v may be sent as a header value unencoded: visible
// ASCII, space and tab only.
func Safe(v string) bool {
	for i := 0; i < len(v); i++ {
		c := v[i]
		if (c < 0x21 || c > 0x7e) && c != ' ' && c != '\t' {
			return false
		}
	}
	return true
}

func looksEncoded(v string) bool {
	return strings.HasPrefix(v, "=?base64?") && strings.HasSuffix(v, "?=") && len(v) >= len("=?base64??=")
}

// Encode returns v as a header value. Values that are not header-safe,
// that have leading or trailing whitespace, or that would read as the
// sentinel themselves are sent as "=?base64?<base64 of UTF-8>?=".
func Encode(v string) string {
	if Safe(v) && strings.TrimSpace(v) == v && !strings.ContainsAny(v, "\t") && !looksEncoded(v) {
		return v
	}
	return "=?base64?" + base64.StdEncoding.EncodeToString([]byte(v)) + "?="
}

// Decode undoes Encode. It rejects values with characters no header may
// carry and sentinels whose base64 is malformed (strictly padded standard
// alphabet).
func Decode(v string) (string, error) {
	if !Safe(v) {
		return "", errors.New("invalid characters in header value")
	}
	if looksEncoded(v) {
		b, err := base64.StdEncoding.Strict().DecodeString(v[len("=?base64?") : len(v)-2])
		if err != nil {
			return "", errors.New("invalid base64 in header value")
		}
		return string(b), nil
	}
	return v, nil
}

// Value renders a raw JSON argument of the given schema type as the text a
// header carries (before Encode): strings as they are, integers in
// decimal, booleans as true or false.
func Value(typ string, raw jsontext.Value) (string, error) {
	switch typ {
	case "string":
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fmt.Errorf("argument is not a string: %w", err)
		}
		return s, nil
	case "integer":
		r, ok := jsonNumber(raw)
		if !ok {
			return "", errors.New("argument is not a number")
		}
		if r.IsInt() {
			if !inSafeRange(r.Num()) {
				return "", errors.New("integer argument outside ±(2^53−1), which a header may not carry")
			}
			return r.Num().String(), nil
		}
		return string(raw), nil
	case "boolean":
		switch string(raw) {
		case "true", "false":
			return string(raw), nil
		}
		return "", errors.New("argument is not a boolean")
	}
	return string(raw), nil
}

// Matches reports whether a decoded header value stands for the raw JSON
// argument. Integers must lie within ±(2^53−1) and compare exactly, not
// as float64; the argument may be
// written in any JSON form of an integer (42, 42.0, 4.2e1), while the
// header must be plain decimal (an optional sign, digits, and optionally
// a point followed by zeros) so that no other spelling slips through.
func Matches(typ string, raw jsontext.Value, header string) bool {
	switch typ {
	case "integer":
		want, ok := jsonNumber(raw)
		if !ok || !want.IsInt() || !inSafeRange(want.Num()) {
			return false
		}
		have, ok := decimalInt(header)
		return ok && want.Num().Cmp(have) == 0
	default:
		v, err := Value(typ, raw)
		return err == nil && v == header
	}
}

// maxSafe is 2^53−1, the largest integer every JSON peer reads exactly:
// integers mirrored into headers must lie within ±maxSafe (XH-3).
var maxSafe = big.NewInt(1<<53 - 1)

// inSafeRange reports whether |n| ≤ 2^53−1.
func inSafeRange(n *big.Int) bool { return n.CmpAbs(maxSafe) <= 0 }

// jsonNumber parses a JSON number exactly. Anything but a JSON number
// (which has no base prefix, fraction slash or hexadecimal form) is
// refused before big.Rat could read it.
func jsonNumber(raw jsontext.Value) (*big.Rat, bool) {
	s := string(raw)
	if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) || strings.ContainsAny(s, "xXbBoOpP/_") {
		return nil, false
	}
	if exp := strings.IndexAny(s, "eE"); exp >= 0 {
		// Bound the exponent: 1e1000000000 is valid JSON but would take
		// big.Rat a long time and much memory to expand.
		n, err := strconv.Atoi(strings.TrimPrefix(s[exp+1:], "+"))
		if err != nil || n > 400 || n < -400 {
			return nil, false
		}
	}
	r, ok := new(big.Rat).SetString(s)
	return r, ok
}

// decimalInt parses a header integer: an optional sign, one or more
// decimal digits, and optionally "." followed by one or more zeros.
func decimalInt(h string) (*big.Int, bool) {
	digits := h
	if digits != "" && (digits[0] == '-' || digits[0] == '+') {
		digits = digits[1:]
	}
	if i := strings.IndexByte(digits, '.'); i >= 0 {
		frac := digits[i+1:]
		if frac == "" || strings.Trim(frac, "0") != "" {
			return nil, false
		}
		digits = digits[:i]
	}
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return nil, false
	}
	n, ok := new(big.Int).SetString(digits, 10)
	if ok && h[0] == '-' {
		n.Neg(n)
	}
	return n, ok
}
