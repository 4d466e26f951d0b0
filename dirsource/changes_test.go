package dirsource_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"tidings/dirsource"
	"tidings/internal/engine"
	"tidings/internal/legacy"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// updates is a subscription to one URI, in either protocol era: next
// returns once the server has said the URI changed.
type updates interface{ next(t testing.TB) }

// listenUpdates subscribes with subscriptions/listen (2026-07-28).
type listenUpdates struct {
	l   *listener
	uri string
}

func (u listenUpdates) next(t testing.TB) {
	t.Helper()
	for {
		n := u.l.next(t)
		if n.Method == mcp.NotifyResourceUpdated && n.Params.URI == u.uri {
			return
		}
	}
}

// sessionStream is a 2025-11-25 session's stream of notifications.
type sessionStream struct {
	mu   sync.Mutex
	msgs [][]byte
	poke chan struct{}
}

func (s *sessionStream) Send(b []byte) error {
	s.mu.Lock()
	s.msgs = append(s.msgs, bytes.Clone(b))
	s.mu.Unlock()
	select {
	case s.poke <- struct{}{}:
	default:
	}
	return nil
}

func (s *sessionStream) KeepAlive() error { return nil }

// legacyUpdates subscribes with resources/subscribe on a 2025-11-25
// session and reads its stream.
type legacyUpdates struct {
	st   *sessionStream
	uri  string
	seen *int
}

func (u legacyUpdates) next(t testing.TB) {
	t.Helper()
	deadline := time.After(wait)
	for {
		u.st.mu.Lock()
		msgs := u.st.msgs[*u.seen:]
		u.st.mu.Unlock()
		for _, b := range msgs {
			*u.seen++
			var n note
			if err := json.Unmarshal(b, &n); err != nil {
				t.Fatalf("%v: %s", err, b)
			}
			if n.Method == mcp.NotifyResourceUpdated && n.Params.URI == u.uri {
				return
			}
		}
		select {
		case <-u.st.poke:
		case <-deadline:
			t.Fatal("no resources/updated in time")
		}
	}
}

// legacyCall parses a 2025-11-25 request, which carries no _meta.
func legacyCall(t testing.TB, id int, method string, params map[string]any) *engine.Call {
	t.Helper()
	b, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
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

// subscribeLegacy opens a 2025-11-25 session with its stream and
// subscribes to uri.
func (f *fixture) subscribeLegacy(t testing.TB, uri string) updates {
	t.Helper()
	ss, rep := legacy.Open(context.Background(), engine.Of(f.srv), legacyCall(t, 0, mcp.MethodInitialize, map[string]any{
		"protocolVersion": mcp.LegacyVersion,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "test", "version": "1"},
	}), "")
	if ss == nil {
		t.Fatalf("initialize: %s", rep.Body)
	}
	st := &sessionStream{poke: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- ss.Stream(ctx, st, func() error { close(started); return nil }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("session stream: %v", err)
		}
		ss.End()
	})
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("session stream ended: %v", err)
	case <-time.After(wait):
		t.Fatal("session stream did not open")
	}
	r := ss.Serve(context.Background(), legacyCall(t, 1, mcp.MethodResourcesSubscribe, map[string]any{"uri": uri}), st)
	if !bytes.Contains(r.Body, []byte(`"result"`)) {
		t.Fatalf("resources/subscribe: %s", r.Body)
	}
	return legacyUpdates{st: st, uri: uri, seen: new(int)}
}

// eras are the ways a client can be told of a resource's changes.
var eras = []struct {
	name      string
	subscribe func(t *testing.T, f *fixture, uri string) updates
}{
	{"2026-07-28", func(t *testing.T, f *fixture, uri string) updates {
		return listenUpdates{l: f.listen(t, map[string]any{"resourceSubscriptions": []string{uri}}), uri: uri}
	}},
	{"2025-11-25", func(t *testing.T, f *fixture, uri string) updates { return f.subscribeLegacy(t, uri) }},
}

// readState is what resources/read and resources/list say of one file:
// its text, or "missing"; and whether it is listed.
func (f *fixture) readState(t testing.TB, rel string) (text string, listed bool) {
	t.Helper()
	r := f.rpc(t, mcp.MethodResourcesRead, map[string]any{"uri": f.uri(rel)})
	switch {
	case r.Error != nil && r.Error.Code == jsonrpc.CodeInvalidParams:
		text = "missing"
	case r.Error != nil:
		text = "error: " + r.Error.Message
	default:
		text = r.Result["contents"].([]any)[0].(map[string]any)["text"].(string)
	}
	return text, slices.Contains(f.allURIs(t), f.uri(rel))
}

