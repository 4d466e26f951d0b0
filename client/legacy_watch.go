package client

import (
	"context"
	"errors"
	"time"

	"tidings/jsonrpc"
	"tidings/mcp"
)

// legacyListen follows a 2025-11-25 server for one connection: it
// subscribes to each resource, opens the session's notification stream and
// reads it until it ends. What the server's capabilities do not promise to
// announce is polled. It reports whether the loop should go on.
func (w *Watcher) legacyListen(ctx context.Context, ls *legacySession, want mcp.SubscriptionFilter, bo *backoff) bool {
	c := w.c
	var got mcp.SubscriptionFilter
	caps := ls.caps
	got.ToolsListChanged = want.ToolsListChanged && caps.Tools != nil && caps.Tools.ListChanged
	got.PromptsListChanged = want.PromptsListChanged && caps.Prompts != nil && caps.Prompts.ListChanged
	got.ResourcesListChanged = want.ResourcesListChanged && caps.Resources != nil && caps.Resources.ListChanged
	if caps.Resources != nil && caps.Resources.Subscribe {
		for _, u := range want.ResourceSubscriptions {
			if _, err := c.doLegacy(ctx, ls, mcp.MethodResourcesSubscribe, map[string]any{"uri": u}, callOpts{}); err == nil {
				got.ResourceSubscriptions = append(got.ResourceSubscriptions, u)
			} else if ctx.Err() != nil {
				return false
			}
		}
	}
	opened := false
	var openedAt time.Time
	onOpen := func() {
		opened, openedAt = true, time.Now()
		ls.setLive(got)
		w.acknowledged(ctx, want, got)
	}
	onMsg := func(m *jsonrpc.Message) {
		if m.IsRequest() {
			// The session stream also carries the server's own requests
			// (elicitation, sampling, roots, ping) that belong to no call.
			c.answerServer(ctx, m)
			return
		}
		how := tied
		if !notifies(got, m) {
			how = undeclared
		}
		w.notification(m, how)
	}
	err := ls.over(c).stream(ctx, c.cfg.listenIdle, onOpen, onMsg)
	ls.endLive(c.cache)
	c.cache.cover.down(w)
	if ctx.Err() != nil {
		return false
	}
	if opened && w.proven(openedAt) {
		bo.reset()
	}
	switch {
	case errors.Is(err, errNoStream):
		// Nothing will be announced: poll everything.
		w.state.Store(int32(Polling))
		w.setPolled(w.topics())
		w.markDirty(w.topics()...)
		<-ctx.Done()
		return false
	case errors.Is(err, errSessionGone):
		_, _ = c.reinitialize(ctx, ls)
	}
	w.state.Store(int32(Down))
	w.c.cache.markUnknown(w.topics()...)
	w.emit(ctx, Event{Kind: Disconnected, Err: err})
	if errors.Is(err, ErrClosed) {
		<-ctx.Done() // closed, or a server that cannot come back
		return false
	}
	return sleepCtx(ctx, bo.next())
}
