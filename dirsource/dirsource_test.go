package dirsource_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"tidings/dirsource"
	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 10 * time.Second

// writeFiles creates files (slash paths relative to dir) with contents.
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for rel, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type fixture struct {
	root string // the served directory
	base string // its parent, for files outside it
	src  *dirsource.Source
	srv  *server.Server
	ids  atomic.Int64
}

func newFixture(t testing.TB, files map[string]string, opts ...dirsource.Option) *fixture {
	t.Helper()
	return newFixtureNamed(t, "root", files, opts...)
}

// newFixtureNamed serves a directory of the given name in a fresh
// temporary directory.
func newFixtureNamed(t testing.TB, name string, files map[string]string, opts ...dirsource.Option) *fixture {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, name)
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, root, files)
	src, err := dirsource.New(root, opts...)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(mcp.Implementation{Name: "test", Version: "1"}, server.WithKeepAlive(0))
	if err := src.Register(srv); err != nil {
		t.Fatal(err)
	}
	// Paths in URIs are the resolved ones (TMPDIR may be a symbolic link).
	return &fixture{root: src.Root(), base: filepath.Dir(src.Root()), src: src, srv: srv}
}

// run starts the watch loop and waits until it is ready; cleanup stops it
// and checks it ended cleanly.
func (f *fixture) run(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.src.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-f.src.Ready():
	case err := <-done:
		t.Fatalf("Run ended early: %v", err)
	case <-time.After(wait):
		t.Fatal("Run not ready")
	}
}

func (f *fixture) uri(rel string) string { return f.src.URI(rel) }

func (f *fixture) request(t testing.TB, method string, params map[string]any) *engine.Call {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	params["_meta"] = map[string]any{
		mcp.MetaProtocolVersion:    mcp.Version,
		mcp.MetaClientCapabilities: map[string]any{},
	}
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": f.ids.Add(1), "method": method, "params": params})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := jsonrpc.Decode(b, jsonrpc.DefaultMaxDepth)
	if err != nil {
		t.Fatal(err)
	}
	call, rep := engine.Parse(msg)
	if rep != nil {
		t.Fatalf("parse: %s", rep.Body)
	}
	return call
}

type response struct {
	Result map[string]any `json:"result"`
	Error  *struct {
		Code    jsonrpc.Code   `json:"code"`
		Message string         `json:"message"`
		Data    map[string]any `json:"data"`
	} `json:"error"`
}

type discard struct{}

func (discard) Send([]byte) error { return nil }
func (discard) KeepAlive() error  { return nil }

// rpc serves one request in process and decodes the response.
func (f *fixture) rpc(t testing.TB, method string, params map[string]any) response {
	t.Helper()
	rep := engine.Of(f.srv).Serve(context.Background(), f.request(t, method, params), "", nil, discard{})
	var r response
	if err := json.Unmarshal(rep.Body, &r); err != nil {
		t.Fatalf("%s: %v: %s", method, err, rep.Body)
	}
	return r
}

func (f *fixture) result(t testing.TB, method string, params map[string]any) map[string]any {
	t.Helper()
	r := f.rpc(t, method, params)
	if r.Error != nil {
		t.Fatalf("%s: error %d %s", method, r.Error.Code, r.Error.Message)
	}
	return r.Result
}

// listURIs returns the URIs of resources/list (one page is enough here).
func (f *fixture) listURIs(t testing.TB) []string {
	t.Helper()
	res := f.result(t, mcp.MethodResourcesList, nil)
	var uris []string
	for _, r := range res["resources"].([]any) {
		uris = append(uris, r.(map[string]any)["uri"].(string))
	}
	return uris
}

// chanStream is a server.Stream that hands every message to a channel.
type chanStream struct {
	ch   chan []byte
	done <-chan struct{}
	last atomic.Int64 // unix nanoseconds of the latest message
}

func (c *chanStream) Send(b []byte) error {
	select {
	case c.ch <- bytes.Clone(b):
		c.last.Store(time.Now().UnixNano())
		return nil
	case <-c.done:
		return errors.New("listener gone")
	}
}

