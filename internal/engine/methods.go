package engine

import "tidings/mcp"

// Eras is the set of protocol eras a method exists in.
type Eras uint8

// The eras.
const (
	// Modern is 2026-07-28: stateless requests that carry their version
	// and capabilities in _meta.
	Modern Eras = 1 << iota
	// Legacy is 2025-11-25 (and the earlier versions its sessions
	// serve): requests of a session opened by initialize.
	Legacy
)

// Has reports whether e includes every era of o.
func (e Eras) Has(o Eras) bool { return e&o == o }

// Capability is what the server must offer for a method to exist on it:
// a method of a capability the server does not advertise is not found.
type Capability uint8

// The capabilities a method can need.
const (
	// Always: the method exists on every server.
	Always Capability = iota
	// NeedsTools, NeedsPrompts and NeedsResources: the server offers
	// that kind of item (by option or by having registered one).
	NeedsTools
	NeedsPrompts
	NeedsResources
	// NeedsCompletions: the server has a completion handler.
	NeedsCompletions
	// NeedsLogging: the server takes log levels (every server does).
	NeedsLogging
	// NeedsTasks: the server offers the tasks extension.
	NeedsTasks
)

// NameFrom says which member of params the Mcp-Name header mirrors, so
// that a balancer can route on it.
type NameFrom uint8

// The sources of Mcp-Name.
const (
	// NoName: the method carries no Mcp-Name.
	NoName NameFrom = iota
	// FromName: the tool or prompt name.
	FromName
	// FromURI: the resource URI.
	FromURI
	// FromTaskID: the task id of the tasks extension's methods.
	FromTaskID
)

// Member returns the name of the params member f reads, "" for NoName.
func (f NameFrom) Member() string {
	switch f {
	case FromName:
		return "name"
	case FromURI:
		return "uri"
	case FromTaskID:
		return "taskId"
	}
	return ""
}

// Handler is the key under which whoever serves a method finds its
// handler: the server's core for most, the 2025-11-25 session for the
// methods only that era has, the transport for initialize. Keys are
// small integers so that the server's handlers are an array indexed by
// them.
type Handler uint8

// The handlers. The core's come first, up to NumCoreHandlers.
const (
	NoHandler Handler = iota
	HandleToolsList
	HandlePromptsList
	HandleResourcesList
	HandleTemplatesList
	HandleToolsCall
	HandlePromptsGet
	HandleResourcesRead
	HandleComplete
	HandleDiscover
	HandleListen
	HandleTasksGet
	HandleTasksUpdate
	HandleTasksCancel
	// NumCoreHandlers bounds the keys the server's core serves.
	NumCoreHandlers

	// The 2025-11-25 session's own methods.
	HandlePing
	HandleSetLevel
	HandleSubscribe
	HandleUnsubscribe
	// HandleInitialize: the transport opens a session.
	HandleInitialize
)

// Core reports whether the server's core serves h.
func (h Handler) Core() bool { return h > NoHandler && h < NumCoreHandlers }

// Method is what one method is: everything the parser, the transports
// and the server need to know of it, in one place.
type Method struct {
	// Name is the JSON-RPC method name.
	Name string
	// Params are the members of params the method reads; Parse decodes
	// these and no others.
	Params []string
	// MCPName says where the Mcp-Name header's value comes from.
	MCPName NameFrom
	// Eras are the protocol eras the method exists in.
	Eras Eras
	// Needs is the capability the server must offer.
	Needs Capability
	// Handler is the key of the method's handler.
	Handler Handler
	// AsksInput marks a method whose handler may answer input_required
	// (MRTR-1), and that reads the answers back in inputResponses and
	// requestState.
	AsksInput bool
	// Notification marks a method sent as a notification.
	Notification bool
}

