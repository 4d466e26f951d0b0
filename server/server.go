// Package server is a Model Context Protocol 2026-07-28 server whose tools,
// prompts and resources can change while it runs.
//
// A Server holds registries (immutable sorted snapshots, read without
// locks), a change hub that tells every open subscriptions/listen stream
// what changed, and the handling of every method. It does no I/O of its
// own: hand it to streamhttp.New or stdio.Serve. Because the 2026-07-28
// core is stateless, nothing here is keyed by connection; every request
// stands on its own _meta. Clients of the previous revision, 2025-11-25,
// are served by those transports through the same handlers.
//
// An option that takes a size, a count or a duration keeps its default
// for a value of zero or less, unless its doc gives zero a meaning
// (WithKeepAlive): a bound is never turned off by a zero left unset.
package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	jsonschema "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/yosida95/uritemplate/v3"

	"tidings/bus"
	"tidings/hub"
	"tidings/internal/engine"
	"tidings/internal/xheader"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// List names one of the cacheable results, for cache policies.
type List int

// The six cacheable results.
const (
	ListDiscover List = iota
	ListTools
	ListPrompts
	ListResources
	ListTemplates
	ReadResource
	numLists
)

// CachePolicy is the caching hint attached to a cacheable result.
type CachePolicy struct {
	// TTL becomes ttlMs; negative values are sent as 0.
	TTL time.Duration
	// Scope becomes cacheScope; empty means public.
	Scope mcp.CacheScope
}

func (p CachePolicy) ttlMs() int64 {
	if p.TTL < 0 {
		return 0
	}
	return p.TTL.Milliseconds()
}

func (p CachePolicy) scope() mcp.CacheScope {
	if p.Scope == "" {
		return mcp.ScopePublic
	}
	return p.Scope
}

// DefaultPolicies are the cache hints used unless overridden: lists are
// announced by notifications, so a short TTL only bounds staleness for
// clients that do not listen; reads default to 0 because content may
// change at any time.
func DefaultPolicies() [numLists]CachePolicy {
	return [6]CachePolicy{
		ListDiscover:  {TTL: time.Minute},
		ListTools:     {TTL: 10 * time.Second},
		ListPrompts:   {TTL: 10 * time.Second},
		ListResources: {TTL: 10 * time.Second},
		ListTemplates: {TTL: 10 * time.Second},
		ReadResource:  {TTL: 0},
	}
}

// Server is an MCP server. Create it with New; it is safe for concurrent use.
type Server struct {
	handle // the transports' view; see engine.Of

	shut shutState // see Shutdown

	info     mcp.Implementation
	infoJSON []byte
	cfg      config
	seal     sealer
	hub      *hub.Hub
	log      *slog.Logger

	// src is where the server's items come from (see source).
	src       source
	tools     *registry[*tool]
	prompts   *registry[*prompt]
	resources *registry[*resource]
	templates *registry[*template]

	// follows bounds what listens hold (WithListenLimits).
	follows *followSet

	// shared runs the shared state (WithSharedState); nil without.
	shared *sharedState

	// taskStore holds the tasks (WithTaskStore); tasks runs their work.
	// taskTools is set once a tool requires tasks (RequireTasks).
	taskStore bus.TaskStore
	// ownerKey keys what a task's record keeps of its owner (ownerHash).
	ownerKey []byte
	tasks    *taskSet
	// taskSrc is where the tasks callers follow live (see taskSource).
	taskSrc   taskSource
	taskTools atomic.Bool
	// leases follows the leases of the tasks this replica's listens
	// follow (WithTaskLease).
	leases *leaseWatch
	// originFollows are the listens following an origin's tasks
	// (TaskOrigin).
	originFollows originTaskFollows

	completeMu sync.RWMutex
	complete   CompleteHandler

	// handler is the middleware chain around the router (nil without
	// middleware).
	handler MethodHandler
	// changes stamps and traces list changes (nil without a tracer or a
	// meter provider); road is the road this server's own changes come
	// by: local, or origin for a server whose items are its Origin's.
	changes *changeTelemetry
	road    string
	// scoped is set once any item was registered with RequireScopes, so
	// that servers without scopes never look them up.
	scoped  atomic.Bool
	writers writers

	// bodies recycles response buffers; see okReply.
	bodies sync.Pool
}

