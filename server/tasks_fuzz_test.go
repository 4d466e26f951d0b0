package server

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/jsonrpc"
	"tidings/mcp"
)

// FuzzTaskRecord feeds arbitrary bytes to the decoder of task records,
// which reads what a shared store holds: whatever it is given, it
// returns a record or an error that says the record is corrupt, never
// panics, and a record it accepts encodes to one that decodes alike.
func FuzzTaskRecord(f *testing.F) {
	now := time.Date(2026, 7, 28, 10, 0, 0, 0, time.UTC)
	owner := (&Server{ownerKey: taskOwnerKey([]byte("a secret"))}).ownerHash("alice")
	for _, rec := range []taskRecord{
		{V: 1, Owner: owner, Status: mcp.TaskWorking, Created: now, Updated: now, TTLMs: 1000, PollMs: 10,
			Answers: map[string]jsontext.Value{"a.1": jsontext.Value(`{"action":"accept"}`)}},
		{V: 1, Owner: owner, Status: mcp.TaskInputRequired, Message: "waiting", Created: now, Updated: now.Add(time.Second), TTLMs: 1, PollMs: 1,
			Inputs: map[string]mcp.InputRequest{"q.2": {Method: mcp.MethodElicit, Params: jsontext.Value(`{"message":"?"}`)}}},
		{V: 1, Owner: owner, Status: mcp.TaskCompleted, Created: now, Updated: now, TTLMs: 5, PollMs: 5, Result: jsontext.Value(`{"content":[]}`)},
		{V: 1, Owner: owner, Status: mcp.TaskFailed, Created: now, Updated: now, TTLMs: 5, PollMs: 5, Error: jsontext.Value(`{"code":-32603,"message":"x"}`)},
		{V: 1, Owner: owner, Status: mcp.TaskCancelled, Created: now, Updated: now, TTLMs: 5, PollMs: 5},
	} {
		b, err := rec.encode()
		if err != nil {
			f.Fatal(err)
		}
		if _, err := decodeTaskRecord(b); err != nil {
			f.Fatalf("seed %s: %v", b, err)
		}
		f.Add(b)
	}
	for _, s := range []string{"", "null", "{}", "[]", `{"v":1}`, `{"v":2,"owner":"x"}`, "\xff", `{"v":1,"v":1}`,
		`{"v":1,"owner":"` + owner + `","status":"completed","created":"2026-07-28T10:00:00Z","updated":"2026-07-28T10:00:00Z","ttlMs":1,"pollMs":1,"result":[1]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := decodeTaskRecord(b)
		if err != nil {
			if rec != nil {
				t.Fatalf("a record and an error for %q", b)
			}
			if !strings.Contains(err.Error(), "corrupt task record") {
				t.Fatalf("error %q does not say the record is corrupt", err)
			}
			return
		}
		again, err := rec.encode()
		if err != nil {
			t.Fatalf("an accepted record does not encode: %v", err)
		}
		rec2, err := decodeTaskRecord(again)
		if err != nil {
			t.Fatalf("an accepted record, re-encoded, is refused: %v\n%s", err, again)
		}
		w1, _ := jsonrpc.Marshal(rec.wire("T", true))
		w2, _ := jsonrpc.Marshal(rec2.wire("T", true))
		if !bytes.Equal(w1, w2) {
			t.Fatalf("the task reads differently once re-encoded:\n%s\n%s", w1, w2)
		}
	})
}
