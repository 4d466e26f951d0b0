package server

import (
	"context"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/engine"
	"tidings/mcp"
)

// handlers are the core's handlers, indexed by the method table's keys
// (see engine.Lookup): adding a method is its entry in the table and its
// handler here. The array is never written.
var handlers = [engine.NumCoreHandlers]router{
	engine.HandleToolsList: func(s *Server, ctx context.Context, c *engine.Call, req *Request) engine.Reply {
		return s.src.list(ctx, ListTools, c, req)
	},
	engine.HandlePromptsList: func(s *Server, ctx context.Context, c *engine.Call, req *Request) engine.Reply {
		return s.src.list(ctx, ListPrompts, c, req)
	},
	engine.HandleResourcesList: func(s *Server, ctx context.Context, c *engine.Call, req *Request) engine.Reply {
		return s.src.list(ctx, ListResources, c, req)
	},
	engine.HandleTemplatesList: func(s *Server, ctx context.Context, c *engine.Call, req *Request) engine.Reply {
		return s.src.list(ctx, ListTemplates, c, req)
	},
	engine.HandleToolsCall: func(s *Server, ctx context.Context, c *engine.Call, req *Request) engine.Reply {
		return s.src.callTool(ctx, c, req)
	},
	engine.HandlePromptsGet: func(s *Server, ctx context.Context, c *engine.Call, req *Request) engine.Reply {
		return s.src.getPrompt(ctx, c, req)
	},
	engine.HandleResourcesRead: func(s *Server, ctx context.Context, c *engine.Call, req *Request) engine.Reply {
		return s.src.readResource(ctx, c, req)
	},
	engine.HandleComplete: func(s *Server, ctx context.Context, c *engine.Call, req *Request) engine.Reply {
		return s.src.completion(ctx, c, req)
	},
	engine.HandleDiscover: func(s *Server, _ context.Context, _ *engine.Call, req *Request) engine.Reply {
		return s.discover(req)
	},
	engine.HandleListen:      (*Server).listen,
	engine.HandleTasksGet:    (*Server).tasksGet,
	engine.HandleTasksUpdate: (*Server).tasksUpdate,
	engine.HandleTasksCancel: (*Server).tasksCancel,
}

// offers reports whether the server offers capability c now: a method
// that needs one the server does not offer is not found.
func (s *Server) offers(c engine.Capability) bool {
	switch c {
	case engine.NeedsTools:
		return s.advertisesTools()
	case engine.NeedsPrompts:
		return s.advertisesPrompts()
	case engine.NeedsResources:
		return s.advertisesResources()
	case engine.NeedsCompletions:
		return s.src.completes()
	case engine.NeedsTasks:
		return s.offersTasks()
	}
	return true // Always, and logging, which every server takes
}

// advertises reports whether the server offers list l now.
func (s *Server) advertises(l mcp.List) bool {
	switch l {
	case mcp.ToolsList:
		return s.advertisesTools()
	case mcp.PromptsList:
		return s.advertisesPrompts()
	}
	return s.advertisesResources()
}

func (s *Server) advertisesTools() bool {
	return s.cfg.capabilities.tools || s.tools.used.Load()
}

func (s *Server) advertisesPrompts() bool {
	return s.cfg.capabilities.prompts || s.prompts.used.Load()
}

func (s *Server) advertisesResources() bool {
	return s.cfg.capabilities.resources || s.resources.used.Load() || s.templates.used.Load()
}

// capabilities returns what the server advertises right now.
func (s *Server) capabilities() mcp.ServerCaps {
	var c mcp.ServerCaps
	c.Logging = &struct{}{}
	if s.advertisesTools() {
		c.Tools = &mcp.ListCaps{ListChanged: true}
	}
	if s.advertisesPrompts() {
		c.Prompts = &mcp.ListCaps{ListChanged: true}
	}
	if s.advertisesResources() {
		c.Resources = &mcp.ResourceCaps{Subscribe: true, ListChanged: true}
	}
	if s.cfg.capabilities.completions || s.completer() != nil {
		c.Completions = &struct{}{}
	}
	exts := s.cfg.extensions
	if more := s.src.extensions(); more != nil {
		exts = more
		for name, v := range s.cfg.extensions {
			exts[name] = v
		}
	}
	if len(exts) > 0 || s.offersTasks() {
		c.Extensions = make(map[string]jsontext.Value, len(exts)+1)
		for name, v := range exts {
			c.Extensions[name] = v
		}
		delete(c.Extensions, mcp.ExtensionTasks) // said by offersTasks alone
	}
	if s.offersTasks() {
		c.Extensions[mcp.ExtensionTasks] = jsontext.Value("{}")
	}
	return c
}
