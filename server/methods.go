package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/engine"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// This file serves the methods that run an author's handler: tools/call,
// prompts/get, resources/read and completion/complete.

func invalid(id jsonrpc.ID, msg string) engine.Reply {
	return engine.Fail(id, jsonrpc.CodeInvalidParams, msg, nil)
}

func (r *registries) callTool(ctx context.Context, c *engine.Call, req *Request) engine.Reply {
	s := (*Server)(r)
	if c.P.Name == nil {
		return invalid(req.ID, "Invalid params: missing tool name")
	}
	name := *c.P.Name
	e, ok := s.tools.load().get(name)
	if !ok || !s.sees(req.Principal, ListTools, name) {
		return invalid(req.ID, "Unknown tool: "+strconv.Quote(name))
	}
	t := e.val
	if t.tasksOnly && !s.taskable(req) {
		return engine.ErrorReply(req.ID, tasksRequired())
	}
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
	if err := validateJSON(t.input, args); err != nil {
		res := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{mcp.TextContent("Invalid arguments for tool " + strconv.Quote(name) + ": " + err.Error())}}
		return s.toolResult(req, name, t, res)
	}
	treq := &ToolRequest{Request: *req, Arguments: args, srv: s, tool: t}
	treq.Request.out = req.out
	res, err := withInput(ctx, &treq.Request, func() (*mcp.CallToolResult, error) {
		return t.handler(context.WithValue(ctx, ctxKey{}, &treq.Request), treq)
	})
	if err != nil {
		var ir *InputRequired
		var je *jsonrpc.Error
		var tc *taskCreated
		switch {
		case errors.As(err, &tc):
			return s.reply(req, tc.task, engine.Tail{ResultType: mcp.ResultTask})
		case errors.As(err, &ir):
			return s.inputRequired(req, name, args, ir)
		case errors.As(err, &je):
			return engine.ErrorReply(req.ID, je)
		case ctx.Err() != nil:
			return engine.Reply{Outcome: engine.Silent}
		}
		res = toolErrorResult(err)
	}
	return s.toolResult(req, name, t, res)
}

// toolErrorResult is the isError result that a plain error of a tool's
// handler (or a task's work) stands for: the error is the tool's to
// report, and the model reads it, as the spec has tool errors told.
func toolErrorResult(err error) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{mcp.TextContent(err.Error())}}
}

// checkToolResult readies res, what tool t (called name) returned, to be
// sent or kept: nil is an empty result, and content is never null. A
// result that is not an error must match the tool's output schema; one
// that does not is an error of the server's, never the client's, which
// a call answers, and a task fails, with -32603.
func checkToolResult(t *tool, name string, res *mcp.CallToolResult) (*mcp.CallToolResult, error) {
	if res == nil {
		res = &mcp.CallToolResult{}
	}
	if res.Content == nil {
		res.Content = []mcp.Content{}
	}
	if t != nil && t.output != nil && !res.IsError {
		if len(res.StructuredContent) == 0 {
			return nil, fmt.Errorf("tool %q declares an output schema but returned no structuredContent", name)
		}
		if err := validateJSON(t.output, res.StructuredContent); err != nil {
			return nil, fmt.Errorf("tool %q returned structuredContent that does not match its output schema: %w", name, err)
		}
	}
	return res, nil
}

func (s *Server) toolResult(req *Request, name string, t *tool, res *mcp.CallToolResult) engine.Reply {
	res, err := checkToolResult(t, name, res)
	if err != nil {
		return s.internal(req.ID, err)
	}
	// The handler's _meta is merged with serverInfo into one member; left
	// on the struct it would be written a second time.
	body, meta := *res, res.Meta
	body.Meta = nil
	return s.reply(req, &body, engine.Tail{Meta: meta})
}

func (r *registries) getPrompt(ctx context.Context, c *engine.Call, req *Request) engine.Reply {
	s := (*Server)(r)
	if c.P.Name == nil {
		return invalid(req.ID, "Invalid params: missing prompt name")
	}
	name := *c.P.Name
	e, ok := s.prompts.load().get(name)
	if !ok || !s.sees(req.Principal, ListPrompts, name) {
		return invalid(req.ID, "Unknown prompt: "+strconv.Quote(name))
	}
	args, bad := promptArgs(c, req)
	if bad != nil {
		return *bad
	}
	for _, a := range e.val.def.Arguments {
		if _, ok := args[a.Name]; a.Required && !ok {
			return invalid(req.ID, "Missing required argument: "+strconv.Quote(a.Name))
		}
	}
	return s.runPrompt(ctx, c, req, name, args, e.val.handler)
}

// promptArgs reads a prompts/get's arguments, an object of strings.
func promptArgs(c *engine.Call, req *Request) (map[string]string, *engine.Reply) {
	var args map[string]string
	if len(c.P.Arguments) > 0 && string(c.P.Arguments) != "null" {
		if err := jsonrpc.UnmarshalParams(c.P.Arguments, &args); err != nil {
			r := invalid(req.ID, "Invalid params: prompt arguments must be an object of strings")
			return nil, &r
		}
	}
	return args, nil
}

// runPrompt runs the prompt handler h (again, with input, on a session
// that asks for it) and answers with its messages.
func (s *Server) runPrompt(ctx context.Context, c *engine.Call, req *Request, name string, args map[string]string, h PromptHandler) engine.Reply {
	if r := s.openState(c, req, name, c.P.Arguments); r != nil {
		return *r
	}
	preq := &PromptRequest{Request: *req, Arguments: args}
	res, err := withInput(ctx, &preq.Request, func() (*mcp.GetPromptResult, error) {
		return h(context.WithValue(ctx, ctxKey{}, &preq.Request), preq)
	})
	if err != nil {
		return s.handlerError(ctx, req, name, c.P.Arguments, err)
	}
	if res == nil {
		res = &mcp.GetPromptResult{}
	}
	if res.Messages == nil {
		res.Messages = []mcp.PromptMessage{}
	}
	body, meta := *res, res.Meta
	body.Meta = nil
	return s.reply(req, &body, engine.Tail{Meta: meta})
}

