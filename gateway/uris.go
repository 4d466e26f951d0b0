package gateway

import (
	"fmt"
	"strings"

	"tidings/server"
)

// A resource URI reaches the gateway as the caller spelt it, and goes
// upstream as it is. The rules (the caller's exclude, the upstream's
// include and exclude) are globs over that text, but an upstream may
// serve a resource by template and read many spellings as one:
// "file:///d1/./secret.txt", "file:///d1//secret.txt" and
// "file:///d1/s%65cret.txt" all name "file:///d1/secret.txt" to a server
// that cleans paths or decodes escapes. A glob cannot see through that,
// so the gateway refuses what it cannot judge: a URI it does not find
// listed as it is must be in the one spelling those normalizations leave
// unchanged (checkSpelling), and the rules are then matched against the
// URI itself, never a template standing for it (uriVariants).

// checkSpelling reports why uri is not in the form that an upstream
// normalizing URIs would leave as it is, or nil. The error names what to
// change, for the person who wrote the URI.
func checkSpelling(uri string) error {
	colon := strings.IndexByte(uri, ':')
	if colon <= 0 {
		return fmt.Errorf("it has no scheme")
	}
	for i := 0; i < len(uri); i++ {
		switch c := uri[i]; {
		case c <= ' ' || c == 0x7f:
			return fmt.Errorf("it holds a control character or a space at byte %d (escape it as %%%02X)", i, c)
		case c >= 0x80:
			// Raw, such bytes have more than one spelling to a server
			// that normalizes Unicode; escaped, they have one.
			return fmt.Errorf("it holds a byte outside ASCII at byte %d (escape it as %%%02X)", i, c)
		case i < colon && !isSchemeByte(c, i):
			return fmt.Errorf("its scheme %q is not letters, digits, '+', '-' and '.' starting with a letter", uri[:colon])
		case c == '\\':
			return fmt.Errorf("it holds a backslash, which some servers read as '/'")
		case c == '#':
			return fmt.Errorf("it has a fragment (#), which is no part of a resource's name")
		case c >= 'A' && c <= 'Z' && i < colon:
			return fmt.Errorf("its scheme has capitals; schemes are written in lower case")
		case c == '%':
			if err := checkEscape(uri[i:]); err != nil {
				return err
			}
		}
	}
	rest := uri[colon+1:]
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		rest = rest[:q]
	}
	if auth, ok := strings.CutPrefix(rest, "//"); ok {
		end := strings.IndexByte(auth, '/')
		if end < 0 {
			end = len(auth)
		}
		if host := auth[:end]; strings.ToLower(host) != host {
			return fmt.Errorf("its host %q has capitals; hosts are written in lower case", host)
		}
		rest = auth[end:]
	}
	segs := strings.Split(rest, "/")
	for j, s := range segs {
		switch {
		case s == "." || s == "..":
			return fmt.Errorf("its path has a %q segment; resolve it first", s)
		case s == "" && j > 0 && j < len(segs)-1:
			return fmt.Errorf("its path has an empty segment (//)")
		}
	}
	return nil
}

// checkEscape checks the percent-escape that esc starts with: two
// upper-case hex digits, of a byte that must be escaped. An escaped
// letter, digit or "-._~" means the same unescaped (RFC 3986, 2.3), and
// an escaped '/' or '\' is a separator to some servers, so neither can
// be judged by a glob.
func checkEscape(esc string) error {
	if len(esc) < 3 || !isUpperHex(esc[1]) || !isUpperHex(esc[2]) {
		if len(esc) >= 3 && isHex(esc[1]) && isHex(esc[2]) {
			return fmt.Errorf("its escape %s has lower-case hex digits; write %s", esc[:3], strings.ToUpper(esc[:3]))
		}
		return fmt.Errorf("it has a '%%' that does not start an escape (write %%25)")
	}
	b := unhex(esc[1])<<4 | unhex(esc[2])
	switch {
	case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9', b == '-', b == '.', b == '_', b == '~':
		return fmt.Errorf("its escape %s stands for %q, which is written as it is", esc[:3], string(rune(b)))
	case b == '/' || b == '\\':
		return fmt.Errorf("its escape %s stands for %q, which some servers read as a path separator", esc[:3], string(rune(b)))
	case b == '%' && len(esc) >= 5 && isHex(esc[3]) && isHex(esc[4]):
		return fmt.Errorf("its escape %s is followed by hex digits, which a server that decodes twice reads as another escape", esc[:3])
	}
	return nil
}

