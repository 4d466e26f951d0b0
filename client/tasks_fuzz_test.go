package client

import (
	"context"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/mcp"
)

// FuzzTaskState feeds the follower task states as a server might send
// them, well-formed or not: it must never panic, must end the call on
// every terminal state of its task, and must pass over states of other
// tasks. The client has no handlers, so input requests end the call too,
// as a following stopped before the task ended (which followTask then
// cancels).
func FuzzTaskState(f *testing.F) {
	for _, seed := range []string{
		`{"taskId":"t","status":"working","createdAt":"2026-07-28T12:00:00Z","lastUpdatedAt":"2026-07-28T12:00:00Z","ttlMs":null,"pollIntervalMs":5000}`,
		`{"taskId":"t","status":"completed","result":{"content":[{"type":"text","text":"x"}],"isError":true}}`,
		`{"taskId":"t","status":"completed"}`,
		`{"taskId":"t","status":"completed","result":[1]}`,
		`{"taskId":"t","status":"failed","error":{"code":-32603,"message":"m","data":{"a":1}}}`,
		`{"taskId":"t","status":"failed","error":"nope"}`,
		`{"taskId":"t","status":"cancelled","statusMessage":"bye\u001b[2J"}`,
		`{"taskId":"t","status":"input_required","inputRequests":{"a":{"method":"elicitation/create","params":{}},"b":{"method":"nope"}}}`,
		`{"taskId":"other","status":"completed","result":{"content":[]}}`,
		`{"taskId":"t","status":"paused","lastUpdatedAt":"not a time","pollIntervalMs":-4}`,
	} {
		f.Add([]byte(seed))
	}
	c := NewHTTP("http://127.0.0.1:1/mcp", WithLogger(quietLogger()))
	defer c.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		var st mcp.Task
		if json.Unmarshal(data, &st) != nil {
			return
		}
		fl := &taskFollower{c: c, name: "tool", id: "t", interval: defaultTaskPoll,
			progress: &progressFloor{fn: func(float64, *float64, string) {}},
			answers:  map[string]jsontext.Value{}, sent: map[string]bool{}}
		end := fl.see(context.Background(), st)
		switch {
		case st.TaskID != "t" || st.Status == "":
			if end != nil || fl.reported {
				t.Fatalf("a state of another task (%q) was taken: %+v", st.TaskID, end)
			}
		case st.Status.Terminal():
			if end == nil || !end.terminal || (end.res == nil) == (end.err == nil) {
				t.Fatalf("terminal state %s gave outcome %+v", st.Status, end)
			}
		case end != nil && (end.terminal || end.err == nil):
			t.Fatalf("state %s, not terminal, gave outcome %+v", st.Status, end)
		}
		if fl.interval < minTaskPoll || fl.interval > maxTaskPoll {
			t.Fatalf("interval %v out of bounds", fl.interval)
		}
	})
}
