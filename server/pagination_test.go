package server_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"tidings/mcp"
	"tidings/server"
)

func toolName(i int) string { return fmt.Sprintf("t%03d", i) }

// pagedTools returns a server with n tools registered in shuffled order
// and the given page size.
func pagedTools(t testing.TB, n, pageSize int, opts ...server.Option) *harness {
	h := newHarness(t, append([]server.Option{server.WithPageSize(pageSize)}, opts...)...)
	order := rand.Perm(n)
	for _, i := range order {
		mustAddTool(t, h.srv, textTool(toolName(i)), echoHandler("x"))
	}
	return h
}

// page fetches one page of a list and returns its item keys and cursor
// (nil when it is the last page).
func (h *harness) page(method string, cursor *string) ([]string, *string, map[string]any) {
	h.t.Helper()
	params := P{}
	if cursor != nil {
		params["cursor"] = *cursor
	}
	r, _ := h.call("p", method, params)
	res := r.ok(h.t)
	var keys []string
	key := "name"
	if method == mcp.MethodResourcesList {
		key = "uri"
	} else if method == mcp.MethodResourcesTemplates {
		key = "uriTemplate"
	}
	for _, it := range res[listField(method)].([]any) {
		keys = append(keys, it.(map[string]any)[key].(string))
	}
	var next *string
	if nc, ok := res["nextCursor"]; ok {
		s, isStr := nc.(string)
		if !isStr || s == "" {
			h.t.Fatalf("nextCursor = %#v, want a non-empty string (PAG-8)", nc)
		}
		next = &s
	}
	return keys, next, res
}

// TestPaginationPages covers PAG-2/3 and ORD-1/3: pages of the configured
// size in key order, nextCursor on every page but the last, and the same
// bytes for the same request while nothing changes.
func TestPaginationPages(t *testing.T) {
	h := pagedTools(t, 10, 3)
	var all []string
	var sizes []int
	var cursor *string
	for i := 0; ; i++ {
		keys, next, _ := h.page(mcp.MethodToolsList, cursor)
		all = append(all, keys...)
		sizes = append(sizes, len(keys))
		if next == nil {
			break
		}
		if i > 10 {
			t.Fatal("walk does not end")
		}
		cursor = next
	}
	if !slices.Equal(sizes, []int{3, 3, 3, 1}) {
		t.Errorf("page sizes = %v, want [3 3 3 1]", sizes)
	}
	want := make([]string, 10)
	for i := range want {
		want[i] = toolName(i)
	}
	if !slices.Equal(all, want) {
		t.Errorf("walk = %v, want %v in key order", all, want)
	}

	// Deterministic: the same request gives the same bytes, first page and
	// later pages alike.
	a, _ := h.call(1, mcp.MethodToolsList, P{})
	b, _ := h.call(1, mcp.MethodToolsList, P{})
	if !bytes.Equal(a.raw, b.raw) {
		t.Errorf("first page differs between calls:\n%s\n%s", a.raw, b.raw)
	}
	_, next, _ := h.page(mcp.MethodToolsList, nil)
	a, _ = h.call(1, mcp.MethodToolsList, P{"cursor": *next})
	b, _ = h.call(1, mcp.MethodToolsList, P{"cursor": *next})
	if !bytes.Equal(a.raw, b.raw) {
		t.Errorf("second page differs between calls:\n%s\n%s", a.raw, b.raw)
	}

	// A list that fits one page has no nextCursor.
	small := pagedTools(t, 3, 3)
	if keys, next, _ := small.page(mcp.MethodToolsList, nil); len(keys) != 3 || next != nil {
		t.Errorf("exact page: %d items, cursor %v", len(keys), next)
	}
}

