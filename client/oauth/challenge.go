package oauth

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// AuthChallenge is one authentication challenge of a WWW-Authenticate field
// (RFC 9110 §11.6.1): a scheme and either a token68 or auth-params.
type AuthChallenge struct {
	// Scheme is the auth-scheme as sent; compare it case-insensitively
	// (see [AuthChallenge.Is]).
	Scheme string
	// Token68 is the challenge's token68, if it has one instead of
	// parameters.
	Token68 string
	// Params holds the auth-params, names lowercased (they are
	// case-insensitive), quoted-string values unquoted. When a name
	// occurs twice the first value is kept.
	Params map[string]string
}

// Is reports whether the challenge's scheme is scheme, ignoring case.
func (c AuthChallenge) Is(scheme string) bool { return strings.EqualFold(c.Scheme, scheme) }

// Param returns the value of the auth-param name (case-insensitive).
func (c AuthChallenge) Param(name string) string { return c.Params[strings.ToLower(name)] }

// Limits of the parser: a WWW-Authenticate longer than this, or with
// more challenges or parameters, is refused or cut, so a hostile server
// cannot make the client spend more than linear time on a small bound.
const (
	maxChallengeBytes  = 16 << 10
	maxChallenges      = 16
	maxChallengeParams = 32
)

// ErrMalformedChallenge is wrapped by the error [ParseChallenges]
// returns for a field it could not entirely parse.
var ErrMalformedChallenge = errors.New("oauth: malformed WWW-Authenticate")

// ParseChallenges parses the values of one or more WWW-Authenticate
// fields (each may hold several comma-separated challenges). It returns
// the challenges it could parse; the error, wrapping
// [ErrMalformedChallenge], tells that something was skipped: a
// malformed challenge, an unterminated quoted string, more than 16
// challenges or 32 parameters to one, or more than 16 KiB in all.
func ParseChallenges(values ...string) ([]AuthChallenge, error) {
	total := 0
	for _, v := range values {
		total += len(v)
	}
	if total > maxChallengeBytes {
		return nil, fmt.Errorf("%w: field longer than %d bytes", ErrMalformedChallenge, maxChallengeBytes)
	}
	var (
		out  []AuthChallenge
		fail string // the first problem met
	)
	note := func(err error) {
		if err != nil && fail == "" {
			fail = err.Error()
		}
	}
	for _, v := range values {
		p := &chParser{s: v}
		for len(out) < maxChallenges {
			c, ok, err := p.next()
			note(err)
			if c != nil {
				out = append(out, *c)
			}
			if !ok {
				break
			}
		}
		if len(out) >= maxChallenges && p.more() {
			note(errors.New("too many challenges"))
			break
		}
	}
	if fail != "" {
		return out, fmt.Errorf("%w: %s", ErrMalformedChallenge, fail)
	}
	return out, nil
}

// challengesOf parses a response's WWW-Authenticate fields, keeping
// whatever parsed.
func challengesOf(h http.Header) []AuthChallenge {
	cs, _ := ParseChallenges(h.Values("WWW-Authenticate")...)
	return cs
}

// findChallenge returns the first challenge of one of the schemes.
func findChallenge(cs []AuthChallenge, schemes ...string) (AuthChallenge, bool) {
	for _, c := range cs {
		for _, s := range schemes {
			if c.Is(s) {
				return c, true
			}
		}
	}
	return AuthChallenge{}, false
}

type chParser struct {
	s string
	i int
}

func (p *chParser) more() bool {
	p.skipListSep()
	return p.i < len(p.s)
}

func (p *chParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *chParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// skipListSep skips whitespace and empty list elements.
func (p *chParser) skipListSep() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t' || p.s[p.i] == ',') {
		p.i++
	}
}

func (p *chParser) token() string {
	start := p.i
	for p.i < len(p.s) && isTchar(p.s[p.i]) {
		p.i++
	}
	return p.s[start:p.i]
}

// skipElement moves past the current list element, to the next comma
// outside a quoted string (or the end), after a parse error.
func (p *chParser) skipElement() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ',':
			return
		case '"':
			p.i++
			for p.i < len(p.s) && p.s[p.i] != '"' {
				if p.s[p.i] == '\\' {
					p.i++
				}
				p.i++
			}
			if p.i < len(p.s) {
				p.i++
			}
		default:
			p.i++
		}
	}
}

