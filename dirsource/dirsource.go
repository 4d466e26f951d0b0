// Package dirsource serves a directory tree as live MCP resources.
//
// Every regular file under the directory (recursively, hidden files and
// directories excluded) is a resource whose URI is its canonical file://
// URL. Run watches the tree with fsnotify: when a file is written, readers
// subscribed to its URI get notifications/resources/updated; when files
// appear, disappear or are renamed, the resource list changes and
// listeners get notifications/resources/list_changed. Bursts of events for
// one file (an editor saving in several writes, a build rewriting a file)
// are coalesced; the file's state when the burst ends is what counts, so
// the last change is never lost. A write that changes a file's size also
// changes its entry in the list (which carries the size), so list
// listeners hear of it too.
//
// Reads never leave the directory: a URI must be the canonical spelling of
// a path inside it, hidden components and ".." are refused, symbolic links
// are neither listed nor followed, and the file is opened through an
// os.Root, so even a link swapped in between the check and the open cannot
// lead outside the directory.
package dirsource

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"mime"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

type config struct {
	coalesce  time.Duration
	maxRead   int64
	maxSearch int64
	maxFiles  int
	logger    *slog.Logger
	noTools   bool
}

// Option configures a Source.
type Option func(*config)

// WithCoalesceWindow sets how long events are gathered before they are
// acted on (default 25ms). Longer windows merge more of a burst into one
// notification; the delay of every notification grows by the same amount.
func WithCoalesceWindow(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.coalesce = d
		}
	}
}

// WithMaxReadBytes bounds the size of a file that resources/read returns
// (default 8 MiB). Larger files stay listed, but reading them fails, so a
// stray disk image cannot exhaust memory.
func WithMaxReadBytes(n int64) Option {
	return func(c *config) {
		if n > 0 {
			c.maxRead = n
		}
	}
}

// WithMaxFiles bounds how many files are listed (default 10000). Files
// beyond the bound are left out with a warning; the limit keeps memory and
// list sizes predictable when pointed at a huge tree by mistake.
func WithMaxFiles(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.maxFiles = n
		}
	}
}

// WithLogger sets where the source logs (default slog.Default).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithoutTools stops Register from adding the search_files, file_info and
// list_directory tools, for servers that serve several directories (tool
// names are unique per server) or want resources only.
func WithoutTools() Option { return func(c *config) { c.noTools = true } }

// fileMeta is what the source remembers of a listed file.
type fileMeta struct {
	size int64
	mod  time.Time
	mime string
}

// Source serves one directory. Create it with New, attach it to a server
// with Register, then keep it live with Run.
type Source struct {
	root    string // absolute, clean, symbolic links resolved
	rootURI string
	cfg     config
	log     *slog.Logger
	ready   chan struct{}
	started atomic.Bool

	mu    sync.Mutex
	srv   *server.Server
	files map[string]fileMeta // by slash-separated path relative to root
}

// New returns a source for dir, which must be an existing directory. The
// directory's own path is resolved once, so URIs stay the same even if a
// symbolic link to it is later changed.
func New(dir string, opts ...Option) (*Source, error) {
	cfg := config{coalesce: 25 * time.Millisecond, maxRead: 8 << 20, maxSearch: 1 << 20, maxFiles: 10000}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("dirsource: %w", err)
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("dirsource: %w", err)
	}
	fi, err := os.Stat(resolved)
	if err != nil {
		return nil, fmt.Errorf("dirsource: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("dirsource: %s is not a directory", dir)
	}
	return &Source{
		root:    resolved,
		rootURI: fileURI(resolved),
		cfg:     cfg,
		log:     cfg.logger.With("dir", resolved),
		ready:   make(chan struct{}),
		files:   map[string]fileMeta{},
	}, nil
}

// Root returns the directory served, as an absolute path with symbolic
// links resolved.
func (s *Source) Root() string { return s.root }

// URI returns the resource URI of a slash-separated path relative to the
// root.
func (s *Source) URI(rel string) string {
	if rel == "" {
		return s.rootURI
	}
	return fileURI(filepath.Join(s.root, filepath.FromSlash(rel)))
}

// Template returns the URI template registered for reads of files that
// are not (yet) listed.
func (s *Source) Template() string {
	// The root URI is percent-encoded, and RFC 6570 literals may hold
	// percent-encoded octets, so it can be used as is.
	if strings.HasSuffix(s.rootURI, "/") { // the root is "/" itself
		return s.rootURI + "{+path}"
	}
	return s.rootURI + "/{+path}"
}

// Ready is closed once Run watches the whole tree and the resource list
// matches the directory. Changes made after that are always reported.
func (s *Source) Ready() <-chan struct{} { return s.ready }

