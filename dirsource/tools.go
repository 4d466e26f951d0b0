package dirsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

const (
	defaultSearchResults = 50
	maxSearchResults     = 1000
	// searchBudget bounds the bytes one search reads, so a query over a
	// large tree answers in bounded time; the result says when it stopped.
	searchBudget = 64 << 20
	maxLineText  = 240
	maxDirList   = 1000
)

func ptr[T any](v T) *T { return &v }

// readOnly returns fresh annotations for a tool that only looks at the
// directory. Each definition gets its own value, so nothing that holds one
// tool's annotations can change another's.
func readOnly() *mcp.ToolAnnotations {
	return &mcp.ToolAnnotations{ReadOnlyHint: ptr(true), DestructiveHint: ptr(false), IdempotentHint: ptr(true), OpenWorldHint: ptr(false)}
}

const searchInput = `{
  "type": "object",
  "properties": {
    "query": {"type": "string", "minLength": 1, "maxLength": 1000, "description": "Text to look for, or a regular expression (RE2 syntax) when regexp is true. Matching is case-sensitive; use (?i) in a regexp to ignore case."},
    "regexp": {"type": "boolean", "description": "Treat query as a regular expression."},
    "max_results": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Most matching lines to return (default 50)."}
  },
  "required": ["query"],
  "additionalProperties": false
}`

const searchOutput = `{
  "type": "object",
  "properties": {
    "matches": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "path": {"type": "string"},
          "uri": {"type": "string"},
          "line": {"type": "integer", "minimum": 1},
          "text": {"type": "string"}
        },
        "required": ["path", "uri", "line", "text"]
      }
    },
    "truncated": {"type": "boolean", "description": "More matches may exist: the result limit or the search budget was reached."},
    "filesSearched": {"type": "integer"}
  },
  "required": ["matches", "truncated", "filesSearched"]
}`

