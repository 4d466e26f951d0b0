package main

import (
	"strings"
	"unicode"
)

// replacement stands in for a rune that must not reach the terminal. It is
// one rune wide, like what it replaces, so column arithmetic still holds.
const replacement = '\uFFFD'

// printable returns s with every rune that a terminal would not simply
// print replaced: C0 and C1 controls (ESC starts colour, cursor and OSC
// sequences such as clipboard writes; BEL ends them), newlines and tabs
// (which break the layout), format characters (bidirectional overrides
// that reorder what is shown) and invalid UTF-8. Server names, titles,
// list items, URIs and error texts come from the server and pass through
// here before they are displayed.
func printable(s string) string {
	clean := true
	for _, r := range s {
		if !unicode.IsPrint(r) || r == unicode.ReplacementChar {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		if unicode.IsPrint(r) {
			b.WriteRune(r)
		} else {
			b.WriteRune(replacement)
		}
	}
	return b.String()
}
