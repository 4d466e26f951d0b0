package streamhttp

import (
	"context"
	"errors"
	"net/http"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/jsonrpc"
	"tidings/mcp"
	"tidings/server"
)

// The same endpoint serves 2025-11-25 clients through sessions. The era is
// decided per request: a request that names a session, or one that carries
// neither _meta nor a 2026-07-28 version header, is a legacy one (an initialize that carries 2026-07-28 _meta is a modern
// request for a method that no longer exists); everything else follows
// 2026-07-28, with no session state.

// isLegacy decides the era of one POST.
func (h *Handler) isLegacy(r *http.Request, msg *jsonrpc.Message, sid string) bool {
	if sid != "" {
		return true
	}
	if msg.IsResponse() {
		return false
	}
	if hv := r.Header.Get(mcp.HeaderProtocolVersion); hv != "" && !server.IsLegacyVersion(hv) {
		return false
	}
	var p struct {
		Meta *struct {
			Version *string `json:"io.modelcontextprotocol/protocolVersion"`
		} `json:"_meta"`
	}
	_ = jsonrpc.UnmarshalParams(orEmpty(msg.Params), &p)
	return p.Meta == nil || p.Meta.Version == nil
}

func orEmpty(b jsontext.Value) jsontext.Value {
	if len(b) == 0 {
		return jsontext.Value("{}")
	}
	return b
}

func (h *Handler) principalOf(r *http.Request) string {
	if h.cfg.principal != nil {
		return h.cfg.principal(r)
	}
	return ""
}

// serveLegacy handles one POST of the 2025-11-25 era.
func (h *Handler) serveLegacy(w http.ResponseWriter, r *http.Request, msg *jsonrpc.Message, sid string) {
	if sid == "" {
		if msg.Method != mcp.MethodInitialize {
			if msg.IsNotification() {
				w.WriteHeader(http.StatusAccepted)
				return
			}
			writeError(w, http.StatusBadRequest, msg.ID, jsonrpc.CodeInvalidRequest,
				"Bad Request: no session; send initialize first, or use protocol version "+mcp.Version+" with _meta", nil)
			return
		}
		call, rep := h.srv.Parse(msg)
		if rep != nil {
			writeJSON(w, rep.Status, rep.Body)
			return
		}
		ss, reply := h.srv.Initialize(call)
		if ss != nil {
			w.Header().Set(mcp.HeaderSessionID, ss.ID())
		}
		writeJSON(w, statusOr200(reply.Status), reply.Body)
		return
	}
	ss, ok := h.srv.Session(sid)
	if !ok {
		writeError(w, http.StatusNotFound, msg.ID, jsonrpc.CodeInvalidRequest, "Session not found: initialize again", nil)
		return
	}
	if hv := r.Header.Get(mcp.HeaderProtocolVersion); hv != "" && !server.IsLegacyVersion(hv) {
		writeError(w, http.StatusBadRequest, msg.ID, jsonrpc.CodeInvalidRequest,
			"Bad Request: "+mcp.HeaderProtocolVersion+" "+hv+" does not belong to a session", nil)
		return
	}
	switch {
	case msg.IsResponse():
		ss.Deliver(msg)
		w.WriteHeader(http.StatusAccepted)
		return
	case msg.IsNotification():
		if msg.Method == mcp.NotifyCancelled {
			ss.Cancel(msg)
		}
		w.WriteHeader(http.StatusAccepted)
		return
	case msg.Method == mcp.MethodInitialize:
		writeError(w, http.StatusBadRequest, msg.ID, jsonrpc.CodeInvalidRequest, "Bad Request: the session is already initialized", nil)
		return
	}
	call, rep := h.srv.Parse(msg)
	if rep != nil {
		writeJSON(w, rep.Status, rep.Body)
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer ss.Track(msg.ID, cancel)()
	out := &responder{w: w, rc: http.NewResponseController(w), timeout: h.cfg.writeTimeout}
	reply := h.srv.ServeLegacy(ctx, ss, call, h.principalOf(r), out)
	out.finish(reply)
}

func statusOr200(s int) int {
	if s == 0 {
		return http.StatusOK
	}
	return s
}

// serveSessionMethod handles GET (the session's notification stream) and
// DELETE (the end of a session).
func (h *Handler) serveSessionMethod(w http.ResponseWriter, r *http.Request, sid string) {
	ss, ok := h.srv.Session(sid)
	if !ok {
		writeError(w, http.StatusNotFound, jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "Session not found: initialize again", nil)
		return
	}
	switch r.Method {
	case http.MethodDelete:
		h.srv.EndSession(ss.ID())
		w.WriteHeader(http.StatusOK)
	case http.MethodGet:
		out := &responder{w: w, rc: http.NewResponseController(w), timeout: h.cfg.writeTimeout}
		start := func() error {
			out.mu.Lock()
			defer out.mu.Unlock()
			out.startSSE()
			return out.rc.Flush()
		}
		err := h.srv.ServeSessionStream(r.Context(), ss, out, start)
		out.mu.Lock()
		out.clearDeadline()
		out.mu.Unlock()
		switch {
		case errors.Is(err, server.ErrStreamOpen):
			writeError(w, http.StatusConflict, jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "Conflict: the session already has a notification stream", nil)
		case err != nil:
			panic(http.ErrAbortHandler)
		}
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		writeError(w, http.StatusMethodNotAllowed, jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "Method not allowed", nil)
	}
}
