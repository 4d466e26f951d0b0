package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/jsonscan"
	"tidings/internal/xheader"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// maxPages bounds one list walk, so a server that hands out cursors
// forever cannot keep the client walking forever.
const maxPages = 10000

// walkRetries bounds how often a walk restarts because the list changed
// under it or a cursor stopped working.
const walkRetries = 4

// listAll walks every page of a paginated list and returns one consistent
// snapshot: when a change notification for the list arrives during the
// walk, or a cursor is refused, the walk starts over. The snapshot
// expires at the earliest receipt time plus TTL over its pages (CACHE-5),
// not at the end of the walk plus the smallest TTL, and its scope is the
// strictest page scope. Whose credentials each page's request carried
// goes to who.
func (c *Client) listAll(ctx context.Context, method, field, topic string, who *authRecord) ([]jsontext.Value, time.Time, mcp.CacheScope, error) {
	var lastErr error
	for attempt := 0; attempt < walkRetries; attempt++ {
		gen := c.cache.gen(topic)
		var items []jsontext.Value
		var cursor *string
		var expires time.Time
		scope := mcp.ScopePublic
		restart := false
		for page := 0; ; page++ {
			if page >= maxPages {
				return nil, time.Time{}, "", fmt.Errorf("client: %s: more than %d pages", method, maxPages)
			}
			params := map[string]any{}
			if cursor != nil {
				params["cursor"] = *cursor
			}
			res, err := c.do(ctx, method, params, callOpts{auth: who})
			received := c.cfg.now()
			if err != nil {
				var rpc *jsonrpc.Error
				if cursor != nil && errors.As(err, &rpc) && rpc.Code == jsonrpc.CodeInvalidParams {
					// The cursor stopped working (expired, or the server was
					// replaced): drop what we have and start over.
					lastErr, restart = err, true
					break
				}
				return nil, time.Time{}, "", err
			}
			next, pageItems, err := splitPage(res, field)
			if err != nil {
				return nil, time.Time{}, "", fmt.Errorf("client: %s: %w", method, err)
			}
			items = append(items, pageItems...)
			ttl, sc := c.hints(topic, res)
			if exp := received.Add(ttl); expires.IsZero() || exp.Before(expires) {
				expires = exp
			}
			if sc == mcp.ScopePrivate {
				scope = mcp.ScopePrivate
			}
			if next == nil {
				break
			}
			cursor = next
		}
		if restart {
			continue
		}
		if c.cache.gen(topic) != gen && attempt < walkRetries-1 {
			lastErr = errors.New("list changed during the walk")
			continue
		}
		if expires.IsZero() { // no page at all; cannot happen, but never fresh
			expires = c.cfg.now()
		}
		return items, expires, scope, nil
	}
	return nil, time.Time{}, "", fmt.Errorf("client: %s: no consistent snapshot after %d walks: %w", method, walkRetries, lastErr)
}

// splitPage returns a list page's cursor and its items under field,
// the items as sub-slices of res: a list of many tools with large
// schemas is not copied item by item. res is a result as the message
// decoder hands it, valid JSON the caller owns. A page with a member
// name written with escapes, or of a shape the scan does not expect, is
// read by the decoder instead, which also words what is wrong.
func splitPage(res jsontext.Value, field string) (next *string, items []jsontext.Value, err error) {
	if len(res) == 0 || res[0] != '{' {
		return decodePage(res, field) // which says what is wrong
	}
	var cursor, list []byte
	o := jsonscan.NewObject(res)
	for {
		name, v, more := o.Next()
		if !more {
			break
		}
		if bytes.IndexByte(name, '\\') >= 0 {
			return decodePage(res, field)
		}
		switch string(name) {
		case "nextCursor":
			cursor = v
		case field:
			list = v
		}
	}
	if list != nil && list[0] != '[' && string(list) != "null" {
		return decodePage(res, field)
	}
	if cursor != nil {
		_ = json.Unmarshal(cursor, &next)
	}
	a := jsonscan.NewArray(list)
	for {
		v, more := a.Next()
		if !more {
			return next, items, nil
		}
		items = append(items, v[:len(v):len(v)])
	}
}

// decodePage is splitPage by the decoder, for what the scan leaves.
func decodePage(res jsontext.Value, field string) (next *string, items []jsontext.Value, err error) {
	var fields map[string]jsontext.Value
	if err := json.Unmarshal(res, &fields); err != nil {
		return nil, nil, err
	}
	if raw, ok := fields["nextCursor"]; ok {
		_ = json.Unmarshal(raw, &next)
	}
	if raw, ok := fields[field]; ok {
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", field, err)
		}
	}
	return next, items, nil
}