// isSchemeByte reports whether c may be the i-th byte of a scheme
// (RFC 3986, 3.1); capitals are told apart, as a spelling to refuse.
func isSchemeByte(c byte, i int) bool {
	letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
	return letter || i > 0 && (c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')
}

func isHex(c byte) bool      { return isUpperHex(c) || c >= 'a' && c <= 'f' }
func isUpperHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'A' && c <= 'F' }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'A' + 10
}

// uriVariants are the names uri may stand for at an upstream that drops
// a query or a trailing slash, or reads "file://localhost/" as
// "file:///" (RFC 8089): an exclude that matches any of them hides uri.
// (An include must match uri itself.)
func uriVariants(uri string) []string {
	out := []string{uri}
	if rest, ok := strings.CutPrefix(uri, "file://localhost"); ok && (rest == "" || rest[0] == '/' || rest[0] == '?') {
		uri = "file://" + rest
		out = append(out, uri)
	}
	if q := strings.IndexByte(uri, '?'); q >= 0 {
		uri = uri[:q]
		out = append(out, uri)
	}
	if t := strings.TrimRight(uri, "/"); t != uri {
		if len(t) == strings.IndexByte(uri, ':')+1 {
			// "x:///" is "x://" with an empty path: the authority stays.
			if strings.HasPrefix(uri[len(t):], "///") {
				t += "//"
			} else {
				t = ""
			}
		}
		if t != "" && t != uri {
			out = append(out, t)
		}
	}
	return out
}

// excludesURI reports whether one of globs matches uri or one of its
// variants.
func excludesURI(globs []string, uri string) bool {
	if len(globs) == 0 {
		return false
	}
	for _, v := range uriVariants(uri) {
		if matchAny(globs, v) {
			return true
		}
	}
	return false
}

// keepsURI reports whether the upstream's own include and exclude let
// the resource uri through: the URI itself, not a template it matches.
func (u *upstream) keepsURI(uri string) bool {
	if len(u.cfg.Include) > 0 && !matchAny(u.cfg.Include, uri) {
		return false
	}
	return !excludesURI(u.cfg.Exclude, uri)
}

// servesKept reports whether u serves the resource uri to principal by
// what the gateway keeps of its lists, without asking it: listed as it is
// (tmpl ""), or matched by a template (tmpl, and only for a uri spelt so
// that it can be judged and that u's own rules keep).
func (u *upstream) servesKept(principal, uri string) (tmpl string, ok bool) {
	key := principal
	if u.x != nil {
		if tok := u.x.latest(principal); tok != nil {
			key = credentialKey(principal, tok)
		}
	}
	ri, ti := listIndex(server.ListResources), listIndex(server.ListTemplates)
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, v := range []*view{u.public[ri], u.private[ri][key]} {
		if v == nil {
			continue
		}
		if _, ok := v.byKey[uri]; ok {
			return "", true
		}
	}
	for _, v := range []*view{u.public[ti], u.private[ti][key]} {
		if v == nil {
			continue
		}
		for _, it := range v.items {
			if it.tmpl != nil && it.tmpl.Match(uri) != nil {
				if checkSpelling(uri) != nil || !u.keepsURI(uri) {
					return "", false
				}
				return it.key, true
			}
		}
	}
	return "", false
}
