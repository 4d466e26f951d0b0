package engine

import "tidings/mcp"

// Hint is a result's caching hint.
type Hint struct {
	// TTLms becomes ttlMs (never negative).
	TTLms int64
	// Scope becomes cacheScope.
	Scope mcp.CacheScope
}

// Tail is what a result carries after its own members.
type Tail struct {
	// ResultType is "complete" or "input_required".
	ResultType string
	// Hint is the caching hint of a cacheable result, nil otherwise.
	Hint *Hint
	// Meta is the handler's own _meta.
	Meta mcp.Meta
}

// Encoder finishes result objects the way one protocol era wants them:
// 2026-07-28 results carry resultType, cache hints and serverInfo;
// 2025-11-25 results carry none of them.
type Encoder interface {
	// Finish appends t to dst, which holds "{" and the result's own
	// members, each followed by a comma, and closes the object.
	Finish(dst []byte, t Tail) ([]byte, error)
}