func (c *chanStream) KeepAlive() error { return nil }

type listener struct {
	ch <-chan []byte
	id float64
	st *chanStream
}

// lastSent is when the server sent the latest message.
func (l *listener) lastSent() time.Time { return time.Unix(0, l.st.last.Load()) }

// listen opens a subscriptions/listen in process and returns after the
// acknowledgement.
func (f *fixture) listen(t testing.TB, filter map[string]any) *listener {
	t.Helper()
	call := f.request(t, mcp.MethodListen, map[string]any{"notifications": filter})
	var id float64
	if err := json.Unmarshal([]byte(call.Msg.ID.Raw()), &id); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &chanStream{ch: make(chan []byte, 256), done: ctx.Done()}
	served := make(chan struct{})
	go func() {
		defer close(served)
		engine.Of(f.srv).Serve(ctx, call, "", nil, st)
	}()
	t.Cleanup(func() {
		cancel()
		<-served
	})
	l := &listener{ch: st.ch, id: id, st: st}
	if m := l.next(t); m.Method != mcp.NotifyAcknowledged {
		t.Fatalf("first message is %q, want the acknowledgement", m.Method)
	}
	return l
}

type note struct {
	Method string `json:"method"`
	Params struct {
		URI  string         `json:"uri"`
		Meta map[string]any `json:"_meta"`
	} `json:"params"`
}

func (l *listener) next(t testing.TB) note {
	t.Helper()
	select {
	case b := <-l.ch:
		var n note
		if err := json.Unmarshal(b, &n); err != nil {
			t.Fatalf("%v: %s", err, b)
		}
		if got := n.Params.Meta[mcp.MetaSubscriptionID]; got != l.id {
			t.Fatalf("%s tagged with subscription %v, want %v", n.Method, got, l.id)
		}
		return n
	case <-time.After(wait):
		t.Fatal("no notification in time")
	}
	return note{}
}

func TestListAndRead(t *testing.T) {
	f := newFixture(t, map[string]string{
		"a.txt":             "hello\n",
		"sub/b.json":        `{"x":1}`,
		"sub/deeper/c.md":   "# c",
		"bin":               "\x00\x01\xff",
		"noext":             "plain words",
		"with space ü.txt":  "spaced",
		".env":              "SECRET=1",
		".git/config":       "[core]",
		"sub/.hidden/d.txt": "d",
	})
	if err := os.Symlink("a.txt", filepath.Join(f.root, "link")); err != nil {
		t.Fatal(err)
	}
	res := f.result(t, mcp.MethodResourcesList, nil)
	type entry struct {
		URI, Name, MimeType string
		Size                float64
	}
	var got []entry
	for _, r := range res["resources"].([]any) {
		m := r.(map[string]any)
		got = append(got, entry{m["uri"].(string), m["name"].(string), m["mimeType"].(string), m["size"].(float64)})
	}
	want := []entry{
		{f.uri("a.txt"), "a.txt", "text/plain", 6},
		{f.uri("bin"), "bin", "application/octet-stream", 3},
		{f.uri("noext"), "noext", "text/plain", 11},
		{f.uri("sub/b.json"), "sub/b.json", "application/json", 7},
		{f.uri("sub/deeper/c.md"), "sub/deeper/c.md", "text/markdown", 3},
		{f.uri("with space ü.txt"), "with space ü.txt", "text/plain", 6},
	}
	slices.SortFunc(want, func(a, b entry) int { return strings.Compare(a.URI, b.URI) })
	if md := got[4].MimeType; md != "text/markdown" {
		// .md is not in Go's built-in table; accept the system's answer.
		want[4].MimeType = md
	}
	if !slices.Equal(got, want) {
		t.Fatalf("resources/list:\n got %v\nwant %v", got, want)
	}
	if u := f.uri("with space ü.txt"); !strings.HasSuffix(u, "/root/with%20space%20%C3%BC.txt") || !strings.HasPrefix(u, "file:///") {
		t.Errorf("URI not percent-encoded: %s", u)
	}

	tmpl := f.result(t, mcp.MethodResourcesTemplates, nil)["resourceTemplates"].([]any)
	if len(tmpl) != 1 || tmpl[0].(map[string]any)["uriTemplate"] != f.src.Template() {
		t.Errorf("templates = %v, want %s", tmpl, f.src.Template())
	}

	read := func(rel string) map[string]any {
		t.Helper()
		c := f.result(t, mcp.MethodResourcesRead, map[string]any{"uri": f.uri(rel)})["contents"].([]any)
		if len(c) != 1 {
			t.Fatalf("%s: %d contents", rel, len(c))
		}
		m := c[0].(map[string]any)
		if m["uri"] != f.uri(rel) {
			t.Errorf("%s: contents uri %v", rel, m["uri"])
		}
		return m
	}
	if m := read("a.txt"); m["text"] != "hello\n" || m["mimeType"] != "text/plain" || m["blob"] != nil {
		t.Errorf("a.txt = %v", m)
	}
	if m := read("with space ü.txt"); m["text"] != "spaced" {
		t.Errorf("spaced file = %v", m)
	}
	m := read("bin")
	if m["blob"] != base64.StdEncoding.EncodeToString([]byte("\x00\x01\xff")) || m["text"] != nil || m["mimeType"] != "application/octet-stream" {
		t.Errorf("bin = %v", m)
	}
	// A symbolic link is not served, not even one that stays inside: the
	// file would have two URIs and be notified under one only.
	if r := f.rpc(t, mcp.MethodResourcesRead, map[string]any{"uri": f.uri("link")}); r.Error == nil || r.Error.Code != jsonrpc.CodeInvalidParams {
		t.Errorf("read through an inner link: %+v", r)
	}
}

