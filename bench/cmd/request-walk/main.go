// Command request-walk tells which of tidings' packages one HTTP request
// passes through on its way from the handler to the answer — the rooms
// of its walk — by the code coverage counters that the request alone
// moves. It must be built with coverage of tidings' packages:
//
//	cd bench && go run -cover -covermode=atomic -coverpkg=tidings/... ./cmd/request-walk
//
// For each request (tools/list, and a tools/call whose tool mirrors an
// argument into an Mcp-Param-* header and has its arguments checked
// against its input schema) it serves the request once to warm up, then
// once more between two snapshots of the counters, and prints each
// package whose code the second request ran, with the number of blocks.
// It needs the go command on the PATH, whose covdata tool reads the
// snapshots. (The coverage runtime's warning at exit that GOCOVERDIR is
// not set is about the counters of the whole run, which are not needed.)
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/coverage"
	"sort"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// schema has path mirrored into the Mcp-Param-Path header.
const schema = `{"type":"object","properties":{"path":{"type":"string","x-mcp-header":"Path"},` +
	`"query":{"type":"string"},"limit":{"type":"integer","minimum":1}},"required":["path"]}`

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "request-walk: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	dir, err := os.MkdirTemp("", "request-walk-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv := server.New(mcp.Implementation{Name: "walk", Version: "1.0.0"})
	// The handlers answer with what was made beforehand: the walk is the
	// server's, not the tool's.
	found := mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent("found")}}
	for _, name := range []string{"grep", "search_files"} {
		err := srv.AddTool(mcp.Tool{Name: name, InputSchema: jsontext.Value(schema)}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			res := found
			return &res, nil
		})
		if err != nil {
			return err
		}
	}
	h := streamhttp.New(srv)
	meta := `"_meta":{"io.modelcontextprotocol/protocolVersion":"` + mcp.Version + `","io.modelcontextprotocol/clientCapabilities":{}}`
	for _, r := range []struct {
		method, params, name string
	}{
		{mcp.MethodToolsList, `{` + meta + `}`, ""},
		{mcp.MethodToolsCall, `{` + meta + `,"name":"search_files","arguments":{"path":"src","query":"TODO","limit":10}}`, "search_files"},
	} {
		body := []byte(`{"jsonrpc":"2.0","id":1,"method":"` + r.method + `","params":` + r.params + `}`)
		serve := func() error {
			req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			req.Header.Set(mcp.HeaderProtocolVersion, mcp.Version)
			req.Header.Set(mcp.HeaderMethod, r.method)
			if r.name != "" {
				req.Header.Set(mcp.HeaderName, r.name)
				req.Header.Set("Mcp-Param-Path", "src")
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK || !bytes.Contains(rec.Body.Bytes(), []byte(`"result"`)) {
				return fmt.Errorf("%s: status %d: %s", r.method, rec.Code, rec.Body)
			}
			return nil
		}
		if err := serve(); err != nil {
			return err
		}
		before, err := snapshot(filepath.Join(dir, r.method, "before"))
		if err != nil {
			return err
		}
		if err := serve(); err != nil {
			return err
		}
		after, err := snapshot(filepath.Join(dir, r.method, "after"))
		if err != nil {
			return err
		}
		rooms := map[string]int{}
		for block, n := range after {
			if n > before[block] {
				rooms[path(block)]++
			}
		}
		names := make([]string, 0, len(rooms))
		for name := range rooms {
			if !strings.HasPrefix(name, "tidings/bench/") {
				names = append(names, name)
			}
		}
		sort.Strings(names)
		fmt.Printf("%s: %d packages\n", r.method, len(names))
		for _, name := range names {
			fmt.Printf("  %-40s %4d blocks\n", name, rooms[name])
		}
	}
	return nil
}

// snapshot writes the coverage counters into dir and returns them, by
// block ("file:position"), as go tool covdata reads them.
func snapshot(dir string) (map[string]int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := coverage.WriteMetaDir(dir); err != nil {
		return nil, fmt.Errorf("%w (build it with -cover -covermode=atomic -coverpkg=tidings/...)", err)
	}
	if err := coverage.WriteCountersDir(dir); err != nil {
		return nil, fmt.Errorf("%w (build it with -cover -covermode=atomic -coverpkg=tidings/...)", err)
	}
	out := filepath.Join(dir, "profile.txt")
	if b, err := exec.Command("go", "tool", "covdata", "textfmt", "-i", dir, "-o", out).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go tool covdata: %w: %s", err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	counts := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Scan() // mode: atomic
	for sc.Scan() {
		// file:start,end statements count
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 {
			continue
		}
		n, err := strconv.Atoi(fields[2])
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", out, sc.Text(), err)
		}
		counts[fields[0]] += n
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(counts) == 0 {
		return nil, errors.New("no coverage counters: build it with -cover -covermode=atomic and -coverpkg of tidings's packages")
	}
	return counts, nil
}

// path is the import path of the package of block, "dir/file.go:pos".
func path(block string) string {
	file, _, _ := strings.Cut(block, ":")
	return filepath.Dir(file)
}
