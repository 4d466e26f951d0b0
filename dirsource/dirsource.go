// Package dirsource serves a directory tree as live MCP resources.
//
// Every readable regular file under the directory (recursively, hidden
// files and directories excluded) is a resource whose URI is its
// canonical file:// URL. Run watches the tree with fsnotify and keeps the
// server in step with it: whenever a read of a file's URI would now
// answer differently — the file was written, truncated, created, removed,
// renamed onto or away, made readable or unreadable — readers subscribed
// to that URI get notifications/resources/updated, and whenever the
// resource list would now be different, list listeners get
// notifications/resources/list_changed. Bursts of events are coalesced;
// the tree's state when the burst ends is what counts, so the last change
// is never lost.
//
// The served directory itself may vanish and come back (a checkout
// re-cloned, rm -rf dir && mkdir dir): while it is missing nothing is
// listed, and once it is back it is watched and listed again. A directory
// missing for longer than the grace period (WithRootGrace) is taken to be
// gone for good, and Run returns an error wrapping ErrRootGone.
//
// The list holds at most WithMaxFiles files. When the limit bites, the
// list carries one more resource, at PartialURI, whose _meta under
// PartialMetaKey says how many files were left out; the list refills as
// room appears.
//
// File names are bytes, and need not be UTF-8 (Linux allows any byte but
// "/" and NUL), while JSON text must be. A URI carries a name's exact
// bytes, percent-encoded, and reads the file back; in resource names,
// descriptions and tool results, a path component that is not UTF-8 is
// shown with each stray byte written %XX and "%" written %25
// ("caf\xe9.txt" is shown "caf%E9.txt"), and the tools take that form
// back. The served directory's own path may be such a name too.
//
// The tools answer in bounded time and memory: search_files refuses a
// regular expression whose program is too large (WithMaxRegexpSize),
// stops at a time limit (WithSearchTimeout) and when its caller gives up,
// even in the middle of a file, and list_directory reads a directory
// only up to the entries it shows (WithMaxDirEntries). Stats says how
// often each limit bites.
//
// With WithGitignore the tree's .gitignore files exclude what they name,
// with git's rules, and WithExclude adds patterns of the same syntax that
// decide before them: excluded files are not listed, not readable by URI
// and not seen by the tools, and excluded directories are not watched.
//
// Reads never leave the directory: a URI must be the canonical spelling of
// a path inside it, hidden components and ".." are refused, symbolic links
// are neither listed nor followed, and the file is opened through an
// os.Root, so even a link swapped in between the check and the open cannot
// lead outside the directory.
//
// An option that takes a size, a count or a duration keeps its default
// for a value of zero or less, unless its doc gives zero a meaning
// (WithRootGrace): a bound is never turned off by a zero left unset.
package dirsource

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"tidings/internal/gitignore"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// Defaults of the options, also used by the serve command's flags.
const (
	DefaultMaxFiles       = 10000
	DefaultMaxReadBytes   = 8 << 20
	DefaultMaxSearchBytes = 1 << 20
	DefaultSearchBudget   = 64 << 20
	DefaultSearchTimeout  = 10 * time.Second
	DefaultMaxRegexpSize  = 2000
	DefaultMaxDirEntries  = 1000
	DefaultRootGrace      = time.Minute
)

type config struct {
	coalesce     time.Duration
	maxRead      int64
	maxSearch    int64
	searchBudget int64
	searchTime   time.Duration
	maxRegexp    int
	maxDirList   int
	maxFiles     int
	rootGrace    time.Duration // < 0: wait forever
	rootCheck    time.Duration
	logger       *slog.Logger
	noTools      bool
	gitignore    bool     // WithGitignore
	exclude      []string // WithExclude
}

// Option configures a Source.
type Option func(*config)

// WithCoalesceWindow sets how long events are gathered before they are
// acted on (default 25ms). Longer windows merge more of a burst into one
// notification; the delay of every notification grows by the same amount.
func WithCoalesceWindow(d time.Duration) Option { return func(c *config) { positive(&c.coalesce, d) } }