func TestReadRefusesEscapes(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": "a", "sub/b.txt": "b", ".env": "SECRET", ".git/config": "x"})
	writeFiles(t, f.base, map[string]string{"outside.txt": "outside"})
	for link, target := range map[string]string{
		"out":      filepath.Join(f.base, "outside.txt"),
		"relout":   "../outside.txt",
		"dirout":   f.base,
		"tohidden": ".env",
		"sub/up":   "..",
	} {
		if err := os.Symlink(target, filepath.Join(f.root, filepath.FromSlash(link))); err != nil {
			t.Fatal(err)
		}
	}
	rootURI := f.src.URI("")
	for _, uri := range []string{
		"file:///etc/passwd",
		f.uri("../outside.txt"),
		rootURI + "/../outside.txt",
		rootURI + "/sub/../../outside.txt",
		rootURI + "/sub/%2E%2E/%2E%2E/outside.txt",
		rootURI + "/%2E%2E/outside.txt",
		rootURI + "/./a.txt",
		rootURI + "//a.txt",
		rootURI + "/a.txt?x=1",
		rootURI + "/a.txt#frag",
		rootURI + "/%61.txt", // a non-canonical spelling of a.txt
		"file://localhost" + strings.TrimPrefix(f.uri("a.txt"), "file://"),
		f.uri("out"),
		f.uri("relout"),
		f.uri("dirout/outside.txt"),
		f.uri("dirout/root/a.txt"),
		f.uri("tohidden"),
		f.uri("sub/up/a.txt"),
		f.uri(".env"),
		f.uri(".git/config"),
		rootURI + "/%2Eenv",
		f.uri("sub"),
		rootURI,
		rootURI + "/",
		f.uri("missing.txt"),
	} {
		r := f.rpc(t, mcp.MethodResourcesRead, map[string]any{"uri": uri})
		if r.Error == nil {
			t.Errorf("read %s succeeded: %v", uri, r.Result)
			continue
		}
		if r.Error.Code != jsonrpc.CodeInvalidParams || r.Error.Data["uri"] != uri {
			t.Errorf("read %s: error %d %v, want -32602 with the uri", uri, r.Error.Code, r.Error.Data)
		}
	}
	// The listed files still read fine.
	if r := f.rpc(t, mcp.MethodResourcesRead, map[string]any{"uri": f.uri("sub/b.txt")}); r.Error != nil {
		t.Errorf("sub/b.txt: %v", r.Error)
	}
}

