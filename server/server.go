// Package server is a Model Context Protocol 2026-07-28 server whose tools,
// prompts and resources can change while it runs.
//
// A Server holds registries (immutable sorted snapshots, read without
// locks), a change hub that tells every open subscriptions/listen stream
// what changed, and the dispatch logic for every method. It does no I/O of
// its own: the streamhttp and stdio packages frame messages and call
// Parse and Serve. Because the 2026-07-28 core is stateless, nothing here
// is keyed by connection; every request stands on its own _meta.
package server

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	jsonschema "github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/yosida95/uritemplate/v3"

	"tidings/hub"
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

type config struct {
	instructions string
	pageSize     int
	secret       []byte
	policies     [numLists]CachePolicy
	logger       *slog.Logger
	keepAlive    time.Duration
	stateTTL     time.Duration
	noServerInfo bool
	now          func() time.Time
	capabilities capsOverride
	maxSessions  int
	sessionIdle  time.Duration
	visible      func(principal string, l List, key string) bool
}

type capsOverride struct {
	tools, prompts, resources, completions bool
}

// Option configures a Server.
type Option func(*config)

// WithInstructions sets the instructions returned by server/discover.
func WithInstructions(s string) Option { return func(c *config) { c.instructions = s } }

// WithPageSize sets how many items a list page holds (default 100).
func WithPageSize(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.pageSize = n
		}
	}
}

// minSecretLen is the shortest secret New accepts without a warning.
const minSecretLen = 32

// WithSecret sets the key that protects cursors and request state. Give
// every replica behind a balancer the same key (at least 32 random bytes)
// so that tokens issued by one are accepted by the others. Without it a
// random key is drawn at start. New logs a warning for a key shorter
// than 32 bytes, which would make the tokens easier to forge.
func WithSecret(key []byte) Option {
	return func(c *config) { c.secret = append([]byte(nil), key...) }
}

// WithCachePolicy overrides the cache hint of one cacheable result.
func WithCachePolicy(l List, p CachePolicy) Option {
	return func(c *config) {
		if l >= 0 && l < numLists {
			c.policies[l] = p
		}
	}
}

// WithLogger sets where the server logs (default: slog.Default). Request
// payloads and secrets are never logged.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithKeepAlive sets the interval of listen stream keep-alives (default
// 15s; 0 disables). A listen gets one after a whole tick of the interval
// passed with nothing written, so an idle stream hears something within
// twice the interval.
func WithKeepAlive(d time.Duration) Option { return func(c *config) { c.keepAlive = d } }

// WithRequestStateTTL bounds how long an MRTR requestState stays valid
// (default 10 minutes).
func WithRequestStateTTL(d time.Duration) Option { return func(c *config) { c.stateTTL = d } }

// WithoutServerInfo stops the server from putting serverInfo in result _meta.
func WithoutServerInfo() Option { return func(c *config) { c.noServerInfo = true } }

// WithVisibility makes what a caller sees depend on who the caller is:
// visible reports whether principal (see streamhttp.WithPrincipal) may see
// the item keyed key — a tool or prompt name, a resource URI, a URI
// template — of list l. Hidden items are left out of lists and answer as
// unknown when called or read. Lists then carry cacheScope "private", so
// no cache ever serves one caller's list to another. Access control
// itself belongs here, never in cache scopes: a public answer may be
// reused under any token.
func WithVisibility(visible func(principal string, l List, key string) bool) Option {
	return func(c *config) { c.visible = visible }
}

// WithClock replaces time.Now, for tests of expiry.
func WithClock(now func() time.Time) Option { return func(c *config) { c.now = now } }

// WithCapabilities advertises primitives before anything is registered, for
// servers that start empty and fill up at run time. A primitive is also
// advertised as soon as something of its kind is first registered.
func WithCapabilities(tools, prompts, resources, completions bool) Option {
	return func(c *config) {
		c.capabilities = capsOverride{tools, prompts, resources, completions}
	}
}

