package oauth

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseChallenges(t *testing.T) {
	type ch = AuthChallenge
	p := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name   string
		in     []string
		want   []AuthChallenge
		broken bool
	}{
		{"bearer with params", []string{`Bearer resource_metadata="https://x/.well-known/oauth-protected-resource", scope="files:read"`},
			[]ch{{Scheme: "Bearer", Params: p("resource_metadata", "https://x/.well-known/oauth-protected-resource", "scope", "files:read")}}, false},
		{"case-insensitive names, token values", []string{`bearer Error=invalid_token, SCOPE="a b"`},
			[]ch{{Scheme: "bearer", Params: p("error", "invalid_token", "scope", "a b")}}, false},
		{"several schemes in one field", []string{`Basic realm="simple", Newauth realm="apps", type=1, title="Login to \"apps\"", Bearer error="insufficient_scope"`},
			[]ch{
				{Scheme: "Basic", Params: p("realm", "simple")},
				{Scheme: "Newauth", Params: p("realm", "apps", "type", "1", "title", `Login to "apps"`)},
				{Scheme: "Bearer", Params: p("error", "insufficient_scope")},
			}, false},
		{"several fields", []string{`Basic realm="a"`, `DPoP algs="ES256", error="use_dpop_nonce"`},
			[]ch{{Scheme: "Basic", Params: p("realm", "a")}, {Scheme: "DPoP", Params: p("algs", "ES256", "error", "use_dpop_nonce")}}, false},
		{"token68", []string{`Negotiate a87421000492aa874209af8bc028==, Bearer`},
			[]ch{{Scheme: "Negotiate", Token68: "a87421000492aa874209af8bc028=="}, {Scheme: "Bearer"}}, false},
		{"token68 with slash and plus", []string{`Basic dXNlcjpw/+YXNz`}, []ch{{Scheme: "Basic", Token68: "dXNlcjpw/+YXNz"}}, false},
		{"bare scheme", []string{`Bearer`}, []ch{{Scheme: "Bearer"}}, false},
		{"whitespace around =", []string{`Bearer realm = "x" ,error= invalid_token`},
			[]ch{{Scheme: "Bearer", Params: p("realm", "x", "error", "invalid_token")}}, false},
		{"empty list elements", []string{` , Bearer realm="x",, ,`}, []ch{{Scheme: "Bearer", Params: p("realm", "x")}}, false},
		{"duplicate param keeps first", []string{`Bearer scope="a", scope="b"`}, []ch{{Scheme: "Bearer", Params: p("scope", "a")}}, false},
		{"escaped backslash", []string{`Bearer error_description="a\\b\"c"`}, []ch{{Scheme: "Bearer", Params: p("error_description", `a\b"c`)}}, false},
		{"commas inside quotes", []string{`Bearer scope="a,b", realm="x"`}, []ch{{Scheme: "Bearer", Params: p("scope", "a,b", "realm", "x")}}, false},
		{"unterminated quote keeps what parsed", []string{`Bearer realm="x", scope="never closed`}, []ch{{Scheme: "Bearer", Params: p("realm", "x")}}, true},
		{"garbage before a good one", []string{`"quoted", Bearer realm="x"`}, []ch{{Scheme: "Bearer", Params: p("realm", "x")}}, true},
		{"empty", []string{""}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseChallenges(tt.in...)
			if (err != nil) != tt.broken {
				t.Fatalf("err = %v, want broken=%v", err, tt.broken)
			}
			if err != nil && !errors.Is(err, ErrMalformedChallenge) {
				t.Errorf("err = %v does not wrap ErrMalformedChallenge", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %#v\nwant %#v", got, tt.want)
			}
		})
	}
}

func TestParseChallengesLimits(t *testing.T) {
	if _, err := ParseChallenges(strings.Repeat("a", maxChallengeBytes+1)); !errors.Is(err, ErrMalformedChallenge) {
		t.Errorf("over-long field: err = %v", err)
	}
	many := strings.Repeat("Bearer, ", 40)
	got, err := ParseChallenges(many)
	if len(got) != maxChallenges || !errors.Is(err, ErrMalformedChallenge) {
		t.Errorf("40 challenges: got %d, err %v", len(got), err)
	}
	var params []string
	for i := range 50 {
		params = append(params, "p"+strings.Repeat("x", i)+"=1")
	}
	got, err = ParseChallenges("Bearer " + strings.Join(params, ", ") + ", Basic realm=x")
	if len(got) != 2 || len(got[0].Params) != maxChallengeParams || got[1].Param("realm") != "x" || err == nil {
		t.Errorf("50 params: got %d challenges, %d params, err %v", len(got), len(got[0].Params), err)
	}
}

// FuzzParseChallenges checks that the parser never panics, stays within
// its limits, and gives challenges whose schemes are tokens.
func FuzzParseChallenges(f *testing.F) {
	for _, s := range []string{
		`Bearer resource_metadata="https://x/y", scope="a b"`,
		`Basic realm="simple", Newauth realm="apps", type=1, title="Login to \"apps\""`,
		`Negotiate abc==, Bearer`,
		`DPoP error="use_dpop_nonce", algs="ES256 PS256"`,
		`Bearer realm="unterminated`,
		`, , "x" = , Bearer a==b`,
		`Bearer realm=\"x\"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cs, err := ParseChallenges(s, s)
		if err != nil && !errors.Is(err, ErrMalformedChallenge) {
			t.Fatalf("error %v does not wrap ErrMalformedChallenge", err)
		}
		if len(cs) > maxChallenges {
			t.Fatalf("%d challenges", len(cs))
		}
		for _, c := range cs {
			if c.Scheme == "" || strings.IndexFunc(c.Scheme, func(r rune) bool { return r > 127 || !isTchar(byte(r)) }) >= 0 {
				t.Fatalf("scheme %q is not a token", c.Scheme)
			}
			if len(c.Params) > maxChallengeParams {
				t.Fatalf("%d params", len(c.Params))
			}
			if c.Token68 != "" && c.Params != nil {
				t.Fatalf("both token68 and params")
			}
		}
	})
}
