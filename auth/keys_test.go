package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// TestWithdrawnKeyStopsWorking: a key the issuer no longer publishes is
// refused once the key set is older than maxKeyAge, while an issuer that
// cannot be reached then leaves the last keys in use.
func TestWithdrawnKeyStopsWorking(t *testing.T) {
	newKey := func(kid string) jose.JSONWebKey {
		priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return jose.JSONWebKey{Key: &priv.PublicKey, KeyID: kid, Algorithm: string(jose.ES256), Use: "sig"}
	}
	var mu sync.Mutex
	published := []jose.JSONWebKey{newKey("a")}
	down := false
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if down {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: published})
	}))
	defer ts.Close()
	now := time.Unix(1_800_000_000, 0)
	s := &keySource{issuer: ts.URL, client: ts.Client(), now: func() time.Time { return now },
		interval: 30 * time.Second, backoff: 5 * time.Second, jwksURI: ts.URL}
	ctx := context.Background()
	if _, err := s.key(ctx, "a"); err != nil {
		t.Fatalf("key a: %v", err)
	}
	mu.Lock()
	published = []jose.JSONWebKey{newKey("b")}
	mu.Unlock()
	now = now.Add(maxKeyAge / 2)
	if _, err := s.key(ctx, "a"); err != nil {
		t.Fatalf("key a within maxKeyAge: %v", err)
	}
	// The issuer is down when the set grows old: a stays in use.
	mu.Lock()
	down = true
	mu.Unlock()
	now = now.Add(maxKeyAge)
	if _, err := s.key(ctx, "a"); err != nil {
		t.Fatalf("key a while the issuer is down: %v", err)
	}
	// Back up and the set old again: a, withdrawn, is refused.
	mu.Lock()
	down = false
	mu.Unlock()
	now = now.Add(maxKeyAge + time.Second)
	if _, err := s.key(ctx, "a"); !errors.Is(err, errUnknownKey) {
		t.Fatalf("withdrawn key a: err %v, want errUnknownKey", err)
	}
	if _, err := s.key(ctx, "b"); err != nil {
		t.Fatalf("key b: %v", err)
	}
}
