package mcp

import (
	"github.com/go-json-experiment/json/jsontext"
)

// Meta is an open _meta object. Values stay raw JSON so that unknown keys
// pass through untouched.
type Meta map[string]jsontext.Value

// Implementation names a client or server (self-reported, never trusted).
type Implementation struct {
	Name       string `json:"name"`
	Title      string `json:"title,omitempty"`
	Version    string `json:"version"`
	WebsiteURL string `json:"websiteUrl,omitempty"`
	Icons      []Icon `json:"icons,omitempty"`
}

// Icon is an image a client may show next to an item.
type Icon struct {
	Src      string   `json:"src"`
	MimeType string   `json:"mimeType,omitempty"`
	Sizes    []string `json:"sizes,omitempty"`
	Theme    string   `json:"theme,omitempty"`
}

// RequestMeta is the _meta every 2026-07-28 request carries. Pointers and
// raw values keep "absent" distinct from "empty", which the server needs to
// tell a missing field (-32602) from an empty one.
type RequestMeta struct {
	ProtocolVersion    *string         `json:"io.modelcontextprotocol/protocolVersion,omitzero"`
	ClientCapabilities *ClientCaps     `json:"io.modelcontextprotocol/clientCapabilities,omitzero"`
	ClientInfo         *Implementation `json:"io.modelcontextprotocol/clientInfo,omitzero"`
	LogLevel           *LogLevel       `json:"io.modelcontextprotocol/logLevel,omitzero"`
	ProgressToken      jsontext.Value  `json:"progressToken,omitzero"`
	// TraceParent and TraceState are the W3C trace context of the
	// request (OpenTelemetry's conventions for MCP carry it in _meta), so
	// that the server's span of it joins the caller's trace.
	TraceParent string         `json:"traceparent,omitzero"`
	TraceState  string         `json:"tracestate,omitzero"`
	Rest        jsontext.Value `json:",embed"`
}

// ClientCaps are the optional features a client declares per request.
type ClientCaps struct {
	Elicitation  *ElicitationCaps          `json:"elicitation,omitzero"`
	Sampling     *SamplingCaps             `json:"sampling,omitzero"`
	Roots        *jsontext.Value           `json:"roots,omitzero"`
	Experimental map[string]jsontext.Value `json:"experimental,omitzero"`
	Extensions   map[string]jsontext.Value `json:"extensions,omitzero"`
}

// ElicitationCaps declares elicitation modes. An empty object means form.
type ElicitationCaps struct {
	Form *jsontext.Value `json:"form,omitzero"`
	URL  *jsontext.Value `json:"url,omitzero"`
}

// SupportsForm reports whether form-mode elicitation was declared.
func (e *ElicitationCaps) SupportsForm() bool {
	return e != nil && (e.Form != nil || e.URL == nil)
}

// SupportsURL reports whether URL-mode elicitation was declared.
func (e *ElicitationCaps) SupportsURL() bool { return e != nil && e.URL != nil }

// SamplingCaps declares sampling support (deprecated, reachable via MRTR).
type SamplingCaps struct {
	Context *jsontext.Value `json:"context,omitzero"`
	Tools   *jsontext.Value `json:"tools,omitzero"`
}

// ServerCaps is what a server advertises in server/discover.
type ServerCaps struct {
	Completions  *struct{}                 `json:"completions,omitzero"`
	Logging      *struct{}                 `json:"logging,omitzero"`
	Prompts      *ListCaps                 `json:"prompts,omitzero"`
	Resources    *ResourceCaps             `json:"resources,omitzero"`
	Tools        *ListCaps                 `json:"tools,omitzero"`
	Experimental map[string]jsontext.Value `json:"experimental,omitempty"`
	Extensions   map[string]jsontext.Value `json:"extensions,omitempty"`
}

// ListCaps is the capability object of a listable primitive.
type ListCaps struct {
	ListChanged bool `json:"listChanged,omitzero"`
}

// ResourceCaps is the resources capability.
type ResourceCaps struct {
	Subscribe   bool `json:"subscribe,omitzero"`
	ListChanged bool `json:"listChanged,omitzero"`
}

