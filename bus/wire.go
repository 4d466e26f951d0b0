package bus

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/bus/internal/brokerkit"
	"tidings/hub"
)

// The wire format is one JSON object per message, chosen over a binary
// one so that a broker's own tools (nats sub, redis-cli subscribe) show
// what travels: an envelope holding the version, the MAC and the body,
//
//	{"v":2,"mac":"<43 base64url digits>","body":{"type":"change",
//	 "origin":"<32 hex digits>","seq":7,"sent":<Unix ns>,"kinds":1,
//	 "uri":"file:///a","audience":["alice"],"keys":["deploy"],"space":1,
//	 "keyspace":"tools"}}
//
// mac is the HMAC-SHA256 of the body's bytes exactly as they stand
// between the braces, under the bus key (see WithSecret); a bus without
// one leaves it out. The body is read from the very bytes the MAC
// covers, so no two readers can disagree about what was signed.
//
// type is "change" or "beat" (a heartbeat, which carries the origin's
// latest sequence number and nothing else). kinds is a bit set: 1 tools,
// 2 prompts, 4 resources. Members that are absent are empty; an audience
// or keys member that is present, even as [], limits the event (to no one
// when empty). keyspace names the kind of item the keys are keys of (a
// Space, by name), and space says the same by number (1 tools, 2 prompts,
// 3 resources, 4 templates) for the replicas of version 2 that predate
// keyspace; a reader prefers the name. The numbers are fixed here, apart
// from any constant in code, so that a replica whose code orders its
// kinds anew still means what the others read. Unknown members, of the
// envelope as of the body, are ignored, so later versions may add some;
// a message of another version is unreadable, and unreadable messages
// make the receiver re-notify — unless the receiver has a key, which then
// refuses it as unsigned.
// Version 1 was the body alone, with "v":1 in it and no MAC.
const wireVersion = 2

// The limits of one message.
const (
	maxMessage  = 64 << 10
	maxAudience = 1024
	maxKeys     = 4096
	// maxTaskID bounds a task id on the wire, as in a task store; the
	// server's are far shorter.
	maxTaskID = brokerkit.MaxTaskID
)

const (
	typeChange = "change"
	typeBeat   = "beat"
)

// The bounds of a change's trace context on the wire: W3C's traceparent
// is 55 bytes in its version 00 (room is left for later versions), and a
// tracestate at most 512.
const (
	maxTraceParent = 128
	maxTraceState  = 512
)

// allKinds is every list kind an event may name.
const allKinds = hub.ToolsList | hub.PromptsList | hub.ResourcesList

// The envelope around a body, written by hand so that the body's bytes
// travel exactly as they were signed.
const (
	envelopeHead     = `{"v":2,`
	envelopeMAC      = `"mac":"`
	envelopeBody     = `"body":`
	envelopeTail     = `}`
	macText          = 43 // base64url digits of a SHA-256 MAC, unpadded
	envelopeOverhead = len(envelopeHead) + len(envelopeMAC) + macText + len(`",`) + len(envelopeBody) + len(envelopeTail)
)

type envelope struct {
	V    int            `json:"v"`
	MAC  *string        `json:"mac"`
	Body jsontext.Value `json:"body"`
}

type wireMsg struct {
	Type     string   `json:"type"`
	Origin   string   `json:"origin"`
	Seq      uint64   `json:"seq"`
	Sent     int64    `json:"sent"`
	Kinds    uint32   `json:"kinds,omitzero"`
	URI      string   `json:"uri,omitzero"`
	Task     string   `json:"task,omitzero"`
	Audience []string `json:"audience,omitzero"`
	Keys     []string `json:"keys,omitzero"`
	// Space is the key space by number, for replicas that predate
	// Keyspace; Keyspace is it by name.
	Space    uint8  `json:"space,omitzero"`
	Keyspace string `json:"keyspace,omitzero"`
	// The change's trace context; replicas that predate them ignore them.
	TraceParent string `json:"traceparent,omitzero"`
	TraceState  string `json:"tracestate,omitzero"`
}

// spaceNumbers are the key spaces' numbers on the wire: those of the
// server's List when the wire carried no name, kept whatever List becomes.
var spaceNumbers = [...]struct {
	s Space
	n uint8
}{{SpaceTools, 1}, {SpacePrompts, 2}, {SpaceResources, 3}, {SpaceTemplates, 4}}

// spaceNumber is the wire number of s, 0 for none.
func spaceNumber(s Space) uint8 {
	for _, sn := range spaceNumbers {
		if sn.s == s {
			return sn.n
		}
	}
	return 0
}

