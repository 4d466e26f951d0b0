package oauth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-json-experiment/json"
)

// dpopKey holds the key a flow proves possession of (RFC 9449).
type dpopKey struct {
	alg    jose.SignatureAlgorithm
	signer jose.Signer
	jkt    string // base64url SHA-256 JWK thumbprint (RFC 7638)
	// now is the flow's clock: a proof's iat is checked against the
	// server's clock, so it must come from the same clock as the rest
	// of the flow (Config.Now), which a host may correct.
	now func() time.Time
}

// newDPoPKey wraps signer, or a fresh P-256 key when signer is nil.
func newDPoPKey(signer crypto.Signer, now func() time.Time) (*dpopKey, error) {
	if signer == nil {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		signer = k
	}
	alg, err := signingAlg(signer)
	if err != nil {
		return nil, fmt.Errorf("oauth: DPoP key: %w", err)
	}
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: signer},
		(&jose.SignerOptions{EmbedJWK: true}).WithType("dpop+jwt"))
	if err != nil {
		return nil, fmt.Errorf("oauth: DPoP key: %w", err)
	}
	pub := jose.JSONWebKey{Key: signer.Public()}
	tp, err := pub.Thumbprint(crypto.SHA256)
	if err != nil {
		return nil, fmt.Errorf("oauth: DPoP key: %w", err)
	}
	return &dpopKey{alg: alg, signer: s, jkt: base64.RawURLEncoding.EncodeToString(tp), now: now}, nil
}

// signingAlg is the JWS algorithm a key signs with: ES256/384/512 by
// curve, EdDSA, or PS256 for RSA.
func signingAlg(k crypto.Signer) (jose.SignatureAlgorithm, error) {
	switch pub := k.Public().(type) {
	case *ecdsa.PublicKey:
		switch pub.Curve {
		case elliptic.P256():
			return jose.ES256, nil
		case elliptic.P384():
			return jose.ES384, nil
		case elliptic.P521():
			return jose.ES512, nil
		}
	case ed25519.PublicKey:
		return jose.EdDSA, nil
	default:
		if _, ok := pub.(interface{ Size() int }); ok {
			return jose.PS256, nil
		}
	}
	return "", errors.New("unsupported key type")
}

// usableWith reports whether an authorization server advertising algs
// accepts this key's proofs.
func (k *dpopKey) usableWith(algs []string) bool {
	return slices.Contains(algs, string(k.alg))
}

// proof returns a DPoP proof JWT for a request (RFC 9449 §4.2): htm
// and htu name it, ath binds the access token presented with it (empty
// at the token endpoint), nonce is the server's latest, if any.
func (k *dpopKey) proof(method, target, accessToken, nonce string) (string, error) {
	u, err := url.Parse(target)
	if err != nil {
		return "", err
	}
	u.RawQuery, u.Fragment, u.RawFragment = "", "", ""
	claims := map[string]any{
		"jti": randomString(16),
		"htm": strings.ToUpper(method),
		"htu": u.String(),
		"iat": k.now().Unix(),
	}
	if accessToken != "" {
		h := sha256.Sum256([]byte(accessToken))
		claims["ath"] = base64.RawURLEncoding.EncodeToString(h[:])
	}
	if nonce != "" {
		claims["nonce"] = nonce
	}
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	jws, err := k.signer.Sign(payload)
	if err != nil {
		return "", err
	}
	return jws.CompactSerialize()
}

// proofNonce returns the nonce claim of a DPoP proof, without checking
// it (it is one the flow made).
func proofNonce(proof string) string {
	parts := strings.Split(proof, ".")
	if len(parts) != 3 {
		return ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var c struct {
		Nonce string `json:"nonce"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return ""
	}
	return c.Nonce
}

// randomString returns n random bytes, base64url-encoded.
func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
