package server

import (
	"net/http"

	"tidings/jsonrpc"
)

// maxPooledBody bounds the buffers kept for reuse, so one huge result does
// not stay pinned in the pool.
const maxPooledBody = 1 << 20

// okReply wraps an encoded result in a success response. The body buffer
// comes from the server's pool: a tools/list page is tens of kilobytes,
// and allocating (and zeroing, and collecting) a fresh buffer of that size
// per request cost more than everything else the handler does.
func (s *Server) okReply(id jsonrpc.ID, result []byte) Reply {
	bp, _ := s.bodies.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	*bp = jsonrpc.AppendResponse((*bp)[:0], id, result)
	return Reply{Body: *bp, Status: http.StatusOK, buf: bp, pool: &s.bodies}
}

// Release hands Body's buffer back for reuse by later replies and clears
// Body. Call it at most once, after Body has been written out and when no
// copy of this Reply will be used again. Transports that never call it
// lose nothing but the reuse.
func (r *Reply) Release() {
	if r.buf == nil {
		return
	}
	if cap(*r.buf) <= maxPooledBody {
		r.pool.Put(r.buf)
	}
	r.buf, r.pool, r.Body = nil, nil, nil
}