const pathInput = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "Path relative to the served directory, with / as separator."}
  },
  "required": ["path"],
  "additionalProperties": false
}`

const infoOutput = `{
  "type": "object",
  "properties": {
    "path": {"type": "string"},
    "uri": {"type": "string"},
    "type": {"enum": ["file", "directory"]},
    "size": {"type": "integer", "minimum": 0},
    "modTime": {"type": "string", "format": "date-time"},
    "mimeType": {"type": "string"}
  },
  "required": ["path", "uri", "type", "size", "modTime"]
}`

const listInput = `{
  "type": "object",
  "properties": {
    "path": {"type": "string", "description": "Directory relative to the served directory; omit or use \"\" for the top."}
  },
  "additionalProperties": false
}`

const listOutput = `{
  "type": "object",
  "properties": {
    "path": {"type": "string"},
    "entries": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "name": {"type": "string"},
          "path": {"type": "string"},
          "type": {"enum": ["file", "directory"]},
          "size": {"type": "integer", "minimum": 0},
          "uri": {"type": "string"}
        },
        "required": ["name", "path", "type"]
      }
    },
    "truncated": {"type": "boolean"}
  },
  "required": ["path", "entries", "truncated"]
}`

func (s *Source) addTools(srv *server.Server) error {
	tools := []struct {
		def mcp.Tool
		h   server.ToolHandler
	}{
		{mcp.Tool{
			Name:         "search_files",
			Title:        "Search files",
			Description:  "Search the text files under " + s.root + " for a string or regular expression; returns matching lines with their paths, URIs and line numbers.",
			InputSchema:  jsontext.Value(searchInput),
			OutputSchema: jsontext.Value(searchOutput),
			Annotations:  readOnly(),
		}, s.searchTool},
		{mcp.Tool{
			Name:         "file_info",
			Title:        "File information",
			Description:  "Size, modification time and media type of a file or directory under " + s.root + ".",
			InputSchema:  jsontext.Value(pathInput),
			OutputSchema: jsontext.Value(infoOutput),
			Annotations:  readOnly(),
		}, s.infoTool},
		{mcp.Tool{
			Name:         "list_directory",
			Title:        "List directory",
			Description:  "The files and subdirectories of a directory under " + s.root + ", hidden entries excluded.",
			InputSchema:  jsontext.Value(listInput),
			OutputSchema: jsontext.Value(listOutput),
			Annotations:  readOnly(),
		}, s.listTool},
	}
	for _, t := range tools {
		if err := srv.AddTool(t.def, t.h); err != nil {
			return fmt.Errorf("dirsource: %w", err)
		}
	}
	return nil
}

// structured builds a result whose text content mirrors the structured
// content, for clients that only show text.
func structured(v any, text string) (*mcp.CallToolResult, error) {
	b, err := jsonrpc.Marshal(v)
	if err != nil {
		return nil, err
	}
	if text == "" {
		text = string(b)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(text)}, StructuredContent: b}, nil
}

type searchMatch struct {
	Path string `json:"path"`
	URI  string `json:"uri"`
	Line int    `json:"line"`
	Text string `json:"text"`
}

type searchResult struct {
	Matches       []searchMatch `json:"matches"`
	Truncated     bool          `json:"truncated"`
	FilesSearched int           `json:"filesSearched"`
}

func (s *Source) searchTool(ctx context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	var args struct {
		Query      string `json:"query"`
		Regexp     bool   `json:"regexp"`
		MaxResults int    `json:"max_results"`
	}
	if err := json.Unmarshal(req.Arguments, &args); err != nil {
		return nil, fmt.Errorf("arguments: %w", err)
	}
	limit := args.MaxResults
	if limit <= 0 {
		limit = defaultSearchResults
	}
	limit = min(limit, maxSearchResults)
	match := func(line []byte) bool { return bytes.Contains(line, []byte(args.Query)) }
	if args.Regexp {
		re, err := regexp.Compile(args.Query)
		if err != nil {
			return nil, fmt.Errorf("invalid regular expression: %w", err)
		}
		match = re.Match
	}
	res := searchResult{Matches: []searchMatch{}}
	rels, metas := s.snapshot()
	budget := int64(searchBudget)
	var text strings.Builder
files:
	for _, rel := range rels {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		m := metas[rel]
		if m.size > s.cfg.maxSearch {
			continue
		}
		if budget -= m.size; budget < 0 {
			res.Truncated = true
			break
		}
		data, _, err := s.readFile(rel, s.cfg.maxSearch)
		if err != nil || !looksText(data, false) {
			continue
		}
		res.FilesSearched++
		n := 0
		for line := range bytes.Lines(data) {
			n++
			line = bytes.TrimRight(line, "\r\n")
			if !match(line) {
				continue
			}
			if len(res.Matches) == limit {
				res.Truncated = true
				break files
			}
			t := clip(line, maxLineText)
			res.Matches = append(res.Matches, searchMatch{Path: rel, URI: s.URI(rel), Line: n, Text: t})
			fmt.Fprintf(&text, "%s:%d: %s\n", rel, n, t)
		}
	}
	switch {
	case len(res.Matches) == 0:
		text.WriteString("No matches.")
	case res.Truncated:
		text.WriteString("(more matches may exist)")
	}
	return structured(res, strings.TrimRight(text.String(), "\n"))
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
	Path     string `json:"path"`
	URI      string `json:"uri"`
	Type     string `json:"type"`
	Size     int64  `json:"size"`
	ModTime  string `json:"modTime"`
	MimeType string `json:"mimeType,omitempty"`
}

// errNoSuchPath is what tools say for anything they may not show, so the
// answer does not reveal whether a hidden or outside path exists.
var errNoSuchPath = errors.New("no such file or directory")

// openArg opens the file or directory a tool's "path" argument names,
// inside the served directory only. It returns the clean relative path and
// the argument as given (for messages).
func (s *Source) openArg(req *server.ToolRequest) (rel, arg string, root *os.Root, f *os.File, err error) {
	var args struct {
		Path string `json:"path"`
	}
	if err := json.Unmarshal(req.Arguments, &args); err != nil {
		return "", "", nil, nil, fmt.Errorf("arguments: %w", err)
	}
	rel, ok := cleanRel(args.Path)
	if !ok {
		return "", "", nil, nil, fmt.Errorf("%s: %w", args.Path, errNoSuchPath)
	}
	root, f, err = s.open(rel)
	if err != nil {
		return "", "", nil, nil, fmt.Errorf("%s: %w", args.Path, errNoSuchPath)
	}
	return rel, args.Path, root, f, nil
}

func (s *Source) infoTool(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	rel, arg, root, f, err := s.openArg(req)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", arg, errNoSuchPath)
	}
	info := fileInfo{Path: rel, URI: s.URI(rel), Size: fi.Size(), ModTime: fi.ModTime().UTC().Format(time.RFC3339Nano)}
	switch {
	case fi.IsDir():
		info.Type, info.Size = "directory", 0
	case fi.Mode().IsRegular():
		info.Type = "file"
		info.MimeType = s.metaOf(root, rel, fi).mime
	default:
		return nil, fmt.Errorf("%s: %w", arg, errNoSuchPath)
	}
	return structured(info, "")
}

type dirEntry struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Type string `json:"type"`
	Size *int64 `json:"size,omitzero"`
	URI  string `json:"uri,omitempty"`
}

type dirListing struct {
	Path      string     `json:"path"`
	Entries   []dirEntry `json:"entries"`
	Truncated bool       `json:"truncated"`
}

func (s *Source) listTool(_ context.Context, req *server.ToolRequest) (*mcp.CallToolResult, error) {
	rel, arg, root, f, err := s.openArg(req)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("%s: not a directory", arg)
	}
	des, err := f.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", arg, err)
	}
	slices.SortFunc(des, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	out := dirListing{Path: rel, Entries: []dirEntry{}}
	var text strings.Builder
	for _, d := range des {
		if strings.HasPrefix(d.Name(), ".") {
			continue
		}
		p := path.Join(rel, d.Name())
		e := dirEntry{Name: d.Name(), Path: p}
		line := d.Name() + "/"
		switch {
		case d.IsDir():
			e.Type = "directory"
		case d.Type().IsRegular():
			fi, err := d.Info()
			if err != nil {
				continue
			}
			e.Type, e.Size, e.URI = "file", ptr(fi.Size()), s.URI(p)
			line = d.Name() + "\t" + strconv.FormatInt(fi.Size(), 10) + " bytes"
		default:
			continue // symbolic links and special files are not served
		}
		if len(out.Entries) == maxDirList {
			out.Truncated = true
			text.WriteString("(more entries not shown)\n")
			break
		}
		out.Entries = append(out.Entries, e)
		text.WriteString(line + "\n")
	}
	if len(out.Entries) == 0 {
		text.WriteString("(empty)")
	}
	return structured(out, strings.TrimRight(text.String(), "\n"))
}