// WithMaxReadBytes bounds the size of a file that resources/read returns
// (default DefaultMaxReadBytes, 8 MiB). Larger files stay listed, but
// reading them fails with an error that names the limit, so a stray disk
// image cannot exhaust memory.
func WithMaxReadBytes(n int64) Option { return func(c *config) { positive(&c.maxRead, n) } }

// WithMaxSearchBytes bounds the size of a file that search_files looks
// into (default DefaultMaxSearchBytes, 1 MiB). Larger files are skipped,
// and a search that skipped any says so (truncated, reason
// "file_too_large").
func WithMaxSearchBytes(n int64) Option { return func(c *config) { positive(&c.maxSearch, n) } }

// WithSearchBudget bounds the bytes one search_files call reads in all
// (default DefaultSearchBudget, 64 MiB), so a query over a large tree
// answers in bounded time; a search that stops early says so (truncated,
// reason "search_budget").
func WithSearchBudget(n int64) Option { return func(c *config) { positive(&c.searchBudget, n) } }

// WithSearchTimeout bounds how long one search_files call may take
// (default DefaultSearchTimeout, ten seconds). A regular expression can
// cost far more per byte than a plain string, so the bytes a search reads
// (WithSearchBudget) do not bound its time by themselves. A search that
// runs out of time answers with what it found so far and says so
// (truncated, reason "search_timeout"), like one that ran out of bytes:
// what was found is still true, and the caller can narrow the query.
func WithSearchTimeout(d time.Duration) Option { return func(c *config) { positive(&c.searchTime, d) } }

// WithMaxRegexpSize bounds the size of the program a search_files regular
// expression compiles to, in instructions (default DefaultMaxRegexpSize,
// 2000). RE2 matching takes time linear in the input but also in the
// program's size, and a short pattern can compile to a large program:
// (?:.*){0,1000}z is 15 characters and 3003 instructions, and costs about
// a minute of CPU per MiB searched. A plain string of the longest query
// (1000 characters) compiles to about 1000, so it always passes. A larger
// pattern is refused with -32602, naming the limit and its size.
func WithMaxRegexpSize(n int) Option { return func(c *config) { positive(&c.maxRegexp, n) } }

// WithMaxDirEntries bounds the entries one list_directory answer holds
// (default DefaultMaxDirEntries, 1000). The directory is read in batches
// and reading stops at the limit, so a directory of a million files costs
// no more to list than one of a thousand; the answer then says it was cut
// (truncated), and holds the entries the system returned first, sorted by
// name, not the first by name of the whole directory.
func WithMaxDirEntries(n int) Option { return func(c *config) { positive(&c.maxDirList, n) } }

// WithMaxFiles bounds how many files are listed (default
// DefaultMaxFiles, 10000), which keeps list sizes predictable when the
// source is pointed at a huge tree by mistake. Files beyond the bound are
// not listed but not hidden either: they can be read by URI and searched,
// and the list says it is partial (see PartialURI). The source still
// keeps a small record of every file, so that room left by deleted files
// is filled at once.
func WithMaxFiles(n int) Option { return func(c *config) { positive(&c.maxFiles, n) } }

// positive sets *dst to v if v is positive and otherwise leaves the
// default there: the rule of every size, count and duration option (see
// the package doc).
func positive[T ~int | ~int64](dst *T, v T) {
	if v > 0 {
		*dst = v
	}
}

// WithRootGrace sets how long the served directory may be missing before
// Run gives up with ErrRootGone (default DefaultRootGrace, one minute).
// Within that time a directory that comes back at the same path is
// watched and listed again. Zero gives up as soon as the loss is noticed;
// a negative duration waits forever.
func WithRootGrace(d time.Duration) Option { return func(c *config) { c.rootGrace = d } }

// WithLogger sets where the source logs (default slog.Default).
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithoutTools stops Register from adding the search_files, file_info and
// list_directory tools, for servers that serve several directories (tool
// names are unique per server) or want resources only.
func WithoutTools() Option { return func(c *config) { c.noTools = true } }

// ErrRootGone is wrapped by the error Run returns when the served
// directory has been missing for longer than the grace period.
var ErrRootGone = errors.New("dirsource: the served directory is gone")

