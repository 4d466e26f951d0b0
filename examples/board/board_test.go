package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"testing"

	"tidings/client"
	"tidings/internal/testrig/clustertest"
	"tidings/internal/testrig/testbroker"
	"tidings/internal/testrig/testlb"
	"tidings/mcp"
)

// replicas runs n replicas of the board against Redis at redisURL, each
// as the command runs with its flags, and stops them when t ends. It
// returns their base URLs.
func replicas(t *testing.T, n int, redisURL string) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var urls []string
	errs := make(chan error, n)
	for i := range n {
		addr := make(chan string, 1)
		args := []string{"-addr", "127.0.0.1:0", "-redis", redisURL, "-secret", "board test: the replicas' shared key"}
		log := slog.New(slog.DiscardHandler)
		go func() { errs <- run(ctx, args, &strings.Builder{}, log, func(a string) { addr <- a }) }()
		select {
		case a := <-addr:
			urls = append(urls, "http://"+a)
		case err := <-errs:
			cancel()
			t.Fatalf("replica %d: %v", i, err)
		}
	}
	t.Cleanup(func() {
		cancel()
		for range n {
			if err := <-errs; err != nil {
				t.Errorf("a replica: %v", err)
			}
		}
	})
	return urls
}

// TestBoardOnThreeReplicas: three replicas of the example on one Redis,
// behind nginx. A watcher on each replica follows board://sprint-1 and the
// tool list; a task completed through the balancer reaches all three, and
// so does the sprint report that enable_reports turns on.
func TestBoardOnThreeReplicas(t *testing.T) {
	rd, err := url.Parse(testbroker.StartRedis(t).URL())
	if err != nil {
		t.Fatal(err)
	}
	rd.RawQuery = "" // the board names its own channel
	ups := replicas(t, 3, rd.String())
	lb := testlb.StartNginx(t, ups...)
	var ws []*clustertest.Watch
	for i, u := range ups {
		w := clustertest.NewWatch(t, fmt.Sprintf("the watcher on replica %d", i), u+"/mcp", "",
			client.WatchOptions{Tools: true, URIs: []string{"board://sprint-1"}})
		w.Ready(t, 2)
		ws = append(ws, w)
	}
	c := client.NewHTTP(lb.URL() + "/mcp")
	defer c.Close()
	ctx := context.Background()

	res, err := c.CallTool(ctx, "complete_task", map[string]any{"board": "sprint-1", "task": "build"})
	if err != nil || res.IsError {
		t.Fatalf("complete_task: %+v, %v", res, err)
	}
	for _, w := range ws {
		w.ExpectUpdated(t, "board://sprint-1")
	}
	read, err := c.ReadResource(ctx, "board://sprint-1")
	if err != nil {
		t.Fatal(err)
	}
	if body := read.Contents[0].Text; body == nil || !strings.Contains(*body, `{"task":"build","done":true}`) {
		t.Errorf("board://sprint-1 = %+v, want build done", read.Contents[0])
	}

	if tools, err := c.Tools(ctx); err != nil || slices.ContainsFunc(tools, func(t mcp.Tool) bool { return t.Name == "sprint_report" }) {
		t.Fatalf("before enable_reports: %+v, %v", tools, err)
	}
	if res, err := c.CallTool(ctx, "enable_reports", map[string]any{}); err != nil || res.IsError {
		t.Fatalf("enable_reports: %+v, %v", res, err)
	}
	for _, w := range ws {
		e := w.Change(t)
		if e.Kind != client.ToolsChanged || !slices.Equal(e.Added, []string{"sprint_report"}) || len(e.Removed)+len(e.Changed) != 0 {
			t.Fatalf("%s: %s, want sprint_report added", w.Name, clustertest.Describe(e))
		}
	}
	// Every replica lists and runs it now, whichever the balancer picks.
	for range ups {
		rep, err := c.CallTool(ctx, "sprint_report", map[string]any{})
		if err != nil || rep.IsError {
			t.Fatalf("sprint_report: %+v, %v", rep, err)
		}
		if got := string(rep.StructuredContent); got != `{"boards":[{"board":"sprint-1","done":1,"total":4}]}` {
			t.Errorf("sprint_report = %s", got)
		}
	}
	// A replica that starts later serves the report too: starting writes
	// nothing to the shared state, so it hides nothing again.
	late := client.NewHTTP(replicas(t, 1, rd.String())[0] + "/mcp")
	defer late.Close()
	tools, err := late.Tools(ctx)
	if err != nil || !slices.ContainsFunc(tools, func(t mcp.Tool) bool { return t.Name == "sprint_report" }) {
		t.Fatalf("a replica started after enable_reports lists %+v, %v", tools, err)
	}
}