func TestReadTooLarge(t *testing.T) {
	f := newFixture(t, map[string]string{"big.txt": strings.Repeat("x", 100)}, dirsource.WithMaxReadBytes(10))
	r := f.rpc(t, mcp.MethodResourcesRead, map[string]any{"uri": f.uri("big.txt")})
	if r.Error == nil || r.Error.Code != jsonrpc.CodeInternalError {
		t.Fatalf("reading a file over the limit: %+v", r)
	}
}

func TestCreateRemoveRenameChangeTheList(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": "a"})
	f.run(t)
	l := f.listen(t, map[string]any{"resourcesListChanged": true})

	// waitFor waits for list_changed notifications until the list meets ok.
	waitFor := func(what string, ok func([]string) bool) {
		t.Helper()
		deadline := time.Now().Add(wait)
		for !ok(f.listURIs(t)) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: list is %v", what, f.listURIs(t))
			}
			if n := l.next(t); n.Method != mcp.NotifyResourcesListChanged {
				t.Fatalf("got %s, want resources/list_changed", n.Method)
			}
		}
	}

	writeFiles(t, f.root, map[string]string{"new.txt": "new"})
	if n := l.next(t); n.Method != mcp.NotifyResourcesListChanged {
		t.Fatalf("after create: %s", n.Method)
	}
	if !slices.Contains(f.listURIs(t), f.uri("new.txt")) {
		t.Fatalf("new.txt not listed after list_changed: %v", f.listURIs(t))
	}

	// Files created in a new directory before its watch exists are found.
	writeFiles(t, f.root, map[string]string{"dir/deep/x.txt": "x", "dir/y.txt": "y"})
	waitFor("new directory", func(u []string) bool {
		return slices.Contains(u, f.uri("dir/deep/x.txt")) && slices.Contains(u, f.uri("dir/y.txt"))
	})
	// ... and the new directory is watched.
	writeFiles(t, f.root, map[string]string{"dir/deep/z.txt": "z"})
	waitFor("file in new directory", func(u []string) bool { return slices.Contains(u, f.uri("dir/deep/z.txt")) })

	if err := os.Remove(filepath.Join(f.root, "new.txt")); err != nil {
		t.Fatal(err)
	}
	waitFor("remove", func(u []string) bool { return !slices.Contains(u, f.uri("new.txt")) })

	if err := os.Rename(filepath.Join(f.root, "dir"), filepath.Join(f.root, "moved")); err != nil {
		t.Fatal(err)
	}
	waitFor("rename directory", func(u []string) bool {
		return slices.Equal(u, []string{f.uri("a.txt"), f.uri("moved/deep/x.txt"), f.uri("moved/deep/z.txt"), f.uri("moved/y.txt")})
	})

	// Hidden files never show up.
	writeFiles(t, f.root, map[string]string{".swp": "x", "b.txt": "b"})
	waitFor("create b.txt", func(u []string) bool { return slices.Contains(u, f.uri("b.txt")) })
	if slices.Contains(f.listURIs(t), f.uri(".swp")) {
		t.Fatal("hidden file listed")
	}
}

