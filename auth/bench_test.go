package auth_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/auth"
	"tidings/internal/testas"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

const benchSchema = `{"type":"object","properties":{` +
	`"path":{"type":"string","description":"File path relative to the workspace root"},` +
	`"query":{"type":"string","description":"Text or regular expression to look for"},` +
	`"limit":{"type":"integer","minimum":1,"maximum":1000,"description":"Maximum number of results"},` +
	`"recursive":{"type":"boolean","default":false,"description":"Descend into subdirectories"}},` +
	`"required":["path","query"],"additionalProperties":false}`

// benchServer returns a server with 50 tools, as streamhttp's benchmark.
func benchServer(b *testing.B) *server.Server {
	b.Helper()
	srv := server.New(mcp.Implementation{Name: "bench", Version: "1.0.0"})
	yes := true
	for i := range 50 {
		err := srv.AddTool(mcp.Tool{
			Name:        fmt.Sprintf("search_files_%02d", i),
			Title:       fmt.Sprintf("Search files (%d)", i),
			Description: "Searches the files under a path for text and returns matching lines with their locations.",
			InputSchema: jsontext.Value(benchSchema),
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: &yes},
		}, func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	return srv
}

// runToolsList POSTs the same tools/list b.N times and reads every body.
func runToolsList(b *testing.B, url, authz string) {
	b.Helper()
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, DisableCompression: true}}
	defer c.CloseIdleConnections()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":` + meta + `}}`
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Accept", "application/json, text/event-stream")
	hdr.Set(mcp.HeaderProtocolVersion, mcp.Version)
	hdr.Set(mcp.HeaderMethod, mcp.MethodToolsList)
	if authz != "" {
		hdr.Set("Authorization", authz)
	}
	var n int64
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header = hdr
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		m, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d, %v", resp.StatusCode, err)
		}
		n = m
	}
	b.SetBytes(n)
}

// BenchmarkToolsListHTTPNoAuth is the baseline: no resource server.
func BenchmarkToolsListHTTPNoAuth(b *testing.B) {
	ts := httptest.NewServer(streamhttp.New(benchServer(b)))
	defer ts.Close()
	runToolsList(b, ts.URL+"/mcp", "")
}

// BenchmarkToolsListHTTPAuth is the same tools/list behind Require with
// an RS256 JWT from the real issuer; its keys are cached after the first
// request, so this measures validation, not fetching.
func BenchmarkToolsListHTTPAuth(b *testing.B) {
	ts := httptest.NewUnstartedServer(nil)
	resource := "http://" + ts.Listener.Addr().String() + "/mcp"
	as := testas.Start(b, resource)
	g, err := auth.New(as.Issuer(), resource)
	if err != nil {
		b.Fatal(err)
	}
	mux := http.NewServeMux()
	g.Mount(mux, streamhttp.New(benchServer(b), streamhttp.WithPrincipal(auth.Principal)))
	ts.Config.Handler = mux
	ts.Start()
	defer ts.Close()
	runToolsList(b, resource, "Bearer "+as.Token(b))
}
