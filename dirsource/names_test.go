package dirsource_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"tidings/dirsource"
	"tidings/mcp"
)

// latin1 is a file name in Latin-1, as old archives hold them: "café.txt"
// with é as the single byte E9, which is not UTF-8.
const latin1 = "caf\xe9.txt"

// nameFiles are three ordinary files beside names that are not UTF-8,
// one of them a directory, and one holding a "%" as well.
var nameFiles = map[string]string{
	"a.txt":        "a",
	"b.txt":        "b",
	"c.txt":        "c",
	latin1:         "latin one\n",
	"d\xff/x.txt":  "inside\n",
	"50%\xe9.txt":  "percent\n",
	"caf\xc3.md":   "cut off here\n", // the first byte of a two-byte character, alone
	"ok é.txt":     "valid\n",
	"ok %E9.txt":   "literal escape\n", // valid UTF-8 that reads like an escape
	"sub/\xfe.bin": "\x00",
	// A directory whose valid name reads like an escape, above one that
	// is not UTF-8.
	"lit %E9/\xff.txt": "mixed\n",
}

// shown is how the tools and the list name nameFiles.
var shown = map[string]string{
	"a.txt":            "a.txt",
	"b.txt":            "b.txt",
	"c.txt":            "c.txt",
	latin1:             "caf%E9.txt",
	"d\xff/x.txt":      "d%FF/x.txt",
	"50%\xe9.txt":      "50%25%E9.txt",
	"caf\xc3.md":       "caf%C3.md",
	"ok é.txt":         "ok é.txt",
	"ok %E9.txt":       "ok %E9.txt",
	"sub/\xfe.bin":     "sub/%FE.bin",
	"lit %E9/\xff.txt": "lit %E9/%FF.txt",
}

// listNames returns the resource list as URI → name, and checks that
// every name is valid UTF-8.
func (f *fixture) listNames(t testing.TB) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, r := range f.result(t, mcp.MethodResourcesList, nil)["resources"].([]any) {
		r := r.(map[string]any)
		name := r["name"].(string)
		if !utf8.ValidString(name) {
			t.Errorf("name %q is not UTF-8", name)
		}
		got[r["uri"].(string)] = name
	}
	return got
}

func TestNamesThatAreNotUTF8AreServed(t *testing.T) {
	f := newFixture(t, nameFiles)
	want := map[string]string{}
	for rel, name := range shown {
		want[f.uri(rel)] = name
	}
	if got := f.listNames(t); !mapsEqual(got, want) {
		t.Fatalf("resources/list = %v\nwant %v", got, want)
	}
	// The URI carries the exact bytes, percent-encoded, and reads the file.
	if u := f.uri(latin1); !strings.HasSuffix(u, "/caf%E9.txt") {
		t.Errorf("URI of %q = %s", latin1, u)
	}
	for rel, body := range nameFiles {
		if strings.HasSuffix(rel, ".bin") {
			continue
		}
		c := f.result(t, mcp.MethodResourcesRead, map[string]any{"uri": f.uri(rel)})["contents"].([]any)
		if got := c[0].(map[string]any)["text"]; got != body {
			t.Errorf("read %q = %v, want %q", rel, got, body)
		}
	}

	r := f.tool(t, "list_directory", map[string]any{})
	if r.IsError {
		t.Fatalf("list_directory: %v", r.Content)
	}
	var entries []string
	for _, e := range r.Structured["entries"].([]any) {
		e := e.(map[string]any)
		entries = append(entries, e["name"].(string)+"|"+e["path"].(string))
		if e["name"] == "caf%E9.txt" && e["uri"] != f.uri(latin1) {
			t.Errorf("list_directory: uri of caf%%E9.txt = %v, want %s", e["uri"], f.uri(latin1))
		}
	}
	slices.Sort(entries)
	wantEntries := []string{"50%25%E9.txt|50%25%E9.txt", "a.txt|a.txt", "b.txt|b.txt", "c.txt|c.txt", "caf%C3.md|caf%C3.md",
		"caf%E9.txt|caf%E9.txt", "d%FF|d%FF", "lit %E9|lit %E9", "ok %E9.txt|ok %E9.txt", "ok é.txt|ok é.txt", "sub|sub"}
	if !slices.Equal(entries, wantEntries) {
		t.Errorf("list_directory = %v\nwant %v", entries, wantEntries)
	}
	if !strings.Contains(r.Content[0].Text, "caf%E9.txt\t10 bytes") {
		t.Errorf("list_directory text = %q", r.Content[0].Text)
	}
	// The paths the tools show lead back to the files.
	r = f.tool(t, "list_directory", map[string]any{"path": "d%FF"})
	if r.IsError || r.Structured["path"] != "d%FF" || len(r.Structured["entries"].([]any)) != 1 ||
		r.Structured["entries"].([]any)[0].(map[string]any)["path"] != "d%FF/x.txt" {
		t.Errorf("list_directory d%%FF = %v %v", r.Structured, r.Content)
	}
	for rel, name := range shown {
		r := f.tool(t, "file_info", map[string]any{"path": name})
		if r.IsError || r.Structured["path"] != name || r.Structured["uri"] != f.uri(rel) {
			t.Errorf("file_info %q = %v %v, want the file %q", name, r.Structured, r.Content, rel)
		}
	}

	r = f.tool(t, "search_files", map[string]any{"query": "e", "max_results": 100})
	if r.IsError {
		t.Fatalf("search_files: %v", r.Content)
	}
	found := map[string]string{}
	for _, m := range r.Structured["matches"].([]any) {
		m := m.(map[string]any)
		found[m["path"].(string)] = m["uri"].(string)
	}
	for _, rel := range []string{latin1, "d\xff/x.txt", "50%\xe9.txt", "caf\xc3.md"} {
		if found[shown[rel]] != f.uri(rel) {
			t.Errorf("search_files: %q found at %q, want %s; matches %v", shown[rel], found[shown[rel]], f.uri(rel), found)
		}
	}
	if !strings.Contains(r.Content[0].Text, "caf%E9.txt:1: latin one") {
		t.Errorf("search_files text = %q", r.Content[0].Text)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestNameThatIsNotUTF8ComingAndGoing has such a file appear and vanish
// while the source runs: the other files stay listed throughout, and
// the list follows.
func TestNameThatIsNotUTF8ComingAndGoing(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": "a", "b.txt": "b", latin1: "x"})
	f.run(t)
	l := f.listen(t, map[string]any{"resourcesListChanged": true})
	waitList := func(what string, want ...string) {
		t.Helper()
		var uris []string
		for _, rel := range want {
			uris = append(uris, f.uri(rel))
		}
		slices.Sort(uris)
		deadline := time.Now().Add(wait)
		for got := f.listURIs(t); !slices.Equal(got, uris); got = f.listURIs(t) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: list is %v, want %v", what, got, uris)
			}
			l.next(t)
		}
	}
	waitList("at start", "a.txt", "b.txt", latin1)

	mustDo(t, os.Remove(filepath.Join(f.root, latin1)))
	waitList("bad name removed", "a.txt", "b.txt")

	// One burst brings a good file and two bad names at once.
	writeFiles(t, f.root, map[string]string{"new\xe9.txt": "n", "c.txt": "c", "dir\xe9/y.txt": "y"})
	waitList("bad names created", "a.txt", "b.txt", "c.txt", "dir\xe9/y.txt", "new\xe9.txt")
	names := f.listNames(t)
	if names[f.uri("new\xe9.txt")] != "new%E9.txt" || names[f.uri("dir\xe9/y.txt")] != "dir%E9/y.txt" {
		t.Errorf("names = %v", names)
	}
	if st := f.src.Stats(); st.Listed != 5 || st.Refused != 0 {
		t.Errorf("stats = %+v, want 5 listed and none refused", st)
	}
}

