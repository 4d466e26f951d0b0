package server

import (
	"errors"
	"maps"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// modern is the 2026-07-28 result encoder: every result says its
// resultType, cacheable ones their ttlMs and cacheScope, and _meta names
// the server unless WithoutServerInfo was given.
type modern Server

// Finish appends resultType, the cache hint and _meta, and closes the
// result object.
func (e *modern) Finish(dst []byte, t engine.Tail) ([]byte, error) {
	dst = append(dst, `"resultType":`...)
	dst, _ = jsontext.AppendQuote(dst, t.ResultType)
	if t.Hint != nil {
		dst = append(dst, `,"ttlMs":`...)
		dst = strconv.AppendInt(dst, t.Hint.TTLms, 10)
		dst = append(dst, `,"cacheScope":`...)
		dst, _ = jsontext.AppendQuote(dst, string(t.Hint.Scope))
	}
	switch {
	case len(t.Meta) > 0:
		m := maps.Clone(t.Meta)
		if !e.cfg.noServerInfo {
			m[mcp.MetaServerInfo] = e.infoJSON
		}
		mb, err := jsonrpc.Marshal(m)
		if err != nil {
			return nil, err
		}
		dst = append(dst, `,"_meta":`...)
		dst = append(dst, mb...)
	case !e.cfg.noServerInfo:
		// The common case, without a map: serverInfo alone.
		dst = append(dst, `,"_meta":{"`+mcp.MetaServerInfo+`":`...)
		dst = append(dst, e.infoJSON...)
		dst = append(dst, '}')
	}
	return append(dst, '}'), nil
}

// encodeResult marshals a handler's result object and finishes it with
// the request's encoder.
func (s *Server) encodeResult(req *Request, v any, t engine.Tail) ([]byte, error) {
	b, err := jsonrpc.Marshal(v)
	if err != nil {
		return nil, err
	}
	if len(b) < 2 || b[0] != '{' {
		return nil, errors.New("result is not an object")
	}
	out := make([]byte, 0, len(b)+len(s.infoJSON)+96)
	out = append(out, '{')
	if inner := b[1 : len(b)-1]; len(inner) > 0 {
		out = append(out, inner...)
		out = append(out, ',')
	}
	return req.enc.Finish(out, t)
}

// reply encodes v as the complete result of req.
func (s *Server) reply(req *Request, v any, t engine.Tail) engine.Reply {
	if t.ResultType == "" {
		t.ResultType = mcp.ResultComplete
	}
	b, err := s.encodeResult(req, v, t)
	if err != nil {
		return s.internal(req.ID, err)
	}
	return s.okReply(req.ID, b)
}

// okReply wraps an encoded result in a success response. The body buffer
// comes from the server's pool: a tools/list page is tens of kilobytes,
// and allocating (and zeroing, and collecting) a fresh buffer of that size
// per request cost more than everything else the handler does.
func (s *Server) okReply(id jsonrpc.ID, result []byte) engine.Reply {
	bp, _ := s.bodies.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	*bp = jsonrpc.AppendResponse((*bp)[:0], id, result)
	return engine.Reply{Body: *bp, Buf: bp, Pool: &s.bodies}
}

// internal logs err and answers -32603 without its details, which may
// name things the caller should not learn.
func (s *Server) internal(id jsonrpc.ID, err error) engine.Reply {
	s.log.Error("mcp: internal error", "err", err)
	return engine.Fail(id, jsonrpc.CodeInternalError, "Internal error", nil)
}

// hint turns a cache policy into the wire hint.
func (p CachePolicy) hint() *engine.Hint {
	return &engine.Hint{TTLms: p.ttlMs(), Scope: p.scope()}
}