func TestWriteNotifiesSubscribers(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": "a", "b.txt": "b", "c.txt": "c"})
	f.run(t)
	const sentinel = "urn:test:sentinel"
	l := f.listen(t, map[string]any{"resourceSubscriptions": []string{f.uri("a.txt"), f.uri("b.txt"), sentinel}})

	// drain reads updates until the sentinel and returns the URIs seen
	// before it. Publishing the sentinel after the first update proves
	// nothing else was pending.
	drain := func(first note) []string {
		t.Helper()
		seen := []string{first.Params.URI}
		f.srv.ResourceUpdated(sentinel)
		for {
			n := l.next(t)
			if n.Method != mcp.NotifyResourceUpdated {
				t.Fatalf("got %s, want resources/updated", n.Method)
			}
			if n.Params.URI == sentinel {
				return seen
			}
			seen = append(seen, n.Params.URI)
		}
	}
	onlyURI := func(seen []string, want string) {
		t.Helper()
		for _, u := range seen {
			if u != want {
				t.Fatalf("updates %v, want only %s", seen, want)
			}
		}
	}

	writeFiles(t, f.root, map[string]string{"a.txt": "changed"})
	onlyURI(drain(l.next(t)), f.uri("a.txt"))
	if c := f.result(t, mcp.MethodResourcesRead, map[string]any{"uri": f.uri("a.txt")})["contents"].([]any); c[0].(map[string]any)["text"] != "changed" {
		t.Errorf("read after write: %v", c)
	}

	// Writing an unsubscribed file tells this listener nothing.
	writeFiles(t, f.root, map[string]string{"c.txt": "changed"})
	// An editor's atomic save: write elsewhere, rename over the file.
	tmp := filepath.Join(f.root, ".b.txt.tmp")
	if err := os.WriteFile(tmp, []byte("saved"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(f.root, "b.txt")); err != nil {
		t.Fatal(err)
	}
	onlyURI(drain(l.next(t)), f.uri("b.txt"))
}

func TestBurstEndsWithLastState(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": "0"})
	f.run(t)
	l := f.listen(t, map[string]any{"resourcesListChanged": true, "resourceSubscriptions": []string{f.uri("a.txt")}})
	const n = 200
	for i := 1; i <= n; i++ {
		writeFiles(t, f.root, map[string]string{"a.txt": fmt.Sprint(i)})
	}
	// Each notification may be followed by more, but once they stop, what
	// a client reads is the last write: the content, and the size in the
	// list. Until then another notification must come.
	final := func() bool {
		c := f.result(t, mcp.MethodResourcesRead, map[string]any{"uri": f.uri("a.txt")})["contents"].([]any)
		res := f.result(t, mcp.MethodResourcesList, nil)["resources"].([]any)
		return c[0].(map[string]any)["text"] == fmt.Sprint(n) &&
			res[0].(map[string]any)["size"] == float64(len(fmt.Sprint(n)))
	}
	updates := 0
	deadline := time.Now().Add(wait)
	for !final() {
		if time.Now().After(deadline) {
			t.Fatal("never reached the final state")
		}
		switch u := l.next(t); u.Method {
		case mcp.NotifyResourceUpdated:
			updates++
			if u.Params.URI != f.uri("a.txt") {
				t.Fatalf("update for %s", u.Params.URI)
			}
		case mcp.NotifyResourcesListChanged:
		default:
			t.Fatalf("unexpected %s", u.Method)
		}
	}
	t.Logf("%d writes, %d updates seen", n, updates)
}

func TestRunNeedsRegister(t *testing.T) {
	src, err := dirsource.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Run(context.Background()); err == nil {
		t.Fatal("Run before Register succeeded")
	}
	if _, err := dirsource.New(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("New on a missing directory succeeded")
	}
}

type toolResult struct {
	Content []struct {
		Text string `json:"text"`
	} `json:"content"`
	Structured map[string]any `json:"structuredContent"`
	IsError    bool           `json:"isError"`
}

func (f *fixture) tool(t testing.TB, name string, args map[string]any) toolResult {
	t.Helper()
	res := f.result(t, mcp.MethodToolsCall, map[string]any{"name": name, "arguments": args})
	b, _ := json.Marshal(res)
	var tr toolResult
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestTools(t *testing.T) {
	f := newFixture(t, map[string]string{
		"a.txt":       "alpha\nbeta gamma\nALPHA\n",
		"sub/b.go":    "package b\n\nfunc Alpha() {}\n",
		"sub/c.bin":   "alpha\x00",
		".hidden.txt": "alpha",
	})

	r := f.tool(t, "search_files", map[string]any{"query": "alpha"})
	if r.IsError {
		t.Fatalf("search: %v", r.Content)
	}
	matches := r.Structured["matches"].([]any)
	if len(matches) != 1 || r.Structured["truncated"] != false {
		t.Fatalf("substring search: %v", r.Structured)
	}
	m := matches[0].(map[string]any)
	if m["path"] != "a.txt" || m["line"] != 1.0 || m["text"] != "alpha" || m["uri"] != f.uri("a.txt") {
		t.Errorf("match = %v", m)
	}
	if r.Content[0].Text != "a.txt:1: alpha" {
		t.Errorf("text = %q", r.Content[0].Text)
	}

	r = f.tool(t, "search_files", map[string]any{"query": "(?i)^(func )?alpha", "regexp": true})
	var got []string
	for _, m := range r.Structured["matches"].([]any) {
		m := m.(map[string]any)
		got = append(got, fmt.Sprintf("%s:%v", m["path"], m["line"]))
	}
	if want := []string{"a.txt:1", "a.txt:3", "sub/b.go:3"}; !slices.Equal(got, want) {
		t.Errorf("regexp search = %v, want %v", got, want)
	}

	r = f.tool(t, "search_files", map[string]any{"query": "a", "max_results": 2})
	if len(r.Structured["matches"].([]any)) != 2 || r.Structured["truncated"] != true {
		t.Errorf("bounded search = %v", r.Structured)
	}
	if r = f.tool(t, "search_files", map[string]any{"query": "(", "regexp": true}); !r.IsError {
		t.Errorf("bad regexp accepted: %v", r)
	}
	if r = f.tool(t, "search_files", map[string]any{"query": ""}); !r.IsError {
		t.Errorf("empty query accepted: %v", r)
	}

	r = f.tool(t, "file_info", map[string]any{"path": "sub/b.go"})
	if r.IsError || r.Structured["size"] != 27.0 || r.Structured["type"] != "file" || r.Structured["uri"] != f.uri("sub/b.go") || r.Structured["path"] != "sub/b.go" {
		t.Errorf("file_info = %v %v", r.Structured, r.Content)
	}
	fi, err := os.Stat(filepath.Join(f.root, "sub", "b.go"))
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := time.Parse(time.RFC3339Nano, r.Structured["modTime"].(string)); !mt.Equal(fi.ModTime()) {
		t.Errorf("modTime %v, want %v", r.Structured["modTime"], fi.ModTime())
	}
	if r = f.tool(t, "file_info", map[string]any{"path": "sub"}); r.Structured["type"] != "directory" {
		t.Errorf("file_info dir = %v", r.Structured)
	}
	for _, p := range []string{".hidden.txt", "../root/a.txt", "/etc/passwd", "missing", "sub/../../x"} {
		if r = f.tool(t, "file_info", map[string]any{"path": p}); !r.IsError {
			t.Errorf("file_info %q = %v", p, r.Structured)
		}
	}

	r = f.tool(t, "list_directory", map[string]any{})
	if r.IsError {
		t.Fatalf("list_directory: %v", r.Content)
	}
	var names []string
	for _, e := range r.Structured["entries"].([]any) {
		e := e.(map[string]any)
		names = append(names, fmt.Sprintf("%s:%s", e["path"], e["type"]))
	}
	if want := []string{"a.txt:file", "sub:directory"}; !slices.Equal(names, want) {
		t.Errorf("list_directory = %v, want %v", names, want)
	}
	if r = f.tool(t, "list_directory", map[string]any{"path": "sub"}); len(r.Structured["entries"].([]any)) != 2 {
		t.Errorf("list_directory sub = %v", r.Structured)
	}
	if r = f.tool(t, "list_directory", map[string]any{"path": ".."}); !r.IsError {
		t.Errorf("list_directory .. = %v", r.Structured)
	}
}