// wireOf is e's body on the wire, apart from the type and the numbering.
func wireOf(e Event) wireMsg {
	return wireMsg{Kinds: uint32(e.Kinds), URI: e.URI, Task: e.Task, Audience: e.Audience, Keys: e.Keys,
		Space: spaceNumber(e.Space), Keyspace: string(e.Space), TraceParent: e.TraceParent, TraceState: e.TraceState}
}

// event is the event w carries, apart from where it came from; it
// refuses what wireOf would not write. The key space is read by name
// when there is one, and by number otherwise.
func (w wireMsg) event() (Event, error) {
	if w.Kinds > math.MaxUint8 {
		return Event{}, fmt.Errorf("bus: unknown list kinds %#x", w.Kinds)
	}
	e := Event{Kinds: hub.Kind(w.Kinds), URI: w.URI, Task: w.Task, Audience: w.Audience, Keys: w.Keys, Space: Space(w.Keyspace),
		TraceParent: w.TraceParent, TraceState: w.TraceState}
	if w.Keyspace == "" && w.Space != 0 {
		for _, sn := range spaceNumbers {
			if sn.n == w.Space {
				e.Space = sn.s
			}
		}
		if e.Space == "" {
			return Event{}, fmt.Errorf("bus: unknown key space %d", w.Space)
		}
	}
	return e, nil
}

// message is a decoded message: an event, or a heartbeat (beat), whose
// Event holds only Origin, Seq and Sent.
type message struct {
	beat bool
	e    Event
}

// busKey derives the key that signs bus messages from the replicas'
// shared secret, under a label of its own: the secret also keys cursors,
// request state and task owners, and none of those may be taken for
// another.
func busKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("tidings bus message v2"))
	return m.Sum(nil)
}

// macOf is the MAC of body under key, as it travels.
func macOf(key, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return base64.RawURLEncoding.AppendEncode(nil, m.Sum(nil))
}

// errUnsigned and errBadMAC are messages a bus with a key refuses: they
// are not from a replica that holds it. They are counted, never taken
// for a change that could not be read.
var (
	errUnsigned = errors.New("bus: a message without a MAC")
	errBadMAC   = errors.New("bus: a message whose MAC is not this bus key's")
)

// encode returns the message for e (or a heartbeat) from origin, signed
// under key when there is one.
func encode(key []byte, origin string, seq uint64, sent time.Time, beat bool, e Event) ([]byte, error) {
	var w wireMsg
	if beat {
		w.Type = typeBeat
	} else {
		if err := checkEvent(e); err != nil {
			return nil, err
		}
		w = wireOf(e)
		w.Type = typeChange
	}
	w.Origin, w.Seq, w.Sent = origin, seq, sent.UnixNano()
	body, err := json.Marshal(w)
	if err != nil {
		return nil, fmt.Errorf("bus: encoding an event: %w", err)
	}
	// Sized as if signed, so that a bus cuts events into the same parts
	// with a key or without.
	if n := len(body) + envelopeOverhead; n > maxMessage {
		return nil, fmt.Errorf("bus: an event of %d bytes is over the limit of %d", n, maxMessage)
	}
	b := make([]byte, 0, len(body)+envelopeOverhead)
	b = append(b, envelopeHead...)
	if key != nil {
		b = append(b, envelopeMAC...)
		b = append(b, macOf(key, body)...)
		b = append(b, `",`...)
	}
	b = append(b, envelopeBody...)
	b = append(b, body...)
	b = append(b, envelopeTail...)
	return b, nil
}

// checkEvent enforces what every event on the wire must be.
func checkEvent(e Event) error {
	switch {
	case e.Kinds&^allKinds != 0:
		return fmt.Errorf("bus: unknown list kinds %#x", uint32(e.Kinds&^allKinds))
	case e.Kinds == 0 && e.URI == "" && e.Task == "":
		return errors.New("bus: an event names no list, no resource and no task")
	case len(e.Task) > maxTaskID:
		return fmt.Errorf("bus: a task id of %d bytes is over the limit of %d", len(e.Task), maxTaskID)
	case len(e.Audience) > maxAudience:
		return fmt.Errorf("bus: an audience of %d is over the limit of %d", len(e.Audience), maxAudience)
	case len(e.Keys) > maxKeys:
		return fmt.Errorf("bus: %d keys are over the limit of %d", len(e.Keys), maxKeys)
	case e.Keys == nil && e.Space != "":
		return errors.New("bus: a key space without keys")
	case e.Space != "" && spaceNumber(e.Space) == 0:
		return fmt.Errorf("bus: unknown key space %q", string(e.Space))
	case len(e.TraceParent) > maxTraceParent:
		return fmt.Errorf("bus: a traceparent of %d bytes is over the limit of %d", len(e.TraceParent), maxTraceParent)
	case len(e.TraceState) > maxTraceState:
		return fmt.Errorf("bus: a tracestate of %d bytes is over the limit of %d", len(e.TraceState), maxTraceState)
	}
	return nil
}

