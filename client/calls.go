package client

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/internal/xheader"
	"tidings/jsonrpc"
	"tidings/mcp"
)

// ErrTooManyRounds reports a server that kept asking for input past the
// client's bound.
var ErrTooManyRounds = errors.New("client: too many input-required rounds")

// interim is an input_required result.
type interim struct {
	ResultType    string                      `json:"resultType"`
	InputRequests map[string]mcp.InputRequest `json:"inputRequests"`
	RequestState  *string                     `json:"requestState"`
}

// withInput runs a request that may answer input_required: it fulfils
// every input request through the installed handlers and retries with the
// original params plus inputResponses, echoing requestState byte for byte,
// under a new id each time.
func (c *Client) withInput(ctx context.Context, method string, params map[string]any, o callOpts) (jsontext.Value, int, error) {
	params = maps.Clone(params)
	for round := 0; ; round++ {
		res, err := c.do(ctx, method, params, o)
		if err != nil {
			return nil, round, err
		}
		var ir interim
		if err := json.Unmarshal(res, &ir); err != nil {
			return nil, round, fmt.Errorf("client: %s: %w", method, err)
		}
		if ir.ResultType != mcp.ResultInputRequired {
			return res, round, nil
		}
		if round+1 >= c.cfg.maxRounds {
			return nil, round, ErrTooManyRounds
		}
		responses := make(map[string]jsontext.Value, len(ir.InputRequests))
		for key, r := range ir.InputRequests {
			v, err := c.answer(ctx, r)
			if err != nil {
				return nil, round, fmt.Errorf("client: %s: input %q: %w", method, key, err)
			}
			responses[key] = v
		}
		params["inputResponses"] = responses
		if ir.RequestState != nil {
			params["requestState"] = *ir.RequestState
		} else {
			delete(params, "requestState")
		}
	}
}

func (c *Client) answer(ctx context.Context, r mcp.InputRequest) (jsontext.Value, error) {
	switch r.Method {
	case mcp.MethodElicit:
		if c.cfg.elicit == nil {
			return nil, errors.New("no elicitation handler")
		}
		res, err := c.cfg.elicit(ctx, r.Params)
		if err != nil {
			return nil, err
		}
		return json.Marshal(res, json.Deterministic(true))
	case mcp.MethodCreateMessage:
		if c.cfg.sample == nil {
			return nil, errors.New("no sampling handler")
		}
		return c.cfg.sample(ctx, r.Params)
	case mcp.MethodRootsList:
		if c.cfg.roots == nil {
			return nil, errors.New("no roots handler")
		}
		res, err := c.cfg.roots(ctx)
		if err != nil {
			return nil, err
		}
		if res.Roots == nil {
			res.Roots = []mcp.Root{}
		}
		return json.Marshal(res, json.Deterministic(true))
	}
	return nil, fmt.Errorf("unsupported input request method %q", r.Method)
}

// CallOption tunes one call of CallTool. It is of another kind than the
// constructors' options (Option, HTTPOption, CommandOption): those set up
// the client for all its calls, a CallOption is given to the one call it
// concerns, so neither is accepted where the other is.
type CallOption interface{ applyCall(*callOpts) }

// callOption is a CallOption.
type callOption func(*callOpts)

func (o callOption) applyCall(c *callOpts) { o(c) }

// WithCapabilities declares caps on this one request in place of the
// client's own. A gateway or proxy declares its caller's, so that the
// server asks for only the input the caller can give: the proxy passes
// an input_required result down as it is and retries with the caller's
// answers (Request returns such results rather than answering them).
func WithCapabilities(caps mcp.ClientCaps) CallOption {
	return callOption(func(o *callOpts) { o.caps = &caps })
}

// WithLogs asks for this one request's log messages at level and above,
// in place of WithServerLogs, and hands them to fn: a proxy passes its
// upstream's messages to its own caller. Over the 2026-07-28 protocol the
// level travels with the request; a 2025-11-25 session's level is the
// session's, which this does not change.
func WithLogs(level mcp.LogLevel, fn func(level mcp.LogLevel, logger string, data jsontext.Value)) CallOption {
	return callOption(func(o *callOpts) { o.logLevel, o.onLog = level, fn })
}

// WithProgress asks for progress notifications and hands them to fn.
// When the server runs a tool call as a task (see WithTaskStatus), each
// change of the task's status is reported through fn too, with the
// task's status message and a progress value one above the last, so
// that a caller showing progress sees the task's as it goes.
func WithProgress(fn func(progress float64, total *float64, message string)) CallOption {
	return callOption(func(o *callOpts) { o.progress = fn })
}

