package bus

import (
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
		"keys":           {Kinds: hub.ToolsList, Keys: []string{"deploy", "secret"}, Space: 1},
		"empty keys":     {Kinds: hub.ResourcesList, Keys: []string{}, Space: 4},
	} {
		b, err := encode(testOrigin, 7, sent, false, e)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		m, err := decode(b)
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
	b, err := encode(testOrigin, 9, sent, true, Event{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := decode(b); err != nil || !m.beat || m.e.Seq != 9 || m.e.Origin != testOrigin {
		t.Errorf("heartbeat %s read back as %+v, %v", b, m, err)
	}
}

// TestWireFormat pins the format other replicas (of other versions) read.
func TestWireFormat(t *testing.T) {
	b, err := encode(testOrigin, 3, time.Unix(0, 42), false, Event{Kinds: hub.ToolsList, Audience: []string{"alice"}, Keys: []string{"k"}, Space: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":1,"type":"change","origin":"` + testOrigin + `","seq":3,"sent":42,"kinds":1,"audience":["alice"],"keys":["k"],"space":1}`
	if string(b) != want {
		t.Errorf("encoded\n%s\nwant\n%s", b, want)
	}
}

// TestDecodeRefuses: messages that are not what a replica sends are
// refused, not half-read.
func TestDecodeRefuses(t *testing.T) {
	head := `{"v":1,"origin":"` + testOrigin + `",`
	for name, msg := range map[string]string{
		"not json":       `nope`,
		"other version":  `{"v":2,"type":"change","origin":"` + testOrigin + `","seq":1,"kinds":1}`,
		"no origin":      `{"v":1,"type":"change","seq":1,"kinds":1}`,
		"bad origin":     `{"v":1,"type":"change","origin":"XYZ","seq":1,"kinds":1}`,
		"unknown type":   head + `"type":"bye","seq":1}`,
		"no seq":         head + `"type":"change","kinds":1}`,
		"empty change":   head + `"type":"change","seq":1}`,
		"unknown kinds":  head + `"type":"change","seq":1,"kinds":8}`,
		"huge kinds":     head + `"type":"change","seq":1,"kinds":257}`,
		"beat w/ change": head + `"type":"beat","seq":1,"kinds":1}`,
		"space w/o keys": head + `"type":"change","seq":1,"kinds":1,"space":2}`,
		"duplicate name": head + `"type":"change","seq":1,"seq":2,"kinds":1}`,
		"bad utf-8":      head + `"type":"change","seq":1,"uri":"` + "\xff" + `"}`,
		"too large":      head + `"type":"change","seq":1,"uri":"` + strings.Repeat("a", maxMessage) + `"}`,
		"big audience":   head + `"type":"change","seq":1,"kinds":1,"audience":[` + strings.Repeat(`"a",`, maxAudience) + `"a"]}`,
	} {
		if m, err := decode([]byte(msg)); err == nil {
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
	e := Event{Kinds: hub.ResourcesList, Keys: keys, Space: 3, Audience: []string{"alice"}}
	parts := split(testOrigin, e, nil)
	if len(parts) < 2 {
		t.Fatalf("%d keys in %d part", len(keys), len(parts))
	}
	n := 0
	for _, p := range parts {
		if !p.ok {
			t.Fatal("a part of small keys cannot be sent")
		}
		b, err := encode(testOrigin, math.MaxUint64, widestSent, false, p.e)
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

// FuzzDecodeEvent: decode never panics, and what it accepts is within
// the limits and encodes back to a message it reads the same.
func FuzzDecodeEvent(f *testing.F) {
	for _, e := range []Event{
		{Kinds: hub.ToolsList},
		{URI: "res://a", Audience: []string{"alice"}},
		{Kinds: hub.ResourcesList, Keys: []string{"a", "b"}, Space: 3},
		{Kinds: hub.PromptsList, Audience: []string{}, Keys: []string{}},
	} {
		b, _ := encode(testOrigin, 5, time.Unix(0, 1), false, e)
		f.Add(b)
	}
	b, _ := encode(testOrigin, 5, time.Unix(0, 1), true, Event{})
	f.Add(b)
	f.Add([]byte(`{"v":1,"type":"change","origin":"` + testOrigin + `","seq":1,"kinds":1,"extra":{"x":[1,2]}}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, msg []byte) {
		m, err := decode(msg)
		if err != nil {
			return
		}
		if !m.beat && (m.e.Seq == 0 || len(m.e.Audience) > maxAudience || len(m.e.Keys) > maxKeys || m.e.Kinds&^allKinds != 0) {
			t.Fatalf("accepted %+v", m.e)
		}
		again, err := encode(m.e.Origin, m.e.Seq, m.e.Sent, m.beat, m.e)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode it: %v", msg, err)
		}
		m2, err := decode(again)
		if err != nil || !reflect.DeepEqual(m, m2) {
			t.Fatalf("%q re-encoded as %q reads %+v, %v; want %+v", msg, again, m2, err, m)
		}
	})
}

// TestSplitHalvesTheListOverItsLimit: an event whose audience alone is
// over its limit is cut by audience, into a few parts, not into one part
// per key.
func TestSplitHalvesTheListOverItsLimit(t *testing.T) {
	e := Event{Kinds: hub.ToolsList, Space: 1}
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
