package server

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/hub"
	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// Origin supplies a server's items from somewhere other than its own
// registries — other servers, for a gateway in front of them. With one
// (WithOrigin), every list, tools/call, prompts/get, resources/read and
// completion/complete is answered by it, while the server keeps doing
// everything around them: both eras and both transports, cursors sealed
// with the server's secret, requestState sealed and bound to the caller,
// listens and sessions, limits, middleware and the bus. The origin tells
// the server of its changes with ListChanged and ResourceUpdated.
//
// A method returns what the caller may see: an origin that filters per
// caller marks its pages private. Errors are told as from any handler: a
// *jsonrpc.Error as it is, an *InputRequired as an input_required result,
// ErrResourceNotFound (from ReadResource) as the spec's not-found error.
// An origin that also implements TaskOrigin passes tasks on.
type Origin interface {
	// List returns one page of req.List for req.Principal.
	List(ctx context.Context, req *ListRequest) (*ListPage, error)
	// CallTool runs a tools/call; req.Arguments is the raw object.
	CallTool(ctx context.Context, req *ToolRequest) (*mcp.CallToolResult, error)
	// GetPrompt runs a prompts/get.
	GetPrompt(ctx context.Context, req *PromptRequest) (*mcp.GetPromptResult, error)
	// ReadResource runs a resources/read; ResourceRequest.SetCache sets its hint.
	ReadResource(ctx context.Context, req *ResourceRequest) (*mcp.ReadResourceResult, error)
	// Complete runs a completion/complete.
	Complete(ctx context.Context, req *CompleteRequest) (*mcp.Completion, error)
	// ToolSchema returns the input schema of the tool named name as
	// principal sees it, without I/O (from what the origin keeps), so
	// that a call's Mcp-Param-* headers are checked against what the
	// schema declares before the call goes anywhere; false skips the
	// check.
	ToolSchema(principal, name string) (jsontext.Value, bool)
	// Follow is called when a listen starts to follow uris' contents, and
	// the function it returns when the listen ends: an origin that hears
	// of changes from elsewhere follows there what somebody follows here.
	Follow(principal string, uris []string) (release func())
	// Forget is called when another replica tells (over the bus) that
	// list l changed, or with ReadResource that the resource uri did (""
	// for every resource: the bus may have lost changes), before this
	// replica's listeners are told: what the origin keeps of it is stale.
	Forget(l List, uri string)
}

// ExtensionOrigin is an Origin whose servers offer extensions: the
// server advertises what Extensions returns (beside those of
// WithExtension) in capabilities.extensions, at each discover or
// initialize. A gateway passes its upstreams' on. Extensions returns a
// map the server may keep and change, and must not block.
type ExtensionOrigin interface {
	Origin
	Extensions() map[string]jsontext.Value
}

// ListRequest is one page of a list asked of an Origin.
type ListRequest struct {
	Request
	// List is the list asked for: ListTools, ListPrompts, ListResources
	// or ListTemplates.
	List List
	// Cursor is the Next of the page before, as the origin made it, nil
	// for the first page. The server sealed it, bound to the list and the
	// principal, so it is what the origin wrote: a forged or foreign
	// cursor is refused before the origin is asked.
	Cursor []byte
}

// ListPage is one page of a list, as an Origin answers it.
type ListPage struct {
	// Items are the items' JSON, in the list's order.
	Items []jsontext.Value
	// Next, when not nil, is what the origin needs to find the next page.
	Next []byte
	// Cache is the page's hint; a page that depends on who asks must be
	// private.
	Cache CachePolicy
	// Meta is the page's own _meta: what the origin tells of the page
	// besides its items (a gateway names the servers missing from it).
	Meta mcp.Meta
}

// WithOrigin has o answer the server's lists and item requests in place of
// its registries (see Origin). Items registered with AddTool and the like
// are then never served. The server advertises the capabilities set with
// WithCapabilities.
func WithOrigin(o Origin) Option { return func(c *config) { c.origin = o } }

// ListChanged tells the listeners of list l (ListTools, ListPrompts,
// ListResources or ListTemplates) that it changed — and, over the bus,
// the other replicas' — for a server whose items come from an Origin.
// keys name the items that changed, so that, with WithVisibility, only
// those who may see one of them are told; none tells everyone who
// follows the list.
func (s *Server) ListChanged(l List, keys ...string) {
	s.ListChangedContext(context.Background(), l, keys...)
}

// ListChangedContext is ListChanged for a change that continues a trace:
// with WithTracerProvider, the change's span is the child of the span ctx
// holds — a gateway passes on the trace context of its upstream's
// notification, so that one trace runs from the upstream's change to
// every listener of the gateway.
func (s *Server) ListChangedContext(ctx context.Context, l List, keys ...string) {
	if len(keys) == 0 {
		publish(ctx, s.hub, s.cfg.bus, change{Event: hub.Event{Kinds: kindOf(l)}}, s.changes, roadOrigin)
		return
	}
	switch l {
	case ListTools:
		s.tools.changedIn(ctx, keys)
	case ListPrompts:
		s.prompts.changedIn(ctx, keys)
	case ListResources:
		s.resources.changedIn(ctx, keys)
	case ListTemplates:
		s.templates.changedIn(ctx, keys)
	}
}

// ListChangedFor tells the listeners of principal alone, on this
// replica, that list l changed: for an origin whose items differ per
// caller and which hears of each caller's changes on its own (a gateway
// speaking to an upstream with each caller's credential). Another
// replica's listeners of principal are not told: that replica hears of
// the change itself, on its own listen.
func (s *Server) ListChangedFor(principal string, l List) {
	s.hub.PublishRemote(hub.Event{Kinds: kindOf(l), Audience: []string{principal}})
}

