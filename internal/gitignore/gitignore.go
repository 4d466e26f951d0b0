// Package gitignore decides which paths of a tree .gitignore patterns
// exclude, with git's rules, so that a directory served from a checkout
// leaves out what the checkout's own tools leave behind (node_modules,
// build output) without a list of its own.
//
// The pattern syntax is git's: a blank line or one starting with "#" is
// no pattern ("\#" starts one with "#"); trailing spaces are dropped
// unless escaped ("\ "); "!" negates (re-includes what an earlier pattern
// excluded; "\!" starts one with "!"); a trailing "/" matches directories
// only; a "/" at the start or in the middle anchors the pattern to the
// directory of its .gitignore, and without one the pattern matches a name
// at any depth below it. "*" matches any run of characters but "/", "?"
// one character but "/", "[a-z]", "[!a-z]" and "[[:alpha:]]" one of a
// class, and "\" quotes the next character. "**" as a whole component
// matches any number of directories: "**/x" x anywhere, "a/**/b" a/b,
// a/x/b and deeper, and "a/**" everything inside a (but not a itself).
// Elsewhere "**" is "*". Within one set of rules the last pattern that
// matches decides; the rules of a deeper directory decide before those
// of the directories above it. As in git, a file whose directory is
// excluded cannot be re-included.
//
// Paths are slash-separated, relative to the tree's root, and compared
// byte by byte (names need not be UTF-8), as git does without
// core.ignoreCase. A pattern that git would refuse (an unclosed "[", a
// trailing "\") matches nothing.
package gitignore

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// Verdict is what a set of rules says about one path.
type Verdict int8

const (
	// NoMatch: no pattern matches; rules further up decide.
	NoMatch Verdict = iota
	// Exclude: the last pattern that matches excludes the path.
	Exclude
	// Include: the last pattern that matches is a negation ("!").
	Include
)

// pattern is one compiled line.
type pattern struct {
	segs     []string // the components, "**" alone where it spans directories
	negate   bool
	dirOnly  bool
	anchored bool // matched against the whole path below base, not its last component
}

// Rules are the patterns of one .gitignore file, or patterns given
// beside such files, and the directory they apply under.
type Rules struct {
	base string // slash-separated, relative to the tree's root; "" is the root
	pats []pattern
}

// Base returns the directory the rules apply under ("" for the root).
func (r *Rules) Base() string { return r.base }

// Len returns the number of patterns, lines that match nothing aside.
func (r *Rules) Len() int { return len(r.pats) }

// Parse reads the content of the .gitignore file in the directory base
// (slash-separated, relative to the tree's root, "" for the root). Lines
// that are no pattern are skipped, as git skips them; a "\r" ending a
// line is dropped, so files written on Windows mean the same.
func Parse(base string, data []byte) *Rules {
	r := &Rules{base: base}
	for line := range bytes.Lines(data) {
		line = bytes.TrimSuffix(line, []byte("\n"))
		line = bytes.TrimSuffix(line, []byte("\r"))
		if p, ok := compile(string(line)); ok {
			r.pats = append(r.pats, p)
		}
	}
	return r
}

