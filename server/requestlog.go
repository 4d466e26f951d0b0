package server

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"tidings/jsonrpc"
	"tidings/mcp"
)

// LogRequests returns middleware that logs each request at debug level
// once it ends: its method, the name it names (tool, prompt or resource
// URI), its outcome (ok, or the JSON-RPC error code) and how long it took.
// Arguments, results and the caller's credentials are never logged.
func LogRequests(l *slog.Logger) Middleware {
	return func(next MethodHandler) MethodHandler {
		return func(ctx context.Context, req *Request) error {
			if !l.Enabled(ctx, slog.LevelDebug) {
				return next(ctx, req)
			}
			start := time.Now()
			err := next(ctx, req)
			// A parked listen is logged when it ends (only a listen is
			// ever parked).
			if req.Method == mcp.MethodListen && req.AfterEnd(func(end error) { logRequest(context.Background(), l, req, start, end) }) {
				return err
			}
			logRequest(ctx, l, req, start, err)
			return err
		}
	}
}

// logRequest logs one request that ended with err.
func logRequest(ctx context.Context, l *slog.Logger, req *Request, start time.Time, err error) {
	attrs := []slog.Attr{slog.String("method", req.Method), slog.Duration("duration", time.Since(start))}
	if req.Name != "" {
		attrs = append(attrs, slog.String("name", req.Name))
	}
	var je *jsonrpc.Error
	switch {
	case errors.As(err, &je):
		attrs = append(attrs, slog.Int("code", int(je.Code)))
	case errors.Is(err, context.Canceled):
		attrs = append(attrs, slog.String("outcome", "cancelled")) // a parked listen its client left
	case err != nil:
		attrs = append(attrs, slog.String("outcome", "failed"))
	case ctx.Err() != nil:
		attrs = append(attrs, slog.String("outcome", "cancelled"))
	default:
		attrs = append(attrs, slog.String("outcome", "ok"))
	}
	l.LogAttrs(ctx, slog.LevelDebug, "mcp: request", attrs...)
}
