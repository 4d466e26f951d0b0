package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"tidings/client"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// A gateway that is its own upstream, directly (its own URL in the
// configuration) or through other gateways, would ask itself for its
// lists without end and hear its own changes as its upstream's, which it
// tells itself again: a core spinning with no traffic, and lists that
// never answer. So each gateway has a random id, which it tells in its
// server/discover result with the ids of the gateways its upstreams
// reach (IdentityMetaKey); it reads the same of each upstream when it
// first asks anything of it and whenever its listen reconnects. An
// upstream that is this gateway, or reaches it, is cut off for good, with
// the loop named in the log and to every request that would go to it.

// IdentityMetaKey is the member of a tidings gateway's server/discover
// _meta that tells who it is: {"id": ..., "reaches": [...]}, the ids of
// the gateways behind it.
const IdentityMetaKey = "io.github.tidings/gateway"

// identity is what IdentityMetaKey holds.
type identity struct {
	ID      string   `json:"id"`
	Reaches []string `json:"reaches,omitempty"`
}

// newGatewayID returns a random id for a gateway.
func newGatewayID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// discoverMeta is the gateway's own part of its server/discover result.
func (g *Gateway) discoverMeta() mcp.Meta {
	me := identity{ID: g.id}
	ups, _ := g.upstreams()
	for _, u := range ups {
		if r := u.reaches.Load(); r != nil {
			for _, id := range *r {
				if !slices.Contains(me.Reaches, id) {
					me.Reaches = append(me.Reaches, id)
				}
			}
		}
	}
	b, err := jsonrpc.Marshal(me)
	if err != nil {
		return nil
	}
	return mcp.Meta{IdentityMetaKey: b}
}

// errLoop is the error of every request that would go to an upstream
// that leads back to this gateway.
var errLoop = errors.New("it leads back to this gateway")

// loopState is what is known of whether an upstream leads back here.
type loopState struct {
	checked atomic.Bool // a server/discover of it was read
	err     atomic.Pointer[error]
}

// identify reads u's server/discover (once, or again with force) and
// tells whether u leads back to this gateway: the error then names the
// loop. An upstream that does not answer is not known to loop.
func (u *upstream) identify(ctx context.Context, force bool) error {
	if e := u.loop.err.Load(); e != nil {
		return *e
	}
	if u.x != nil || !force && u.loop.checked.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	d, err := u.c.Discover(ctx)
	if err != nil {
		return nil
	}
	return u.noteIdentity(d)
}

// noteIdentity reads whether the upstream that discovered as d leads
// back to this gateway, and cuts it off if so.
func (u *upstream) noteIdentity(d *client.DiscoverResult) error {
	u.loop.checked.Store(true)
	var them identity
	if raw, ok := d.Meta[IdentityMetaKey]; !ok || jsonrpc.UnmarshalParams(raw, &them) != nil || them.ID == "" {
		return nil
	}
	reach := append([]string{them.ID}, them.Reaches...)
	u.reaches.Store(&reach)
	if !slices.Contains(reach, u.g.id) {
		return nil
	}
	how := "it is this gateway itself"
	if them.ID != u.g.id {
		how = "it is the gateway " + them.ID + ", which reaches this one (" + u.g.id + ") through its own upstreams: " +
			strings.Join(them.Reaches, ", ")
	}
	err := fmt.Errorf("upstream %s leads back to this gateway: %s; it is left out until the configuration changes: %w", u.cfg.ID, how, errLoop)
	if u.loop.err.CompareAndSwap(nil, &err) {
		u.log.Error("upstream is a loop; it is left out", "err", err)
		p := err.Error()
		u.problem.Store(&p)
		u.down.Store(true)
		u.retryAt.Store(1<<63 - 1)
		if u.cancel != nil {
			u.cancel() // its listen, which would hear this gateway's own changes
		}
		u.forgetAll()
	}
	return err
}
