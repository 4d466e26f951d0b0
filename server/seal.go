package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"time"
)

// Tokens handed to clients — list cursors and MRTR requestState — are
// opaque, versioned and integrity-protected with HMAC-SHA256 under the
// server's secret. Replicas that share the secret accept each other's
// tokens, so a client may walk a list across a round-robin balancer.
//
// Layout (before base64url): version(1) | purpose(1) | expiry unix(8) |
// payload | mac(16). The MAC also covers a binding string (list kind and
// principal for cursors; method, name and principal for request state)
// that is not stored, so a token cannot be replayed in another context.

const (
	tokenVersion = 1
	macLen       = 16

	purposeCursor byte = 'c'
	purposeState  byte = 's'
)

var errBadToken = errors.New("token is malformed, tampered with, expired or from another context")

type sealer struct{ key []byte }

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
	header, payload, mac := raw[:10], raw[10:len(raw)-macLen], raw[len(raw)-macLen:]
	if header[0] != tokenVersion || header[1] != purpose {
		return nil, errBadToken
	}
	if !hmac.Equal(mac, s.mac(header, payload, binding)) {
		return nil, errBadToken
	}
	if exp := binary.BigEndian.Uint64(header[2:10]); exp != 0 && now.Unix() > int64(exp) {
		return nil, errBadToken
	}
	return payload, nil
}
