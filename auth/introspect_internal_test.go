package auth

import (
	"errors"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4/jwt"
)

func TestIntrospectedClaimsAreChecked(t *testing.T) {
	now := time.Now()
	v := &validator{issuer: "https://as.example", audience: "https://rs.example/mcp", skew: 30 * time.Second,
		now: func() time.Time { return now }}
	date := func(d time.Duration) *jwt.NumericDate { return jwt.NewNumericDate(now.Add(d)) }
	good := func() claims {
		return claims{Claims: jwt.Claims{Subject: "alice", Expiry: date(time.Minute)}}
	}
	if _, err := v.accept(new(good()), true); err != nil {
		t.Fatalf("an answer without iss and aud: %v", err)
	}
	c := good()
	c.Issuer, c.Audience = v.issuer, jwt.Audience{"https://other.example", "HTTPS://RS.example/mcp"}
	if _, err := v.accept(&c, true); err != nil {
		t.Fatalf("an answer naming this issuer and resource: %v", err)
	}
	if _, err := v.accept(new(good()), false); err == nil {
		t.Error("a JWT without iss and aud was accepted")
	}
	for name, edit := range map[string]func(*claims){
		"other issuer":   func(c *claims) { c.Issuer = "https://evil.example" },
		"other audience": func(c *claims) { c.Audience = jwt.Audience{"https://other.example"} },
		"no expiry":      func(c *claims) { c.Expiry = nil },
		"expired":        func(c *claims) { c.Expiry = date(-time.Minute) },
		"not yet valid":  func(c *claims) { c.NotBefore = date(time.Hour) },
		"no principal":   func(c *claims) { c.Subject = "" },
	} {
		c := good()
		edit(&c)
		var te *tokenError
		if _, err := v.accept(&c, true); !errors.As(err, &te) {
			t.Errorf("%s: %v, want a token error", name, err)
		}
	}
}

func TestLooksLikeJWT(t *testing.T) {
	for tok, want := range map[string]bool{
		"eyJhbGciOiJSUzI1NiJ9.e30.c2ln": true,
		"eyJhbGciOiJub25lIn0.e30.":      true,
		"abc.def.ghi":                   false,
		"c2VjcmV0":                      false,
		"e30.e30":                       false,
		"e30.e30.e30.e30":               false,
	} {
		if got := looksLikeJWT(tok); got != want {
			t.Errorf("looksLikeJWT(%q) = %v", tok, got)
		}
	}
}