// Compile compiles patterns given one by one (on a command line, say),
// which apply from the tree's root. Unlike Parse, it refuses a pattern
// that can match nothing — blank, a comment, "!" or "/" alone — since
// whoever typed it meant something else.
func Compile(patterns []string) (*Rules, error) {
	r := &Rules{}
	for _, s := range patterns {
		p, ok := compile(s)
		switch {
		case ok:
			r.pats = append(r.pats, p)
		case strings.HasPrefix(s, "#"):
			return nil, fmt.Errorf("pattern %q is a comment in .gitignore syntax and matches nothing; write %q for a name that starts with #", s, `\`+s)
		case strings.TrimSpace(s) == "":
			return nil, errors.New("empty pattern: it matches nothing")
		default:
			return nil, fmt.Errorf("pattern %q matches nothing: it names no file", s)
		}
	}
	return r, nil
}

// compile turns one line into a pattern, and reports false for a line
// that is no pattern.
func compile(line string) (pattern, bool) {
	if line == "" || line[0] == '#' {
		return pattern{}, false
	}
	line = trimTrailingSpaces(line)
	var p pattern
	if strings.HasPrefix(line, "!") {
		p.negate, line = true, line[1:]
	}
	if strings.HasSuffix(line, "/") && !escapedAt(line, len(line)-1) {
		p.dirOnly, line = true, line[:len(line)-1]
	}
	p.anchored = strings.Contains(line, "/")
	line = strings.TrimPrefix(line, "/")
	if line == "" {
		return pattern{}, false
	}
	if !p.anchored {
		p.segs = []string{line}
		return p, true
	}
	p.segs = strings.Split(line, "/")
	return p, true
}

// trimTrailingSpaces drops the spaces ending a line, except one quoted
// with a backslash (and those before it).
func trimTrailingSpaces(s string) string {
	end := len(s)
	for end > 0 && s[end-1] == ' ' && !escapedAt(s, end-1) {
		end--
	}
	return s[:end]
}

// escapedAt reports whether s[i] is quoted: preceded by an odd number of
// backslashes.
func escapedAt(s string, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// Match says what the rules say about rel, a slash-separated path
// relative to the tree's root, which is a directory when isDir is set.
// It looks at rel alone, not at its directories (see Set.Ignored).
func (r *Rules) Match(rel string, isDir bool) Verdict {
	below, ok := r.below(rel)
	if !ok {
		return NoMatch
	}
	var segs []string // split only when an anchored pattern needs it
	name := below[strings.LastIndexByte(below, '/')+1:]
	for i := len(r.pats) - 1; i >= 0; i-- {
		p := &r.pats[i]
		if p.dirOnly && !isDir {
			continue
		}
		var hit bool
		if p.anchored {
			if segs == nil {
				segs = strings.Split(below, "/")
			}
			hit = matchSegs(p.segs, segs)
		} else {
			hit = matchSeg(p.segs[0], name)
		}
		if hit {
			if p.negate {
				return Include
			}
			return Exclude
		}
	}
	return NoMatch
}

// below returns rel relative to the rules' base, and false when rel is
// not strictly under it.
func (r *Rules) below(rel string) (string, bool) {
	if rel == "" {
		return "", false
	}
	if r.base == "" {
		return rel, true
	}
	rest, ok := strings.CutPrefix(rel, r.base)
	if !ok || len(rest) < 2 || rest[0] != '/' {
		return "", false
	}
	return rest[1:], true
}

// matchSegs matches the components of an anchored pattern against those
// of a path, "**" standing for any number of components (one or more
// when it ends the pattern). It takes time proportional to the product
// of their lengths, however many "**" there are.
func matchSegs(ps, ss []string) bool {
	// ok[j]: ps[i:] matches ss[j:], computed for i from the end.
	ok := make([]bool, len(ss)+1)
	next := make([]bool, len(ss)+1)
	ok[len(ss)] = true
	for i := len(ps) - 1; i >= 0; i-- {
		ok, next = next, ok // next now holds row i+1
		switch {
		case ps[i] == "**" && i == len(ps)-1:
			for j := range ok {
				ok[j] = j < len(ss)
			}
		case ps[i] == "**":
			ok[len(ss)] = next[len(ss)]
			for j := len(ss) - 1; j >= 0; j-- {
				ok[j] = next[j] || ok[j+1]
			}
		default:
			ok[len(ss)] = false
			for j := len(ss) - 1; j >= 0; j-- {
				ok[j] = next[j+1] && matchSeg(ps[i], ss[j])
			}
		}
	}
	return ok[0]
}

// matchSeg matches one component of a pattern against one name. A star
// is retried from one position on only, which keeps the time
// proportional to the product of the lengths.
func matchSeg(p, s string) bool {
	px, sx := 0, 0
	starP, starS := -1, 0
	for px < len(p) || sx < len(s) {
		if px < len(p) {
			switch c := p[px]; c {
			case '*':
				for px < len(p) && p[px] == '*' {
					px++
				}
				starP, starS = px, sx
				continue
			case '?':
				if sx < len(s) {
					px, sx = px+1, sx+1
					continue
				}
			case '[':
				hit, width, valid := matchClass(p[px:], s, sx)
				if !valid {
					return false
				}
				if hit {
					px, sx = px+width, sx+1
					continue
				}
			case '\\':
				if px+1 == len(p) {
					return false // a trailing backslash: git refuses the pattern
				}
				if sx < len(s) && s[sx] == p[px+1] {
					px, sx = px+2, sx+1
					continue
				}
			default:
				if sx < len(s) && s[sx] == c {
					px, sx = px+1, sx+1
					continue
				}
			}
		}
		if starP >= 0 && starS < len(s) {
			starS++
			px, sx = starP, starS
			continue
		}
		return false
	}
	return true
}

// matchClass matches the bracket expression p starts with against s[sx]
// (no match when s has no byte there). It returns whether it matched, the
// expression's width, and false when p holds no valid expression (no
// closing bracket, an unknown [:class:]).
func matchClass(p, s string, sx int) (hit bool, width int, valid bool) {
	i := 1
	negate := false
	if i < len(p) && (p[i] == '!' || p[i] == '^') {
		negate, i = true, i+1
	}
	var c byte
	have := sx < len(s)
	if have {
		c = s[sx]
	}
	matched := false
	for first := true; ; first = false {
		if i >= len(p) {
			return false, 0, false
		}
		ch := p[i]
		if ch == ']' && !first {
			i++
			break
		}
		if ch == '[' && i+1 < len(p) && p[i+1] == ':' {
			if end := strings.Index(p[i+2:], ":]"); end >= 0 {
				is, known := posixClass(p[i+2 : i+2+end])
				if !known {
					return false, 0, false
				}
				if have && is(c) {
					matched = true
				}
				i += 2 + end + 2
				continue
			}
		}
		if ch == '\\' {
			if i++; i >= len(p) {
				return false, 0, false
			}
			ch = p[i]
		}
		lo := ch
		i++
		if i+1 < len(p) && p[i] == '-' && p[i+1] != ']' {
			hi := p[i+1]
			i += 2
			if hi == '\\' {
				if i >= len(p) {
					return false, 0, false
				}
				hi = p[i]
				i++
			}
			if have && lo <= c && c <= hi {
				matched = true
			}
			continue
		}
		if have && c == lo {
			matched = true
		}
	}
	if !have {
		return false, i, true
	}
	return matched != negate, i, true
}

// posixClass returns the test of a [:name:] class, and false for a name
// git does not know.
func posixClass(name string) (func(byte) bool, bool) {
	lower := func(c byte) bool { return 'a' <= c && c <= 'z' }
	upper := func(c byte) bool { return 'A' <= c && c <= 'Z' }
	digit := func(c byte) bool { return '0' <= c && c <= '9' }
	switch name {
	case "alnum":
		return func(c byte) bool { return lower(c) || upper(c) || digit(c) }, true
	case "alpha":
		return func(c byte) bool { return lower(c) || upper(c) }, true
	case "blank":
		return func(c byte) bool { return c == ' ' || c == '\t' }, true
	case "cntrl":
		return func(c byte) bool { return c < 0x20 || c == 0x7f }, true
	case "digit":
		return digit, true
	case "graph":
		return func(c byte) bool { return 0x21 <= c && c <= 0x7e }, true
	case "lower":
		return lower, true
	case "print":
		return func(c byte) bool { return 0x20 <= c && c <= 0x7e }, true
	case "punct":
		return func(c byte) bool { return 0x21 <= c && c <= 0x7e && !lower(c) && !upper(c) && !digit(c) }, true
	case "space":
		return func(c byte) bool { return c == ' ' || '\t' <= c && c <= '\r' }, true
	case "upper":
		return upper, true
	case "xdigit":
		return func(c byte) bool { return digit(c) || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F' }, true
	}
	return nil, false
}