// TestRootThatIsNotUTF8 serves a directory whose own path is not UTF-8:
// the template, the tools and the partial marker all name it, as text.
func TestRootThatIsNotUTF8(t *testing.T) {
	f := newFixtureNamed(t, "r\xe9sum\xe9s", map[string]string{"a.txt": "a", latin1: "l", "b.txt": "b"}, dirsource.WithMaxFiles(2))
	if !utf8.ValidString(f.src.DisplayRoot()) || !strings.HasSuffix(f.src.DisplayRoot(), "/r%E9sum%E9s") {
		t.Errorf("DisplayRoot = %q", f.src.DisplayRoot())
	}
	if !strings.HasSuffix(f.src.Root(), "/r\xe9sum\xe9s") {
		t.Errorf("Root = %q, want the exact bytes", f.src.Root())
	}
	if u := f.uri("a.txt"); !strings.HasSuffix(u, "/r%E9sum%E9s/a.txt") {
		t.Errorf("URI = %s", u)
	}
	// Two files listed, the third readable through the template.
	if got := f.listURIs(t); len(got) != 3 || !slices.Contains(got, f.src.PartialURI()) {
		t.Errorf("resources/list = %v", got)
	}
	for rel, body := range map[string]string{"a.txt": "a", latin1: "l", "b.txt": "b"} {
		c := f.result(t, mcp.MethodResourcesRead, map[string]any{"uri": f.uri(rel)})["contents"].([]any)
		if got := c[0].(map[string]any)["text"]; got != body {
			t.Errorf("read %q = %v", rel, got)
		}
	}
	tmpl := f.result(t, mcp.MethodResourcesTemplates, nil)["resourceTemplates"].([]any)
	if len(tmpl) != 1 || !strings.Contains(tmpl[0].(map[string]any)["title"].(string), "r%E9sum%E9s") {
		t.Errorf("templates = %v", tmpl)
	}
	tools := f.result(t, mcp.MethodToolsList, nil)["tools"].([]any)
	if len(tools) != 3 {
		t.Errorf("tools = %v", tools)
	}
	if r := f.tool(t, "search_files", map[string]any{"query": "l"}); r.IsError || len(r.Structured["matches"].([]any)) != 1 {
		t.Errorf("search_files = %v %v", r.Structured, r.Content)
	}
	if r := f.tool(t, "list_directory", map[string]any{}); r.IsError || len(r.Structured["entries"].([]any)) != 3 {
		t.Errorf("list_directory = %v %v", r.Structured, r.Content)
	}
}