// paramAhead reports whether an auth-param (token BWS "=") starts at the
// current position, which is then left unchanged.
func (p *chParser) paramAhead() bool {
	j := p.i
	for j < len(p.s) && isTchar(p.s[j]) {
		j++
	}
	if j == p.i {
		return false
	}
	for j < len(p.s) && (p.s[j] == ' ' || p.s[j] == '\t') {
		j++
	}
	if j >= len(p.s) || p.s[j] != '=' {
		return false
	}
	// "abc=" followed by nothing, a comma or more "=" is a token68 with
	// padding, not a parameter (a parameter's value is never empty).
	j++
	for j < len(p.s) && (p.s[j] == ' ' || p.s[j] == '\t') {
		j++
	}
	return j < len(p.s) && (p.s[j] == '"' || isTchar(p.s[j])) && p.s[j] != '='
}

// next parses one challenge. ok=false means the field is exhausted.
func (p *chParser) next() (c *AuthChallenge, ok bool, err error) {
	p.skipListSep()
	if p.i >= len(p.s) {
		return nil, false, nil
	}
	scheme := p.token()
	if scheme == "" {
		p.skipElement()
		return nil, true, errors.New("challenge without a scheme")
	}
	c = &AuthChallenge{Scheme: scheme}
	if p.i < len(p.s) && p.s[p.i] != ' ' && p.s[p.i] != '\t' && p.s[p.i] != ',' {
		p.skipElement()
		return nil, true, errors.New("bad character after scheme")
	}
	p.skipOWS()
	if p.i >= len(p.s) || p.peek() == ',' {
		return c, true, nil
	}
	if !p.paramAhead() {
		// token68
		start := p.i
		for p.i < len(p.s) && isToken68Char(p.s[p.i]) {
			p.i++
		}
		for p.i < len(p.s) && p.s[p.i] == '=' {
			p.i++
		}
		c.Token68 = p.s[start:p.i]
		p.skipOWS()
		if c.Token68 == "" || (p.i < len(p.s) && p.s[p.i] != ',') {
			p.skipElement()
			return nil, true, errors.New("bad token68")
		}
		return c, true, nil
	}
	c.Params = map[string]string{}
	for {
		name := strings.ToLower(p.token())
		p.skipOWS()
		p.i++ // "="
		p.skipOWS()
		var val string
		if p.peek() == '"' {
			v, qok := p.quoted()
			if !qok {
				return c, false, errors.New("unterminated quoted string")
			}
			val = v
		} else {
			val = p.token()
		}
		if _, dup := c.Params[name]; !dup {
			if len(c.Params) >= maxChallengeParams {
				p.skipRest()
				return c, true, errors.New("too many parameters")
			}
			c.Params[name] = val
		}
		p.skipOWS()
		if p.i >= len(p.s) {
			return c, true, nil
		}
		if p.s[p.i] != ',' {
			p.skipElement()
			return c, true, errors.New("bad character after parameter")
		}
		// After the comma: another parameter of this challenge, or the
		// next challenge.
		p.skipListSep()
		if p.i >= len(p.s) {
			return c, true, nil
		}
		if !p.paramAhead() {
			return c, true, nil
		}
	}
}

// skipRest moves past the remaining parameters of a challenge whose
// parameters are over the limit, to the next challenge.
func (p *chParser) skipRest() {
	for {
		p.skipElement()
		p.skipListSep()
		if p.i >= len(p.s) || !p.paramAhead() {
			return
		}
	}
}

// quoted reads a quoted-string at the current position.
func (p *chParser) quoted() (string, bool) {
	p.i++ // opening quote
	var b strings.Builder
	for p.i < len(p.s) {
		ch := p.s[p.i]
		switch {
		case ch == '"':
			p.i++
			return b.String(), true
		case ch == '\\':
			if p.i+1 >= len(p.s) {
				p.i = len(p.s)
				return "", false
			}
			b.WriteByte(p.s[p.i+1])
			p.i += 2
		default:
			b.WriteByte(ch)
			p.i++
		}
	}
	return "", false
}

func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

func isToken68Char(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~+/", c) >= 0
}