// allURIs returns every URI of resources/list, following the cursor.
func (f *fixture) allURIs(t testing.TB) []string {
	t.Helper()
	var uris []string
	params := map[string]any{}
	for {
		res := f.result(t, mcp.MethodResourcesList, params)
		for _, r := range res["resources"].([]any) {
			uris = append(uris, r.(map[string]any)["uri"].(string))
		}
		c, ok := res["nextCursor"].(string)
		if !ok {
			return uris
		}
		params = map[string]any{"cursor": c}
	}
}

// untilState waits for updates of rel until reads say want (text,
// "missing", or "error: " and the message) and the list agrees: only
// files that read are listed. Every intermediate state must be
// followed by another update: the last change is never lost.
func (f *fixture) untilState(t testing.TB, u updates, rel, want string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		u.next(t)
		text, listed := f.readState(t, rel)
		if text == want && listed == (want != "missing" && !strings.HasPrefix(want, "error: ")) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: read %q, listed %v; want %q", rel, text, listed, want)
		}
	}
}

func mustDo(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestEveryChangeIsTold(t *testing.T) {
	type env struct{ root, base string }
	at := func(e env, rel string) string { return filepath.Join(e.root, filepath.FromSlash(rel)) }
	cases := []struct {
		name  string
		files map[string]string
		watch string // the file subscribed to
		op    func(t *testing.T, e env)
		want  string // what a read says afterwards
	}{
		{"create", nil, "new.txt", func(t *testing.T, e env) {
			writeFiles(t, e.root, map[string]string{"new.txt": "new"})
		}, "new"},
		{"create in a new directory", nil, "d/e/new.txt", func(t *testing.T, e env) {
			writeFiles(t, e.root, map[string]string{"d/e/new.txt": "deep"})
		}, "deep"},
		{"write", map[string]string{"a.txt": "one"}, "a.txt", func(t *testing.T, e env) {
			mustDo(t, os.WriteFile(at(e, "a.txt"), []byte("two"), 0o644))
		}, "two"},
		{"truncate", map[string]string{"a.txt": "some text"}, "a.txt", func(t *testing.T, e env) {
			mustDo(t, os.Truncate(at(e, "a.txt"), 0))
		}, ""},
		{"delete", map[string]string{"a.txt": "a"}, "a.txt", func(t *testing.T, e env) {
			mustDo(t, os.Remove(at(e, "a.txt")))
		}, "missing"},
		{"rename onto", map[string]string{"a.txt": "old", "b.txt": "new"}, "a.txt", func(t *testing.T, e env) {
			mustDo(t, os.Rename(at(e, "b.txt"), at(e, "a.txt")))
		}, "new"},
		{"rename onto, same size and time", map[string]string{"a.txt": "old", ".b.txt": "new"}, "a.txt", func(t *testing.T, e env) {
			fi, err := os.Stat(at(e, "a.txt"))
			mustDo(t, err)
			mustDo(t, os.Chtimes(at(e, ".b.txt"), fi.ModTime(), fi.ModTime()))
			mustDo(t, os.Rename(at(e, ".b.txt"), at(e, "a.txt")))
		}, "new"},
		{"rename away", map[string]string{"a.txt": "a"}, "a.txt", func(t *testing.T, e env) {
			mustDo(t, os.Rename(at(e, "a.txt"), at(e, "b.txt")))
		}, "missing"},
		{"rename in from a new name", map[string]string{"a.txt": "a"}, "b.txt", func(t *testing.T, e env) {
			mustDo(t, os.Rename(at(e, "a.txt"), at(e, "b.txt")))
		}, "a"},
		{"move in from outside", nil, "in.txt", func(t *testing.T, e env) {
			writeFiles(t, e.base, map[string]string{"out.txt": "came in"})
			mustDo(t, os.Rename(filepath.Join(e.base, "out.txt"), at(e, "in.txt")))
		}, "came in"},
		{"move out", map[string]string{"a.txt": "a"}, "a.txt", func(t *testing.T, e env) {
			mustDo(t, os.Rename(at(e, "a.txt"), filepath.Join(e.base, "a.txt")))
		}, "missing"},
		{"hide", map[string]string{"a.txt": "a"}, "a.txt", func(t *testing.T, e env) {
			mustDo(t, os.Rename(at(e, "a.txt"), at(e, ".a.txt")))
		}, "missing"},
		{"replace by a symbolic link", map[string]string{"a.txt": "a", "b.txt": "b"}, "a.txt", func(t *testing.T, e env) {
			mustDo(t, os.Remove(at(e, "a.txt")))
			mustDo(t, os.Symlink("b.txt", at(e, "a.txt")))
		}, "missing"},
		{"remove directory", map[string]string{"d/e/a.txt": "a"}, "d/e/a.txt", func(t *testing.T, e env) {
			mustDo(t, os.RemoveAll(at(e, "d")))
		}, "missing"},
		{"rename directory away", map[string]string{"d/a.txt": "a"}, "d/a.txt", func(t *testing.T, e env) {
			mustDo(t, os.Rename(at(e, "d"), at(e, "moved")))
		}, "missing"},
		{"rename directory onto the name", map[string]string{"d/a.txt": "a"}, "moved/a.txt", func(t *testing.T, e env) {
			mustDo(t, os.Rename(at(e, "d"), at(e, "moved")))
		}, "a"},
		{"directory replaced by a file", map[string]string{"d/a.txt": "a"}, "d/a.txt", func(t *testing.T, e env) {
			mustDo(t, os.RemoveAll(at(e, "d")))
			mustDo(t, os.WriteFile(at(e, "d"), []byte("file"), 0o644))
		}, "missing"},
	}
	for _, era := range eras {
		t.Run(era.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					f := newFixture(t, c.files)
					f.run(t)
					u := era.subscribe(t, f, f.uri(c.watch))
					c.op(t, env{root: f.root, base: f.base})
					f.untilState(t, u, c.watch, c.want)
				})
			}
		})
	}
}

