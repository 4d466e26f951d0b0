package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// FuzzParseBearer checks that any Authorization value is either refused
// or yields a b64token that, sent back, parses to itself.
func FuzzParseBearer(f *testing.F) {
	for _, s := range []string{"Bearer abc", "bearer a.b.c", "BEARER  x==", "Basic dTpw", "Bearer", "Bearer a b", "", " ", "Bearer =", "Bearer a=b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		tok, ok, err := parseBearer(v)
		if err != nil || !ok {
			if tok != "" {
				t.Fatalf("%q: token %q without success", v, tok)
			}
			return
		}
		if !isB64Token(tok) || strings.ContainsAny(tok, " \t\"") {
			t.Fatalf("%q: token %q is not a b64token", v, tok)
		}
		again, ok, err := parseBearer("Bearer " + tok)
		if err != nil || !ok || again != tok {
			t.Fatalf("%q: %q does not round-trip: %q %v %v", v, tok, again, ok, err)
		}
	})
}

// FuzzValidate feeds arbitrary strings to the token decoding path with
// a cached key and no network: it must never panic, and must accept
// nothing but tokens signed by that key.
func FuzzValidate(f *testing.F) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	now := time.Now()
	const iss, aud = "http://127.0.0.1:1", "http://127.0.0.1:2/mcp"
	sig, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: priv}, (&jose.SignerOptions{}).WithHeader("kid", "k"))
	if err != nil {
		f.Fatal(err)
	}
	good, err := jwt.Signed(sig).Claims(map[string]any{"iss": iss, "aud": aud, "sub": "s", "exp": now.Add(time.Hour).Unix(), "scope": "a b"}).Serialize()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{good, good + "x", "e30.e30.", "a.b.c", "eyJhbGciOiJub25lIn0.e30.", strings.Replace(good, ".", "..", 1), ""} {
		f.Add(s)
	}
	v := &validator{
		issuer: iss, audience: aud, skew: 30 * time.Second, now: func() time.Time { return now },
		keys: &keySource{
			issuer: iss, now: func() time.Time { return now }, interval: time.Hour, backoff: time.Hour,
			keys:    map[string]jose.JSONWebKey{"k": {Key: &priv.PublicKey, KeyID: "k", Algorithm: string(jose.ES256)}},
			fetched: now,
		},
	}
	if _, err := v.validate(context.Background(), good); err != nil {
		f.Fatalf("the seed token is refused: %v", err)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		info, err := v.validate(context.Background(), raw)
		if err != nil {
			return
		}
		if info.Subject != "s" {
			t.Fatalf("%q accepted with subject %q", raw, info.Subject)
		}
	})
}