// Register scans the directory and registers its files, a resource
// template covering the directory, and (unless WithoutTools) the tools on
// srv. A source serves one server.
func (s *Source) Register(srv *server.Server) error {
	if srv == nil {
		return errors.New("dirsource: nil server")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("dirsource: already registered")
	}
	found, err := s.scan("", nil)
	if err != nil {
		return err
	}
	err = srv.AddResourceTemplate(mcp.ResourceTemplate{
		URITemplate: s.Template(),
		Name:        "files",
		Title:       "Files under " + s.root,
		Description: "Any regular, non-hidden file under " + s.root + ", by absolute path.",
	}, s.read)
	if err != nil {
		return fmt.Errorf("dirsource: %w", err)
	}
	if !s.cfg.noTools {
		if err := s.addTools(srv); err != nil {
			return err
		}
	}
	s.srv = srv
	s.commitLocked(nil, []subtreeObs{{found: found}})
	return nil
}

// read serves resources/read for listed files and for the template.
func (s *Source) read(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
	rel, ok := s.relFromURI(req.URI)
	if !ok {
		return nil, server.ErrResourceNotFound
	}
	data, _, err := s.readFile(rel, s.cfg.maxRead)
	if errors.Is(err, errTooLarge) {
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "Resource too large",
			map[string]any{"uri": req.URI, "limit": s.cfg.maxRead})
	}
	if err != nil {
		s.log.Debug("dirsource: read refused", "uri", req.URI, "err", err)
		return nil, server.ErrResourceNotFound
	}
	mt := mimeType(rel, data)
	var c mcp.ResourceContents
	if looksText(data, false) {
		c = mcp.TextContents(req.URI, mt, string(data))
	} else {
		c = mcp.BlobContents(req.URI, mt, base64.StdEncoding.EncodeToString(data))
	}
	return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{c}}, nil
}

// relFromURI maps a URI to a path relative to the root, refusing anything
// that is not the canonical URI of a non-hidden path strictly inside it.
func (s *Source) relFromURI(uri string) (string, bool) {
	abs, ok := pathFromURI(uri)
	if !ok {
		return "", false
	}
	r, err := filepath.Rel(s.root, abs)
	if err != nil || !filepath.IsLocal(r) {
		return "", false
	}
	rel := filepath.ToSlash(r)
	if hidden(rel) {
		return "", false
	}
	return rel, true
}

var (
	errTooLarge = errors.New("file too large")
	errLink     = errors.New("path goes through a symbolic link")
	errNotFile  = errors.New("not a regular file")
)

// resolve checks that no component of rel is a symbolic link. Links are
// not served at all, not even those that stay inside the root: a file
// reachable under two URIs would be notified under one only, and a
// client subscribed to the other would never hear of its changes. The
// os.Root used to open the file enforces containment once more, without
// the race between this check and the open.
func (s *Source) resolve(rel string) error {
	abs := filepath.Join(s.root, filepath.FromSlash(rel))
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return err
	}
	if resolved != abs {
		return errLink
	}
	return nil
}

// open opens rel (already validated by cleanRel or relFromURI) inside the
// root. The caller closes both the root and the file.
func (s *Source) open(rel string) (*os.Root, *os.File, error) {
	if err := s.resolve(rel); err != nil {
		return nil, nil, err
	}
	root, err := os.OpenRoot(s.root)
	if err != nil {
		return nil, nil, err
	}
	name := "."
	if rel != "" {
		name = filepath.FromSlash(rel)
	}
	f, err := openServable(root, name, true)
	if err != nil {
		root.Close()
		return nil, nil, err
	}
	return root, f, nil
}

// servable reports whether a file of mode m may be opened: regular files
// always, directories when allowDir is set. Named pipes, devices and
// sockets never are: opening or reading them can block forever, pinning a
// goroutine and an OS thread per request.
func servable(m fs.FileMode, allowDir bool) bool {
	return m.IsRegular() || allowDir && m.IsDir()
}

// openServable opens name inside root only if it is servable. The type is
// checked with Lstat before the open, the open does not block (openFlags),
// and the type of what was actually opened is checked once more, so a
// named pipe swapped in between the two steps is refused too.
func openServable(root *os.Root, name string, allowDir bool) (*os.File, error) {
	fi, err := root.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !servable(fi.Mode(), allowDir) {
		return nil, errNotFile
	}
	f, err := root.OpenFile(name, openFlags, 0)
	if err != nil {
		return nil, err
	}
	fi, err = f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !servable(fi.Mode(), allowDir) {
		f.Close()
		return nil, errNotFile
	}
	return f, nil
}

// readFile reads a regular file of at most limit bytes.
func (s *Source) readFile(rel string, limit int64) ([]byte, fs.FileInfo, error) {
	root, f, err := s.open(rel)
	if err != nil {
		return nil, nil, err
	}
	defer root.Close()
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, errNotFile
	}
	if fi.Size() > limit {
		return nil, nil, errTooLarge
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, nil, err
	}
	if int64(len(data)) > limit {
		return nil, nil, errTooLarge
	}
	return data, fi, nil
}

// relOf returns the slash-separated path of abs relative to the root, and
// false when abs is outside it.
func (s *Source) relOf(abs string) (string, bool) {
	r, err := filepath.Rel(s.root, abs)
	if err != nil || !filepath.IsLocal(r) && r != "." {
		return "", false
	}
	if r == "." {
		return "", true
	}
	return filepath.ToSlash(r), true
}