// Tool describes a callable tool. InputSchema and OutputSchema are raw JSON
// Schema documents, kept byte for byte as the author wrote them.
type Tool struct {
	Name         string           `json:"name"`
	Title        string           `json:"title,omitempty"`
	Description  string           `json:"description,omitempty"`
	InputSchema  jsontext.Value   `json:"inputSchema"`
	OutputSchema jsontext.Value   `json:"outputSchema,omitempty"`
	Annotations  *ToolAnnotations `json:"annotations,omitzero"`
	Icons        []Icon           `json:"icons,omitempty"`
	Meta         Meta             `json:"_meta,omitempty"`
}

// ToolAnnotations are hints about a tool; clients treat them as untrusted.
type ToolAnnotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    *bool  `json:"readOnlyHint,omitzero"`
	DestructiveHint *bool  `json:"destructiveHint,omitzero"`
	IdempotentHint  *bool  `json:"idempotentHint,omitzero"`
	OpenWorldHint   *bool  `json:"openWorldHint,omitzero"`
}

// Annotations guide how a client uses or shows an object.
type Annotations struct {
	Audience     []string `json:"audience,omitempty"`
	Priority     *float64 `json:"priority,omitzero"`
	LastModified string   `json:"lastModified,omitempty"`
}

// Resource is a readable item named by URI.
type Resource struct {
	URI         string       `json:"uri"`
	Name        string       `json:"name"`
	Title       string       `json:"title,omitempty"`
	Description string       `json:"description,omitempty"`
	MimeType    string       `json:"mimeType,omitempty"`
	Size        *int64       `json:"size,omitzero"`
	Annotations *Annotations `json:"annotations,omitzero"`
	Icons       []Icon       `json:"icons,omitempty"`
	Meta        Meta         `json:"_meta,omitempty"`
}

// ResourceTemplate describes a family of resources by RFC 6570 template.
type ResourceTemplate struct {
	URITemplate string       `json:"uriTemplate"`
	Name        string       `json:"name"`
	Title       string       `json:"title,omitempty"`
	Description string       `json:"description,omitempty"`
	MimeType    string       `json:"mimeType,omitempty"`
	Annotations *Annotations `json:"annotations,omitzero"`
	Icons       []Icon       `json:"icons,omitempty"`
	Meta        Meta         `json:"_meta,omitempty"`
}

// Prompt is a template of messages a user can pick.
type Prompt struct {
	Name        string           `json:"name"`
	Title       string           `json:"title,omitempty"`
	Description string           `json:"description,omitempty"`
	Arguments   []PromptArgument `json:"arguments,omitempty"`
	Icons       []Icon           `json:"icons,omitempty"`
	Meta        Meta             `json:"_meta,omitempty"`
}

// PromptArgument is one named argument of a prompt.
type PromptArgument struct {
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	Required    bool   `json:"required,omitzero"`
}

// PromptMessage is one message of a rendered prompt.
type PromptMessage struct {
	Role    string  `json:"role"`
	Content Content `json:"content"`
}

// ResourceContents is the content of one resource: Text or Blob (base64).
type ResourceContents struct {
	URI      string  `json:"uri"`
	MimeType string  `json:"mimeType,omitempty"`
	Text     *string `json:"text,omitzero"`
	Blob     *string `json:"blob,omitzero"`
	Meta     Meta    `json:"_meta,omitempty"`
}

// TextContents returns text contents for uri.
func TextContents(uri, mimeType, text string) ResourceContents {
	return ResourceContents{URI: uri, MimeType: mimeType, Text: &text}
}

// BlobContents returns binary contents (already base64-encoded) for uri.
func BlobContents(uri, mimeType, b64 string) ResourceContents {
	return ResourceContents{URI: uri, MimeType: mimeType, Blob: &b64}
}