func TestRootVanishesAndComesBack(t *testing.T) {
	for _, era := range eras {
		t.Run(era.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, map[string]string{"a.txt": "first", "d/b.txt": "b"})
			f.run(t)
			u := era.subscribe(t, f, f.uri("a.txt"))

			mustDo(t, os.RemoveAll(f.root))
			f.untilState(t, u, "a.txt", "missing")
			if got := f.allURIs(t); len(got) != 0 {
				t.Fatalf("list while the directory is gone: %v", got)
			}
			writeFiles(t, f.root, map[string]string{"a.txt": "second"})
			f.untilState(t, u, "a.txt", "second")

			// Moved away: the watch must not follow the old directory.
			mustDo(t, os.Rename(f.root, f.root+".old"))
			f.untilState(t, u, "a.txt", "missing")
			writeFiles(t, f.root+".old", map[string]string{"a.txt": "in the old one"})
			mustDo(t, os.Mkdir(f.root, 0o755))
			writeFiles(t, f.root, map[string]string{"a.txt": "third"})
			f.untilState(t, u, "a.txt", "third")

			// The parent renamed: the path now leads nowhere, although
			// nothing happened to the watched directory itself.
			parent := f.base
			mustDo(t, os.Rename(parent, parent+".moved"))
			f.untilState(t, u, "a.txt", "missing")
			mustDo(t, os.Rename(parent+".moved", parent))
			f.untilState(t, u, "a.txt", "third")
			// ... and it is watched again.
			writeFiles(t, f.root, map[string]string{"a.txt": "fourth"})
			f.untilState(t, u, "a.txt", "fourth")
		})
	}
}

func TestRootGoneForGood(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": "a"}, dirsource.WithRootGrace(100*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- f.src.Run(ctx) }()
	select {
	case <-f.src.Ready():
	case <-time.After(wait):
		t.Fatal("Run not ready")
	}
	mustDo(t, os.RemoveAll(f.base))
	select {
	case err := <-done:
		if !errors.Is(err, dirsource.ErrRootGone) || !strings.Contains(err.Error(), f.root) {
			t.Fatalf("Run = %v, want ErrRootGone naming the directory", err)
		}
	case <-time.After(wait):
		t.Fatal("Run did not give up on a directory gone for good")
	}
	if got := f.allURIs(t); len(got) != 0 {
		t.Errorf("list after the directory is gone: %v", got)
	}
}