// resolve finds the handler that reads uri for the caller: a registered
// resource, else the first template (in key order) that matches.
func (s *Server) resolve(principal, uri string) (h ResourceHandler, opts itemOpts, vars map[string]string) {
	if e, ok := s.resources.load().get(uri); ok {
		if s.sees(principal, ListResources, uri) {
			return e.val.handler, e.val.opts, nil
		}
		return nil, itemOpts{}, nil
	}
	for _, e := range s.templates.load().items {
		if !s.sees(principal, ListTemplates, e.key) {
			continue
		}
		vals := e.val.tmpl.Match(uri)
		if vals == nil {
			continue
		}
		vars = map[string]string{}
		for _, name := range e.val.tmpl.Varnames() {
			if v := vals.Get(name); v.Valid() {
				vars[name] = v.String()
			}
		}
		return e.val.handler, e.val.opts, vars
	}
	return nil, itemOpts{}, nil
}

func (r *registries) readResource(ctx context.Context, c *engine.Call, req *Request) engine.Reply {
	s := (*Server)(r)
	if c.P.URI == nil {
		return invalid(req.ID, "Invalid params: missing uri")
	}
	uri := *c.P.URI
	h, opts, vars := s.resolve(req.Principal, uri)
	if h == nil {
		return resourceNotFound(req, uri)
	}
	p := s.cfg.policies[ReadResource]
	if opts.policy != nil {
		p = *opts.policy
	} else if s.cfg.visible != nil {
		p.Scope = mcp.ScopePrivate // what a read shows depends on who asks
	}
	return s.runRead(ctx, c, req, uri, vars, h, p)
}

// resourceNotFound is the error of a read of a resource there is none of.
func resourceNotFound(req *Request, uri string) engine.Reply {
	return engine.Fail(req.ID, jsonrpc.CodeInvalidParams, "Resource not found", map[string]string{"uri": uri})
}

// runRead runs the resource handler h for uri and answers with its
// contents, under the cache hint p unless the handler set its own.
func (s *Server) runRead(ctx context.Context, c *engine.Call, req *Request, uri string, vars map[string]string, h ResourceHandler, p CachePolicy) engine.Reply {
	if r := s.openState(c, req, uri, nil); r != nil {
		return *r
	}
	rreq := &ResourceRequest{Request: *req, URI: uri, Vars: vars}
	res, err := withInput(ctx, &rreq.Request, func() (*mcp.ReadResourceResult, error) {
		return h(context.WithValue(ctx, ctxKey{}, &rreq.Request), rreq)
	})
	if err != nil {
		if errors.Is(err, ErrResourceNotFound) {
			return resourceNotFound(req, uri)
		}
		return s.handlerError(ctx, req, uri, nil, err)
	}
	if res == nil || len(res.Contents) == 0 {
		return resourceNotFound(req, uri)
	}
	if rreq.policy != nil {
		p = *rreq.policy
	}
	body, meta := *res, res.Meta
	body.Meta = nil
	return s.reply(req, &body, engine.Tail{Hint: p.hint(), Meta: meta})
}

func (r *registries) completion(ctx context.Context, c *engine.Call, req *Request) engine.Reply {
	s := (*Server)(r)
	if c.P.Ref == nil || c.P.Argument == nil {
		return invalid(req.ID, "Invalid params: ref and argument are required")
	}
	ref := *c.P.Ref
	switch ref.Type {
	case "ref/prompt":
		if _, ok := s.prompts.load().get(ref.Name); !ok || !s.sees(req.Principal, ListPrompts, ref.Name) {
			return invalid(req.ID, "Unknown prompt: "+strconv.Quote(ref.Name))
		}
	case "ref/resource":
		// The ref names a registered resource template (or resource) the
		// caller may see; anything else is a bad ref, told apart from
		// nothing so that hidden templates stay hidden.
		_, isTemplate := s.templates.load().get(ref.URI)
		_, isResource := s.resources.load().get(ref.URI)
		if !(isTemplate && s.sees(req.Principal, ListTemplates, ref.URI)) &&
			!(isResource && s.sees(req.Principal, ListResources, ref.URI)) {
			return invalid(req.ID, "Unknown resource template: "+strconv.Quote(ref.URI))
		}
	default:
		return invalid(req.ID, "Invalid params: unknown ref type "+strconv.Quote(ref.Type))
	}
	return s.runComplete(ctx, c, req, ref, s.completer())
}

// runComplete runs a completion handler h for ref and answers with what
// it found: at most 100 values, and hasMore when there were more.
func (s *Server) runComplete(ctx context.Context, c *engine.Call, req *Request, ref mcp.CompleteRef, h CompleteHandler) engine.Reply {
	creq := &CompleteRequest{Request: *req, Ref: ref, Argument: *c.P.Argument}
	if c.P.Context != nil {
		creq.Context = *c.P.Context
	}
	comp, err := h(context.WithValue(ctx, ctxKey{}, &creq.Request), creq)
	if err != nil {
		return s.handlerError(ctx, req, "", nil, err)
	}
	if comp == nil {
		comp = &mcp.Completion{}
	}
	if comp.Values == nil {
		comp.Values = []string{}
	}
	if len(comp.Values) > 100 {
		comp.Values = comp.Values[:100]
		comp.HasMore = true
	}
	return s.reply(req, struct {
		Completion *mcp.Completion `json:"completion"`
	}{comp}, engine.Tail{})
}