// Content is one content block. Type selects which fields apply:
// "text" (Text), "image" and "audio" (Data, MimeType), "resource_link"
// (URI, Name, ...), "resource" (Resource).
type Content struct {
	Type        string            `json:"type"`
	Text        *string           `json:"text,omitzero"`
	Data        string            `json:"data,omitempty"`
	MimeType    string            `json:"mimeType,omitempty"`
	URI         string            `json:"uri,omitempty"`
	Name        string            `json:"name,omitempty"`
	Title       string            `json:"title,omitempty"`
	Description string            `json:"description,omitempty"`
	Size        *int64            `json:"size,omitzero"`
	Resource    *ResourceContents `json:"resource,omitzero"`
	Annotations *Annotations      `json:"annotations,omitzero"`
	Meta        Meta              `json:"_meta,omitempty"`
}

// TextContent returns a text block.
func TextContent(s string) Content { return Content{Type: "text", Text: &s} }

// ImageContent returns an image block; data is base64.
func ImageContent(data, mimeType string) Content {
	return Content{Type: "image", Data: data, MimeType: mimeType}
}

// AudioContent returns an audio block; data is base64.
func AudioContent(data, mimeType string) Content {
	return Content{Type: "audio", Data: data, MimeType: mimeType}
}

// EmbeddedResource returns a block that carries a resource's contents.
func EmbeddedResource(rc ResourceContents) Content {
	return Content{Type: "resource", Resource: &rc}
}

// ResourceLink returns a block that points at a resource.
func ResourceLink(uri, name, mimeType string) Content {
	return Content{Type: "resource_link", URI: uri, Name: name, MimeType: mimeType}
}

// CallToolResult is a tool's final answer.
type CallToolResult struct {
	Content           []Content      `json:"content"`
	StructuredContent jsontext.Value `json:"structuredContent,omitzero"`
	IsError           bool           `json:"isError,omitzero"`
	Meta              Meta           `json:"_meta,omitempty"`
}

// GetPromptResult is a rendered prompt.
type GetPromptResult struct {
	Description string          `json:"description,omitempty"`
	Messages    []PromptMessage `json:"messages"`
	Meta        Meta            `json:"_meta,omitempty"`
}

// ReadResourceResult is what resources/read returns (without cache hints,
// which the server adds from its policy).
type ReadResourceResult struct {
	Contents []ResourceContents `json:"contents"`
	Meta     Meta               `json:"_meta,omitempty"`
}

// Completion is the answer to completion/complete.
type Completion struct {
	Values  []string `json:"values"`
	Total   *int     `json:"total,omitzero"`
	HasMore bool     `json:"hasMore,omitzero"`
}

// CompleteRef names what is being completed: a prompt or a resource template.
type CompleteRef struct {
	Type string `json:"type"`
	Name string `json:"name,omitempty"`
	URI  string `json:"uri,omitempty"`
}

// CompleteArgument is the argument being completed.
type CompleteArgument struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// CompleteContext carries arguments already resolved.
type CompleteContext struct {
	Arguments map[string]string `json:"arguments,omitempty"`
}

// SubscriptionFilter is what a listen asks for (and, in the
// acknowledgement, what the server grants).
type SubscriptionFilter struct {
	ToolsListChanged      bool     `json:"toolsListChanged,omitzero"`
	PromptsListChanged    bool     `json:"promptsListChanged,omitzero"`
	ResourcesListChanged  bool     `json:"resourcesListChanged,omitzero"`
	ResourceSubscriptions []string `json:"resourceSubscriptions,omitempty"`
	// TaskIDs are the tasks whose status to follow (the tasks extension;
	// see ExtensionTasks).
	TaskIDs []string `json:"taskIds,omitempty"`
}

// InputRequest is one request for client input inside an
// InputRequiredResult (elicitation, sampling or roots).
type InputRequest struct {
	Method string         `json:"method"`
	Params jsontext.Value `json:"params,omitempty"`
}

// ElicitResult is a client's answer to an elicitation input request.
type ElicitResult struct {
	Action  string                    `json:"action"`
	Content map[string]jsontext.Value `json:"content,omitempty"`
}

// Root is a filesystem root a client exposes.
type Root struct {
	URI  string `json:"uri"`
	Name string `json:"name,omitempty"`
}

// ListRootsResult is a client's answer to a roots input request.
type ListRootsResult struct {
	Roots []Root `json:"roots"`
}
