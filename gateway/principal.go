package gateway

import (
	"net/http"
	"slices"
	"strconv"

	"tidings/auth"
)

// Principal names the caller of r for a gateway with caller rules; give
// it to streamhttp.WithPrincipal in front of the gateway, behind an
// auth.Guard. It is the caller auth.Principal names, told apart by the
// scopes its token grants: a rule may choose callers by scope, and a
// change is told to a listen as the rule of the listen's principal
// says, so two tokens of one subject with different scopes must be two
// principals — else a listen opened with the narrower token would be
// judged by the wider one its owner used last, and told of items its own
// token may not see. A request without a token has no principal ("").
func Principal(r *http.Request) string {
	info, ok := auth.FromContext(r.Context())
	if !ok {
		return ""
	}
	return principalOf(info)
}

// principalOf is Principal for the token info.
func principalOf(info *auth.Info) string {
	p := info.Principal()
	if p == "" || len(info.Scopes) == 0 {
		return p
	}
	scopes := slices.Compact(slices.Sorted(slices.Values(info.Scopes)))
	// auth's principals end with a netstring; each scope follows as
	// one, so that no set of scopes spells another.
	b := []byte(p)
	b = append(b, "scopes:"...)
	for _, s := range scopes {
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
		b = append(b, ',')
	}
	return string(b)
}
