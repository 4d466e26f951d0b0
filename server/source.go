package server

import (
	"context"
	"sync"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/engine"
	"tidings/internal/xheader"
)

// source is where a server's items come from: its own registries, or the
// Origin given with WithOrigin (a gateway's upstreams, say). New picks
// one and nothing asks again: every list, every method that runs an
// item, the check of a call's headers against its tool, and what listens
// follow go through the source, so that the server around it — both eras,
// both transports, cursors, limits, listens, the bus — has one path,
// whichever answers.
type source interface {
	// list answers one page of list l.
	list(ctx context.Context, l List, c *engine.Call, req *Request) engine.Reply
	// callTool, getPrompt, readResource and completion run the item the
	// request names.
	callTool(ctx context.Context, c *engine.Call, req *Request) engine.Reply
	getPrompt(ctx context.Context, c *engine.Call, req *Request) engine.Reply
	readResource(ctx context.Context, c *engine.Call, req *Request) engine.Reply
	completion(ctx context.Context, c *engine.Call, req *Request) engine.Reply
	// completes reports whether completion/complete is served now.
	completes() bool
	// toolHeaders returns the x-mcp-header parameters of the tool name as
	// principal sees it, without I/O; none for a tool it cannot see.
	toolHeaders(principal, name string) []xheader.Param
	// follow is called when a listen or a session starts to follow uris'
	// contents, and the function it returns when it stops.
	follow(principal string, uris []string) (release func())
	// forget is told that list l (or, with ReadResource, the resource
	// uri; "" for every one) changed on another replica, before this
	// replica's listeners are: what the source keeps of it is stale.
	forget(l List, uri string)
	// extensions returns the extensions the source offers besides the
	// server's own (WithExtension), in a map the caller may change.
	extensions() map[string]jsontext.Value
}

// newSource is the source of a server configured with cfg, and the road
// its own changes come by.
func newSource(s *Server, cfg *config) (source, string) {
	if cfg.origin == nil {
		return (*registries)(s), roadLocal
	}
	o := &originSource{s: s, o: cfg.origin}
	o.exts, _ = cfg.origin.(ExtensionOrigin)
	return o, roadOrigin
}

// registries is the source of a server that serves what was registered
// with AddTool and the like: the default.
type registries Server

func (r *registries) list(_ context.Context, l List, c *engine.Call, req *Request) engine.Reply {
	s := (*Server)(r)
	switch l {
	case ListTools:
		return listPage(s, s.tools, ListTools, "tools", c, req)
	case ListPrompts:
		return listPage(s, s.prompts, ListPrompts, "prompts", c, req)
	case ListResources:
		return listPage(s, s.resources, ListResources, "resources", c, req)
	}
	return listPage(s, s.templates, ListTemplates, "resourceTemplates", c, req)
}

func (r *registries) completes() bool { return (*Server)(r).completer() != nil }

func (r *registries) toolHeaders(principal, name string) []xheader.Param {
	s := (*Server)(r)
	e, ok := s.tools.load().get(name)
	if !ok || !s.sees(principal, ListTools, name) {
		return nil
	}
	return e.val.headers
}

// follow has nothing to do: the registries hear of every change.
func (r *registries) follow(string, []string) func() { return func() {} }

// forget has nothing to do: the registries keep nothing of another
// replica's (the shared state, if any, is loaded anew).
func (r *registries) forget(List, string) {}

func (r *registries) extensions() map[string]jsontext.Value { return nil }

// originSource is the source of a server with an Origin.
type originSource struct {
	s *Server
	o Origin
	// exts is o when it offers extensions, nil when not.
	exts ExtensionOrigin
	// headers keeps the x-mcp-header parameters read from each input
	// schema the origin gave, by the schema's bytes, so that a call's
	// headers are checked without reading its tool's schema again.
	headersMu    sync.RWMutex
	headers      map[string][]xheader.Param
	headersBytes int
}

// maxKeptSchemaBytes bounds the bytes of the schemas an originSource
// keeps the header parameters of; past it, it forgets them all and
// reads them anew.
const maxKeptSchemaBytes = 4 << 20

// completes: an origin's completions are offered where the server was
// told to offer them (WithCapabilities), since whether its servers
// complete is theirs to say, or has a completion handler of its own.
func (o *originSource) completes() bool {
	return o.s.cfg.capabilities.completions || o.s.completer() != nil
}

func (o *originSource) toolHeaders(principal, name string) []xheader.Param {
	schema, ok := o.o.ToolSchema(principal, name)
	if !ok {
		return nil
	}
	o.headersMu.RLock()
	headers, kept := o.headers[string(schema)]
	o.headersMu.RUnlock()
	if kept {
		return headers
	}
	headers, _ = xheader.Params(schema)
	o.headersMu.Lock()
	if o.headers == nil || o.headersBytes+len(schema) > maxKeptSchemaBytes {
		o.headers, o.headersBytes = make(map[string][]xheader.Param), 0
	}
	if _, dup := o.headers[string(schema)]; !dup && len(schema) <= maxKeptSchemaBytes {
		o.headers[string(schema)] = headers
		o.headersBytes += len(schema)
	}
	o.headersMu.Unlock()
	return headers
}

func (o *originSource) follow(principal string, uris []string) func() {
	return o.o.Follow(principal, uris)
}

func (o *originSource) forget(l List, uri string) { o.o.Forget(l, uri) }

func (o *originSource) extensions() map[string]jsontext.Value {
	if o.exts == nil {
		return nil
	}
	return o.exts.Extensions()
}

// taskOp is what tasks/get, tasks/update or tasks/cancel does to the
// server's own task id: the record to answer with (nil: an empty
// result), or the message of an invalid-params refusal, or an error.
type taskOp func(id string) (rec *taskRecord, refusal string, err error)

// taskSource is where a server's tasks live: its own store, or a
// TaskOrigin that runs them elsewhere (originTasks). New picks one.
type taskSource interface {
	// offers reports whether tasks are offered whatever the server's
	// options say.
	offers() bool
	// method serves a tasks/get, tasks/update or tasks/cancel of the
	// task the caller knows as id, once tasksMethod has checked the
	// request; op is what the method does to a task of the store.
	method(ctx context.Context, c *engine.Call, req *Request, id string, op taskOp) engine.Reply
	// grant returns the tasks of ids that a listen by req's principal
	// follows, with the notification of each one's state now, and what
	// to call when the listen ends.
	grant(ctx context.Context, req *Request, n *listenNotices, ids []string) ([]string, [][]byte, func(), error)
	// task is what listenNotices.Task answers.
	task(ctx context.Context, n *listenNotices, id string) ([]byte, error)
}

// newTaskSource is the taskSource of a server configured with cfg.
func newTaskSource(s *Server, cfg *config) taskSource {
	if o, ok := cfg.origin.(TaskOrigin); ok {
		return &originTasks{s: s, o: o}
	}
	return (*storeTasks)(s)
}
