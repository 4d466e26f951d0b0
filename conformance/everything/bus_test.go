package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"tidings/client"
	"tidings/internal/testrig/clustertest"
	"tidings/internal/testrig/testbroker"
	"tidings/mcp"
	"tidings/streamhttp"
)

// TestCopiesOnOneBus: two copies started with the same -bus and -secret;
// a listen on one hears the tool list change that a call through the
// other announces, and a task created through one is polled and
// cancelled through the other, over NATS and over Redis.
func TestCopiesOnOneBus(t *testing.T) {
	for _, b := range []struct {
		name string
		url  func(t *testing.T) string
	}{
		{"nats", func(t *testing.T) string { return testbroker.StartNATS(t).URL() }},
		{"redis", func(t *testing.T) string { return testbroker.StartRedis(t).URL() }},
	} {
		t.Run(b.name, func(t *testing.T) {
			o := options{secret: "one secret for both", bus: b.url(t)}
			copies := make([]string, 2)
			for i := range copies {
				copies[i] = startCopy(t, o)
			}
			w := clustertest.NewWatch(t, "the watcher on the first copy", copies[0], "", client.WatchOptions{Tools: true})
			w.Ready(t, 1)
			c := client.NewHTTP(copies[1])
			defer c.Close()
			before := w.Stats().Notifications
			res, err := c.CallTool(context.Background(), "test_trigger_tool_change", map[string]any{})
			if err != nil || res.IsError {
				t.Fatalf("trigger: %+v, %v", res, err)
			}
			clustertest.WaitFor(t, "the first copy's listen to hear the second's announcement", func() bool {
				return w.Stats().Notifications > before
			})

			// A task created through one copy is the other's too.
			handle := rpc(t, copies[0], mcp.MethodToolsCall, "slow_compute", map[string]any{"name": "slow_compute", "arguments": map[string]any{"seconds": 60}})
			id, _ := handle["taskId"].(string)
			if handle["resultType"] != mcp.ResultTask || id == "" {
				t.Fatalf("slow_compute: %v, want a task", handle)
			}
			if task := rpc(t, copies[1], mcp.MethodTasksGet, id, map[string]any{"taskId": id}); task["status"] != string(mcp.TaskWorking) {
				t.Fatalf("tasks/get through the other copy: %v", task)
			}
			rpc(t, copies[1], mcp.MethodTasksCancel, id, map[string]any{"taskId": id})
			if task := rpc(t, copies[0], mcp.MethodTasksGet, id, map[string]any{"taskId": id}); task["status"] != string(mcp.TaskCancelled) {
				t.Fatalf("tasks/get through the first copy after the cancel: %v", task)
			}
		})
	}
}

// startCopy runs one copy with the flags o, as run does, on a loopback
// server, and returns its /mcp URL; it is stopped when t ends.
func startCopy(t *testing.T, o options) string {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	opts, closeShared, err := o.serverOptions(context.Background(), log)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServer(log, opts...)
	if err != nil {
		closeShared()
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", streamhttp.New(srv, streamhttp.WithLogger(log)))
	ts := httptest.NewServer(mux)
	t.Cleanup(func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		ts.Close()
	})
	return ts.URL + "/mcp"
}

// rpc sends one request of the tasks extension's client to url (name
// goes in Mcp-Name) and returns its result, failing the test on an error.
func rpc(t *testing.T, url, method, name string, params map[string]any) map[string]any {
	t.Helper()
	params["_meta"] = map[string]any{
		mcp.MetaProtocolVersion:    mcp.Version,
		mcp.MetaClientCapabilities: map[string]any{"extensions": map[string]any{mcp.ExtensionTasks: map[string]any{}}},
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version)
	req.Header.Set(mcp.HeaderMethod, method)
	req.Header.Set(mcp.HeaderName, name)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	var r struct {
		Result map[string]any `json:"result"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.Result == nil {
		t.Fatalf("%s: %s (%v)", method, b, err)
	}
	return r.Result
}