// New returns a server that introduces itself as info.
func New(info mcp.Implementation, opts ...Option) *Server {
	cfg := config{
		pageSize:  100,
		policies:  DefaultPolicies(),
		keepAlive: 15 * time.Second,
		stateTTL:  10 * time.Minute,
		now:       time.Now,
		taskTTL:   defaultTaskTTL,
		taskPoll:  defaultTaskPoll,
		taskLease: defaultTaskLease,

		maxTasks:          defaultMaxTasks,
		maxPrincipalTasks: defaultMaxPrincipalTasks,
		listens:           DefaultListenLimits(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	if len(cfg.secret) == 0 {
		cfg.secret = make([]byte, 32)
		_, _ = rand.Read(cfg.secret)
	} else if len(cfg.secret) < minSecretLen {
		cfg.logger.Warn("server: the secret is shorter than recommended; cursors and request state are easier to forge",
			"bytes", len(cfg.secret), "recommended", minSecretLen)
	}
	h := hub.New()
	s := &Server{
		info: info,
		cfg:  cfg,
		seal: newSealer(cfg.secret),
		hub:  h,
		log:  cfg.logger,

		taskStore: cfg.taskStore,
		ownerKey:  taskOwnerKey(cfg.secret),
		tasks:     newTaskSet(cfg.maxTasks, cfg.maxPrincipalTasks),
		follows:   newFollowSet(cfg.listens),
	}
	if s.taskStore == nil {
		s.taskStore = bus.NewLocalTasks()
	}
	s.leases = newLeaseWatch(s)
	if len(cfg.middleware) > 0 {
		s.handler = chain(cfg.middleware, s.routed)
	}
	s.handle = engine.NewHandle((*seam)(s))
	s.infoJSON, _ = jsonrpc.Marshal(info)
	s.tools = newRegistry[*tool](h, mcp.ToolsList)
	s.prompts = newRegistry[*prompt](h, mcp.PromptsList)
	s.resources = newRegistry[*resource](h, mcp.ResourcesList)
	s.templates = newRegistry[*template](h, mcp.ResourcesList)
	s.changes = newChangeTelemetry(cfg)
	s.src, s.road = newSource(s, &cfg)
	s.taskSrc = newTaskSource(s, &cfg)
	s.tools.tel, s.prompts.tel, s.resources.tel, s.templates.tel = s.changes, s.changes, s.changes, s.changes
	s.tools.road, s.prompts.road, s.resources.road, s.templates.road = s.road, s.road, s.road, s.road
	if v := cfg.visible; v != nil {
		s.tools.sees = func(p, k string) bool { return v(p, ListTools, k) }
		s.prompts.sees = func(p, k string) bool { return v(p, ListPrompts, k) }
		s.resources.sees = func(p, k string) bool { return v(p, ListResources, k) }
		s.templates.sees = func(p, k string) bool { return v(p, ListTemplates, k) }
	}
	s.tools.space, s.prompts.space, s.resources.space, s.templates.space = ListTools, ListPrompts, ListResources, ListTemplates
	if cfg.state != nil {
		for _, r := range []interface{ initState() }{s.tools, s.prompts, s.resources} {
			r.initState()
		}
		s.shared = newSharedState(s, cfg.state)
	}
	if cfg.bus != nil {
		s.joinBus(cfg.bus)
	}
	return s
}

// Info returns the implementation the server introduces itself as.
func (s *Server) Info() mcp.Implementation { return s.info }

// ---- tools ----

// ToolHandler runs a tool call. A returned *jsonrpc.Error reaches the
// client as a protocol error; *InputRequired asks the client for input
// (MRTR); any other error becomes a result with isError set, which the
// client shows the model so that it can correct itself.
type ToolHandler func(ctx context.Context, req *ToolRequest) (*mcp.CallToolResult, error)

type tool struct {
	def     mcp.Tool
	handler ToolHandler
	input   *jsonschema.Schema
	output  *jsonschema.Schema
	headers []xheader.Param
	scopes  []string
	// tasksOnly: only requests that declare the tasks extension may call
	// it (RequireTasks).
	tasksOnly bool
}

// AddTool registers (or replaces) a tool. Its input schema must be a JSON
// Schema (2020-12 unless it says otherwise) whose root type is "object";
// arguments are validated against it before the handler runs.
func (s *Server) AddTool(t mcp.Tool, h ToolHandler, opts ...ItemOption) error {
	if err := CheckToolName(t.Name); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	if h == nil {
		return fmt.Errorf("server: tool %q needs a handler", t.Name)
	}
	if len(t.InputSchema) == 0 {
		t.InputSchema = jsontext.Value(`{"type":"object"}`)
	}
	if err := checkInputSchema(t.InputSchema); err != nil {
		return fmt.Errorf("server: tool %q: %w", t.Name, err)
	}
	if len(t.OutputSchema) > 0 {
		if err := checkOutputSchema(t.OutputSchema); err != nil {
			return fmt.Errorf("server: tool %q: %w", t.Name, err)
		}
	}
	in, err := s.compileSchema("tool:"+t.Name+":input", t.InputSchema)
	if err != nil {
		return fmt.Errorf("server: tool %q input schema: %w", t.Name, err)
	}
	var out *jsonschema.Schema
	if len(t.OutputSchema) > 0 {
		if out, err = s.compileSchema("tool:"+t.Name+":output", t.OutputSchema); err != nil {
			return fmt.Errorf("server: tool %q output schema: %w", t.Name, err)
		}
	}
	headers, err := xheader.Params(t.InputSchema)
	if err != nil {
		return fmt.Errorf("server: tool %q: %w", t.Name, err)
	}
	b, err := jsonrpc.Marshal(t)
	if err != nil {
		return fmt.Errorf("server: tool %q: %w", t.Name, err)
	}
	o := applyItem(opts)
	if err := s.noteScopes(o.scopes); err != nil {
		return err
	}
	if o.tasksOnly {
		s.taskTools.Store(true)
	}
	s.tools.put(&entry[*tool]{key: t.Name, val: &tool{def: t, handler: h, input: in, output: out, headers: headers, scopes: o.scopes, tasksOnly: o.tasksOnly}, json: b})
	return nil
}

// RemoveTools unregisters tools by name and reports how many were found.
func (s *Server) RemoveTools(names ...string) int { return s.tools.remove(names...) }

// ---- prompts ----

// PromptHandler renders a prompt. Errors follow ToolHandler's rules,
// except that a plain error becomes -32603.
type PromptHandler func(ctx context.Context, req *PromptRequest) (*mcp.GetPromptResult, error)

type prompt struct {
	def     mcp.Prompt
	handler PromptHandler
	scopes  []string
}

// AddPrompt registers (or replaces) a prompt.
func (s *Server) AddPrompt(p mcp.Prompt, h PromptHandler, opts ...ItemOption) error {
	if p.Name == "" || h == nil {
		return errors.New("server: prompt needs a name and a handler")
	}
	b, err := jsonrpc.Marshal(p)
	if err != nil {
		return fmt.Errorf("server: prompt %q: %w", p.Name, err)
	}
	o := applyItem(opts)
	if err := s.noteScopes(o.scopes); err != nil {
		return err
	}
	s.prompts.put(&entry[*prompt]{key: p.Name, val: &prompt{def: p, handler: h, scopes: o.scopes}, json: b})
	return nil
}

// RemovePrompts unregisters prompts by name.
func (s *Server) RemovePrompts(names ...string) int { return s.prompts.remove(names...) }

// ---- resources ----

// ResourceHandler reads a resource. Return ErrResourceNotFound (or wrap it)
// when the URI names nothing; the client then gets -32602 with the URI.
type ResourceHandler func(ctx context.Context, req *ResourceRequest) (*mcp.ReadResourceResult, error)

// ErrResourceNotFound reports that no resource has the requested URI.
var ErrResourceNotFound = errors.New("resource not found")

// ItemOption tunes one registered tool, prompt, resource or template.
type ItemOption func(*itemOpts)

type itemOpts struct {
	policy    *CachePolicy
	scopes    []string
	tasksOnly bool
}

func applyItem(opts []ItemOption) itemOpts {
	var o itemOpts
	for _, f := range opts {
		f(&o)
	}
	return o
}

// WithResourceCache overrides the read cache hint for one resource or
// template, for content whose freshness differs from the server default.
// Tools and prompts ignore it.
func WithResourceCache(p CachePolicy) ItemOption {
	return func(o *itemOpts) { o.policy = &p }
}

// RequireScopes declares the OAuth scopes a caller's token must grant to
// call the tool, get the prompt or read the resource (or a resource of
// the template), where the item is registered. The server does not check
// them itself — it knows no tokens — but hands them to the authorization
// layer: Request.Scopes for middleware, and RequiredScopes for the HTTP
// layer, which answers a missing scope with a 403 challenge (see the auth
// package).
func RequireScopes(scopes ...string) ItemOption {
	return func(o *itemOpts) { o.scopes = append(o.scopes, scopes...) }
}

type resource struct {
	def     mcp.Resource
	handler ResourceHandler
	opts    itemOpts
}

type template struct {
	def     mcp.ResourceTemplate
	tmpl    *uritemplate.Template
	handler ResourceHandler
	opts    itemOpts
}

// AddResource registers (or replaces) a resource with a fixed URI.
func (s *Server) AddResource(r mcp.Resource, h ResourceHandler, opts ...ItemOption) error {
	return s.AddResources([]mcp.Resource{r}, h, opts...)
}

// AddResources registers (or replaces) several resources that share one
// handler as a single change: the snapshot is rebuilt once and listeners
// get one resources/list_changed. Adding n resources one at a time
// rebuilds the sorted snapshot n times, which is quadratic and takes
// seconds for a source of ten thousand items such as a directory tree.
// Nothing is registered when any resource is invalid.
func (s *Server) AddResources(rs []mcp.Resource, h ResourceHandler, opts ...ItemOption) error {
	if h == nil {
		return errors.New("server: resources need a handler")
	}
	es := make([]*entry[*resource], 0, len(rs))
	for _, r := range rs {
		if r.URI == "" {
			return errors.New("server: resource needs a URI")
		}
		if r.Name == "" {
			r.Name = r.URI
		}
		b, err := jsonrpc.Marshal(r)
		if err != nil {
			return fmt.Errorf("server: resource %q: %w", r.URI, err)
		}
		res := &resource{def: r, handler: h, opts: applyItem(opts)}
		if err := s.noteScopes(res.opts.scopes); err != nil {
			return err
		}
		es = append(es, &entry[*resource]{key: r.URI, val: res, json: b})
	}
	s.resources.put(es...)
	return nil
}

// RemoveResources unregisters resources by URI.
func (s *Server) RemoveResources(uris ...string) int { return s.resources.remove(uris...) }

// AddResourceTemplate registers (or replaces) a resource template. Reads of
// URIs that match it and are not registered resources go to h.
func (s *Server) AddResourceTemplate(t mcp.ResourceTemplate, h ResourceHandler, opts ...ItemOption) error {
	if t.URITemplate == "" || h == nil {
		return errors.New("server: resource template needs a URI template and a handler")
	}
	tm, err := uritemplate.New(t.URITemplate)
	if err != nil {
		return fmt.Errorf("server: resource template %q: %w", t.URITemplate, err)
	}
	if t.Name == "" {
		t.Name = t.URITemplate
	}
	b, err := jsonrpc.Marshal(t)
	if err != nil {
		return fmt.Errorf("server: resource template %q: %w", t.URITemplate, err)
	}
	tp := &template{def: t, tmpl: tm, handler: h, opts: applyItem(opts)}
	if err := s.noteScopes(tp.opts.scopes); err != nil {
		return err
	}
	s.templates.put(&entry[*template]{key: t.URITemplate, val: tp, json: b})
	return nil
}

// RemoveResourceTemplates unregisters templates by their URI template.
func (s *Server) RemoveResourceTemplates(uriTemplates ...string) int {
	return s.templates.remove(uriTemplates...)
}

// noteScopes checks the scopes an item requires — each an OAuth
// scope-token (RFC 6749 §3.3), which a challenge can quote as it is — and
// remembers that some item requires scopes.
func (s *Server) noteScopes(scopes []string) error {
	for _, sc := range scopes {
		if sc == "" || strings.ContainsFunc(sc, func(r rune) bool { return r < 0x21 || r == '"' || r == '\\' || r > 0x7e }) {
			return fmt.Errorf("server: %q is not an OAuth scope", sc)
		}
	}
	if len(scopes) > 0 {
		s.scoped.Store(true)
	}
	return nil
}

// RequiredScopes returns the scopes the item a request of principal
// names was registered with (see RequireScopes): the tool of a
// tools/call, the prompt of a prompts/get, the resource (or the template
// that serves it) of a resources/read; nil for other methods, for unknown
// items, and for items principal may not see — those are refused as
// unknown anyway, and a challenge must not reveal that they exist. The
// item is found the way the request will be served, visibility included.
// An HTTP authorization layer asks it before MCP processing, to answer a
// token that lacks them with a 403 challenge.
func (s *Server) RequiredScopes(principal, method, name string) []string {
	if !s.scoped.Load() {
		return nil
	}
	// The methods that name an item: the table says which, and of which
	// kind.
	m, _ := engine.Lookup(method)
	if !m.NamesItem() {
		return nil
	}
	switch m.Needs {
	case engine.NeedsTools:
		if e, ok := s.tools.load().get(name); ok && s.sees(principal, ListTools, name) {
			return e.val.scopes
		}
	case engine.NeedsPrompts:
		if e, ok := s.prompts.load().get(name); ok && s.sees(principal, ListPrompts, name) {
			return e.val.scopes
		}
	case engine.NeedsResources:
		if h, opts, _ := s.resolve(principal, name); h != nil {
			return opts.scopes
		}
	}
	return nil
}

// ResourceUpdated tells every listener subscribed to uri that its content
// changed. Call it whenever a read of uri would now return something else.
func (s *Server) ResourceUpdated(uri string) { s.ResourceUpdatedContext(context.Background(), uri) }

// ResourceUpdatedContext is ResourceUpdated for an update that continues
// a trace: with WithTracerProvider, the update's span is the child of the
// span ctx holds (see ListChangedContext).
func (s *Server) ResourceUpdatedContext(ctx context.Context, uri string) {
	c := change{Event: hub.Event{URI: uri}}
	if v := s.cfg.visible; v != nil {
		c.Sees = func(p string) bool { return v(p, ListResources, uri) }
		c.keys, c.list = []string{uri}, ListResources
	}
	publish(ctx, s.hub, s.cfg.bus, c, s.changes, s.road)
}

// ---- completion ----

// CompleteHandler answers completion/complete.
type CompleteHandler func(ctx context.Context, req *CompleteRequest) (*mcp.Completion, error)

// SetCompletionHandler installs the completion handler and advertises the
// completions capability.
func (s *Server) SetCompletionHandler(h CompleteHandler) {
	s.completeMu.Lock()
	s.complete = h
	s.completeMu.Unlock()
}

func (s *Server) completer() CompleteHandler {
	s.completeMu.RLock()
	defer s.completeMu.RUnlock()
	return s.complete
}