// Server is an MCP server. Create it with New; it is safe for concurrent use.
type Server struct {
	info     mcp.Implementation
	infoJSON []byte
	cfg      config
	seal     sealer
	hub      *hub.Hub
	log      *slog.Logger

	tools     *registry[*tool]
	prompts   *registry[*prompt]
	resources *registry[*resource]
	templates *registry[*template]

	completeMu sync.RWMutex
	complete   CompleteHandler

	sessions *sessions
	writers  writers

	// bodies recycles response buffers; see okReply.
	bodies sync.Pool
}

// New returns a server that introduces itself as info.
func New(info mcp.Implementation, opts ...Option) *Server {
	cfg := config{
		pageSize:    100,
		policies:    DefaultPolicies(),
		keepAlive:   15 * time.Second,
		stateTTL:    10 * time.Minute,
		now:         time.Now,
		maxSessions: 10000,
		sessionIdle: 30 * time.Minute,
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
		info:     info,
		cfg:      cfg,
		seal:     sealer{key: cfg.secret},
		hub:      h,
		log:      cfg.logger,
		sessions: newSessions(cfg.maxSessions, cfg.sessionIdle),
	}
	s.infoJSON, _ = jsonrpc.Marshal(info)
	s.tools = newRegistry[*tool](h, hub.ToolsList)
	s.prompts = newRegistry[*prompt](h, hub.PromptsList)
	s.resources = newRegistry[*resource](h, hub.ResourcesList)
	s.templates = newRegistry[*template](h, hub.ResourcesList)
	return s
}

// Hub returns the server's change hub, for wiring a bus between replicas.
func (s *Server) Hub() *hub.Hub { return s.hub }

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
}

// AddTool registers (or replaces) a tool. Its input schema must be a JSON
// Schema (2020-12 unless it says otherwise) whose root type is "object";
// arguments are validated against it before the handler runs.
func (s *Server) AddTool(t mcp.Tool, h ToolHandler) error {
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
	s.tools.put(&entry[*tool]{key: t.Name, val: &tool{def: t, handler: h, input: in, output: out, headers: headers}, json: b})
	return nil
}

// RemoveTools unregisters tools by name and reports how many were found.
func (s *Server) RemoveTools(names ...string) int { return s.tools.remove(names...) }

// EnableTool shows (true) or hides (false) a registered tool. A hidden tool
// is neither listed nor callable. It reports whether the tool exists.
func (s *Server) EnableTool(name string, on bool) bool { return s.tools.setEnabled(name, on) }

// ---- prompts ----

// PromptHandler renders a prompt. Errors follow ToolHandler's rules,
// except that a plain error becomes -32603.
type PromptHandler func(ctx context.Context, req *PromptRequest) (*mcp.GetPromptResult, error)

type prompt struct {
	def     mcp.Prompt
	handler PromptHandler
}

// AddPrompt registers (or replaces) a prompt.
func (s *Server) AddPrompt(p mcp.Prompt, h PromptHandler) error {
	if p.Name == "" || h == nil {
		return errors.New("server: prompt needs a name and a handler")
	}
	b, err := jsonrpc.Marshal(p)
	if err != nil {
		return fmt.Errorf("server: prompt %q: %w", p.Name, err)
	}
	s.prompts.put(&entry[*prompt]{key: p.Name, val: &prompt{def: p, handler: h}, json: b})
	return nil
}

// RemovePrompts unregisters prompts by name.
func (s *Server) RemovePrompts(names ...string) int { return s.prompts.remove(names...) }

// EnablePrompt shows or hides a registered prompt.
func (s *Server) EnablePrompt(name string, on bool) bool { return s.prompts.setEnabled(name, on) }

// ---- resources ----

// ResourceHandler reads a resource. Return ErrResourceNotFound (or wrap it)
// when the URI names nothing; the client then gets -32602 with the URI.
type ResourceHandler func(ctx context.Context, req *ResourceRequest) (*mcp.ReadResourceResult, error)