// ResourceUpdatedFor tells the listeners of principal alone, on this
// replica, that the content of uri changed (see ListChangedFor).
func (s *Server) ResourceUpdatedFor(principal, uri string) {
	s.hub.PublishRemote(hub.Event{URI: uri, Audience: []string{principal}})
}

// listFields are the result members of each list.
var listFields = [...]string{ListTools: "tools", ListPrompts: "prompts", ListResources: "resources", ListTemplates: "resourceTemplates"}

// list answers one page of list l from the origin.
func (o *originSource) list(ctx context.Context, l List, c *engine.Call, req *Request) engine.Reply {
	s := o.s
	binding := strconv.Itoa(int(l)) + "\x00" + req.Principal
	lreq := &ListRequest{Request: *req, List: l}
	if c.P.Cursor != nil {
		b, err := s.seal.open(purposeCursor, *c.P.Cursor, binding, s.cfg.now())
		if err != nil {
			return engine.Fail(req.ID, jsonrpc.CodeInvalidParams, "Invalid cursor", nil)
		}
		lreq.Cursor = b
	}
	page, err := o.o.List(context.WithValue(ctx, ctxKey{}, &lreq.Request), lreq)
	if err != nil {
		return s.handlerError(ctx, req, "", nil, err)
	}
	// The result is written straight into the pooled response buffer,
	// after the envelope's head: a long list is copied once, into memory
	// already in use, not into a new buffer and then again into the
	// envelope (okReply).
	bp, _ := s.bodies.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	b := jsonrpc.AppendResponse((*bp)[:0], req.ID, nil)
	b = b[:len(b)-1] // the envelope's closing brace: the result goes here
	b = append(b, `{"`...)
	b = append(b, listFields[l]...)
	b = append(b, `":[`...)
	for i, it := range page.Items {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, it...)
	}
	b = append(b, "],"...)
	if page.Next != nil {
		b = append(b, `"nextCursor":`...)
		b, _ = jsontext.AppendQuote(b, s.seal.seal(purposeCursor, page.Next, binding, time.Time{}))
		b = append(b, ',')
	}
	b, err = req.enc.Finish(b, engine.Tail{ResultType: mcp.ResultComplete, Hint: page.Cache.hint(), Meta: page.Meta})
	if err != nil {
		*bp = (*bp)[:0]
		s.bodies.Put(bp)
		return s.internal(req.ID, err)
	}
	*bp = append(b, '}')
	return engine.Reply{Body: *bp, Buf: bp, Pool: &s.bodies}
}

// callTool runs a tools/call through the origin.
func (o *originSource) callTool(ctx context.Context, c *engine.Call, req *Request) engine.Reply {
	s := o.s
	if c.P.Name == nil {
		return invalid(req.ID, "Invalid params: missing tool name")
	}
	name := *c.P.Name
	args := c.P.Arguments
	if len(args) == 0 || string(args) == "null" {
		args = jsontext.Value("{}")
	}
	if args[0] != '{' {
		return invalid(req.ID, "Invalid params: arguments must be an object")
	}
	if r := s.openState(c, req, name, args); r != nil {
		return *r
	}
	treq := &ToolRequest{Request: *req, Arguments: args, srv: s}
	res, err := withInput(ctx, &treq.Request, func() (*mcp.CallToolResult, error) {
		return o.o.CallTool(context.WithValue(ctx, ctxKey{}, &treq.Request), treq)
	})
	var ts *TaskStarted
	if errors.As(err, &ts) {
		return s.originTaskStarted(req, ts.Task)
	}
	if err != nil {
		return s.handlerError(ctx, req, name, args, err)
	}
	return s.toolResult(req, name, nil, res)
}

// getPrompt runs a prompts/get through the origin.
func (o *originSource) getPrompt(ctx context.Context, c *engine.Call, req *Request) engine.Reply {
	s := o.s
	if c.P.Name == nil {
		return invalid(req.ID, "Invalid params: missing prompt name")
	}
	args, bad := promptArgs(c, req)
	if bad != nil {
		return *bad
	}
	return s.runPrompt(ctx, c, req, *c.P.Name, args, o.o.GetPrompt)
}

// readResource runs a resources/read through the origin.
func (o *originSource) readResource(ctx context.Context, c *engine.Call, req *Request) engine.Reply {
	s := o.s
	if c.P.URI == nil {
		return invalid(req.ID, "Invalid params: missing uri")
	}
	return s.runRead(ctx, c, req, *c.P.URI, nil, o.o.ReadResource, s.cfg.policies[ReadResource])
}

// completion runs a completion/complete through the origin.
func (o *originSource) completion(ctx context.Context, c *engine.Call, req *Request) engine.Reply {
	s := o.s
	if c.P.Ref == nil || c.P.Argument == nil {
		return invalid(req.ID, "Invalid params: ref and argument are required")
	}
	return s.runComplete(ctx, c, req, *c.P.Ref, o.o.Complete)
}

// kindOf is the hub kind under which list l's changes are told.
func kindOf(l List) hub.Kind {
	switch l {
	case ListTools:
		return hub.Of(mcp.ToolsList)
	case ListPrompts:
		return hub.Of(mcp.PromptsList)
	case ListResources, ListTemplates:
		return hub.Of(mcp.ResourcesList)
	}
	return 0
}
