package gateway

import (
	"sync"
	"time"

	"tidings/mcp"
)

// keptReads are the public resources/read answers the gateway keeps,
// by URI, bounded in bytes (Config.MaxKeptBytes) as well as in number:
// a few large resources must not grow the gateway without end. Past a
// bound, answers whose time is up go first, then others at random (the
// order maps are walked in), until the new one fits; an answer larger
// than an eighth of the bound is not kept at all.
type keptReads struct {
	mu    sync.Mutex
	m     map[string]*keptRead
	bytes int64
}

// keptRead is a public resources/read answer, kept for its ttlMs.
type keptRead struct {
	res *mcp.ReadResourceResult
	// from is the upstream that answered: served again only for a read
	// routed to it, so that a reload that hands the URI to another
	// upstream, or a caller routed elsewhere, is not served this one.
	from    *upstream
	expires time.Time
	size    int64 // the answer's bytes as the upstream sent them
}

// maxKeptReads bounds the number of reads the gateway keeps.
const maxKeptReads = 10000

func newKeptReads() *keptReads { return &keptReads{m: map[string]*keptRead{}} }

// get returns the answer kept for uri, if any.
func (k *keptReads) get(uri string) *keptRead {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.m[uri]
}

// put keeps kr for uri, within maxBytes; it reports whether it did.
func (k *keptReads) put(uri string, kr *keptRead, maxBytes int64, now time.Time) bool {
	if kr.size > maxBytes/8 {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.dropLocked(uri)
	if k.bytes+kr.size > maxBytes || len(k.m) >= maxKeptReads {
		for u, old := range k.m {
			if !now.Before(old.expires) {
				k.dropLocked(u)
			}
		}
	}
	for u := range k.m {
		if k.bytes+kr.size <= maxBytes && len(k.m) < maxKeptReads {
			break
		}
		if old := k.m[u]; old != nil {
			old.from.st.readsEvicted.Add(1)
		}
		k.dropLocked(u)
	}
	k.m[uri] = kr
	k.bytes += kr.size
	kr.from.st.readBytes.Add(kr.size)
	return true
}

// forget drops what is kept for uri, or everything for "".
func (k *keptReads) forget(uri string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if uri != "" {
		k.dropLocked(uri)
		return
	}
	for u := range k.m {
		k.dropLocked(u)
	}
}

func (k *keptReads) dropLocked(uri string) {
	if old, ok := k.m[uri]; ok {
		delete(k.m, uri)
		k.bytes -= old.size
		old.from.st.readBytes.Add(-old.size)
	}
}