// ErrResourceNotFound reports that no resource has the requested URI.
var ErrResourceNotFound = errors.New("resource not found")

// ResourceOption tunes one resource or template.
type ResourceOption func(*resourceOpts)

type resourceOpts struct {
	policy *CachePolicy
}

// WithResourceCache overrides the read cache hint for one resource or
// template, for content whose freshness differs from the server default.
func WithResourceCache(p CachePolicy) ResourceOption {
	return func(o *resourceOpts) { o.policy = &p }
}

type resource struct {
	def     mcp.Resource
	handler ResourceHandler
	opts    resourceOpts
}

type template struct {
	def     mcp.ResourceTemplate
	tmpl    *uritemplate.Template
	handler ResourceHandler
	opts    resourceOpts
}

// AddResource registers (or replaces) a resource with a fixed URI.
func (s *Server) AddResource(r mcp.Resource, h ResourceHandler, opts ...ResourceOption) error {
	return s.AddResources([]mcp.Resource{r}, h, opts...)
}

// AddResources registers (or replaces) several resources that share one
// handler as a single change: the snapshot is rebuilt once and listeners
// get one resources/list_changed. Adding n resources one at a time
// rebuilds the sorted snapshot n times, which is quadratic and takes
// seconds for a source of ten thousand items such as a directory tree.
// Nothing is registered when any resource is invalid.
func (s *Server) AddResources(rs []mcp.Resource, h ResourceHandler, opts ...ResourceOption) error {
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
		res := &resource{def: r, handler: h}
		for _, o := range opts {
			o(&res.opts)
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
func (s *Server) AddResourceTemplate(t mcp.ResourceTemplate, h ResourceHandler, opts ...ResourceOption) error {
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
	tp := &template{def: t, tmpl: tm, handler: h}
	for _, o := range opts {
		o(&tp.opts)
	}
	s.templates.put(&entry[*template]{key: t.URITemplate, val: tp, json: b})
	return nil
}

// RemoveResourceTemplates unregisters templates by their URI template.
func (s *Server) RemoveResourceTemplates(uriTemplates ...string) int {
	return s.templates.remove(uriTemplates...)
}

// ResourceUpdated tells every listener subscribed to uri that its content
// changed. Call it whenever a read of uri would now return something else.
func (s *Server) ResourceUpdated(uri string) { s.hub.ResourceUpdated(uri) }

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

// ---- lifecycle ----

// Shutdown ends every open listen gracefully (each gets the complete
// result) and waits until their streams are closed or ctx ends. A
// transport that registered a listen with TrackListen is waited for until
// it has written that last message, so closing connections right after
// Shutdown returns cuts nothing short. New listens are refused afterwards;
// other requests are still served, so a transport can drain in-flight
// calls on its own schedule.
func (s *Server) Shutdown(ctx context.Context) error {
	s.hub.Shutdown()
	idle := s.writers.close()
	for _, ch := range []<-chan struct{}{s.hub.Drained(), idle} {
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("server: shutdown: %w", ctx.Err())
		}
	}
	return nil
}

// TrackListen tells the server that a transport is serving a listen and
// will write its final message after Serve returns; call the returned
// function once that write is done (or abandoned). Shutdown waits for it.
func (s *Server) TrackListen() (done func()) { return s.writers.add() }

// writers counts listens whose last message a transport has yet to write.
type writers struct {
	mu         sync.Mutex
	n          int
	closing    bool
	idle       chan struct{}
	idleClosed bool
}

func (w *writers) add() func() {
	w.mu.Lock()
	w.n++
	w.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.n--
			if w.closing && w.n == 0 && !w.idleClosed {
				w.idleClosed = true
				close(w.idle)
			}
		})
	}
}

// close marks the shutdown and returns a channel closed once no listen
// is left to write.
func (w *writers) close() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closing {
		w.closing = true
		w.idle = make(chan struct{})
		if w.n == 0 {
			w.idleClosed = true
			close(w.idle)
		}
	}
	return w.idle
}
