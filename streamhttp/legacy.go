package streamhttp

import (
	"context"
	"errors"
	"net/http"

	"tidings/internal/engine"
	"tidings/internal/legacy"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// The same endpoint serves 2025-11-25 clients through sessions. The era is
// decided per request, by engine.Call.Era: the version a request declares
// wins, so one that declares 2026-07-28 (in _meta or in
// MCP-Protocol-Version) is served statelessly even if it also names a
// session, and one that declares neither is a session's, or an initialize
// (an initialize that carries 2026-07-28 _meta is a modern request for a
// method that no longer exists). A response is a session's when it names
// one.

func (h *Handler) principalOf(r *http.Request) string {
	if h.cfg.principal != nil {
		return h.cfg.principal(r)
	}
	return ""
}

// serveLegacy handles one POST of the 2025-11-25 era: msg as parsed into
// call (rep is the refusal of params that could not be read, reported in
// its turn), or a response (call nil).
func (h *Handler) serveLegacy(w http.ResponseWriter, r *http.Request, msg *jsonrpc.Message, call *engine.Call, rep *engine.Reply, sid string) {
	if sid == "" {
		if call == nil || call.M.Handler != engine.HandleInitialize {
			if msg.IsNotification() {
				h.writeJSON(w, http.StatusAccepted, nil)
				return
			}
			h.writeError(w, http.StatusBadRequest, msg.ID, jsonrpc.CodeInvalidRequest,
				"Bad Request: no session; send initialize first, or use protocol version "+mcp.Version+" with _meta", nil)
			return
		}
		if rep != nil {
			h.writeJSON(w, statusOf(rep), rep.Body)
			return
		}
		ss, reply, err := h.sessions.Open(r.Context(), call, h.principalOf(r))
		status := statusOf(&reply)
		if errors.Is(err, legacy.ErrFull) {
			// Full for now: a client, or a balancer, may try again
			// later or elsewhere.
			status = http.StatusServiceUnavailable
		}
		if ss != nil {
			w.Header().Set(mcp.HeaderSessionID, ss.ID())
		}
		h.writeJSON(w, status, reply.Body)
		return
	}
	ss, ok := h.sessions.Get(sid, h.principalOf(r))
	if !ok {
		h.writeError(w, http.StatusNotFound, msg.ID, jsonrpc.CodeInvalidRequest, "Session not found: initialize again", nil)
		return
	}
	switch {
	case msg.IsResponse():
		ss.Deliver(msg)
		h.writeJSON(w, http.StatusAccepted, nil)
		return
	case msg.IsNotification():
		if msg.Method == mcp.NotifyCancelled {
			ss.Cancel(msg)
		}
		h.writeJSON(w, http.StatusAccepted, nil)
		return
	case call.M.Handler == engine.HandleInitialize:
		h.writeError(w, http.StatusBadRequest, msg.ID, jsonrpc.CodeInvalidRequest, "Bad Request: the session is already initialized", nil)
		return
	}
	if rep != nil {
		h.writeJSON(w, statusOf(rep), rep.Body)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	untrack, ok := ss.Track(msg.ID, cancel)
	if !ok {
		h.writeError(w, http.StatusBadRequest, msg.ID, jsonrpc.CodeInvalidRequest,
			"Invalid Request: id "+msg.ID.Raw()+" is already in use by a request in flight", nil)
		return
	}
	defer untrack()
	out := h.newResponder(w, r)
	reply := ss.Serve(ctx, call, out)
	out.finish(reply)
}

// serveSessionMethod handles GET (the session's notification stream) and
// DELETE (the end of a session).
func (h *Handler) serveSessionMethod(w http.ResponseWriter, r *http.Request, sid string) {
	ss, ok := h.sessions.Get(sid, h.principalOf(r))
	if !ok {
		h.writeError(w, http.StatusNotFound, jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "Session not found: initialize again", nil)
		return
	}
	switch r.Method {
	case http.MethodDelete:
		ss.End()
		h.writeJSON(w, http.StatusOK, nil)
	case http.MethodGet:
		out := h.newResponder(w, r)
		start := func() error {
			out.mu.Lock()
			defer out.mu.Unlock()
			out.startSSE()
			return out.write(nil)
		}
		err := ss.Stream(r.Context(), out, start)
		out.mu.Lock()
		out.clearDeadline()
		out.mu.Unlock()
		var refused *legacy.RefusedError
		switch {
		case errors.As(err, &refused):
			h.writeJSON(w, http.StatusForbidden, jsonrpc.AppendErrorResponse(nil, jsonrpc.ID{}, refused.Err))
		case errors.Is(err, legacy.ErrStreamOpen):
			h.writeError(w, http.StatusConflict, jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "Conflict: the session already has a notification stream", nil)
		case err != nil:
			panic(http.ErrAbortHandler)
		}
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		h.writeError(w, http.StatusMethodNotAllowed, jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "Method not allowed", nil)
	}
}
