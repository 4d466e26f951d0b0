package oauth

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// maxStoreFile bounds the store file read: a few clients and tokens per
// server take a few kilobytes.
const maxStoreFile = 8 << 20

// storeVersion is the format of the store file, written as "version".
const storeVersion = 1

// FileStore is a Store kept in one JSON file, for command-line hosts: a
// later run finds the clients registered and the tokens held, and does
// not send the user through the browser again.
//
// The file is private. It is created with mode 0600, in a directory
// created with mode 0700; a file that group or others may read (or
// write) is refused on Unix, by Load and Save alike, with an error that
// names it and says to chmod 600 it: its tokens may be known to others
// already, and the user should decide, not the program.
//
// Every change rewrites the whole file atomically: a temporary file in
// the same directory is written, synced and renamed over it, and the
// directory is synced, so a crash leaves the old file or the new one,
// never a mix. Changes are made one at a time by a read-modify-write, so
// none is lost: among goroutines by the FileStore itself, and among
// FileStores and processes, on Unix, by an advisory flock(2) on PATH.lock
// (left in place: removing it would let two processes lock two files).
// Elsewhere only one FileStore per file should be used at a time.
//
// A file that cannot be parsed is never overwritten: Load, Save and
// Delete fail with an error naming it until it is repaired or removed.
//
// Values that are compact JSON (as a flow's are) are kept as JSON, so
// the file can be read with jq; any other value is kept in base64. Load
// returns exactly the bytes saved.
type FileStore struct {
	path string
	// turn is held by the one read-modify-write of this FileStore under
	// way; a channel so waiting for it honours ctx.
	turn chan struct{}
}

// NewFileStore returns a FileStore kept at path. Nothing is created
// until the first Save.
func NewFileStore(path string) *FileStore {
	return &FileStore{path: path, turn: make(chan struct{}, 1)}
}

// DefaultStorePath is where a command-line host keeps its store unless
// told otherwise: tidings/oauth.json under the user's configuration
// directory (os.UserConfigDir: $XDG_CONFIG_HOME or ~/.config on Linux).
func DefaultStorePath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("oauth: finding a place for the token store: %w", err)
	}
	return filepath.Join(dir, "tidings", "oauth.json"), nil
}

// Load returns the value saved under key, or an error wrapping
// ErrNotStored when there is none (or no file yet).
func (s *FileStore) Load(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("oauth: loading %q: %w", key, err)
	}
	// No lock: the file is only ever replaced whole, by a rename.
	entries, err := s.read()
	if err != nil {
		return nil, err
	}
	v, ok := entries[key]
	if !ok {
		return nil, fmt.Errorf("oauth: %s has nothing under %q: %w", s.path, key, ErrNotStored)
	}
	return v, nil
}

// Save stores value under key, replacing what was there, and rewrites
// the file. key must be valid UTF-8 and not empty.
func (s *FileStore) Save(ctx context.Context, key string, value []byte) error {
	if key == "" || !utf8.ValidString(key) {
		return fmt.Errorf("oauth: store key %q: want a non-empty UTF-8 string", key)
	}
	return s.update(ctx, func(entries map[string][]byte) bool {
		entries[key] = value // encoded before Save returns
		return true
	})
}

// Delete forgets key, rewriting the file if it held key.
func (s *FileStore) Delete(ctx context.Context, key string) error {
	return s.update(ctx, func(entries map[string][]byte) bool {
		if _, ok := entries[key]; !ok {
			return false
		}
		delete(entries, key)
		return true
	})
}

// update runs one read-modify-write: change edits the entries and says
// whether anything changed, and the file is rewritten if so.
func (s *FileStore) update(ctx context.Context, change func(map[string][]byte) bool) error {
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("oauth: waiting to update %s: %w", s.path, ctx.Err())
	}
	defer func() { <-s.turn }()
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("oauth: creating the token store's directory: %w", err)
	}
	unlock, err := lockFile(ctx, s.path+".lock")
	if err != nil {
		return fmt.Errorf("oauth: locking %s: %w", s.path, err)
	}
	defer unlock()
	entries, err := s.read()
	if err != nil {
		return err
	}
	if !change(entries) {
		return nil
	}
	b, err := encodeStore(entries)
	if err != nil {
		return fmt.Errorf("oauth: encoding %s: %w", s.path, err)
	}
	return writeAtomic(s.path, b)
}

