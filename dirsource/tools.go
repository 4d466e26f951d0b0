package dirsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"

	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

const (
	defaultSearchResults = 50
	maxSearchResults     = 1000
	maxLineText          = 240
	// dirBatch is how many entries list_directory reads at a time.
	dirBatch = 256
)

func ptr[T any](v T) *T { return &v }

// readOnly returns fresh annotations for a tool that only looks at the
// directory. Each definition gets its own value, so nothing that holds one
// tool's annotations can change another's.
func readOnly() *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{ReadOnlyHint: ptr(true), DestructiveHint: ptr(false), IdempotentHint: ptr(true), OpenWorldHint: ptr(false)}
}

// searchQuery is the text or pattern search_files looks for. It is never
// empty, and a bound on its length keeps a regular expression cheap to
// compile.
type searchQuery string

// JSONSchema bounds the query's length in the tool's input schema.
func (searchQuery) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", MinLength: ptr(1), MaxLength: ptr(1000)}
}

// resultLimit is how many matching lines search_files returns at most.
type resultLimit int

// JSONSchema states the accepted range in the tool's input schema.
func (resultLimit) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Type: "integer", Minimum: ptr(1.0), Maximum: ptr(float64(maxSearchResults))}
}

// entryKind says what a path names; tools serve nothing but these two.
type entryKind string

const (
	kindFile      entryKind = "file"
	kindDirectory entryKind = "directory"
)

// JSONSchema lists the kinds in the tools' output schemas.
func (entryKind) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Enum: []any{string(kindFile), string(kindDirectory)}}
}

// dateTime is an RFC 3339 time, which the output schema says by format.
type dateTime string

// JSONSchema marks the string as a date-time.
func (dateTime) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", Format: "date-time"}
}

type searchArgs struct {
	Query      searchQuery `json:"query" jsonschema:"Text to look for, or a regular expression (RE2 syntax) when regexp is true. Matching is case-sensitive; use (?i) in a regexp to ignore case."`
	Regexp     bool        `json:"regexp,omitzero" jsonschema:"Treat query as a regular expression."`
	MaxResults resultLimit `json:"max_results,omitzero" jsonschema:"Most matching lines to return (default 50)."`
}

type pathArgs struct {
	Path string `json:"path" jsonschema:"Path relative to the served directory, with / as separator."`
}

type listArgs struct {
	Path string `json:"path,omitempty" jsonschema:"Directory relative to the served directory; omit or use \"\" for the top."`
}

func (s *Source) addTools(srv *server.Server) error {
	err := errors.Join(
		server.AddTypedTool(srv, mcp.Tool{
			Name:        "search_files",
			Title:       "Search files",
			Description: "Search the text files under " + s.rootName + " for a string or regular expression; returns matching lines with their paths, URIs and line numbers.",
			Annotations: readOnly(),
		}, s.searchTool),
		server.AddTypedTool(srv, mcp.Tool{
			Name:        "file_info",
			Title:       "File information",
			Description: "Size, modification time and media type of a file or directory under " + s.rootName + ".",
			Annotations: readOnly(),
		}, s.infoTool),
		server.AddTypedTool(srv, mcp.Tool{
			Name:        "list_directory",
			Title:       "List directory",
			Description: "The files and subdirectories of a directory under " + s.rootName + ", hidden" + s.andExcludedText() + " entries excluded.",
			Annotations: readOnly(),
		}, s.listTool),
	)
	if err != nil {
		return fmt.Errorf("dirsource: %w", err)
	}
	return nil
}

