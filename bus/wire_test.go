package bus

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"tidings/hub"
)

const testOrigin = "0123456789abcdef0123456789abcdef"

// TestWireRoundTrip: what encode writes, decode reads back the same,
// with an absent audience or key list kept apart from an empty one.
func TestWireRoundTrip(t *testing.T) {
	sent := time.Unix(1700000000, 123456789)
	for name, e := range map[string]Event{
		"list":           {Kinds: hub.ToolsList},
		"resource":       {URI: "file:///a b/ü"},
		"both":           {Kinds: hub.PromptsList | hub.ResourcesList, URI: "res://x"},
		"audience":       {Kinds: hub.ToolsList, Audience: []string{"alice", ""}},
		"empty audience": {Kinds: hub.ToolsList, Audience: []string{}},
		"keys":           {Kinds: hub.ToolsList, Keys: []string{"deploy", "secret"}, Space: SpaceTools},
		"empty keys":     {Kinds: hub.ResourcesList, Keys: []string{}, Space: SpaceTemplates},
	} {
		b, err := encode(nil, testOrigin, 7, sent, false, e)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m, err := decode(nil, b)
		if err != nil {
			t.Fatalf("%s: decode %s: %v", name, b, err)
		}
		want := e
		want.Origin, want.Seq, want.Sent = testOrigin, 7, sent
		if m.beat || !reflect.DeepEqual(m.e, want) {
			t.Errorf("%s: %s read back as %+v (beat %v), want %+v", name, b, m.e, m.beat, want)
		}
		if (m.e.Audience == nil) != (e.Audience == nil) || (m.e.Keys == nil) != (e.Keys == nil) {
			t.Errorf("%s: nil and empty lists were not kept apart: %s", name, b)
		}
	}
	b, err := encode(nil, testOrigin, 9, sent, true, Event{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := decode(nil, b); err != nil || !m.beat || m.e.Seq != 9 || m.e.Origin != testOrigin {
		t.Errorf("heartbeat %s read back as %+v, %v", b, m, err)
	}
}

// TestWireKeyspaceByName: every key space survives encode and decode, and
// travels by name and by its fixed number; a message of a replica that
// sends the number alone reads as the same space, and one whose name and
// number disagree reads as its name.
func TestWireKeyspaceByName(t *testing.T) {
	for _, tc := range []struct {
		s    Space
		name string
		n    int
	}{{SpaceTools, "tools", 1}, {SpacePrompts, "prompts", 2}, {SpaceResources, "resources", 3}, {SpaceTemplates, "templates", 4}} {
		e := Event{Kinds: hub.ResourcesList, Keys: []string{"k"}, Space: tc.s}
		b, err := encode(testKey, testOrigin, 2, time.Unix(0, 1), false, e)
		if err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf(`"space":%d,"keyspace":%q}`, tc.n, tc.name); !strings.Contains(string(b), want) {
			t.Errorf("%s encoded as %s, want %s in it", tc.name, b, want)
		}
		if m, err := decode(testKey, b); err != nil || m.e.Space != tc.s {
			t.Errorf("%s read back as %q, %v", b, m.e.Space, err)
		}
		body := fmt.Sprintf(`{"type":"change","origin":"%s","seq":2,"sent":1,"kinds":4,"keys":["k"],"space":%d}`, testOrigin, tc.n)
		old := `{"v":2,"mac":"` + string(macOf(testKey, []byte(body))) + `","body":` + body + `}`
		if m, err := decode(testKey, []byte(old)); err != nil || m.e.Space != tc.s {
			t.Errorf("%s (numbered only) read as %q, %v; want %q", old, m.e.Space, err, tc.s)
		}
	}
	body := `{"type":"change","origin":"` + testOrigin + `","seq":2,"kinds":1,"keys":["k"],"space":3,"keyspace":"tools"}`
	if m, err := decode(nil, []byte(`{"v":2,"body":`+body+`}`)); err != nil || m.e.Space != SpaceTools {
		t.Errorf("%s read as %q, %v; want the name's %q", body, m.e.Space, err, SpaceTools)
	}
	if _, err := encode(nil, testOrigin, 2, time.Unix(0, 1), false, Event{Kinds: hub.ToolsList, Keys: []string{"k"}, Space: "widgets"}); err == nil {
		t.Error("an unknown key space was encoded")
	}
}

// testKey is a bus key, as WithSecret derives one.
var testKey = busKey([]byte("0123456789abcdef0123456789abcdef"))

// TestWireFormat pins the format other replicas (of other versions) read,
// unsigned and signed, and the key's derivation from the secret.
func TestWireFormat(t *testing.T) {
	e := Event{Kinds: hub.ToolsList, Audience: []string{"alice"}, Keys: []string{"k"}, Space: SpaceTools}
	body := `{"type":"change","origin":"` + testOrigin + `","seq":3,"sent":42,"kinds":1,"audience":["alice"],"keys":["k"],"space":1,"keyspace":"tools"}`
	b, err := encode(nil, testOrigin, 3, time.Unix(0, 42), false, e)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"v":2,"body":` + body + `}`; string(b) != want {
		t.Errorf("encoded\n%s\nwant\n%s", b, want)
	}
	m := hmac.New(sha256.New, []byte("0123456789abcdef0123456789abcdef"))
	m.Write([]byte("tidings bus message v2"))
	key := m.Sum(nil)
	m = hmac.New(sha256.New, key)
	m.Write([]byte(body))
	mac := base64.RawURLEncoding.EncodeToString(m.Sum(nil))
	b, err = encode(testKey, testOrigin, 3, time.Unix(0, 42), false, e)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"v":2,"mac":"` + mac + `","body":` + body + `}`; string(b) != want {
		t.Errorf("signed\n%s\nwant\n%s", b, want)
	}
	if len(mac) != macText {
		t.Errorf("a MAC of %d digits, want %d", len(mac), macText)
	}
}

// TestSignedMessages: a bus with a key reads what is signed with it, in
// any layout the JSON allows, and refuses what is not signed, signed with
// another key, or changed after signing, telling the two apart; a bus
// without a key reads signed and unsigned alike.
func TestSignedMessages(t *testing.T) {
	sent := time.Unix(1700000000, 0)
	signed, err := encode(testKey, testOrigin, 4, sent, false, Event{URI: "res://a"})
	if err != nil {
		t.Fatal(err)
	}
	unsigned, err := encode(nil, testOrigin, 4, sent, false, Event{URI: "res://a"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := encode(busKey([]byte("another secret")), testOrigin, 4, sent, false, Event{URI: "res://a"})
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range [][]byte{signed, unsigned, other} {
		if m, err := decode(nil, msg); err != nil || m.e.URI != "res://a" {
			t.Errorf("without a key, %s: %+v, %v", msg, m, err)
		}
	}
	// The envelope's members in another order, with white space and an
	// unknown member: the body's bytes are what is signed.
	_, rest, _ := strings.Cut(string(signed), `"mac":"`)
	mac, body, _ := strings.Cut(rest, `","body":`)
	body = strings.TrimSuffix(body, "}")
	relaid := `{ "body" : ` + body + ` , "later":[1], "mac":"` + mac + `","v":2 }`
	if m, err := decode(testKey, []byte(relaid)); err != nil || m.e.URI != "res://a" || m.e.Seq != 4 {
		t.Errorf("%s: %+v, %v", relaid, m, err)
	}
	for name, tc := range map[string]struct {
		msg  string
		want error
	}{
		"unsigned":          {string(unsigned), errUnsigned},
		"null mac":          {`{"v":2,"mac":null,"body":` + body + `}`, errUnsigned},
		"version 1":         {`{"v":1,"type":"change","origin":"` + testOrigin + `","seq":1,"kinds":1}`, errUnsigned},
		"not json":          {`nope`, errUnsigned},
		"another key":       {string(other), errBadMAC},
		"empty mac":         {`{"v":2,"mac":"","body":` + body + `}`, errBadMAC},
		"body changed":      {strings.Replace(string(signed), "res://a", "res://b", 1), errBadMAC},
		"body re-spaced":    {`{"v":2,"mac":"` + mac + `","body":` + strings.Replace(body, ",", ", ", 1) + `}`, errBadMAC},
		"mac of other body": {`{"v":2,"mac":"` + mac + `","body":{}}`, errBadMAC},
	} {
		if m, err := decode(testKey, []byte(tc.msg)); !errors.Is(err, tc.want) {
			t.Errorf("%s: %+v, %v; want %v", name, m, err, tc.want)
		}
	}
	// Signed but unreadable: from a holder of the key, so an unreadable
	// message, not a refused one.
	garbled := []byte(`{"type":"change","seq":1}`)
	msg := `{"v":2,"mac":"` + string(macOf(testKey, garbled)) + `","body":` + string(garbled) + `}`
	if _, err := decode(testKey, []byte(msg)); err == nil || errors.Is(err, errUnsigned) || errors.Is(err, errBadMAC) {
		t.Errorf("a signed message without an origin: %v, want it unreadable", err)
	}
}

// TestDecodeRefuses: messages that are not what a replica sends are
// refused, not half-read.
func TestDecodeRefuses(t *testing.T) {
	env := func(body string) string { return `{"v":2,"body":` + body + `}` }
	head := `{"origin":"` + testOrigin + `",`
	for name, msg := range map[string]string{
		"not json":       `nope`,
		"other version":  `{"v":1,"type":"change","origin":"` + testOrigin + `","seq":1,"kinds":1}`,
		"later version":  `{"v":3,"body":{"type":"change","origin":"` + testOrigin + `","seq":1,"kinds":1}}`,
		"no body":        `{"v":2}`,
		"body not obj":   `{"v":2,"body":[1]}`,
		"two bodies":     `{"v":2,"body":{},"body":` + head + `"type":"beat","seq":1}}`,
		"no origin":      env(`{"type":"change","seq":1,"kinds":1}`),
		"bad origin":     env(`{"type":"change","origin":"XYZ","seq":1,"kinds":1}`),
		"unknown type":   env(head + `"type":"bye","seq":1}`),
		"no seq":         env(head + `"type":"change","kinds":1}`),
		"empty change":   env(head + `"type":"change","seq":1}`),
		"unknown kinds":  env(head + `"type":"change","seq":1,"kinds":8}`),
		"huge kinds":     env(head + `"type":"change","seq":1,"kinds":257}`),
		"beat w/ change": env(head + `"type":"beat","seq":1,"kinds":1}`),
		"space w/o keys": env(head + `"type":"change","seq":1,"kinds":1,"space":2}`),
		"name w/o keys":  env(head + `"type":"change","seq":1,"kinds":1,"keyspace":"tools"}`),
		"unknown space":  env(head + `"type":"change","seq":1,"kinds":1,"keys":["a"],"space":5}`),
		"unknown name":   env(head + `"type":"change","seq":1,"kinds":1,"keys":["a"],"keyspace":"widgets","space":1}`),
		"beat w/ name":   env(head + `"type":"beat","seq":1,"keyspace":"tools"}`),
		"duplicate name": env(head + `"type":"change","seq":1,"seq":2,"kinds":1}`),
		"bad utf-8":      env(head + `"type":"change","seq":1,"uri":"` + "\xff" + `"}`),
		"too large":      env(head + `"type":"change","seq":1,"uri":"` + strings.Repeat("a", maxMessage) + `"}`),
		"big audience":   env(head + `"type":"change","seq":1,"kinds":1,"audience":[` + strings.Repeat(`"a",`, maxAudience) + `"a"]}`),
	} {
		if m, err := decode(nil, []byte(msg)); err == nil {
			t.Errorf("%s: decoded as %+v", name, m)
		}
	}
}

// TestSplit: an event too large for one message is cut into parts that
// each fit and together name every key and principal once; one that
// cannot be cut small enough yields a part that is not sent.
func TestSplit(t *testing.T) {
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = strings.Repeat("k", 20) + string(rune('a'+i%26)) + strings.Repeat("x", i%7)
	}
	e := Event{Kinds: hub.ResourcesList, Keys: keys, Space: SpaceResources, Audience: []string{"alice"}}
	parts := split(testOrigin, e, nil)
	if len(parts) < 2 {
		t.Fatalf("%d keys in %d part", len(keys), len(parts))
	}
	n := 0
	for _, p := range parts {
		if !p.ok {
			t.Fatal("a part of small keys cannot be sent")
		}
		b, err := encode(nil, testOrigin, math.MaxUint64, widestSent, false, p.e)
		if err != nil || len(b) > maxMessage {
			t.Fatalf("part of %d keys: %d bytes, %v", len(p.e.Keys), len(b), err)
		}
		for _, k := range p.e.Keys {
			if k != keys[n] {
				t.Fatalf("key %d is %q, want %q", n, k, keys[n])
			}
			n++
		}
	}
	if n != len(keys) {
		t.Errorf("parts name %d keys, want %d", n, len(keys))
	}
	audience := make([]string, 3000)
	for i := range audience {
		audience[i] = "user-" + strings.Repeat("u", i%5)
	}
	if parts := split(testOrigin, Event{Kinds: hub.ToolsList, Audience: audience}, nil); len(parts) < 3 {
		t.Errorf("an audience of %d in %d parts", len(audience), len(parts))
	}
	parts = split(testOrigin, Event{URI: strings.Repeat("u", maxMessage)}, nil)
	if len(parts) != 1 || parts[0].ok {
		t.Errorf("a URI over the limit: %d parts, ok %v", len(parts), len(parts) > 0 && parts[0].ok)
	}
}

// FuzzDecodeEvent: decode never panics, with a key or without; what it
// accepts is within the limits and encodes back to a message it reads the
// same; and what a bus with a key accepts, one without reads the same.
func FuzzDecodeEvent(f *testing.F) {
	for _, key := range [][]byte{nil, testKey} {
		for _, e := range []Event{
			{Kinds: hub.ToolsList},
			{URI: "res://a", Audience: []string{"alice"}},
			{Kinds: hub.ResourcesList, Keys: []string{"a", "b"}, Space: SpaceResources},
			{Kinds: hub.PromptsList, Audience: []string{}, Keys: []string{}},
			{Task: "T1", Audience: []string{"sub:1:i,1:a,"}},
		} {
			b, _ := encode(key, testOrigin, 5, time.Unix(0, 1), false, e)
			f.Add(b)
		}
		b, _ := encode(key, testOrigin, 5, time.Unix(0, math.MinInt64), true, Event{})
		f.Add(b)
	}
	f.Add([]byte(`{"v":2,"body":{"type":"change","origin":"` + testOrigin + `","seq":1,"kinds":1,"extra":{"x":[1,2]}},"more":null}`))
	f.Add([]byte(`{"v":2,"body":{"type":"change","origin":"` + testOrigin + `","seq":1,"kinds":4,"keys":["a"],"space":3}}`))
	f.Add([]byte(`{"v":1,"type":"change","origin":"` + testOrigin + `","seq":1,"kinds":1}`))
	f.Add([]byte(`{"v":2,"mac":"","body":{}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, msg []byte) {
		for _, key := range [][]byte{nil, testKey} {
			m, err := decode(key, msg)
			if err != nil {
				continue
			}
			if !m.beat && (m.e.Seq == 0 || len(m.e.Audience) > maxAudience || len(m.e.Keys) > maxKeys || m.e.Kinds&^allKinds != 0) {
				t.Fatalf("accepted %+v", m.e)
			}
			again, err := encode(key, m.e.Origin, m.e.Seq, m.e.Sent, m.beat, m.e)
			if err != nil {
				t.Fatalf("accepted %q but cannot encode it: %v", msg, err)
			}
			m2, err := decode(key, again)
			if err != nil || !reflect.DeepEqual(m, m2) {
				t.Fatalf("%q re-encoded as %q reads %+v, %v; want %+v", msg, again, m2, err, m)
			}
			if key != nil {
				if m3, err := decode(nil, msg); err != nil || !reflect.DeepEqual(m, m3) {
					t.Fatalf("%q is read as %+v with a key and as %+v, %v without", msg, m, m3, err)
				}
			}
		}
	})
}

// TestSplitHalvesTheListOverItsLimit: an event whose audience alone is
// over its limit is cut by audience, into a few parts, not into one part
// per key.
func TestSplitHalvesTheListOverItsLimit(t *testing.T) {
	e := Event{Kinds: hub.ToolsList, Space: SpaceTools}
	for i := range 1000 {
		e.Keys = append(e.Keys, fmt.Sprintf("k%04d", i))
	}
	for i := range 2000 {
		e.Audience = append(e.Audience, fmt.Sprintf("p%04d", i))
	}
	parts := split(testOrigin, e, nil)
	if len(parts) != 2 {
		t.Fatalf("%d parts, want 2", len(parts))
	}
	for _, p := range parts {
		if !p.ok || len(p.e.Keys) != 1000 || len(p.e.Audience) != 1000 {
			t.Errorf("part with %d keys and %d principals (ok %v), want all keys and half the audience",
				len(p.e.Keys), len(p.e.Audience), p.ok)
		}
	}
}
