package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// nullStream is a Stream for requests that never stream.
type nullStream struct{}

func (nullStream) Send([]byte) error { return nil }
func (nullStream) KeepAlive() error  { return nil }

// cursorFuzzServer has 10 tools listed 3 per page, under a fixed secret
// so that seeds taken from one run stay valid in the next.
func cursorFuzzServer(f *testing.F) (*server.Server, []string) {
	srv := server.New(testInfo, server.WithPageSize(3), server.WithSecret([]byte("fuzz-cursor-secret-0123456789abcdef")))
	var names []string
	for i := range 10 {
		name := fmt.Sprintf("tool-%02d", i)
		names = append(names, name)
		if err := srv.AddTool(textTool(name), echoHandler(name)); err != nil {
			f.Fatal(err)
		}
	}
	return srv, names
}

// fuzzListResp is a tools/list response, decoded loosely.
type fuzzListResp struct {
	Result *struct {
		Tools      []struct{ Name string } `json:"tools"`
		NextCursor *string                 `json:"nextCursor"`
		ResultType string                  `json:"resultType"`
	} `json:"result"`
	Error *struct {
		Code    jsonrpc.Code `json:"code"`
		Message string       `json:"message"`
	} `json:"error"`
}

// fuzzListPage serves tools/list with the given cursor params member (""
// for none) and returns the reply and the decoded response.
func fuzzListPage(t testing.TB, srv *server.Server, cursorMember string) (engine.Reply, *fuzzListResp) {
	t.Helper()
	params := `"_meta":{"io.modelcontextprotocol/protocolVersion":"` + mcp.Version + `","io.modelcontextprotocol/clientCapabilities":{}}`
	if cursorMember != "" {
		params += `,"cursor":` + cursorMember
	}
	raw := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{` + params + `}}`)
	msg, err := jsonrpc.Decode(raw, 0)
	if err != nil {
		t.Fatalf("request does not decode: %v", err)
	}
	var out fuzzListResp
	c, rep := engine.Parse(msg)
	if rep == nil {
		r := engine.Of(srv).Serve(context.Background(), c, "", nil, nullStream{})
		rep = &r
	}
	if err := json.Unmarshal(rep.Body, &out); err != nil {
		t.Fatalf("response is not JSON: %v\n%s", err, rep.Body)
	}
	return *rep, &out
}

// FuzzCursor feeds arbitrary strings to tools/list as the cursor: the
// answer is a valid page or -32602, never a panic or any other code.
func FuzzCursor(f *testing.F) {
	srv, names := cursorFuzzServer(f)

	// Seeds: every real cursor of a full walk, and damaged copies of them.
	var cursors []string
	for cur := ""; ; {
		member := ""
		if cur != "" {
			b, _ := json.Marshal(cur)
			member = string(b)
		}
		_, out := fuzzListPage(f, srv, member)
		if out.Result == nil || out.Result.NextCursor == nil {
			break
		}
		cur = *out.Result.NextCursor
		cursors = append(cursors, cur)
	}
	if len(cursors) != 3 {
		f.Fatalf("walk of 10 tools in pages of 3 gave %d cursors, want 3", len(cursors))
	}
	for _, c := range cursors {
		f.Add(c)
		f.Add(c[:len(c)-1])
		f.Add(c + "A")
		f.Add(strings.ToUpper(c))
		f.Add(strings.Repeat(c, 2))
		b := []byte(c)
		b[len(b)/2] ^= 1
		f.Add(string(b))
	}
	for _, s := range []string{"", "A", "AA==", "AQ", "!!!", "\x00", "null", "ünï", strings.Repeat("A", 9000), strings.Repeat("A", 27)} {
		f.Add(s)
	}

	f.Fuzz(func(t *testing.T, cursor string) {
		b, err := json.Marshal(cursor) // invalid UTF-8 becomes U+FFFD
		if err != nil {
			t.Skip()
		}
		rep, out := fuzzListPage(t, srv, string(b))
		if out.Error != nil {
			if out.Error.Code != jsonrpc.CodeInvalidParams {
				t.Fatalf("cursor %q: error %d %q, want -32602", cursor, out.Error.Code, out.Error.Message)
			}
			if out.Result != nil {
				t.Fatalf("error response with a result: %s", rep.Body)
			}
			if rep.Outcome != engine.Answered && rep.Outcome != engine.Refused {
				t.Fatalf("outcome %d for a bad cursor", rep.Outcome)
			}
			return
		}
		res := out.Result
		if res == nil || res.ResultType != mcp.ResultComplete {
			t.Fatalf("cursor %q: neither a page nor an error: %s", cursor, rep.Body)
		}
		if len(res.Tools) == 0 && res.NextCursor != nil {
			t.Fatalf("empty page with a next cursor: %s", rep.Body)
		}
		if len(res.Tools) > 3 {
			t.Fatalf("page of %d tools, page size is 3", len(res.Tools))
		}
		if len(res.Tools) == 0 {
			return
		}
		got := make([]string, len(res.Tools))
		for i, tl := range res.Tools {
			got[i] = tl.Name
		}
		// A page is a run of consecutive names of the sorted list.
		start := slices.Index(names, got[0])
		if start < 0 || start+len(got) > len(names) || !slices.Equal(names[start:start+len(got)], got) {
			t.Fatalf("page %q is not a run of %q", got, names)
		}
	})
}