// TestPaginationAllLists walks every paginated list (PAG-1) with a small
// page size and checks that each item appears once, in order.
func TestPaginationAllLists(t *testing.T) {
	h := newHarness(t, server.WithPageSize(2))
	var tools, prompts, resources, templates []string
	for i := 4; i >= 0; i-- {
		n := fmt.Sprintf("x%d", i)
		mustAddTool(t, h.srv, textTool(n), echoHandler(n))
		mustAddPrompt(t, h.srv, mcp.Prompt{Name: n}, simplePrompt)
		mustAddResource(t, h.srv, "mem://"+n, textResource("mem://"+n, n))
		if err := h.srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "mem://" + n + "/{v}"}, textResource("", n)); err != nil {
			t.Fatal(err)
		}
		tools = append([]string{n}, tools...)
		prompts = append([]string{n}, prompts...)
		resources = append([]string{"mem://" + n}, resources...)
		templates = append([]string{"mem://" + n + "/{v}"}, templates...)
	}
	for method, want := range map[string][]string{
		mcp.MethodToolsList:          tools,
		mcp.MethodPromptsList:        prompts,
		mcp.MethodResourcesList:      resources,
		mcp.MethodResourcesTemplates: templates,
	} {
		var got []string
		var cursor *string
		for range 10 {
			keys, next, _ := h.page(method, cursor)
			if len(keys) > 2 {
				t.Errorf("%s: page of %d items, page size is 2", method, len(keys))
			}
			got = append(got, keys...)
			if cursor = next; cursor == nil {
				break
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s walk = %v, want %v", method, got, want)
		}
	}
}

// TestPaginationStableUnderChange covers the keyset promise: items present
// for the whole walk are returned exactly once, whatever is added or
// removed mid-walk, including the item the cursor points after.
func TestPaginationStableUnderChange(t *testing.T) {
	h := pagedTools(t, 20, 4)
	removed := map[string]bool{}
	seen := map[string]int{}
	var cursor *string
	step := 0
	for {
		keys, next, _ := h.page(mcp.MethodToolsList, cursor)
		for _, k := range keys {
			seen[k]++
		}
		if next == nil {
			break
		}
		cursor = next
		// Mutate between pages: remove the item the cursor points after,
		// one already seen, one not yet seen; add items before, inside
		// and after the rest of the walk; hide one tool.
		last := keys[len(keys)-1]
		h.srv.RemoveTools(last)
		removed[last] = true
		if step == 0 {
			h.srv.RemoveTools(toolName(1), toolName(15))
			removed[toolName(1)], removed[toolName(15)] = true, true
			if err := h.srv.Disable(t.Context(), server.Tool(toolName(17))); err != nil {
				t.Fatal(err)
			}
			removed[toolName(17)] = true
		}
		for _, n := range []string{fmt.Sprintf("a%02d", step), fmt.Sprintf("t%03d5", 4*step+5), fmt.Sprintf("z%02d", step)} {
			mustAddTool(t, h.srv, textTool(n), echoHandler(n))
		}
		step++
		if step > 50 {
			t.Fatal("walk does not end")
		}
	}
	for i := range 20 {
		n := toolName(i)
		if removed[n] {
			continue
		}
		if seen[n] != 1 {
			t.Errorf("%s present for the whole walk was returned %d times", n, seen[n])
		}
	}
	for n, c := range seen {
		if c > 1 {
			t.Errorf("%s returned %d times", n, c)
		}
	}
}