// metaOf describes a regular file; only names without a known extension
// cost a read of their first bytes.
func (s *Source) metaOf(root *os.Root, rel string, fi fs.FileInfo) fileMeta {
	m := fileMeta{size: fi.Size(), mod: fi.ModTime()}
	var head []byte
	if mime.TypeByExtension(filepath.Ext(rel)) == "" {
		if f, err := openServable(root, filepath.FromSlash(rel), false); err == nil {
			buf := make([]byte, 512)
			n, _ := io.ReadFull(f, buf)
			head = buf[:n]
			f.Close()
		}
	}
	m.mime = mimeType(rel, head)
	return m
}

// adder is what scan calls for every directory it enters, to watch it.
type adder interface{ Add(string) error }

// scan walks the subtree at relDir and returns its listable files. Every
// directory is handed to w (when not nil) before its entries are read, so
// a file created during the walk is either seen by the walk or reported
// by the watcher.
func (s *Source) scan(relDir string, w adder) (map[string]fileMeta, error) {
	root, err := os.OpenRoot(s.root)
	if err != nil {
		return nil, fmt.Errorf("dirsource: %w", err)
	}
	defer root.Close()
	start := filepath.Join(s.root, filepath.FromSlash(relDir))
	found := map[string]fileMeta{}
	err = filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		rel, ok := s.relOf(p)
		if !ok {
			return filepath.SkipDir
		}
		if err != nil {
			if p == start {
				return err
			}
			s.log.Warn("dirsource: skipping unreadable entry", "path", rel, "err", err)
			if d != nil && d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if rel != "" && hidden(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir():
			if w != nil {
				if err := w.Add(p); err != nil {
					if p == s.root {
						return err
					}
					s.log.Warn("dirsource: cannot watch directory; its changes will be missed", "path", rel, "err", err)
				}
			}
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				return nil // removed meanwhile
			}
			found[rel] = s.metaOf(root, rel, fi)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dirsource: scan %s: %w", start, err)
	}
	return found, nil
}

// fileObs is the state of one file seen after an event. content is set
// when the event may have changed its bytes (not for a mere chmod).
type fileObs struct {
	rel     string
	meta    fileMeta
	content bool
}

// subtreeObs is the complete set of files under prefix ("" for the whole
// tree): listed files under it that are missing from found are gone. With
// assumeChanged, every file found is treated as rewritten (after events
// were lost).
type subtreeObs struct {
	prefix        string
	found         map[string]fileMeta
	assumeChanged bool
}

func under(rel, prefix string) bool {
	return prefix == "" || rel == prefix || strings.HasPrefix(rel, prefix+"/")
}

// commitLocked brings the registry in line with what was observed: one
// batch of removals, one of additions, then resources/updated for files
// whose content changed. The registry publishes list changes itself.
func (s *Source) commitLocked(files []fileObs, trees []subtreeObs) {
	put := map[string]fileMeta{}
	changed := map[string]bool{}
	gone := map[string]bool{}
	see := func(rel string, m fileMeta, content bool) {
		delete(gone, rel)
		old, ok := s.files[rel]
		if !ok || old.size != m.size || old.mime != m.mime {
			put[rel] = m
		} else {
			s.files[rel] = m
		}
		if ok && (content || old.size != m.size || !old.mod.Equal(m.mod)) {
			changed[rel] = true
		}
	}
	for _, t := range trees {
		for rel := range s.files {
			if under(rel, t.prefix) {
				if _, ok := t.found[rel]; !ok {
					gone[rel] = true
				}
			}
		}
		for rel, m := range t.found {
			see(rel, m, t.assumeChanged)
		}
	}
	for _, f := range files {
		see(f.rel, f.meta, f.content)
	}

	if len(gone) > 0 {
		uris := make([]string, 0, len(gone))
		for rel := range gone {
			uris = append(uris, s.URI(rel))
			delete(s.files, rel)
			delete(changed, rel)
		}
		s.srv.RemoveResources(uris...)
	}
	if len(put) > 0 {
		rels := slices.Sorted(maps.Keys(put))
		res := make([]mcp.Resource, 0, len(rels))
		skipped := 0
		for _, rel := range rels {
			if _, listed := s.files[rel]; !listed && len(s.files) >= s.cfg.maxFiles {
				skipped++
				delete(changed, rel)
				continue
			}
			m := put[rel]
			s.files[rel] = m
			size := m.size
			res = append(res, mcp.Resource{URI: s.URI(rel), Name: rel, MimeType: m.mime, Size: &size})
		}
		if skipped > 0 {
			s.log.Warn("dirsource: file limit reached; files left out", "limit", s.cfg.maxFiles, "skipped", skipped)
		}
		if err := s.srv.AddResources(res, s.read); err != nil {
			s.log.Error("dirsource: registering files", "err", err)
		}
	}
	for rel := range changed {
		s.srv.ResourceUpdated(s.URI(rel))
	}
}

func (s *Source) commit(files []fileObs, trees []subtreeObs) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commitLocked(files, trees)
}

// snapshot returns the listed files sorted by path.
func (s *Source) snapshot() ([]string, map[string]fileMeta) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := maps.Clone(s.files)
	return slices.Sorted(maps.Keys(m)), m
}