// decodeItems decodes raw list items into T, skipping ones that fail.
// The raw JSON values inside an item (a tool's schemas, say) are kept as
// sub-slices of the item rather than copies: a tools list is mostly
// schemas, and a client re-reads it on every change. The price: a kept
// schema keeps the whole page it came in alive, which a cached list
// holds anyway.
func decodeItems[T any](raw []jsontext.Value) []T {
	out := make([]T, 0, len(raw))
	var cur []byte
	keep := json.WithUnmarshalers(json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *jsontext.Value) error {
		val, err := dec.ReadValue()
		if err != nil {
			return err
		}
		// The decoder reads cur in place, so val is cur's own bytes
		// ending at the offset; if it ever is not, it is copied.
		end := int(dec.InputOffset())
		if start := end - len(val); start >= 0 && end <= len(cur) && bytes.Equal(cur[start:end], val) {
			*v = cur[start:end:end]
		} else {
			*v = bytes.Clone(val)
		}
		return nil
	}))
	for _, r := range raw {
		var v T
		cur = r
		if json.Unmarshal(r, &v, keep) == nil {
			out = append(out, v)
		}
	}
	return out
}

// Tools returns the server's whole tool list, from the cache while it is
// fresh. Tools whose x-mcp-header annotations are invalid are left out
// (and logged), as they cannot be called correctly over HTTP.
func (c *Client) Tools(ctx context.Context) ([]mcp.Tool, error) {
	tl, err := c.toolList(ctx)
	if err != nil {
		return nil, err
	}
	return tl.tools, nil
}

// toolList is the cached answer of tools/list: the valid tools, and for
// each of them the x-mcp-header parameters its calls mirror. Keeping the
// parameters in the cache entry means every view of the client (see As)
// that shares the entry mirrors arguments the same way, whoever fetched it.
type toolList struct {
	tools   []mcp.Tool
	headers map[string][]xheader.Param // every valid tool's name → its params
}

// lookup returns the x-mcp-header parameters of a tool and whether the
// list has the tool. A nil list has nothing.
func (tl *toolList) lookup(name string) ([]xheader.Param, bool) {
	if tl == nil {
		return nil, false
	}
	ps, ok := tl.headers[name]
	return ps, ok
}

func (c *Client) toolList(ctx context.Context) (*toolList, error) {
	return cachedAs[*toolList](ctx, c.cache, mcp.MethodToolsList, topicTools, c.lookupContext(ctx), func(ctx context.Context) (fetched, error) {
		var who authRecord
		raw, expires, scope, err := c.listAll(ctx, mcp.MethodToolsList, "tools", topicTools, &who)
		if err != nil {
			return fetched{}, err
		}
		all := decodeItems[mcp.Tool](raw)
		tl := &toolList{tools: make([]mcp.Tool, 0, len(all)), headers: make(map[string][]xheader.Param, len(all))}
		for _, t := range all {
			ps, err := xheader.Params(t.InputSchema)
			if err != nil {
				c.cfg.logger.Warn("mcp: ignoring tool with invalid x-mcp-header", "tool", t.Name, "reason", err.Error())
				continue
			}
			tl.headers[t.Name] = ps
			tl.tools = append(tl.tools, t)
		}
		return fetched{value: tl, expires: expires, scope: scope, as: who.context()}, nil
	})
}

// Prompts returns the server's whole prompt list (cached).
func (c *Client) Prompts(ctx context.Context) ([]mcp.Prompt, error) {
	return cachedList[mcp.Prompt](ctx, c, mcp.MethodPromptsList, "prompts", topicPrompts)
}

// Resources returns the server's whole resource list (cached).
func (c *Client) Resources(ctx context.Context) ([]mcp.Resource, error) {
	return cachedList[mcp.Resource](ctx, c, mcp.MethodResourcesList, "resources", topicResources)
}

// ResourceTemplates returns the server's whole template list (cached).
func (c *Client) ResourceTemplates(ctx context.Context) ([]mcp.ResourceTemplate, error) {
	return cachedList[mcp.ResourceTemplate](ctx, c, mcp.MethodResourcesTemplates, "resourceTemplates", topicTemplates)
}

func cachedList[T any](ctx context.Context, c *Client, method, field, topic string) ([]T, error) {
	return cachedAs[[]T](ctx, c.cache, method, topic, c.lookupContext(ctx), func(ctx context.Context) (fetched, error) {
		var who authRecord
		raw, expires, scope, err := c.listAll(ctx, method, field, topic, &who)
		if err != nil {
			return fetched{}, err
		}
		return fetched{value: decodeItems[T](raw), expires: expires, scope: scope, as: who.context()}, nil
	})
}

// Freshness reports how far the cached answer of a list method
// ("tools/list", ...) or of a resource read (pass the URI with
// method "resources/read") can be trusted right now, for this client: a
// private answer given to other credentials is Missing here. With an
// Authorizer, it is asked which credentials the next request would carry.
// It also tells whether a Watcher would hear of a change (Notice, Live),
// which is what makes an answer without a TTL worth trusting.
func (c *Client) Freshness(method, uri string) FreshnessInfo {
	as := c.lookupContext(context.Background())
	if method == mcp.MethodResourcesRead {
		return c.cache.info(readKey(uri), topicResource+uri, as)
	}
	return c.cache.info(method, methodTopic(method), as)
}

// methodTopic returns the cache topic of a cached method's answers.
func methodTopic(method string) string {
	switch method {
	case mcp.MethodResourcesTemplates:
		return topicTemplates
	case mcp.MethodDiscover:
		return topicDiscover
	}
	for _, l := range mcp.Lists() {
		if l.Method() == method {
			return l.String()
		}
	}
	return method
}

func readKey(uri string) string { return mcp.MethodResourcesRead + "\x00" + uri }