// decode reads one message; it refuses anything it would not send. With
// a key, a message must carry the MAC of its body under it: one that does
// not is refused with errUnsigned or errBadMAC before its body is read.
// Without one, a MAC is not checked.
func decode(key []byte, b []byte) (message, error) {
	if len(b) > maxMessage {
		return message{}, fmt.Errorf("bus: a message of %d bytes is over the limit of %d", len(b), maxMessage)
	}
	var env envelope
	err := json.Unmarshal(b, &env)
	switch {
	case err != nil && key != nil:
		return message{}, fmt.Errorf("%w: %w", errUnsigned, err)
	case err != nil:
		return message{}, fmt.Errorf("bus: decoding a message: %w", err)
	case env.V != wireVersion && key != nil:
		return message{}, fmt.Errorf("%w: version %d, want %d", errUnsigned, env.V, wireVersion)
	case env.V != wireVersion:
		return message{}, fmt.Errorf("bus: message version %d, want %d", env.V, wireVersion)
	case key != nil && env.MAC == nil:
		return message{}, errUnsigned
	case key != nil && !hmac.Equal([]byte(*env.MAC), macOf(key, env.Body)):
		return message{}, errBadMAC
	case len(env.Body) == 0:
		return message{}, errors.New("bus: a message without a body")
	}
	var w wireMsg
	if err := json.Unmarshal(env.Body, &w); err != nil {
		return message{}, fmt.Errorf("bus: decoding a message: %w", err)
	}
	if !isOrigin(w.Origin) {
		return message{}, fmt.Errorf("bus: %q is not an origin id", w.Origin)
	}
	switch w.Type {
	case typeBeat:
		if w.Kinds != 0 || w.URI != "" || w.Task != "" || w.Audience != nil || w.Keys != nil || w.Space != 0 || w.Keyspace != "" ||
			w.TraceParent != "" || w.TraceState != "" {
			return message{}, errors.New("bus: a heartbeat carries a change")
		}
		return message{beat: true, e: Event{Origin: w.Origin, Seq: w.Seq, Sent: time.Unix(0, w.Sent)}}, nil
	case typeChange:
	default:
		return message{}, fmt.Errorf("bus: unknown message type %q", w.Type)
	}
	if w.Seq == 0 {
		return message{}, errors.New("bus: an event without a sequence number")
	}
	e, err := w.event()
	if err != nil {
		return message{}, err
	}
	if err := checkEvent(e); err != nil {
		return message{}, err
	}
	e.Origin, e.Seq, e.Sent = w.Origin, w.Seq, time.Unix(0, w.Sent)
	return message{e: e}, nil
}

// isOrigin reports whether s looks like an origin id: 32 lowercase hex
// digits.
func isOrigin(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := range len(s) {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// part is one message's worth of an event; ok is false for a part that
// cannot be sent at all (a single key or URI too large, or not text).
type part struct {
	e  Event
	ok bool
}

// widestSent is the send time whose encoding is longest: with the largest
// sequence number, it sizes parts before their real ones are known.
var widestSent = time.Unix(0, math.MinInt64)

// split cuts e into parts that each fit in one message, halving its keys
// and then its audience until they do: an event with keys reaches who may
// see any of them, and one with an audience reaches any of its members,
// so the parts together reach exactly whom e would. A list over its own
// limit is halved first: halving the other would multiply the parts
// without ever bringing it under.
func split(origin string, e Event, out []part) []part {
	if _, err := encode(nil, origin, math.MaxUint64, widestSent, false, e); err == nil {
		return append(out, part{e, true})
	}
	switch {
	case len(e.Audience) > maxAudience && len(e.Keys) <= maxKeys:
		h := len(e.Audience) / 2
		a, b := e, e
		a.Audience, b.Audience = e.Audience[:h:h], e.Audience[h:]
		return split(origin, b, split(origin, a, out))
	case len(e.Keys) > 1:
		h := len(e.Keys) / 2
		a, b := e, e
		a.Keys, b.Keys = e.Keys[:h:h], e.Keys[h:]
		return split(origin, b, split(origin, a, out))
	case len(e.Audience) > 1:
		h := len(e.Audience) / 2
		a, b := e, e
		a.Audience, b.Audience = e.Audience[:h:h], e.Audience[h:]
		return split(origin, b, split(origin, a, out))
	}
	return append(out, part{e, false})
}