// table is every method the server knows, requests and the
// notifications it reads. It is never written: Lookup hands out copies,
// whose Params no one writes either.
var table = [...]Method{
	{Name: mcp.MethodDiscover, Eras: Modern, Handler: HandleDiscover},
	{Name: mcp.MethodToolsList, Params: []string{"cursor"}, Eras: Modern | Legacy, Needs: NeedsTools, Handler: HandleToolsList},
	{Name: mcp.MethodToolsCall, Params: []string{"name", "arguments", "inputResponses", "requestState"}, MCPName: FromName,
		Eras: Modern | Legacy, Needs: NeedsTools, Handler: HandleToolsCall, AsksInput: true},
	{Name: mcp.MethodPromptsList, Params: []string{"cursor"}, Eras: Modern | Legacy, Needs: NeedsPrompts, Handler: HandlePromptsList},
	{Name: mcp.MethodPromptsGet, Params: []string{"name", "arguments", "inputResponses", "requestState"}, MCPName: FromName,
		Eras: Modern | Legacy, Needs: NeedsPrompts, Handler: HandlePromptsGet, AsksInput: true},
	{Name: mcp.MethodResourcesList, Params: []string{"cursor"}, Eras: Modern | Legacy, Needs: NeedsResources, Handler: HandleResourcesList},
	{Name: mcp.MethodResourcesTemplates, Params: []string{"cursor"}, Eras: Modern | Legacy, Needs: NeedsResources, Handler: HandleTemplatesList},
	{Name: mcp.MethodResourcesRead, Params: []string{"uri", "inputResponses", "requestState"}, MCPName: FromURI,
		Eras: Modern | Legacy, Needs: NeedsResources, Handler: HandleResourcesRead, AsksInput: true},
	{Name: mcp.MethodComplete, Params: []string{"ref", "argument", "context"}, Eras: Modern | Legacy, Needs: NeedsCompletions, Handler: HandleComplete},
	{Name: mcp.MethodListen, Params: []string{"notifications"}, Eras: Modern, Handler: HandleListen},
	{Name: mcp.MethodTasksGet, Params: []string{"taskId"}, MCPName: FromTaskID, Eras: Modern, Needs: NeedsTasks, Handler: HandleTasksGet},
	{Name: mcp.MethodTasksUpdate, Params: []string{"taskId", "inputResponses"}, MCPName: FromTaskID, Eras: Modern, Needs: NeedsTasks, Handler: HandleTasksUpdate},
	{Name: mcp.MethodTasksCancel, Params: []string{"taskId"}, MCPName: FromTaskID, Eras: Modern, Needs: NeedsTasks, Handler: HandleTasksCancel},

	{Name: mcp.MethodInitialize, Eras: Legacy, Handler: HandleInitialize},
	{Name: mcp.MethodPing, Eras: Legacy, Handler: HandlePing},
	{Name: mcp.MethodLoggingSetLevel, Eras: Legacy, Needs: NeedsLogging, Handler: HandleSetLevel},
	{Name: mcp.MethodResourcesSubscribe, Params: []string{"uri"}, Eras: Legacy, Needs: NeedsResources, Handler: HandleSubscribe},
	{Name: mcp.MethodResourcesUnsubscribe, Params: []string{"uri"}, Eras: Legacy, Needs: NeedsResources, Handler: HandleUnsubscribe},

	{Name: mcp.NotifyCancelled, Params: []string{"requestId"}, Eras: Modern | Legacy, Notification: true},
}

// NamesItem reports whether the method's Mcp-Name names an item the
// server registers (a tool, a prompt, a resource), whose kind Needs
// says, rather than a task: the methods whose item may require scopes.
func (m Method) NamesItem() bool { return m.MCPName == FromName || m.MCPName == FromURI }

// Lookup returns the method called name; ok is false for a method the
// server does not know.
func Lookup(name string) (Method, bool) {
	for i := range table {
		if table[i].Name == name {
			return table[i], true
		}
	}
	return Method{}, false
}

// Methods returns a copy of the table, for tests and documentation.
func Methods() []Method { return append([]Method(nil), table[:]...) }
