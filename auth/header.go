package auth

import (
	"errors"
	"net/http"
	"strings"

	"tidings/internal/xheader"
)

// errMalformed means the Authorization header was present but is not a
// well-formed credential: the client gets 400, not a challenge, because
// retrying with a fresh token would not help.
var errMalformed = errors.New("malformed Authorization header")

// bearerToken extracts the access token of an RFC 6750 §2.1 header. It
// reports ok=false with a nil error when the request carries no bearer
// credential (no header, or another scheme such as Basic), which is
// answered with a plain challenge.
func bearerToken(h http.Header) (token string, ok bool, err error) {
	vals := h.Values("Authorization")
	switch len(vals) {
	case 0:
		return "", false, nil
	case 1:
	default:
		return "", false, errMalformed
	}
	return parseBearer(vals[0])
}

// parseBearer parses one Authorization value. The scheme name is
// case-insensitive; the credential must be a b64token and nothing may
// follow it.
func parseBearer(v string) (string, bool, error) {
	v = strings.Trim(v, " \t")
	if v == "" {
		return "", false, errMalformed
	}
	scheme, rest, _ := strings.Cut(v, " ")
	if !xheader.IsToken(scheme) {
		return "", false, errMalformed
	}
	if !strings.EqualFold(scheme, "Bearer") {
		return "", false, nil
	}
	tok := strings.TrimLeft(rest, " ")
	if !isB64Token(tok) {
		return "", false, errMalformed
	}
	return tok, true, nil
}

// isB64Token reports whether s matches RFC 6750's
// 1*( ALPHA / DIGIT / "-" / "." / "_" / "~" / "+" / "/" ) *"=".
func isB64Token(s string) bool {
	body := strings.TrimRight(s, "=")
	if body == "" {
		return false
	}
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-' || c == '.' || c == '_' || c == '~' || c == '+' || c == '/':
		default:
			return false
		}
	}
	return true
}

// challenge builds a Bearer WWW-Authenticate value. Values are our own
// constants, scope names and URLs, none of which holds a quote or a
// backslash (scope names and URLs containing them are refused by New).
func challenge(errCode, desc, scope, metadataURL string) string {
	var b strings.Builder
	b.WriteString("Bearer ")
	sep := ""
	add := func(k, v string) {
		b.WriteString(sep)
		b.WriteString(k)
		b.WriteString(`="`)
		b.WriteString(v)
		b.WriteByte('"')
		sep = ", "
	}
	if errCode != "" {
		add("error", errCode)
	}
	if desc != "" {
		add("error_description", desc)
	}
	add("resource_metadata", metadataURL)
	if scope != "" {
		add("scope", scope)
	}
	return b.String()
}
