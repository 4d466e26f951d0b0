package server

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"time"
)

// Tokens handed to clients — list cursors and MRTR requestState — are
// opaque, versioned and integrity-protected under the server's secret.
// Replicas that share the secret accept each other's tokens, so a client
// may walk a list across a round-robin balancer.
//
// A cursor (layout before base64url: version(1) | purpose(1) | expiry
// unix(8) | payload | mac(16)) carries the key of an item the caller has
// seen, so HMAC-SHA256 suffices. A request state carries whatever a
// handler chose to keep between rounds, so it is also encrypted:
// version(1) | purpose(1) | expiry(8) | nonce(12) | AES-256-GCM ciphertext
// and tag, under a key derived from the secret. Either way the check also
// covers a binding string that is not stored (list kind and principal for
// cursors; method, name, principal and arguments for request state), so
// a token cannot be replayed in another context.

const (
	tokenVersion = 1
	macLen       = 16

	purposeCursor byte = 'c'
	purposeState  byte = 's'
)

var errBadToken = errors.New("token is malformed, tampered with, expired or from another context")

type sealer struct {
	key  []byte
	aead cipher.AEAD // for request state
}

func newSealer(secret []byte) sealer {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("tidings request state encryption v1"))
	block, err := aes.NewCipher(m.Sum(nil))
	if err != nil {
		panic(err) // a 32-byte key is always valid
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		panic(err)
	}
	return sealer{key: secret, aead: aead}
}

func (s sealer) mac(header, payload []byte, binding string) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write(header)
	m.Write(payload)
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(binding)))
	m.Write(n[:])
	m.Write([]byte(binding))
	return m.Sum(nil)[:macLen]
}

// seal wraps payload. expiry zero means the token never expires.
func (s sealer) seal(purpose byte, payload []byte, binding string, expiry time.Time) string {
	buf := make([]byte, 0, 10+len(payload)+macLen)
	buf = append(buf, tokenVersion, purpose)
	var exp uint64
	if !expiry.IsZero() {
		exp = uint64(expiry.Unix())
	}
	buf = binary.BigEndian.AppendUint64(buf, exp)
	header := buf[:10]
	if purpose == purposeState {
		return base64.RawURLEncoding.EncodeToString(s.encrypt(buf, payload, binding))
	}
	buf = append(buf, payload...)
	buf = append(buf, s.mac(header, payload, binding)...)
	return base64.RawURLEncoding.EncodeToString(buf)
}

// open verifies and unwraps a token.
func (s sealer) open(purpose byte, token, binding string, now time.Time) ([]byte, error) {
	if len(token) > 8192 {
		return nil, errBadToken
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil || len(raw) < 10+macLen {
		return nil, errBadToken
	}
	header := raw[:10]
	if header[0] != tokenVersion || header[1] != purpose {
		return nil, errBadToken
	}
	var payload []byte
	if purpose == purposeState {
		if payload, err = s.decrypt(raw, binding); err != nil {
			return nil, errBadToken
		}
	} else {
		var mac []byte
		payload, mac = raw[10:len(raw)-macLen], raw[len(raw)-macLen:]
		if !hmac.Equal(mac, s.mac(header, payload, binding)) {
			return nil, errBadToken
		}
	}
	if exp := binary.BigEndian.Uint64(header[2:10]); exp != 0 && now.Unix() > int64(exp) {
		return nil, errBadToken
	}
	return payload, nil
}

// additional is what the AEAD authenticates besides the ciphertext: the
// header and the binding.
func additional(header []byte, binding string) []byte {
	ad := make([]byte, 0, len(header)+len(binding))
	return append(append(ad, header...), binding...)
}

// encrypt appends nonce and ciphertext to header.
func (s sealer) encrypt(header, payload []byte, binding string) []byte {
	out := make([]byte, 0, len(header)+s.aead.NonceSize()+len(payload)+s.aead.Overhead())
	out = append(out, header...)
	nonce := make([]byte, s.aead.NonceSize())
	_, _ = rand.Read(nonce)
	out = append(out, nonce...)
	return s.aead.Seal(out, nonce, payload, additional(header, binding))
}

// decrypt opens a token made by encrypt.
func (s sealer) decrypt(raw []byte, binding string) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(raw) < 10+n+s.aead.Overhead() {
		return nil, errBadToken
	}
	header, nonce, ct := raw[:10], raw[10:10+n], raw[10+n:]
	return s.aead.Open(nil, nonce, ct, additional(header, binding))
}
