package dirsource_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"tidings/dirsource"
	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// costly compiles to 3003 instructions, over the default limit, and costs
// about a minute of CPU per MiB searched.
const costly = `(?:.*){0,1000}z`

// slow compiles to 1803 instructions, under the default limit, and still
// costs most of a minute per MiB.
const slow = `(?:.*){0,600}z`

// slowFiles hold a MiB each that slow takes long over: one as a single
// line, one as many short lines.
func slowFiles() map[string]string {
	return map[string]string{
		"long.txt":  strings.Repeat("a", 1<<20-1),
		"lines.txt": strings.Repeat(strings.Repeat("a", 99)+"\n", 1<<20/100),
	}
}

func TestCostlyRegexpIsRefused(t *testing.T) {
	f := newFixture(t, slowFiles())
	start := time.Now()
	r := f.rpc(t, mcp.MethodToolsCall, map[string]any{"name": "search_files", "arguments": map[string]any{"query": costly, "regexp": true}})
	if r.Error == nil || r.Error.Code != jsonrpc.CodeInvalidParams {
		t.Fatalf("costly pattern: %+v, want -32602", r)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refusal took %v", d)
	}
	for _, want := range []string{"3003 instructions", "limit of 2000"} {
		if !strings.Contains(r.Error.Message, want) {
			t.Errorf("message %q does not say %q", r.Error.Message, want)
		}
	}
	if r.Error.Data["limit"] != 2000.0 || r.Error.Data["size"] != 3003.0 {
		t.Errorf("data = %v", r.Error.Data)
	}
	if n := f.src.Stats().RegexpsRefused; n != 1 {
		t.Errorf("RegexpsRefused = %d, want 1", n)
	}

	// The longest plain query passes as a regular expression too.
	if r := f.tool(t, "search_files", map[string]any{"query": strings.Repeat("a", 1000), "regexp": true, "max_results": 1}); r.IsError {
		t.Errorf("a 1000-character literal pattern: %v", r.Content)
	}

	g := newFixture(t, map[string]string{"a.txt": "z\n"}, dirsource.WithMaxRegexpSize(50))
	r = g.rpc(t, mcp.MethodToolsCall, map[string]any{"name": "search_files", "arguments": map[string]any{"query": `(?:.*){0,30}z`, "regexp": true}})
	if r.Error == nil || !strings.Contains(r.Error.Message, "93 instructions, over the limit of 50") {
		t.Errorf("under WithMaxRegexpSize(50): %+v", r)
	}
	if r := g.tool(t, "search_files", map[string]any{"query": `^z$`, "regexp": true}); r.IsError || len(r.Structured["matches"].([]any)) != 1 {
		t.Errorf("small pattern: %v %v", r.Structured, r.Content)
	}
}

// callCtx calls search_files within ctx, in the background, and returns
// the reply's channel.
func (f *fixture) callCtx(t testing.TB, ctx context.Context, args map[string]any) <-chan engine.Reply {
	t.Helper()
	call := f.request(t, mcp.MethodToolsCall, map[string]any{"name": "search_files", "arguments": args})
	done := make(chan engine.Reply, 1)
	go func() { done <- engine.Of(f.srv).Serve(ctx, call, "", nil, discard{}) }()
	return done
}

func TestSearchStopsInsideAFileWhenTheCallerGivesUp(t *testing.T) {
	for name, body := range slowFiles() {
		t.Run(name, func(t *testing.T) {
			// No time limit of its own: only the caller's end stops it.
			f := newFixture(t, map[string]string{name: body}, dirsource.WithSearchTimeout(time.Hour))
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			done := f.callCtx(t, ctx, map[string]any{"query": slow, "regexp": true})
			select {
			case <-done:
			case <-time.After(wait):
				t.Fatalf("search still running %v after its caller gave up", wait)
			}
			if n := f.src.Stats().SearchesTimedOut; n != 0 {
				t.Errorf("SearchesTimedOut = %d: the caller's end is no time limit", n)
			}
		})
	}
}

func TestSearchTimeLimit(t *testing.T) {
	f := newFixture(t, slowFiles(), dirsource.WithSearchTimeout(100*time.Millisecond))
	done := f.callCtx(t, context.Background(), map[string]any{"query": slow, "regexp": true})
	var rep engine.Reply
	select {
	case rep = <-done:
	case <-time.After(wait):
		t.Fatalf("search still running after %v, over its time limit", wait)
	}
	var r struct {
		Result toolResult `json:"result"`
	}
	if err := json.Unmarshal(rep.Body, &r); err != nil {
		t.Fatalf("%v: %s", err, rep.Body)
	}
	st := r.Result.Structured
	if r.Result.IsError || st["truncated"] != true || fmt.Sprint(st["reasons"]) != "[search_timeout]" || st["skippedFiles"] != 2.0 {
		t.Errorf("result = %s, want truncated by search_timeout with both files skipped", rep.Body)
	}
	if !strings.Contains(r.Result.Content[0].Text, "time limit of 100ms") {
		t.Errorf("text = %q", r.Result.Content[0].Text)
	}
	if n := f.src.Stats().SearchesTimedOut; n != 1 {
		t.Errorf("SearchesTimedOut = %d, want 1", n)
	}
}

// TestSearchLongLines matches lines long enough to be fed to the regular
// expression rune by rune: matches are found wherever they are.
func TestSearchLongLines(t *testing.T) {
	long := strings.Repeat("a", 300000)
	f := newFixture(t, map[string]string{
		"end.txt":   long + "needle\nshort needle\n",
		"start.txt": "needle" + long + "\n",
		"none.txt":  long + "needl\n",
	})
	r := f.tool(t, "search_files", map[string]any{"query": `a{3}needle|^needle`, "regexp": true})
	var got []string
	for _, m := range r.Structured["matches"].([]any) {
		m := m.(map[string]any)
		got = append(got, fmt.Sprintf("%s:%v", m["path"], m["line"]))
	}
	if fmt.Sprint(got) != "[end.txt:1 start.txt:1]" {
		t.Errorf("matches = %v, want end.txt:1 and start.txt:1", got)
	}
}
