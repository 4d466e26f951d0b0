// Package mcp holds the Model Context Protocol's wire vocabulary for
// revision 2026-07-28: method names, _meta keys, error codes and the data
// types that travel in params and results. It does no I/O, so the server,
// the client and the transports can all share it without cycles.
package mcp

import "tidings/jsonrpc"

// Protocol revisions.
const (
	// Version is the revision tidings implements natively.
	Version = "2026-07-28"
	// LegacyVersion is the previous revision, spoken for older peers.
	LegacyVersion = "2025-11-25"
)

// Method and notification names. The first group is 2026-07-28's; the
// rest (from MethodInitialize on) exist only in 2025-11-25 and are
// spoken to older peers.
const (
	MethodDiscover             = "server/discover"
	MethodToolsList            = "tools/list"
	MethodToolsCall            = "tools/call"
	MethodPromptsList          = "prompts/list"
	MethodPromptsGet           = "prompts/get"
	MethodResourcesList        = "resources/list"
	MethodResourcesTemplates   = "resources/templates/list"
	MethodResourcesRead        = "resources/read"
	MethodComplete             = "completion/complete"
	MethodListen               = "subscriptions/listen"
	MethodElicit               = "elicitation/create"
	MethodCreateMessage        = "sampling/createMessage"
	MethodRootsList            = "roots/list"
	NotifyCancelled            = "notifications/cancelled"
	NotifyProgress             = "notifications/progress"
	NotifyMessage              = "notifications/message"
	NotifyAcknowledged         = "notifications/subscriptions/acknowledged"
	NotifyToolsListChanged     = "notifications/tools/list_changed"
	NotifyPromptsListChanged   = "notifications/prompts/list_changed"
	NotifyResourcesListChanged = "notifications/resources/list_changed"
	NotifyResourceUpdated      = "notifications/resources/updated"
	MethodInitialize           = "initialize"
	NotifyInitialized          = "notifications/initialized"
	MethodPing                 = "ping"
	MethodResourcesSubscribe   = "resources/subscribe"
	MethodResourcesUnsubscribe = "resources/unsubscribe"
	MethodLoggingSetLevel      = "logging/setLevel"
)

// _meta keys defined by the protocol.
const (
	MetaProtocolVersion    = "io.modelcontextprotocol/protocolVersion"
	MetaClientCapabilities = "io.modelcontextprotocol/clientCapabilities"
	MetaClientInfo         = "io.modelcontextprotocol/clientInfo"
	MetaServerInfo         = "io.modelcontextprotocol/serverInfo"
	MetaLogLevel           = "io.modelcontextprotocol/logLevel"
	MetaSubscriptionID     = "io.modelcontextprotocol/subscriptionId"
	MetaProgressToken      = "progressToken"
	// MetaTraceParent and MetaTraceState carry a request's or a
	// notification's W3C trace context, as OpenTelemetry's conventions
	// for MCP say.
	MetaTraceParent = "traceparent"
	MetaTraceState  = "tracestate"
)

// MetaChangedAt is tidings' own member of a change notification's _meta:
// when the change it tells of happened, by the server's clock (RFC 3339,
// nanoseconds), so that a client can tell the age of what it knows from
// when it learnt it. A server that traces or measures its changes sends it.
const MetaChangedAt = "io.github.tidings/changedAt"

// MCP error codes beyond the JSON-RPC standard ones.
const (
	CodeHeaderMismatch             jsonrpc.Code = -32020
	CodeMissingRequiredCapability  jsonrpc.Code = -32021
	CodeUnsupportedProtocolVersion jsonrpc.Code = -32022
	// CodeLegacyResourceNotFound is retired: never sent, still understood.
	CodeLegacyResourceNotFound jsonrpc.Code = -32002
)

// HTTP header names of the Streamable HTTP transport. The Mcp-Param-*
// prefix lives with the rules for those headers, as xheader.Prefix.
const (
	HeaderProtocolVersion = "MCP-Protocol-Version"
	HeaderMethod          = "Mcp-Method"
	HeaderName            = "Mcp-Name"
	HeaderSessionID       = "Mcp-Session-Id"
)

// Result types.
const (
	ResultComplete      = "complete"
	ResultInputRequired = "input_required"
	// ResultTask marks a CreateTaskResult (the tasks extension).
	ResultTask = "task"
)

// CacheScope says who may reuse a cached result.
type CacheScope string

// The two cache scopes.
const (
	ScopePublic  CacheScope = "public"
	ScopePrivate CacheScope = "private"
)

// LogLevel is a syslog severity as MCP names it.
type LogLevel string

// Severity returns the level's rank, from 0 for debug to 7 for emergency,
// and whether the level is one of the eight the protocol defines.
func (l LogLevel) Severity() (int, bool) {
	switch l {
	case "debug":
		return 0, true
	case "info":
		return 1, true
	case "notice":
		return 2, true
	case "warning":
		return 3, true
	case "error":
		return 4, true
	case "critical":
		return 5, true
	case "alert":
		return 6, true
	case "emergency":
		return 7, true
	}
	return -1, false
}
