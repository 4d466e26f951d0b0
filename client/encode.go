package client

import (
	"fmt"
	"slices"
	"sync"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/jsonrpc"
	"tidings/mcp"
)

// fixedMeta is what every request of a client repeats in its _meta,
// encoded at the first request: the client's info, and its
// capabilities as declared without and with the tasks extension.
type fixedMeta struct {
	once sync.Once
	err  error
	info []byte
	caps [2][]byte // [tasks]
}

func (c *Client) fixedMeta() (*fixedMeta, error) {
	f := &c.fixed
	f.once.Do(func() {
		var err error
		if f.info, err = json.Marshal(c.cfg.info, json.Deterministic(true)); err != nil {
			f.err = fmt.Errorf("client: clientInfo: %w", err)
			return
		}
		for i, tasks := range []bool{false, true} {
			if f.caps[i], err = json.Marshal(c.caps(tasks), json.Deterministic(true)); err != nil {
				f.err = fmt.Errorf("client: clientCapabilities: %w", err)
				return
			}
		}
	})
	return f, f.err
}

// encode builds the request body for method with params (a JSON object
// without _meta, or nil). The members of params and of _meta are written
// in the order of their names, so that the same request is the same
// bytes; what every request repeats is encoded once (fixedMeta), and the
// rest appended where a map of every member was marshaled before.
func (c *Client) encode(id jsonrpc.ID, method string, params map[string]any, token string, o *callOpts) ([]byte, error) {
	names := make([]string, 0, len(params)+1)
	for k := range params {
		names = append(names, k)
	}
	names = append(names, "_meta")
	slices.Sort(names)
	pb := make([]byte, 0, 512)
	pb = append(pb, '{')
	for i, name := range names {
		if i > 0 {
			pb = append(pb, ',')
		}
		pb, _ = jsontext.AppendQuote(pb, name)
		pb = append(pb, ':')
		var err error
		if name == "_meta" {
			pb, err = c.appendMeta(pb, method, token, o)
		} else {
			pb, err = appendJSON(pb, params[name])
		}
		if err != nil {
			return nil, fmt.Errorf("client: %s params: %s: %w", method, name, err)
		}
	}
	pb = append(pb, '}')
	return jsonrpc.AppendRequest(nil, id, method, pb), nil
}

// appendMeta appends the request's _meta. Its members' names are known,
// and written in their order: clientCapabilities, clientInfo, logLevel,
// protocolVersion (all under io.modelcontextprotocol/), progressToken,
// traceparent, tracestate.
func (c *Client) appendMeta(b []byte, method, token string, o *callOpts) ([]byte, error) {
	fixed, err := c.fixedMeta()
	if err != nil {
		return nil, err
	}
	b = append(b, `{"`+mcp.MetaClientCapabilities+`":`...)
	if o != nil && o.caps != nil {
		if b, err = appendJSON(b, *o.caps); err != nil {
			return nil, err
		}
	} else if c.declaresTasks(method) {
		b = append(b, fixed.caps[1]...)
	} else {
		b = append(b, fixed.caps[0]...)
	}
	b = append(b, `,"`+mcp.MetaClientInfo+`":`...)
	b = append(b, fixed.info...)
	level, hasLevel := c.cfg.logLevel, c.cfg.logLevel != ""
	if o != nil && o.onLog != nil {
		level, hasLevel = o.logLevel, true
	}
	if hasLevel {
		b = append(b, `,"`+mcp.MetaLogLevel+`":`...)
		b, _ = jsontext.AppendQuote(b, string(level))
	}
	b = append(b, `,"`+mcp.MetaProtocolVersion+`":`...)
	b, _ = jsontext.AppendQuote(b, c.currentVersion())
	if token != "" {
		b = append(b, `,"`+mcp.MetaProgressToken+`":`...)
		b = append(b, token...)
	}
	if o != nil && o.trace != nil && o.trace.Parent != "" {
		b = append(b, `,"`+mcp.MetaTraceParent+`":`...)
		b, _ = jsontext.AppendQuote(b, o.trace.Parent)
		if o.trace.State != "" {
			b = append(b, `,"`+mcp.MetaTraceState+`":`...)
			b, _ = jsontext.AppendQuote(b, o.trace.State)
		}
	}
	return append(b, '}'), nil
}

// appendJSON appends v as JSON, as json.Marshal writes it: a string and
// raw JSON without the reflection Marshal goes through.
func appendJSON(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case string:
		return jsontext.AppendQuote(b, v)
	case jsontext.Value:
		// Formatted as an encoder writes it, which checks it too.
		return jsontext.AppendFormat(b, v)
	}
	vb, err := json.Marshal(v, json.Deterministic(true))
	if err != nil {
		return nil, err
	}
	return append(b, vb...), nil
}
