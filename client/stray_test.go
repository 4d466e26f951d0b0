package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"tidings/mcp"
)

// strayServer announces the change a tools/call makes on that call's own
// response stream, untagged, the way Python's FastMCP does; nothing else
// would tell the client. With legacy set it is a 2025-11-25 server (no
// server/discover, a session, a GET stream that stays silent, lists
// without a TTL and tools.listChanged declared); otherwise a 2026-07-28
// one whose tool list is fresh for an hour.
type strayServer struct {
	legacy bool
	mu     sync.Mutex
	tools  []string
	lists  atomic.Int32 // tools/list requests
	stream chan struct{}
	once   sync.Once
}

func (s *strayServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		if !s.legacy {
			http.Error(w, "no", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.(http.Flusher).Flush()
		s.once.Do(func() { close(s.stream) })
		<-r.Context().Done()
		return
	}
	if r.Method == http.MethodDelete {
		return
	}
	var req rawRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "bad body", http.StatusBadRequest)
		return
	}
	reply := func(result string) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, req.ID, result)
	}
	switch req.Method {
	case mcp.MethodDiscover:
		if s.legacy {
			http.Error(w, "404 page not found", http.StatusNotFound)
			return
		}
		reply(rawDiscover)
	case mcp.MethodInitialize:
		w.Header().Set(mcp.HeaderSessionID, "s1")
		reply(`{"protocolVersion":"2025-11-25","capabilities":{"tools":{"listChanged":true}},"serverInfo":{"name":"stray","version":"1"}}`)
	case mcp.NotifyInitialized:
		w.WriteHeader(http.StatusAccepted)
	case mcp.MethodToolsList:
		s.lists.Add(1)
		s.mu.Lock()
		var tools []string
		for _, n := range s.tools {
			tools = append(tools, fmt.Sprintf(`{"name":%q,"inputSchema":{"type":"object"}}`, n))
		}
		s.mu.Unlock()
		hints := `,"resultType":"complete","ttlMs":3600000,"cacheScope":"public"`
		if s.legacy {
			hints = ""
		}
		reply(`{"tools":[` + strings.Join(tools, ",") + `]` + hints + `}`)
	case mcp.MethodToolsCall:
		s.mu.Lock()
		s.tools = append(s.tools, "b")
		s.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprintf(w, "data: %s\n\n", `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)
		fmt.Fprintf(w, "data: %s\n\n", fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"added b"}]}}`, req.ID))
	default:
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32601,"message":"no"}}`, req.ID)
	}
}

// TestChangeOnARequestStream checks that a change notification on the
// response stream of a tools/call is not lost: a 2026-07-28 client
// invalidates what it announces, and a 2025-11-25 session hands it to
// the Watcher following the session.
func TestChangeOnARequestStream(t *testing.T) {
	t.Run("2026-07-28", func(t *testing.T) {
		s := &strayServer{tools: []string{"a"}}
		ts := httptest.NewServer(s)
		t.Cleanup(func() { closeServer(ts) })
		c := rawClient(t, ts.URL)
		ctx := t.Context()
		if _, err := c.Tools(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CallTool(ctx, "add", nil); err != nil {
			t.Fatal(err)
		}
		got, err := c.Tools(ctx)
		must(t, err)
		if !slices.Equal(names(got), []string{"a", "b"}) || s.lists.Load() != 2 {
			t.Errorf("Tools = %v after %d lists, want a, b read again", names(got), s.lists.Load())
		}
	})
	t.Run("2025-11-25", func(t *testing.T) {
		s := &strayServer{legacy: true, tools: []string{"a"}, stream: make(chan struct{})}
		ts := httptest.NewServer(s)
		t.Cleanup(func() { closeServer(ts) })
		c := rawClient(t, ts.URL)
		_, log := watch(t, c, withKinds(fastBackoff, true, false, false))
		log.waitFor(t, "the first read", kindIs(ToolsChanged))
		<-s.stream
		if _, err := c.CallTool(t.Context(), "add", nil); err != nil {
			t.Fatal(err)
		}
		ev, _ := log.waitFor(t, "the re-read the call's notification asks for", func(e Event) bool { return e.Kind == ToolsChanged && len(e.Added) > 0 })
		if !slices.Equal(ev.Added, []string{"b"}) {
			t.Errorf("ToolsChanged = %+v, want b added", ev)
		}
	})
}
