package schematest

import (
	"strings"
	"testing"
)

// TestTaskShapes checks that the hand-written checks of the tasks
// extension accept well-formed tasks and reject each kind of broken one,
// so that the server tests built on them can fail.
func TestTaskShapes(t *testing.T) {
	const common = `"taskId":"T1","createdAt":"2026-07-28T10:00:00Z","lastUpdatedAt":"2026-07-28T10:00:01.5Z","ttlMs":60000,"pollIntervalMs":1000`
	resp := func(method, result string) (string, string) {
		return method, `{"jsonrpc":"2.0","id":1,"result":{` + result + `}}`
	}
	good := [][2]string{}
	add := func(method, msg string) { good = append(good, [2]string{method, msg}) }
	add(resp("tools/call", `"resultType":"task","status":"working",`+common))
	add(resp("tools/call", `"resultType":"task","status":"working","taskId":"T","createdAt":"2026-07-28T10:00:00+02:00","lastUpdatedAt":"2026-07-28T10:00:00Z","ttlMs":null`))
	add(resp("tasks/get", `"resultType":"complete","status":"working","statusMessage":"half way",`+common))
	add(resp("tasks/get", `"resultType":"complete","status":"input_required",`+common+
		`,"inputRequests":{"q.1":{"method":"elicitation/create","params":{"mode":"form","message":"?","requestedSchema":{"type":"object","properties":{}}}}}`))
	add(resp("tasks/get", `"resultType":"complete","status":"completed",`+common+`,"result":{"content":[{"type":"text","text":"ok"}],"isError":true}`))
	add(resp("tasks/get", `"resultType":"complete","status":"failed",`+common+`,"error":{"code":-32603,"message":"broke"}`))
	add(resp("tasks/get", `"resultType":"complete","status":"cancelled",`+common))
	add(resp("tasks/update", `"resultType":"complete","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"s","version":"1"}}`))
	add(resp("tasks/cancel", `"resultType":"complete"`))
	for _, g := range good {
		if err := CheckResponse(g[0], []byte(g[1])); err != nil {
			t.Errorf("%s: valid message rejected: %v\n%s", g[0], err, g[1])
		}
	}

	bad := [][2]string{}
	addBad := func(method, msg string) { bad = append(bad, [2]string{method, msg}) }
	addBad(resp("tools/call", `"resultType":"task","status":"working",`+common+`,"result":{"content":[]}`))
	addBad(resp("tools/call", `"resultType":"task","status":"working",`+common+`,"requestState":"x"`))
	addBad(resp("tools/call", `"resultType":"task","status":"working","task":{"taskId":"T"},`+common))
	addBad(resp("tools/call", `"resultType":"task","status":"working","taskId":"T","createdAt":"2026-07-28T10:00:00Z","lastUpdatedAt":"2026-07-28T10:00:00Z"`))
	addBad(resp("tools/call", `"resultType":"task","status":"working","taskId":"T","createdAt":"2026-07-28T10:00:00Z","lastUpdatedAt":"2026-07-28T10:00:00Z","ttlMs":1.5`))
	addBad(resp("tools/call", `"resultType":"task","status":"working","taskId":"T","createdAt":"2026-07-28T10:00:00Z","lastUpdatedAt":"2026-07-28T10:00:00Z","ttlMs":"60000"`))
	addBad(resp("tools/call", `"resultType":"task","status":"working","taskId":"T","createdAt":"yesterday","lastUpdatedAt":"2026-07-28T10:00:00Z","ttlMs":1`))
	addBad(resp("tools/call", `"resultType":"task","status":"working","taskId":"T","createdAt":"2026-07-28T10:00:00Z","lastUpdatedAt":"2026-07-28T10:00:00Z","ttl":1,"ttlMs":1`))
	addBad(resp("tasks/get", `"resultType":"task","status":"working",`+common))
	addBad(resp("tasks/get", `"resultType":"complete","status":"running",`+common))
	addBad(resp("tasks/get", `"resultType":"complete","status":"input_required",`+common))
	addBad(resp("tasks/get", `"resultType":"complete","status":"input_required",`+common+`,"inputRequests":{}`))
	addBad(resp("tasks/get", `"resultType":"complete","status":"completed",`+common))
	addBad(resp("tasks/get", `"resultType":"complete","status":"completed",`+common+`,"result":{"content":"ok"}`))
	addBad(resp("tasks/get", `"resultType":"complete","status":"failed",`+common+`,"error":{"message":"no code"}`))
	addBad(resp("tasks/get", `"resultType":"complete","status":"failed",`+common+`,"error":{"code":1,"message":"x"},"result":{"content":[]}`))
	addBad(resp("tasks/get", `"resultType":"complete","status":"working",`+common+`,"statusMessage":3`))
	addBad(resp("tasks/cancel", `"resultType":"complete","status":"cancelled"`))
	addBad(resp("tasks/update", `"resultType":"complete","taskId":"T1"`))
	addBad(resp("tasks/update", `"resultType":"input_required"`))
	for _, b := range bad {
		if err := CheckResponse(b[0], []byte(b[1])); err == nil {
			t.Errorf("%s: invalid message accepted: %s", b[0], b[1])
		}
	}

	note := `{"jsonrpc":"2.0","method":"notifications/tasks","params":{"status":"completed",` + common +
		`,"result":{"content":[]},"_meta":{"io.modelcontextprotocol/subscriptionId":7}}}`
	if err := CheckNotification([]byte(note)); err != nil {
		t.Errorf("valid task notification rejected: %v", err)
	}
	for _, broken := range []string{
		strings.Replace(note, `"result":{"content":[]},`, ``, 1),
		strings.Replace(note, `"status":"completed"`, `"status":"done"`, 1),
		`{"jsonrpc":"2.0","method":"notifications/tasks"}`,
	} {
		if err := CheckNotification([]byte(broken)); err == nil {
			t.Errorf("invalid task notification accepted: %s", broken)
		}
	}
}