// fileMeta is what the source remembers of a file.
type fileMeta struct {
	size int64
	mod  time.Time
	mime string
}

// Source serves one directory. Create it with New, attach it to a server
// with Register, then keep it live with Run.
type Source struct {
	root     string // absolute, clean, symbolic links resolved
	rootName string // root as text (see displayName)
	rootURI  string
	cfg      config
	counts   counters
	log      *slog.Logger
	ready    chan struct{}
	started  atomic.Bool

	// ignore holds the exclusion rules in force: WithExclude's and
	// the .gitignore files read by the last scan of each subtree. Only
	// scans replace it (a changed copy), and scans never run at once.
	ignore atomic.Pointer[gitignore.Set]

	mu  sync.Mutex
	srv *server.Server
	st  state
}

// New returns a source for dir, which must be an existing directory. The
// directory's own path is resolved once, so URIs stay the same even if a
// symbolic link to it is later changed.
func New(dir string, opts ...Option) (*Source, error) {
	cfg := config{
		coalesce: 25 * time.Millisecond, maxRead: DefaultMaxReadBytes, maxSearch: DefaultMaxSearchBytes,
		searchBudget: DefaultSearchBudget, searchTime: DefaultSearchTimeout, maxRegexp: DefaultMaxRegexpSize,
		maxDirList: DefaultMaxDirEntries, maxFiles: DefaultMaxFiles, rootGrace: DefaultRootGrace,
		rootCheck: 100 * time.Millisecond,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	if dir == "" {
		return nil, errors.New("dirsource: no directory given")
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
	var first *gitignore.Rules
	if len(cfg.exclude) > 0 {
		if first, err = gitignore.Compile(cfg.exclude); err != nil {
			return nil, fmt.Errorf("dirsource: exclude: %w", err)
		}
	}
	src := &Source{
		root:     resolved,
		rootName: filepath.FromSlash(displayName(filepath.ToSlash(resolved))),
		rootURI:  fileURI(resolved),
		cfg:      cfg,
		log:      cfg.logger.With("dir", resolved),
		ready:    make(chan struct{}),
		st:       newState(),
	}
	src.ignore.Store(gitignore.NewSet(first))
	return src, nil
}

// Root returns the directory served, as an absolute path with symbolic
// links resolved.
func (s *Source) Root() string { return s.root }

// DisplayRoot returns Root as valid UTF-8 text, for messages and server
// instructions, which JSON carries as text: in a component of the path
// that is not UTF-8, each byte outside a UTF-8 character is written %XX
// and "%" is written %25. Root itself keeps the exact bytes.
func (s *Source) DisplayRoot() string { return s.rootName }

// URI returns the resource URI of a slash-separated path relative to the
// root.
func (s *Source) URI(rel string) string {
	if rel == "" {
		return s.rootURI
	}
	return fileURI(filepath.Join(s.root, filepath.FromSlash(rel)))
}

// PartialURI returns the URI of the resource that is listed while the
// file limit leaves files out of the list: "tidings:partial:" followed by
// the root's URI. It is not a file URI, so clients that open listed
// file:// URIs never mistake it for a file. Its entry carries
// PartialMetaKey in _meta; reading it returns the same object as JSON;
// subscribers to it are told whenever the counts change.
func (s *Source) PartialURI() string { return "tidings:partial:" + s.rootURI }

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
	registered := s.srv != nil
	s.mu.Unlock()
	if registered {
		return errors.New("dirsource: already registered")
	}
	found, err := s.scan("", nil) // without the lock: it reads the disk
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("dirsource: already registered")
	}
	err = srv.AddResourceTemplate(mcp.ResourceTemplate{
		URITemplate: s.Template(),
		Name:        "files",
		Title:       "Files under " + s.rootName,
		Description: "Any regular, non-hidden" + s.notExcludedText() + " file under " + s.rootName + ", by absolute path.",
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
	s.commitLocked([]subtreeObs{{found: found}})
	return nil
}

// errPermission is what tools and reads say when the operating system
// refuses access. It names no path beyond what the caller gave.
var errPermission = errors.New("permission denied")

// read serves resources/read for listed files, for the template and for
// the partial-list resource.
func (s *Source) read(_ context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
	if req.URI == s.PartialURI() {
		return s.readPartial(req.URI)
	}
	rel, ok := s.relFromURI(req.URI)
	if !ok {
		return nil, server.ErrResourceNotFound
	}
	data, _, err := s.readFile(rel, s.cfg.maxRead)
	switch {
	case err == nil:
	case errors.Is(err, errTooLarge):
		s.counts.readsTooLarge.Add(1)
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "Resource too large",
			map[string]any{"uri": req.URI, "limit": s.cfg.maxRead})
	case errors.Is(err, fs.ErrPermission):
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "Resource unreadable: permission denied",
			map[string]any{"uri": req.URI, "reason": "permission_denied"})
	case notFound(err):
		s.log.Debug("dirsource: read refused", "uri", req.URI, "err", err)
		return nil, server.ErrResourceNotFound
	default:
		s.log.Warn("dirsource: read failed", "uri", req.URI, "err", err)
		return nil, jsonrpc.NewError(jsonrpc.CodeInternalError, "Resource unreadable: "+errnoText(err),
			map[string]any{"uri": req.URI, "reason": "io_error"})
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

// readPartial returns the counts of the partial list as JSON, or not
// found while the list is complete.
func (s *Source) readPartial(uri string) (*mcp.ReadResourceResult, error) {
	s.mu.Lock()
	info := s.st.partial
	s.mu.Unlock()
	if info.Limit == 0 {
		return nil, server.ErrResourceNotFound
	}
	b, err := json.Marshal(info)
	if err != nil {
		return nil, fmt.Errorf("dirsource: %w", err)
	}
	return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(uri, "application/json", string(b))}}, nil
}