// TestBadCursors covers PAG-5 and the cursor's integrity: forged,
// tampered, empty, cross-list, foreign-server and cross-principal cursors
// all get -32602, with the id echoed.
func TestBadCursors(t *testing.T) {
	secret := bytes.Repeat([]byte{7}, 32)
	h := newHarness(t, server.WithPageSize(1), server.WithSecret(secret))
	for _, n := range []string{"a", "b", "c"} {
		mustAddTool(t, h.srv, textTool(n), echoHandler(n))
		mustAddPrompt(t, h.srv, mcp.Prompt{Name: n}, simplePrompt)
	}
	_, next, _ := h.page(mcp.MethodToolsList, nil)
	good := *next

	tampered := []byte(good)
	mid := len(tampered) / 2
	if tampered[mid] == 'A' {
		tampered[mid] = 'B'
	} else {
		tampered[mid] = 'A'
	}
	mustAddResource(t, h.srv, "mem://r", textResource("mem://r", "r"))
	other := newHarness(t, server.WithPageSize(1))
	mustAddTool(t, other.srv, textTool("a"), echoHandler("a"))
	mustAddTool(t, other.srv, textTool("b"), echoHandler("b"))

	for _, c := range []struct {
		name   string
		h      *harness
		method string
		cursor any
	}{
		{"forged", h, mcp.MethodToolsList, "bm90LWEtY3Vyc29y"},
		{"not base64", h, mcp.MethodToolsList, "!!!"},
		{"tampered", h, mcp.MethodToolsList, string(tampered)},
		{"truncated", h, mcp.MethodToolsList, good[:len(good)-2]},
		{"empty string (PAG-7: not the end)", h, mcp.MethodToolsList, ""},
		{"tools cursor on prompts/list", h, mcp.MethodPromptsList, good},
		{"tools cursor on resources/list", h, mcp.MethodResourcesList, good},
		{"cursor from a server with another secret", other, mcp.MethodToolsList, good},
		{"number", h, mcp.MethodToolsList, 5},
	} {
		r, _ := c.h.call("cur", c.method, P{"cursor": c.cursor})
		if r.Error == nil || r.Error.Code != -32602 {
			t.Errorf("%s: got %s, want -32602", c.name, r.raw)
		}
	}

	// The good cursor still works, and on a replica sharing the secret.
	if keys, _, _ := h.page(mcp.MethodToolsList, &good); !slices.Equal(keys, []string{"b"}) {
		t.Errorf("good cursor gave %v", keys)
	}
	replica := newHarness(t, server.WithPageSize(1), server.WithSecret(secret))
	for _, n := range []string{"a", "b", "c"} {
		mustAddTool(t, replica.srv, textTool(n), echoHandler(n))
	}
	if keys, _, _ := replica.page(mcp.MethodToolsList, &good); !slices.Equal(keys, []string{"b"}) {
		t.Errorf("replica with the same secret gave %v for the cursor", keys)
	}
}

// TestCursorBoundToPrincipal checks that a cursor issued under one
// authorization context is refused under another, and that each principal
// can walk its own list even after an anonymous walk filled any cache.
func TestCursorBoundToPrincipal(t *testing.T) {
	h := pagedTools(t, 5, 2)
	// An anonymous walk first.
	if _, next, _ := h.page(mcp.MethodToolsList, nil); next == nil {
		t.Fatal("no second page")
	}
	alice := &harness{t: t, srv: h.srv, principal: "alice"}
	bob := &harness{t: t, srv: h.srv, principal: "bob"}
	var got []string
	var cursor *string
	for range 5 {
		keys, next, _ := alice.page(mcp.MethodToolsList, cursor)
		got = append(got, keys...)
		if cursor = next; cursor == nil {
			break
		}
	}
	if len(got) != 5 {
		t.Errorf("alice walked %v, want 5 tools", got)
	}
	_, aliceNext, _ := alice.page(mcp.MethodToolsList, nil)
	r, _ := bob.call(1, mcp.MethodToolsList, P{"cursor": *aliceNext})
	r.fails(t, -32602)
	r, _ = h.call(1, mcp.MethodToolsList, P{"cursor": *aliceNext})
	r.fails(t, -32602)
}

// TestCacheHints covers CACHE-1/3: ttlMs and cacheScope on all six
// cacheable results, with the default policies.
func TestCacheHints(t *testing.T) {
	h := fullServer(t)
	def := server.DefaultPolicies()
	for _, c := range []struct {
		method string
		params P
		l      server.List
	}{
		{mcp.MethodDiscover, P{}, server.ListDiscover},
		{mcp.MethodToolsList, P{}, server.ListTools},
		{mcp.MethodPromptsList, P{}, server.ListPrompts},
		{mcp.MethodResourcesList, P{}, server.ListResources},
		{mcp.MethodResourcesTemplates, P{}, server.ListTemplates},
		{mcp.MethodResourcesRead, P{"uri": "mem://a"}, server.ReadResource},
		{mcp.MethodResourcesRead, P{"uri": "mem://users/1"}, server.ReadResource},
	} {
		r, _ := h.call(1, c.method, c.params)
		checkCache(t, c.method, r.ok(t), def[c.l].TTL, mcp.ScopePublic)
	}
	// Not defined for these (CACHE-2).
	for _, c := range everyMethod() {
		switch c.method {
		case mcp.MethodToolsCall, mcp.MethodPromptsGet, mcp.MethodComplete:
			r, _ := h.call(1, c.method, c.params)
			noCache(t, c.method, r.ok(t))
		}
	}
}

