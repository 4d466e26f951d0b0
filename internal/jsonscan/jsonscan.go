// Package jsonscan walks the members of a JSON object, or the elements
// of an array, that is known to be valid, without decoding it: the hot
// request path reads a message's envelope and params, and a client a
// list's items, as sub-slices of the bytes received, where a decode by
// reflection copied every member into maps and structs of its own.
// Whatever it does not handle (an escaped name, an unexpected shape) the
// caller hands to the strict decoder, which also words the errors.
package jsonscan

// Object iterates the members of a JSON object. The bytes must be valid
// JSON (jsontext.Value.IsValid): Object checks bounds, never syntax.
type Object struct {
	b []byte
	i int
}

// NewObject starts iterating obj, a valid JSON object.
func NewObject(obj []byte) Object {
	o := Object{b: obj}
	o.skipSpace()
	if o.i < len(o.b) && o.b[o.i] == '{' {
		o.i++
	} else {
		o.i = len(o.b)
	}
	return o
}

// Next returns the next member: its name as it is written, between the
// quotes (a name holding a backslash is escaped, and the caller must
// unescape it or give up), and its value's bytes. ok is false after the
// last member.
func (o *Object) Next() (name, value []byte, ok bool) {
	o.skipSpace()
	if o.i >= len(o.b) || o.b[o.i] != '"' {
		return nil, nil, false // '}' or the end
	}
	start := o.i
	o.i = skipString(o.b, o.i)
	if o.i-1 <= start {
		return nil, nil, false
	}
	name = o.b[start+1 : o.i-1]
	o.skipSpace()
	if o.i >= len(o.b) || o.b[o.i] != ':' {
		return nil, nil, false
	}
	value, o.i = valueAt(o.b, o.i+1)
	return name, value, len(value) > 0
}

// valueAt returns the value that starts at b[i] or after whitespace, and
// the index past it and past the comma that follows it, if one does.
func valueAt(b []byte, i int) (value []byte, next int) {
	i = skipSpace(b, i)
	end := skipValue(b, i)
	next = skipSpace(b, end)
	if next < len(b) && b[next] == ',' {
		next++
	}
	return b[i:end], next
}

func (o *Object) skipSpace() { o.i = skipSpace(o.b, o.i) }

// skipSpace returns the index of the first byte from b[i] on that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// skipString returns the index just past the string starting at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	}
	for ; i < len(b); i++ {
		switch c := b[i]; {
		case c == ',' || c == '}' || c == ']' || isSpace(c):
			return i
		}
	}
	return i
}

// String returns the text of v, a JSON string without escapes, and
// whether it is one: a string with escapes (or another value) is left
// to a decoder.
func String(v []byte) ([]byte, bool) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return nil, false
	}
	s := v[1 : len(v)-1]
	for _, c := range s {
		if c == '\\' || c == '"' {
			return nil, false
		}
	}
	return s, true
}

// Array iterates the elements of a JSON array that, like Object's, is
// known to be valid.
type Array struct {
	b []byte
	i int
}

// NewArray starts iterating arr, a valid JSON array. Anything else has
// no elements.
func NewArray(arr []byte) Array {
	a := Array{b: arr, i: skipSpace(arr, 0)}
	if a.i < len(a.b) && a.b[a.i] == '[' {
		a.i++
	} else {
		a.i = len(a.b)
	}
	return a
}

// Next returns the next element's bytes, a sub-slice of the array; ok
// is false after the last element.
func (a *Array) Next() (value []byte, ok bool) {
	a.i = skipSpace(a.b, a.i)
	if a.i >= len(a.b) || a.b[a.i] == ']' {
		return nil, false
	}
	value, a.i = valueAt(a.b, a.i)
	return value, len(value) > 0
}
