package oauth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"
)

func TestFileStoreRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "oauth.json")
	s := NewFileStore(path)
	ctx := t.Context()
	values := map[string][]byte{
		"token https://mcp.example/":  []byte(`{"access_token":"at","refresh_token":"rt","expires_at":"2026-11-30T10:00:00Z"}`),
		"escapes":                     []byte(`{"s":"\u003c\u0041\/","n":1.50,"e":1E3,"a":[]}`),
		"spaced json":                 []byte(`{ "a": 1 }`),
		"binary":                      {0, 0xff, '\n', '"'},
		"empty":                       {},
		"not json":                    []byte(`{"a":`),
		"duplicate names":             []byte(`{"a":1,"a":2}`),
		"client https://as.example/ü": []byte(`"text"`),
	}
	for k, v := range values {
		if err := s.Save(ctx, k, v); err != nil {
			t.Fatalf("Save(%q): %v", k, err)
		}
	}
	// A fresh FileStore reads what the first one wrote.
	s2 := NewFileStore(path)
	for k, want := range values {
		got, err := s2.Load(ctx, k)
		if err != nil {
			t.Fatalf("Load(%q): %v", k, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("Load(%q) = %q, want %q", k, got, want)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// Compact JSON is kept readable, the rest in base64.
	if !strings.Contains(string(b), `"access_token": "at"`) || !strings.Contains(string(b), `"base64": "AP8KIg=="`) {
		t.Errorf("file content:\n%s", b)
	}

	v := []byte(`{"a":1}`)
	if err := s.Save(ctx, "nil", nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Load(ctx, "nil"); err != nil || len(got) != 0 {
		t.Errorf("Load of a nil value: %q, %v", got, err)
	}
	if err := s.Save(ctx, "", v); err == nil {
		t.Error("Save with an empty key accepted")
	}
	if err := s.Save(ctx, "\xff", v); err == nil {
		t.Error("Save with a key that is not UTF-8 accepted")
	}
}

func TestFileStoreAbsent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "oauth.json")
	s := NewFileStore(path)
	if _, err := s.Load(t.Context(), "k"); !errors.Is(err, ErrNotStored) {
		t.Errorf("Load without a file: %v", err)
	}
	if err := s.Delete(t.Context(), "k"); err != nil {
		t.Errorf("Delete without a file: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Delete of nothing wrote the file: %v", err)
	}
	if err := s.Save(t.Context(), "a", []byte("1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(t.Context(), "k"); !errors.Is(err, ErrNotStored) || !strings.Contains(err.Error(), path) {
		t.Errorf("Load of an absent key: %v", err)
	}
	if err := s.Delete(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(t.Context(), "a"); !errors.Is(err, ErrNotStored) {
		t.Errorf("Load after Delete: %v", err)
	}
	// An empty file, as touch leaves it, is an empty store.
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(t.Context(), "a"); !errors.Is(err, ErrNotStored) {
		t.Errorf("Load from an empty file: %v", err)
	}
}

func TestFileStorePermissions(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	dir := filepath.Join(t.TempDir(), "config", "tidings")
	path := filepath.Join(dir, "oauth.json")
	if err := NewFileStore(path).Save(t.Context(), "k", []byte("1")); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{path: 0o600, path + ".lock": 0o600, dir: 0o700, filepath.Dir(dir): 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %04o, want %04o", p, got, want)
		}
	}
}

// A token file others may read is not used, and not written over.
func TestFileStoreRefusesReadableFile(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	path := filepath.Join(t.TempDir(), "oauth.json")
	s := NewFileStore(path)
	if err := s.Save(t.Context(), "k", []byte(`"v"`)); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	for _, mode := range []os.FileMode{0o644, 0o640, 0o606, 0o620} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		_, err := s.Load(t.Context(), "k")
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "chmod 600 "+path) {
			t.Errorf("Load of a %04o file: %v", mode, err)
		}
		if err := s.Save(t.Context(), "k2", []byte("2")); err == nil {
			t.Errorf("Save over a %04o file accepted", mode)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
			t.Errorf("the %04o file was written", mode)
		}
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	if v, err := s.Load(t.Context(), "k"); err != nil || string(v) != `"v"` {
		t.Errorf("Load after chmod 600: %q, %v", v, err)
	}
}

// A file that cannot be read as a store is left alone.
func TestFileStoreCorruptFile(t *testing.T) {
	for name, content := range map[string]string{
		"not json":       `{"version":1,"entries":{"k":`,
		"newer version":  `{"version":2,"entries":{}}`,
		"no version":     `{"entries":{}}`,
		"empty entry":    `{"version":1,"entries":{"k":{}}}`,
		"both encodings": `{"version":1,"entries":{"k":{"json":1,"base64":"AA=="}}}`,
		"bad base64":     `{"version":1,"entries":{"k":{"base64":"!"}}}`,
		"duplicate keys": `{"version":1,"entries":{"k":{"json":1},"k":{"json":2}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "oauth.json")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			s := NewFileStore(path)
			_, err := s.Load(t.Context(), "k")
			if err == nil || errors.Is(err, ErrNotStored) || !strings.Contains(err.Error(), path) {
				t.Errorf("Load: %v", err)
			}
			if err := s.Save(t.Context(), "k", []byte("1")); err == nil {
				t.Error("Save over it accepted")
			}
			if err := s.Delete(t.Context(), "k"); err == nil {
				t.Error("Delete in it accepted")
			}
			if b, _ := os.ReadFile(path); string(b) != content {
				t.Errorf("the file was changed to %q", b)
			}
		})
	}
}

// The file is replaced whole, by a rename: a reader that opened the old
// one reads it to its end, and no temporary file is left.
func TestFileStoreAtomicReplace(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "oauth.json")
	s := NewFileStore(path)
	if err := s.Save(t.Context(), "k", []byte(`"old"`)); err != nil {
		t.Fatal(err)
	}
	old, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	oldInfo, _ := old.Stat()
	if err := s.Save(t.Context(), "k", []byte(`"new"`)); err != nil {
		t.Fatal(err)
	}
	newInfo, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if os.SameFile(oldInfo, newInfo) {
		t.Error("the file was written in place, not replaced")
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(old); err != nil {
		t.Fatal(err)
	}
	if entries, err := decodeStore(buf.Bytes()); err != nil || string(entries["k"]) != `"old"` {
		t.Errorf("the old file reads %q, %v", buf.Bytes(), err)
	}
	names, _ := os.ReadDir(dir)
	var got []string
	for _, n := range names {
		got = append(got, n.Name())
	}
	if want := []string{"oauth.json", "oauth.json.lock"}; !slices.Equal(got, want) && !(runtime.GOOS == "windows" && slices.Equal(got, want[:1])) {
		t.Errorf("directory holds %q, want %q", got, want)
	}
}

// Saves from many goroutines, through one FileStore and through several
// on the same file (as several processes would), all land.
func TestFileStoreConcurrentSaves(t *testing.T) {
	path := filepath.Join(t.TempDir(), "oauth.json")
	stores := []*FileStore{NewFileStore(path)}
	if runtime.GOOS != "windows" && runtime.GOOS != "plan9" {
		// Separate FileStores on one file are kept in order by the
		// file lock alone.
		stores = append(stores, NewFileStore(path), NewFileStore(path))
	}
	const perGoroutine = 15
	var wg sync.WaitGroup
	errs := make(chan error, 2*len(stores)*perGoroutine)
	for i, s := range stores {
		for g := range 2 {
			wg.Go(func() {
				for n := range perGoroutine {
					key := fmt.Sprintf("s%d-g%d-%d", i, g, n)
					if err := s.Save(t.Context(), key, []byte(`"`+key+`"`)); err != nil {
						errs <- err
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	entries, err := NewFileStore(path).read()
	if err != nil {
		t.Fatal(err)
	}
	if want := len(stores) * 2 * perGoroutine; len(entries) != want {
		t.Errorf("%d entries after %d saves", len(entries), want)
	}
}

// While another process holds the lock, Save waits, and gives up when
// its context ends, writing nothing.
func TestFileStoreLockHonoursContext(t *testing.T) {
	if runtime.GOOS == "windows" || runtime.GOOS == "plan9" {
		t.Skip("no lock between processes here")
	}
	path := filepath.Join(t.TempDir(), "oauth.json")
	unlock, err := lockFile(t.Context(), path+".lock")
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := NewFileStore(path).Save(ctx, "k", []byte("1")); !errors.Is(err, context.Canceled) {
		t.Errorf("Save while locked: %v", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file was written while another held the lock: %v", err)
	}
	if _, err := NewFileStore(path).Load(ctx, "k"); !errors.Is(err, context.Canceled) {
		t.Errorf("Load with an ended context: %v", err)
	}
}

func TestDefaultStorePath(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("XDG_CONFIG_HOME is Linux's")
	}
	dir := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", dir)
	got, err := DefaultStorePath()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "tidings", "oauth.json"); got != want {
		t.Errorf("DefaultStorePath() = %q, want %q", got, want)
	}
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("HOME", "")
	if _, err := DefaultStorePath(); err == nil {
		t.Error("DefaultStorePath without a home accepted")
	}
}

func TestMemoryStore(t *testing.T) {
	s := NewMemoryStore()
	ctx := t.Context()
	if _, err := s.Load(ctx, "k"); !errors.Is(err, ErrNotStored) {
		t.Errorf("Load of an absent key: %v", err)
	}
	v := []byte(`{"a":1}`)
	if err := s.Save(ctx, "k", v); err != nil {
		t.Fatal(err)
	}
	v[0] = 'x'
	got, err := s.Load(ctx, "k")
	if err != nil || string(got) != `{"a":1}` {
		t.Errorf("Load = %q, %v", got, err)
	}
	got[0] = 'y'
	if again, _ := s.Load(ctx, "k"); string(again) != `{"a":1}` {
		t.Errorf("Load after the caller changed the last one: %q", again)
	}
	if err := s.Save(ctx, "nil", nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Load(ctx, "nil"); err != nil || len(got) != 0 {
		t.Errorf("Load of a nil value: %q, %v", got, err)
	}
	if err := s.Delete(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(ctx, "k"); !errors.Is(err, ErrNotStored) {
		t.Errorf("Load after Delete: %v", err)
	}
	if err := s.Delete(ctx, "k"); err != nil {
		t.Errorf("Delete of an absent key: %v", err)
	}
}

// Whatever is saved comes back byte for byte.
func FuzzFileStoreEncoding(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{ "a": 1 }`, `"\u0041"`, `1.50`, "\xff", "", `[1,2]`, `null`} {
		f.Add("k", []byte(s))
	}
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		if key == "" || !utf8.ValidString(key) {
			return
		}
		b, err := encodeStore(map[string][]byte{key: value})
		if err != nil {
			t.Fatal(err)
		}
		entries, err := decodeStore(b)
		if err != nil {
			t.Fatalf("decoding %q: %v", b, err)
		}
		if got := entries[key]; !bytes.Equal(got, value) {
			t.Fatalf("saved %q, loaded %q (file %s)", value, got, b)
		}
	})
}