// notFound reports whether err means that there is nothing servable at
// the path: missing, a symbolic link, not a regular file.
func notFound(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, errLink) || errors.Is(err, errNotFile) ||
		errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP)
}

// errnoText describes an I/O error by its system error alone, so that no
// path appears in what the client is told.
func errnoText(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return "I/O error"
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
	if hidden(rel) || s.excluded(rel, false) {
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

// metaOf describes a regular file, and reports false when the file
// cannot be opened for reading (permissions, or gone meanwhile): such a
// file is not listed, because every read of it would fail. Names without
// a known extension also cost a read of their first bytes.
func (s *Source) metaOf(root *os.Root, rel string, fi fs.FileInfo) (fileMeta, bool) {
	m := fileMeta{size: fi.Size(), mod: fi.ModTime()}
	f, err := openServable(root, filepath.FromSlash(rel), false)
	if err != nil {
		return m, false
	}
	defer f.Close()
	var head []byte
	if mime.TypeByExtension(filepath.Ext(rel)) == "" {
		buf := make([]byte, 512)
		n, _ := io.ReadFull(f, buf)
		head = buf[:n]
	}
	m.mime = mimeType(rel, head)
	return m, true
}

// adder is what scan calls for every directory it enters, to watch it.
type adder interface{ Add(string) error }

// scan walks the subtree at relDir and returns its listable files. Every
// directory is handed to w (when not nil) before its entries are read, so
// a file created during the walk is either seen by the walk or reported
// by the watcher. Excluded directories are neither entered nor watched;
// the .gitignore files of the others are read as the walk enters them,
// and replace those the subtree had when the walk is done.
func (s *Source) scan(relDir string, w adder) (map[string]fileMeta, error) {
	root, err := os.OpenRoot(s.root)
	if err != nil {
		return nil, fmt.Errorf("dirsource: %w", err)
	}
	defer root.Close()
	start := filepath.Join(s.root, filepath.FromSlash(relDir))
	found := map[string]fileMeta{}
	set := s.ignore.Load()
	if s.cfg.gitignore {
		set = set.Clone()
		set.DropUnder(relDir)
		defer func() { s.ignore.Store(set) }()
	}
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
		// The walk does not enter excluded directories, so only the start
		// can be excluded through a directory above it.
		if p == start && set.Ignored(rel, d.IsDir()) || p != start && set.Matches(rel, d.IsDir()) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		switch {
		case d.IsDir():
			if s.cfg.gitignore {
				s.readIgnoreFile(root, rel, set)
			}
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
			if m, ok := s.metaOf(root, rel, fi); ok {
				found[rel] = m
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dirsource: scan %s: %w", start, err)
	}
	return found, nil
}

// commitLocked brings the bookkeeping and the server in line with what
// was observed: one batch of removals, one of additions (the registry
// publishes each as a list change), then resources/updated for every
// URI whose read now answers differently, "now missing" and "now
// present" included. It does no I/O.
func (s *Source) commitLocked(obs []subtreeObs) {
	was := s.st.partial
	d := s.st.apply(obs, s.cfg.maxFiles)
	if len(d.remove) > 0 || d.dropPartial {
		uris := make([]string, 0, len(d.remove)+1)
		for _, rel := range d.remove {
			uris = append(uris, s.URI(rel))
		}
		if d.dropPartial {
			uris = append(uris, s.PartialURI())
		}
		s.srv.RemoveResources(uris...)
	}
	if len(d.put) > 0 || d.putPartial {
		res := make([]mcp.Resource, 0, len(d.put)+1)
		for _, rel := range d.put {
			m := s.st.files[rel].meta
			size := m.size
			res = append(res, mcp.Resource{URI: s.URI(rel), Name: displayName(rel), MimeType: m.mime, Size: &size})
		}
		if d.putPartial {
			res = append(res, s.partialResource(s.st.partial))
		}
		if refused := s.registerLocked(res); len(refused) > 0 {
			uris := make([]string, 0, len(refused))
			for _, i := range refused {
				if i < len(d.put) {
					s.st.reject(d.put[i])
				}
				uris = append(uris, res[i].URI)
			}
			// An earlier entry of a file whose new one was refused would
			// stay listed, and never be removed: the bookkeeping now
			// says the file is not listed.
			s.srv.RemoveResources(uris...)
		}
	}
	switch now := s.st.partial; {
	case was.Limit == 0 && now.Limit != 0:
		s.log.Warn("dirsource: file limit reached; the resource list is partial",
			"limit", s.cfg.maxFiles, "unlisted", now.Unlisted, "marker", s.PartialURI())
	case was.Limit != 0 && now.Limit == 0:
		s.log.Info("dirsource: every file is listed again")
	}
	if d.putPartial || d.dropPartial {
		s.srv.ResourceUpdated(s.PartialURI())
	}
	for _, rel := range d.updated {
		s.srv.ResourceUpdated(s.URI(rel))
	}
}

// registerLocked adds res to the server as one change, and returns the
// indexes of those the server refused. The server refuses a whole batch
// when any resource in it is invalid, and one bad entry must not keep the
// others out of the list; so after a refusal each resource is checked the
// way the server checks it, and the rest are added as one batch again
// (one at a time only if that is refused too).
func (s *Source) registerLocked(res []mcp.Resource) []int {
	err := s.srv.AddResources(res, s.read)
	if err == nil {
		return nil
	}
	var refused []int
	good := make([]mcp.Resource, 0, len(res))
	for i, r := range res {
		if _, err := jsonrpc.Marshal(r); err != nil {
			s.log.Error("dirsource: the server cannot list a file; it is left out", "uri", r.URI, "err", err)
			refused = append(refused, i)
			continue
		}
		good = append(good, r)
	}
	if len(good) == 0 || s.srv.AddResources(good, s.read) == nil {
		return refused
	}
	refused = refused[:0]
	for i, r := range res {
		if err := s.srv.AddResource(r, s.read); err != nil {
			s.log.Error("dirsource: the server refused a file; it is left out", "uri", r.URI, "err", err)
			refused = append(refused, i)
		}
	}
	return refused
}

func (s *Source) commit(obs []subtreeObs) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.commitLocked(obs)
}

// snapshot returns every known file, listed or not, sorted by path.
func (s *Source) snapshot() ([]string, map[string]fileMeta) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.known()
}
