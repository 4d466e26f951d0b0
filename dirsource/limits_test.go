package dirsource_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"tidings/dirsource"
	"tidings/mcp"
)

// partialMeta returns the PartialMetaKey value of the list's marker
// entry, and nil when the list has none.
func (f *fixture) partialMeta(t *testing.T) map[string]any {
	t.Helper()
	res := f.result(t, mcp.MethodResourcesList, nil)
	for _, r := range res["resources"].([]any) {
		r := r.(map[string]any)
		meta, _ := r["_meta"].(map[string]any)
		v, ok := meta[dirsource.PartialMetaKey]
		if !ok {
			continue
		}
		if r["uri"] != f.src.PartialURI() {
			t.Errorf("partial marker at %v, want %s", r["uri"], f.src.PartialURI())
		}
		return v.(map[string]any)
	}
	return nil
}

func TestPartialListIsToldAndRefills(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": "a", "b.txt": "b", "c.txt": "c", "d.txt": "d"}, dirsource.WithMaxFiles(2))
	f.run(t)
	if got := f.listURIs(t); !slices.Equal(got, []string{f.uri("a.txt"), f.uri("b.txt"), f.src.PartialURI()}) {
		t.Fatalf("list = %v", got)
	}
	want := map[string]any{"listed": 2.0, "limit": 2.0, "unlisted": 2.0}
	if got := f.partialMeta(t); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("partial meta = %v, want %v", got, want)
	}
	c := f.result(t, mcp.MethodResourcesRead, map[string]any{"uri": f.src.PartialURI()})["contents"].([]any)
	var read map[string]any
	if err := json.Unmarshal([]byte(c[0].(map[string]any)["text"].(string)), &read); err != nil || fmt.Sprint(read) != fmt.Sprint(want) {
		t.Fatalf("read of the marker = %v (%v), want %v", read, err, want)
	}
	// Files left out can still be read.
	if text, _ := f.readState(t, "d.txt"); text != "d" {
		t.Errorf("unlisted d.txt reads %q", text)
	}

	l := f.listen(t, map[string]any{"resourcesListChanged": true, "resourceSubscriptions": []string{f.src.PartialURI()}})
	// waitList waits for notifications until the list meets ok.
	waitList := func(what string, ok func([]string) bool) {
		t.Helper()
		deadline := time.Now().Add(wait)
		for !ok(f.listURIs(t)) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: list is %v", what, f.listURIs(t))
			}
			l.next(t)
		}
	}
	// Room appears: a file that did not fit is listed, and the marker
	// counts one fewer.
	mustDo(t, os.Remove(filepath.Join(f.root, "a.txt")))
	waitList("refill", func(u []string) bool {
		return len(u) == 3 && !slices.Contains(u, f.uri("a.txt")) && slices.Contains(u, f.src.PartialURI()) &&
			fmt.Sprint(f.partialMeta(t)) == fmt.Sprint(map[string]any{"listed": 2.0, "limit": 2.0, "unlisted": 1.0})
	})
	// Room for all: the marker goes.
	mustDo(t, os.Remove(filepath.Join(f.root, "b.txt")))
	waitList("complete", func(u []string) bool {
		return slices.Equal(u, []string{f.uri("c.txt"), f.uri("d.txt")})
	})
	if r := f.rpc(t, mcp.MethodResourcesRead, map[string]any{"uri": f.src.PartialURI()}); r.Error == nil {
		t.Errorf("the marker reads while the list is complete: %v", r.Result)
	}
	// Over the limit again: it comes back.
	writeFiles(t, f.root, map[string]string{"e.txt": "e"})
	waitList("partial again", func(u []string) bool { return slices.Contains(u, f.src.PartialURI()) })
}

func TestSearchSaysWhatItSkipped(t *testing.T) {
	f := newFixture(t, map[string]string{
		"a.txt":   "needle\n",
		"big.txt": strings.Repeat("needle ", 100),
		"c.txt":   "needle\nneedle\n",
	}, dirsource.WithMaxSearchBytes(64), dirsource.WithMaxFiles(1))
	r := f.tool(t, "search_files", map[string]any{"query": "needle"})
	if r.IsError {
		t.Fatalf("search: %v", r.Content)
	}
	// c.txt is not listed (limit 1) and still searched; big.txt is
	// skipped, and the result says so.
	if n := len(r.Structured["matches"].([]any)); n != 3 {
		t.Errorf("matches = %v, want 3", r.Structured["matches"])
	}
	if r.Structured["truncated"] != true || fmt.Sprint(r.Structured["reasons"]) != "[file_too_large]" || r.Structured["skippedFiles"] != 1.0 {
		t.Errorf("result = %v, want truncated by file_too_large, 1 skipped", r.Structured)
	}
	if !strings.Contains(r.Content[0].Text, "truncated: file_too_large") {
		t.Errorf("text = %q", r.Content[0].Text)
	}

	r = f.tool(t, "search_files", map[string]any{"query": "needle", "max_results": 1})
	if fmt.Sprint(r.Structured["reasons"]) != "[max_results file_too_large]" {
		t.Errorf("reasons = %v", r.Structured["reasons"])
	}

	g := newFixture(t, map[string]string{"a.txt": "needle\n", "b.txt": "needle\n"}, dirsource.WithSearchBudget(10))
	r = g.tool(t, "search_files", map[string]any{"query": "needle"})
	if fmt.Sprint(r.Structured["reasons"]) != "[search_budget]" || r.Structured["skippedFiles"] != 1.0 {
		t.Errorf("budget: %v", r.Structured)
	}

	h := newFixture(t, map[string]string{"a.txt": "needle\n"})
	if r = h.tool(t, "search_files", map[string]any{"query": "needle"}); r.Structured["truncated"] != false || r.Structured["reasons"] != nil {
		t.Errorf("complete search = %v", r.Structured)
	}
}

func TestListDirectoryIsCutAtItsLimit(t *testing.T) {
	files := map[string]string{".hidden1": "h", ".hidden2": "h"}
	for i := range 25 {
		files[fmt.Sprintf("f%02d.txt", i)] = "x"
	}
	for i := range 5 {
		files[fmt.Sprintf("d%d/x.txt", i)] = "x"
	}
	f := newFixture(t, files, dirsource.WithMaxDirEntries(10))
	r := f.tool(t, "list_directory", map[string]any{})
	if r.IsError {
		t.Fatalf("list_directory: %v", r.Content)
	}
	entries := r.Structured["entries"].([]any)
	var names []string
	for _, e := range entries {
		names = append(names, e.(map[string]any)["name"].(string))
	}
	if len(entries) != 10 || r.Structured["truncated"] != true || r.Structured["limit"] != 10.0 || !slices.IsSorted(names) {
		t.Errorf("listing = %v, want 10 entries sorted by name, truncated at the limit of 10", r.Structured)
	}
	if !strings.HasSuffix(r.Content[0].Text, "(cut at 10 entries, the most one listing shows; more are not shown)") {
		t.Errorf("text = %q", r.Content[0].Text)
	}
	if n := f.src.Stats().ListingsCut; n != 1 {
		t.Errorf("ListingsCut = %d, want 1", n)
	}
	// Exactly the limit is not cut.
	g := newFixture(t, map[string]string{"a": "a", "b": "b", ".c": "c"}, dirsource.WithMaxDirEntries(2))
	if r := g.tool(t, "list_directory", map[string]any{}); r.Structured["truncated"] != false || r.Structured["limit"] != nil ||
		len(r.Structured["entries"].([]any)) != 2 {
		t.Errorf("listing at the limit = %v", r.Structured)
	}
}