type searchMatch struct {
	Path string `json:"path"`
	URI  string `json:"uri"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

// truncReason says why a search may have missed matches.
type truncReason string

const (
	// reasonMaxResults: the result limit was reached.
	reasonMaxResults truncReason = "max_results"
	// reasonBudget: the bytes one search may read were used up.
	reasonBudget truncReason = "search_budget"
	// reasonTimeout: the time one search may take was used up.
	reasonTimeout truncReason = "search_timeout"
	// reasonTooLarge: files over the search size limit were skipped.
	reasonTooLarge truncReason = "file_too_large"
	// reasonUnreadable: files that could not be read were skipped.
	reasonUnreadable truncReason = "unreadable"
)

// JSONSchema lists the reasons in the tool's output schema.
func (truncReason) JSONSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Enum: []any{string(reasonMaxResults), string(reasonBudget), string(reasonTimeout), string(reasonTooLarge), string(reasonUnreadable)}}
}

type searchResult struct {
	Matches       []searchMatch `json:"matches"`
	Truncated     bool          `json:"truncated" jsonschema:"More matches may exist: something was skipped or the search stopped early; reasons says why."`
	Reasons       []truncReason `json:"reasons,omitempty" jsonschema:"Why the result is truncated: max_results (the result limit was reached), search_budget (the bytes a search may read were used up), search_timeout (the time a search may take was used up), file_too_large (files over the search size limit were skipped), unreadable (files that could not be read were skipped)."`
	SkippedFiles  int           `json:"skippedFiles,omitzero" jsonschema:"Files not searched to the end (too large, unreadable, or not reached)."`
	FilesSearched int           `json:"filesSearched" jsonschema:"Files searched to the end, or up to the last match returned."`

	text string // one "path:line: text" per match
}

// ToolText lists the matches one per line, as grep does, which reads
// better than the JSON and says the same.
func (r searchResult) ToolText() string { return r.text }

// errSearchTimeout ends a search's own context when its time is up, so
// that it can tell its time limit from the caller giving up.
var errSearchTimeout = errors.New("search time limit reached")

func (s *Source) searchTool(ctx context.Context, _ *server.ToolRequest, args searchArgs) (searchResult, error) {
	limit := int(args.MaxResults)
	if limit <= 0 {
		limit = defaultSearchResults
	}
	limit = min(limit, maxSearchResults)
	m := &matcher{literal: []byte(args.Query), cost: 1}
	if args.Regexp {
		re, size, err := compileRegexp(string(args.Query), s.cfg.maxRegexp)
		if err != nil {
			if _, tooLarge := errors.AsType[*jsonrpc.Error](err); tooLarge {
				s.counts.regexpsRefused.Add(1)
			}
			return searchResult{}, err
		}
		m.re, m.cost = re, size
	}
	sctx, cancel := context.WithTimeoutCause(ctx, s.cfg.searchTime, errSearchTimeout)
	defer cancel()
	res := searchResult{Matches: []searchMatch{}}
	reasons := map[truncReason]bool{}
	rels, metas := s.snapshot()
	budget := s.cfg.searchBudget
	var text strings.Builder
	// stopped handles the end of the search's context: the caller's
	// cancellation is an error, the time limit a truncated result.
	stopped := func(remaining int) error {
		if err := ctx.Err(); err != nil && !errors.Is(context.Cause(sctx), errSearchTimeout) {
			return err
		}
		reasons[reasonTimeout] = true
		res.SkippedFiles += remaining
		s.counts.timedOut.Add(1)
		return nil
	}
files:
	for i, rel := range rels {
		if sctx.Err() != nil {
			if err := stopped(len(rels) - i); err != nil {
				return searchResult{}, err
			}
			break
		}
		meta := metas[rel]
		if meta.size > s.cfg.maxSearch {
			reasons[reasonTooLarge] = true
			res.SkippedFiles++
			continue
		}
		if budget -= meta.size; budget < 0 {
			reasons[reasonBudget] = true
			res.SkippedFiles += len(rels) - i
			s.counts.overBudget.Add(1)
			break
		}
		data, _, err := s.readFile(rel, s.cfg.maxSearch)
		switch {
		case err == nil:
		case errors.Is(err, errTooLarge):
			reasons[reasonTooLarge] = true // grew since it was listed
			res.SkippedFiles++
			continue
		case notFound(err):
			continue // gone meanwhile: nothing to miss
		default:
			reasons[reasonUnreadable] = true
			res.SkippedFiles++
			continue
		}
		if !looksText(data, false) {
			res.FilesSearched++
			continue // searched: binary files hold no lines to match
		}
		n := 0
		for line := range bytes.Lines(data) {
			n++
			line = bytes.TrimRight(line, "\r\n")
			ok, err := m.match(sctx, line)
			if err != nil {
				if err := stopped(len(rels) - i); err != nil {
					return searchResult{}, err
				}
				break files
			}
			if !ok {
				continue
			}
			if len(res.Matches) == limit {
				reasons[reasonMaxResults] = true
				res.FilesSearched++
				break files
			}
			t := clip(line, maxLineText)
			name := displayName(rel)
			res.Matches = append(res.Matches, searchMatch{Path: name, URI: s.URI(rel), Line: n, Text: t})
			fmt.Fprintf(&text, "%s:%d: %s\n", name, n, t)
		}
		res.FilesSearched++
	}
	for _, r := range []truncReason{reasonMaxResults, reasonBudget, reasonTimeout, reasonTooLarge, reasonUnreadable} {
		if reasons[r] {
			res.Reasons = append(res.Reasons, r)
		}
	}
	res.Truncated = len(res.Reasons) > 0
	if len(res.Matches) == 0 {
		text.WriteString("No matches.\n")
	}
	if res.Truncated {
		fmt.Fprintf(&text, "(truncated: %s; more matches may exist)", joinReasons(res.Reasons))
		if reasons[reasonTimeout] {
			fmt.Fprintf(&text, "\n(the search stopped at its time limit of %v; narrow the query or use a simpler pattern)", s.cfg.searchTime)
		}
	}
	res.text = strings.TrimRight(text.String(), "\n")
	return res, nil
}

func joinReasons(rs []truncReason) string {
	ss := make([]string, len(rs))
	for i, r := range rs {
		ss[i] = string(r)
	}
	return strings.Join(ss, ", ")
}

// clip shortens b to at most n bytes without splitting a character.
func clip(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	return string(b[:n]) + "…"
}

type fileInfo struct {
	Path     string    `json:"path"`
	URI      string    `json:"uri"`
	Type     entryKind `json:"type"`
	Size     int64     `json:"size"`
	ModTime  dateTime  `json:"modTime"`
	MimeType string    `json:"mimeType,omitempty"`
}

// errNoSuchPath is what tools say for anything they may not show, so the
// answer does not reveal whether a hidden or outside path exists.
var errNoSuchPath = errors.New("no such file or directory")

// openArg opens the file or directory a tool's "path" argument names,
// inside the served directory only. It returns the clean relative path.
func (s *Source) openArg(arg string) (rel string, root *os.Root, f *os.File, err error) {
	rel, ok := cleanRel(arg)
	if !ok {
		return "", nil, nil, fmt.Errorf("%s: %w", arg, errNoSuchPath)
	}
	root, f, err = s.open(rel)
	if err != nil && notFound(err) {
		if raw, ok := s.fromShown(rel); ok {
			rel = raw
			root, f, err = s.open(rel)
		}
	}
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrPermission):
		return "", nil, nil, fmt.Errorf("%s: %w", arg, errPermission)
	default:
		return "", nil, nil, fmt.Errorf("%s: %w", arg, errNoSuchPath)
	}
	// Excluded paths are answered like missing ones: they are not served.
	if fi, err := f.Stat(); err != nil || s.excluded(rel, fi.IsDir()) {
		f.Close()
		root.Close()
		return "", nil, nil, fmt.Errorf("%s: %w", arg, errNoSuchPath)
	}
	return rel, root, f, nil
}

// fromShown finds the file a path shown by displayName names, component
// by component: each is taken as it is when that exists, and as the bytes
// its escapes stand for otherwise. It reports false when no component
// needed decoding.
func (s *Source) fromShown(rel string) (string, bool) {
	if !strings.Contains(rel, "%") {
		return "", false
	}
	cs := strings.Split(rel, "/")
	dir, changed := s.root, false
	for i, c := range cs {
		if _, err := os.Lstat(filepath.Join(dir, c)); err != nil {
			if raw, ok := componentFromDisplay(c); ok {
				cs[i], changed = raw, true
			}
		}
		dir = filepath.Join(dir, cs[i])
	}
	return strings.Join(cs, "/"), changed
}

func (s *Source) infoTool(_ context.Context, _ *server.ToolRequest, args pathArgs) (fileInfo, error) {
	arg := args.Path
	rel, root, f, err := s.openArg(arg)
	if err != nil {
		return fileInfo{}, err
	}
	defer root.Close()
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fileInfo{}, fmt.Errorf("%s: %w", arg, errNoSuchPath)
	}
	info := fileInfo{Path: displayName(rel), URI: s.URI(rel), Size: fi.Size(), ModTime: dateTime(fi.ModTime().UTC().Format(time.RFC3339Nano))}
	switch {
	case fi.IsDir():
		info.Type, info.Size = kindDirectory, 0
	case fi.Mode().IsRegular():
		info.Type = kindFile
		m, _ := s.metaOf(root, rel, fi)
		info.MimeType = m.mime
	default:
		return fileInfo{}, fmt.Errorf("%s: %w", arg, errNoSuchPath)
	}
	return info, nil
}

type dirEntry struct {
	Name string    `json:"name"`
	Path string    `json:"path"`
	Type entryKind `json:"type"`
	Size *int64    `json:"size,omitzero"`
	URI  string    `json:"uri,omitempty"`
}

type dirListing struct {
	Path      string     `json:"path"`
	Entries   []dirEntry `json:"entries"`
	Truncated bool       `json:"truncated" jsonschema:"The directory holds more entries than one listing shows (limit); these are the first the system returned, sorted by name."`
	Limit     int        `json:"limit,omitzero" jsonschema:"The most entries one listing shows, when truncated."`

	text string // one entry per line, as ls prints them
}

// ToolText lists the entries one per line, directories with a trailing
// slash and files with their sizes.
func (l dirListing) ToolText() string { return l.text }

func (s *Source) listTool(_ context.Context, _ *server.ToolRequest, args listArgs) (dirListing, error) {
	arg := args.Path
	rel, root, f, err := s.openArg(arg)
	if err != nil {
		return dirListing{}, err
	}
	defer root.Close()
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.IsDir() {
		return dirListing{}, fmt.Errorf("%s: not a directory", arg)
	}
	out := dirListing{Path: displayName(rel), Entries: []dirEntry{}}
	type kept struct {
		name string
		e    dirEntry
	}
	var entries []kept
	limit := s.cfg.maxDirList
	ignored := s.ignore.Load() // the directory itself is not excluded (openArg)
	// Read in batches and stop at the limit: a huge directory must not
	// cost its whole size to show a page of it.
	for !out.Truncated {
		des, err := f.ReadDir(dirBatch)
		for _, d := range des {
			p := path.Join(rel, d.Name())
			if strings.HasPrefix(d.Name(), ".") || ignored.Matches(p, d.IsDir()) {
				continue
			}
			e := dirEntry{Name: displayName(d.Name()), Path: displayName(p)}
			switch {
			case d.IsDir():
				e.Type = kindDirectory
			case d.Type().IsRegular():
				fi, err := d.Info()
				if err != nil {
					continue // gone meanwhile
				}
				e.Type, e.Size, e.URI = kindFile, ptr(fi.Size()), s.URI(p)
			default:
				continue // symbolic links and special files are not served
			}
			if len(entries) == limit {
				out.Truncated = true
				break
			}
			entries = append(entries, kept{d.Name(), e})
		}
		if errors.Is(err, io.EOF) {
			break
		}
		switch {
		case err == nil:
		case errors.Is(err, fs.ErrPermission):
			return dirListing{}, fmt.Errorf("%s: %w", arg, errPermission)
		default:
			return dirListing{}, fmt.Errorf("%s: cannot list: %s", arg, errnoText(err))
		}
	}
	slices.SortFunc(entries, func(a, b kept) int { return strings.Compare(a.name, b.name) })
	var text strings.Builder
	for _, k := range entries {
		out.Entries = append(out.Entries, k.e)
		if k.e.Type == kindDirectory {
			text.WriteString(k.e.Name + "/\n")
		} else {
			text.WriteString(k.e.Name + "\t" + strconv.FormatInt(*k.e.Size, 10) + " bytes\n")
		}
	}
	switch {
	case out.Truncated:
		s.counts.listingsCut.Add(1)
		out.Limit = limit
		fmt.Fprintf(&text, "(cut at %d entries, the most one listing shows; more are not shown)", limit)
	case len(out.Entries) == 0:
		text.WriteString("(empty)")
	}
	out.text = strings.TrimRight(text.String(), "\n")
	return out, nil
}
