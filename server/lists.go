package server

import (
	"strconv"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// discover answers server/discover.
func (s *Server) discover(req *Request) engine.Reply {
	res := struct {
		SupportedVersions []string       `json:"supportedVersions"`
		Capabilities      mcp.ServerCaps `json:"capabilities"`
		Instructions      string         `json:"instructions,omitempty"`
	}{[]string{mcp.Version}, s.capabilities(), s.cfg.instructions}
	var meta mcp.Meta
	if s.cfg.discoverMeta != nil {
		meta = s.cfg.discoverMeta()
	}
	return s.reply(req, res, engine.Tail{Hint: s.cfg.policies[ListDiscover].hint(), Meta: meta})
}

// listPage answers one page of a list: a keyset page after the cursor's
// key, mostly a copy of the items' JSON encoded at registration.
func listPage[T any](s *Server, r *registry[T], l List, field string, c *engine.Call, req *Request) engine.Reply {
	snap := r.load()
	p := s.cfg.policies[l]
	var after string
	hasAfter := false
	binding := strconv.Itoa(int(l)) + "\x00" + req.Principal
	if c.P.Cursor != nil {
		key, err := s.seal.open(purposeCursor, *c.P.Cursor, binding, s.cfg.now())
		if err != nil {
			return engine.Fail(req.ID, jsonrpc.CodeInvalidParams, "Invalid cursor", nil)
		}
		after, hasAfter = string(key), true
	}
	// The cached first page is the 2026-07-28 one of the anonymous
	// caller, or of anyone when the list fits in one page: a nextCursor
	// is bound to the principal, so a page with one must not be served to
	// another. Nobody gets it when lists depend on who asks, nor an
	// earlier era, whose results are encoded differently.
	_, isModern := req.enc.(*modern)
	cacheable := isModern && !hasAfter && s.cfg.visible == nil &&
		(req.Principal == "" || len(snap.items) <= s.cfg.pageSize)
	if cacheable {
		if cached := snap.firstPage.Load(); cached != nil {
			return s.okReply(req.ID, *cached)
		}
	}
	var keep func(string) bool
	if s.cfg.visible != nil {
		keep = func(key string) bool { return s.cfg.visible(req.Principal, l, key) }
		p.Scope = mcp.ScopePrivate
	}
	items, more := snap.page(after, hasAfter, s.cfg.pageSize, keep)
	size := 64 + len(s.infoJSON)
	for _, e := range items {
		size += len(e.json) + 1
	}
	b := make([]byte, 0, size+128)
	b = append(b, `{"`...)
	b = append(b, field...)
	b = append(b, `":[`...)
	for i, e := range items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, e.json...)
	}
	b = append(b, "],"...)
	if more {
		b = append(b, `"nextCursor":`...)
		b, _ = jsontext.AppendQuote(b, s.seal.seal(purposeCursor, []byte(items[len(items)-1].key), binding, time.Time{}))
		b = append(b, ',')
	}
	b, err := req.enc.Finish(b, engine.Tail{ResultType: mcp.ResultComplete, Hint: p.hint()})
	if err != nil {
		return s.internal(req.ID, err)
	}
	if cacheable {
		snap.firstPage.Store(&b)
	}
	return s.okReply(req.ID, b)
}

// sees reports whether principal may see the item keyed key of list l.
func (s *Server) sees(principal string, l List, key string) bool {
	return s.cfg.visible == nil || s.cfg.visible(principal, l, key)
}