// read returns the entries of the file: none when it does not exist.
func (s *FileStore) read() (map[string][]byte, error) {
	f, err := os.Open(s.path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string][]byte{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("oauth: opening the token store: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("oauth: opening the token store: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("oauth: %s is not a regular file", s.path)
	}
	if err := checkPrivate(s.path, fi); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, maxStoreFile+1))
	if err != nil {
		return nil, fmt.Errorf("oauth: reading %s: %w", s.path, err)
	}
	if len(b) > maxStoreFile {
		return nil, fmt.Errorf("oauth: %s is larger than %d bytes; it is not a token store: move it away or remove it", s.path, maxStoreFile)
	}
	entries, err := decodeStore(b)
	if err != nil {
		return nil, fmt.Errorf("oauth: %s is not a token store this program can read (%w); it is left as it is: repair it, or move it away or remove it to start afresh", s.path, err)
	}
	return entries, nil
}

// writeAtomic replaces path with b, mode 0600, so that a reader or a
// crash sees either the old file or the new one.
func writeAtomic(path string, b []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp") // mode 0600
	if err != nil {
		return fmt.Errorf("oauth: writing the token store: %w", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o600); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("oauth: writing the token store: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		return fmt.Errorf("oauth: writing the token store: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("oauth: writing the token store: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("oauth: writing the token store: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("oauth: replacing %s: %w", path, err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("oauth: replacing %s: %w", path, err)
	}
	return nil
}

// storeFile is the store file's content.
type storeFile struct {
	Version int                   `json:"version"`
	Entries map[string]storeEntry `json:"entries"`
}

// storeEntry is one value: JSON as it is when it is compact JSON, else
// base64.
type storeEntry struct {
	JSON   jsontext.Value `json:"json,omitzero"`
	Base64 *[]byte        `json:"base64,omitzero"`
}

// encodeStore lays the entries out as an indented, sorted document.
func encodeStore(entries map[string][]byte) ([]byte, error) {
	doc := storeFile{Version: storeVersion, Entries: make(map[string]storeEntry, len(entries))}
	for k, v := range entries {
		if isCompactJSON(v) {
			doc.Entries[k] = storeEntry{JSON: jsontext.Value(v)}
		} else {
			doc.Entries[k] = storeEntry{Base64: &v}
		}
	}
	b, err := json.Marshal(doc, json.Deterministic(true), jsontext.WithIndent("  "), jsontext.PreserveRawStrings(true))
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// isCompactJSON reports whether v is one valid JSON value (RFC 8259, no
// duplicate names, UTF-8) without any whitespace that compacting would
// drop: such a value comes back byte for byte after indenting.
func isCompactJSON(v []byte) bool {
	if !jsontext.Value(v).IsValid() {
		return false
	}
	c := jsontext.Value(bytes.Clone(v))
	return c.Compact() == nil && bytes.Equal(c, v)
}

// decodeStore is encodeStore's inverse; an empty file is an empty store.
func decodeStore(b []byte) (map[string][]byte, error) {
	entries := map[string][]byte{}
	if len(bytes.TrimSpace(b)) == 0 {
		return entries, nil
	}
	var doc storeFile
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, err
	}
	if doc.Version != storeVersion {
		return nil, fmt.Errorf("format version %d, want %d", doc.Version, storeVersion)
	}
	for k, e := range doc.Entries {
		switch {
		case e.JSON != nil && e.Base64 == nil:
			v := e.JSON.Clone()
			if err := v.Compact(); err != nil {
				return nil, fmt.Errorf("entry %q: %w", k, err)
			}
			entries[k] = v
		case e.JSON == nil && e.Base64 != nil:
			entries[k] = *e.Base64
		default:
			return nil, fmt.Errorf("entry %q: want one of json and base64", k)
		}
	}
	return entries, nil
}

// MemoryStore is a Store that keeps its values in memory only: for hosts
// that must not write tokens to disk, and for tests. A process that ends
// forgets everything, so its next run authorizes again.
type MemoryStore struct {
	mu sync.Mutex
	m  map[string][]byte
}

// NewMemoryStore returns an empty MemoryStore.
func NewMemoryStore() *MemoryStore { return &MemoryStore{m: map[string][]byte{}} }

// Load returns a copy of the value saved under key, or an error wrapping
// ErrNotStored.
func (s *MemoryStore) Load(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[key]
	if !ok {
		return nil, fmt.Errorf("oauth: nothing in memory under %q: %w", key, ErrNotStored)
	}
	return bytes.Clone(v), nil
}

// Save keeps a copy of value under key.
func (s *MemoryStore) Save(_ context.Context, key string, value []byte) error {
	v := bytes.Clone(value)
	if v == nil {
		v = []byte{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m[key] = v
	return nil
}

// Delete forgets key.
func (s *MemoryStore) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, key)
	return nil
}

var (
	_ Store = (*FileStore)(nil)
	_ Store = (*MemoryStore)(nil)
)
