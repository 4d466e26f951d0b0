package server

import (
	"context"

	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/engine"
	"tidings/mcp"
)

// isPrimitive reports whether method is one both protocol eras share.
func isPrimitive(method string) bool {
	switch method {
	case mcp.MethodToolsList, mcp.MethodPromptsList, mcp.MethodResourcesList, mcp.MethodResourcesTemplates,
		mcp.MethodToolsCall, mcp.MethodPromptsGet, mcp.MethodResourcesRead, mcp.MethodComplete:
		return true
	}
	return false
}

// primitive serves the methods both protocol eras share: the lists, tool
// calls, prompts, reads and completion, each only while the server
// advertises its capability. ok is false for any other method.
func (s *Server) primitive(ctx context.Context, c *engine.Call, req *Request) (r engine.Reply, ok bool) {
	switch c.Msg.Method {
	case mcp.MethodToolsList:
		if s.advertisesTools() {
			return listPage(s, s.tools, ListTools, "tools", c, req), true
		}
	case mcp.MethodPromptsList:
		if s.advertisesPrompts() {
			return listPage(s, s.prompts, ListPrompts, "prompts", c, req), true
		}
	case mcp.MethodResourcesList:
		if s.advertisesResources() {
			return listPage(s, s.resources, ListResources, "resources", c, req), true
		}
	case mcp.MethodResourcesTemplates:
		if s.advertisesResources() {
			return listPage(s, s.templates, ListTemplates, "resourceTemplates", c, req), true
		}
	case mcp.MethodToolsCall:
		if s.advertisesTools() {
			return s.callTool(ctx, c, req), true
		}
	case mcp.MethodPromptsGet:
		if s.advertisesPrompts() {
			return s.getPrompt(ctx, c, req), true
		}
	case mcp.MethodResourcesRead:
		if s.advertisesResources() {
			return s.readResource(ctx, c, req), true
		}
	case mcp.MethodComplete:
		if s.completer() != nil {
			return s.completeCall(ctx, c, req), true
		}
	}
	return engine.Reply{}, false
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
	if s.offersTasks() {
		c.Extensions = map[string]jsontext.Value{mcp.ExtensionTasks: jsontext.Value("{}")}
	}
	return c
}