// TestCachePolicyOverride covers CACHE-14 and WithCachePolicy: each
// registry's policy is configurable, the scope is the same on every page,
// and a negative TTL is sent as 0.
func TestCachePolicyOverride(t *testing.T) {
	h := pagedTools(t, 5, 2,
		server.WithCachePolicy(server.ListTools, server.CachePolicy{TTL: 5 * time.Second, Scope: mcp.ScopePrivate}),
		server.WithCachePolicy(server.ListDiscover, server.CachePolicy{TTL: -time.Second}),
		server.WithCachePolicy(server.ListPrompts, server.CachePolicy{TTL: 1500 * time.Millisecond, Scope: mcp.ScopePrivate}),
		server.WithCachePolicy(server.ReadResource, server.CachePolicy{TTL: 2 * time.Second, Scope: mcp.ScopePrivate}),
	)
	mustAddPrompt(t, h.srv, mcp.Prompt{Name: "p"}, simplePrompt)
	mustAddResource(t, h.srv, "mem://a", textResource("mem://a", "A"))

	var cursor *string
	pages := 0
	for {
		_, next, res := h.page(mcp.MethodToolsList, cursor)
		checkCache(t, fmt.Sprintf("tools/list page %d", pages), res, 5*time.Second, mcp.ScopePrivate)
		pages++
		if cursor = next; cursor == nil {
			break
		}
	}
	if pages != 3 {
		t.Errorf("%d pages, want 3", pages)
	}
	r, _ := h.call(1, mcp.MethodDiscover, P{})
	checkCache(t, "discover with negative TTL", r.ok(t), 0, mcp.ScopePublic)
	r, _ = h.call(1, mcp.MethodPromptsList, P{})
	checkCache(t, "prompts/list", r.ok(t), 1500*time.Millisecond, mcp.ScopePrivate)
	r, _ = h.call(1, mcp.MethodResourcesList, P{})
	checkCache(t, "resources/list keeps its default", r.ok(t), server.DefaultPolicies()[server.ListResources].TTL, mcp.ScopePublic)
	r, _ = h.call(1, mcp.MethodResourcesRead, P{"uri": "mem://a"})
	checkCache(t, "resources/read", r.ok(t), 2*time.Second, mcp.ScopePrivate)
}

// TestResourceCacheOverride covers per-resource hints: WithResourceCache
// on a resource and on a template, and ResourceRequest.SetCache, which
// wins over both.
func TestResourceCacheOverride(t *testing.T) {
	h := newHarness(t)
	mustAddResource(t, h.srv, "mem://plain", textResource("mem://plain", "p"))
	mustAddResource(t, h.srv, "mem://slow", textResource("mem://slow", "s"),
		server.WithResourceCache(server.CachePolicy{TTL: time.Hour}))
	mustAddResource(t, h.srv, "mem://mine",
		func(ctx context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			req.SetCache(server.CachePolicy{TTL: 3 * time.Second, Scope: mcp.ScopePrivate})
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "", "m")}}, nil
		}, server.WithResourceCache(server.CachePolicy{TTL: time.Hour}))
	if err := h.srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "mem://docs/{name}"},
		func(ctx context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
			if req.Vars["name"] == "secret" {
				req.SetCache(server.CachePolicy{TTL: 0, Scope: mcp.ScopePrivate})
			}
			return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "", "d")}}, nil
		}, server.WithResourceCache(server.CachePolicy{TTL: 42 * time.Second})); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		uri   string
		ttl   time.Duration
		scope mcp.CacheScope
	}{
		{"mem://plain", 0, mcp.ScopePublic},
		{"mem://slow", time.Hour, mcp.ScopePublic},
		{"mem://mine", 3 * time.Second, mcp.ScopePrivate},
		{"mem://docs/readme", 42 * time.Second, mcp.ScopePublic},
		{"mem://docs/secret", 0, mcp.ScopePrivate},
	} {
		r, _ := h.call(1, mcp.MethodResourcesRead, P{"uri": c.uri})
		checkCache(t, c.uri, r.ok(t), c.ttl, c.scope)
	}
}