// CallTool calls a tool. args is marshalled as the arguments object (nil
// means none). Arguments the tool's schema marks with x-mcp-header are
// mirrored into Mcp-Param-* headers; the client fetches the tool list
// first if it has not seen the tool, and once more (retrying the call)
// when the server says the headers do not match. A result with isError
// set is returned as a result, not an error: it is for the model to read.
//
// A server may run the call as a task (the tasks extension, which the
// client declares unless WithoutTasks is given): CallTool then follows
// the task until it ends and returns what the call would have returned
// — the task's result, or its JSON-RPC error as a *RPCError — so that
// callers need not know. It listens for the task's notifications where
// the server offers them and polls otherwise, answers the task's input
// requests with the client's handlers, and cancels the task when ctx
// ends (returning ctx's error). A task the server cancels ends the call
// with ErrTaskCancelled. The request timeout bounds each request made
// for the task, not the task.
func (c *Client) CallTool(ctx context.Context, name string, args any, opts ...CallOption) (*mcp.CallToolResult, error) {
	var raw jsontext.Value
	if args != nil {
		b, err := json.Marshal(args, json.Deterministic(true))
		if err != nil {
			return nil, fmt.Errorf("client: tool %q arguments: %w", name, err)
		}
		raw = b
	}
	o := callOpts{name: &name}
	for _, opt := range opts {
		opt.applyCall(&o)
	}
	var progress *progressFloor
	if o.progress != nil {
		progress = &progressFloor{fn: o.progress}
		o.progress = progress.report
	}
	params := map[string]any{"name": name}
	if raw != nil {
		params["arguments"] = raw
	}
	var res jsontext.Value
	for attempt := 0; ; attempt++ {
		hdrs, err := c.paramHeaders(ctx, name, raw)
		if err != nil {
			return nil, err
		}
		o.params = hdrs
		var round int
		res, round, err = c.withInput(ctx, mcp.MethodToolsCall, params, o)
		if err == nil {
			break
		}
		var rpc *jsonrpc.Error
		if errors.As(err, &rpc) && (rpc.Code == jsonrpc.CodeInvalidParams || rpc.Code == jsonrpc.CodeMethodNotFound || rpc.Code == mcp.CodeHeaderMismatch) {
			// The tool may have changed under us: the next read re-fetches.
			c.cache.invalidate(topicTools)
			if rpc.Code == mcp.CodeHeaderMismatch && attempt == 0 && round == 0 {
				// XH-8: the annotations we mirrored may be out of date. The
				// invalidation makes paramHeaders re-read the list; retry once.
				continue
			}
		}
		return nil, err
	}
	var kind struct {
		ResultType string `json:"resultType"`
	}
	if err := json.Unmarshal(res, &kind); err == nil && kind.ResultType == mcp.ResultTask {
		return c.followTask(ctx, name, res, o, progress)
	}
	var out mcp.CallToolResult
	if err := json.Unmarshal(res, &out); err != nil {
		return nil, fmt.Errorf("client: tool %q result: %w", name, err)
	}
	return &out, nil
}

// paramHeaders builds the Mcp-Param-* headers of a call from the tool's
// x-mcp-header annotations.
func (c *Client) paramHeaders(ctx context.Context, name string, args jsontext.Value) ([]headerField, error) {
	if _, ok := c.t.(*httpTransport); !ok {
		return nil, nil // only HTTP carries headers
	}
	// The cached list serves however old it is, as long as nothing has put
	// it in doubt (a notification, a refused call, a broken listen): a
	// call should not cost a list walk each time a TTL runs out. A tool
	// the list does not know sends the client to the server for the list.
	tl, _ := peekTrustedAs[*toolList](c.cache, mcp.MethodToolsList, c.lookupContext(ctx))
	if _, known := tl.lookup(name); !known {
		var err error
		if tl, err = c.toolList(ctx); err != nil {
			return nil, err
		}
	}
	ps, _ := tl.lookup(name)
	var out []headerField
	for _, p := range ps {
		v, err := xheader.Lookup(args, p.Path)
		if err != nil {
			continue // absent or null: no header
		}
		s, err := xheader.Value(p.Type, v)
		if err != nil {
			return nil, fmt.Errorf("client: tool %q: argument for %s: %w", name, p.Header(), err)
		}
		out = append(out, headerField{name: p.Header(), value: xheader.Encode(s)})
	}
	return out, nil
}

// GetPrompt renders a prompt.
func (c *Client) GetPrompt(ctx context.Context, name string, args map[string]string) (*mcp.GetPromptResult, error) {
	params := map[string]any{"name": name}
	if args != nil {
		params["arguments"] = args
	}
	res, _, err := c.withInput(ctx, mcp.MethodPromptsGet, params, callOpts{name: &name})
	if err != nil {
		return nil, err
	}
	var out mcp.GetPromptResult
	if err := json.Unmarshal(res, &out); err != nil {
		return nil, fmt.Errorf("client: prompt %q result: %w", name, err)
	}
	return &out, nil
}

// ReadResource reads a resource, from the cache while it is fresh. A
// notifications/resources/updated for the URI makes the cached answer
// stale at once.
func (c *Client) ReadResource(ctx context.Context, uri string) (*mcp.ReadResourceResult, error) {
	return cachedAs[*mcp.ReadResourceResult](ctx, c.cache, readKey(uri), topicResource+uri, c.lookupContext(ctx), func(ctx context.Context) (fetched, error) {
		// A read that needed input was answered to a request carrying
		// inputResponses, and such answers are never cached.
		var who authRecord
		res, rounds, err := c.withInput(ctx, mcp.MethodResourcesRead, map[string]any{"uri": uri}, callOpts{name: &uri, auth: &who})
		if err != nil {
			return fetched{}, err
		}
		var out mcp.ReadResourceResult
		if err := json.Unmarshal(res, &out); err != nil {
			return fetched{}, fmt.Errorf("client: read %q: %w", uri, err)
		}
		ttl, scope := c.hints(topicResource+uri, res)
		return fetched{value: &out, ttl: ttl, scope: scope, noStore: rounds > 0, as: who.context()}, nil
	})
}

// Complete asks for completion values.
func (c *Client) Complete(ctx context.Context, ref mcp.CompleteRef, arg mcp.CompleteArgument, resolved map[string]string) (*mcp.Completion, error) {
	params := map[string]any{"ref": ref, "argument": arg}
	if resolved != nil {
		params["context"] = mcp.CompleteContext{Arguments: resolved}
	}
	res, err := c.do(ctx, mcp.MethodComplete, params, callOpts{})
	if err != nil {
		return nil, err
	}
	var out struct {
		Completion mcp.Completion `json:"completion"`
	}
	if err := json.Unmarshal(res, &out); err != nil {
		return nil, fmt.Errorf("client: completion result: %w", err)
	}
	return &out.Completion, nil
}
