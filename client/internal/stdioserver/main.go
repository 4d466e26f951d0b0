// Command stdioserver is an MCP server on stdin and stdout whose tools,
// prompts and resources change when a client calls its control tools. The
// client's tests run it as a real subprocess, the way a host runs a local
// server, and drive changes through the protocol itself.
//
// Control tools:
//
//	add_tool {name}          registers a tool that answers with its name
//	remove_tool {name}       unregisters a tool
//	add_prompt {name}        registers a prompt
//	set_resource {uri,text}  registers or rewrites a text resource and
//	                         announces the update to subscribers
//	shutdown                 ends every listen gracefully (srv.Shutdown)
//	crash                    exits at once with status 3, answering nothing
//	big {size}               answers with a text of size bytes
//	stall                    stops reading stdin for good (a wedged server)
//	garble                   answers with a line that is not JSON (a broken server)
//
// Flags set the page size and the number of seed tools (seed1...);
// -untagged makes the server leave the subscription id out of its change
// notifications, as some servers of other makes do.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"tidings/mcp"
	"tidings/server"
	"tidings/stdio"
)

func main() {
	page := flag.Int("page", 2, "list page size")
	seed := flag.Int("seed", 3, "number of seed tools")
	dieAt := flag.Int("die-after", -1, "exit with status 3 after reading this many bytes of input (a crashing server)")
	untagged := flag.Bool("untagged", false, "leave the subscription id out of change notifications")
	flag.Parse()
	if *dieAt >= 0 {
		_, _ = io.CopyN(io.Discard, os.Stdin, int64(*dieAt))
		os.Exit(3)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	stdin := &stallReader{r: os.Stdin, stalled: make(chan struct{})}
	out := &garbleWriter{w: os.Stdout}
	srv, err := newServer(*page, *seed, log, stdin.stall, out.arm)
	if err != nil {
		log.Error("stdioserver", "err", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var w io.Writer = out
	if *untagged {
		w = &untagWriter{w: out}
	}
	if err := stdio.Serve(ctx, srv, stdin, w); err != nil {
		log.Error("stdioserver", "err", err)
		os.Exit(1)
	}
}

// untagWriter passes lines on to w, with the subscription id taken out
// of every change notification.
type untagWriter struct {
	w    io.Writer
	mu   sync.Mutex
	line []byte
}

func (u *untagWriter) Write(p []byte) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.line = append(u.line, p...)
	for {
		i := bytes.IndexByte(u.line, '\n')
		if i < 0 {
			return len(p), nil
		}
		if _, err := u.w.Write(append(untag(u.line[:i]), '\n')); err != nil {
			return 0, err
		}
		u.line = u.line[i+1:]
	}
}

// untag removes the subscription id from a change notification; any
// other line is returned as it is.
func untag(line []byte) []byte {
	var m struct {
		JSONRPC string                    `json:"jsonrpc"`
		Method  string                    `json:"method"`
		Params  map[string]jsontext.Value `json:"params"`
	}
	if json.Unmarshal(line, &m) != nil || !strings.HasPrefix(m.Method, "notifications/") || !strings.HasSuffix(m.Method, "/list_changed") && m.Method != mcp.NotifyResourceUpdated {
		return line
	}
	var meta map[string]jsontext.Value
	if json.Unmarshal(m.Params["_meta"], &meta) != nil {
		return line
	}
	delete(meta, mcp.MetaSubscriptionID)
	b, err := json.Marshal(meta)
	if err != nil {
		return line
	}
	m.Params["_meta"] = b
	if len(meta) == 0 {
		delete(m.Params, "_meta")
	}
	out, err := json.Marshal(m)
	if err != nil {
		return line
	}
	return out
}

// controlArgs are the arguments of the control tools.
type controlArgs struct {
	Name string `json:"name"`
	URI  string `json:"uri"`
	Text string `json:"text"`
	Size int    `json:"size"`
}

// garbleWriter passes writes on to w, but for the first answer written
// after arm, which it replaces with a line that is not JSON.
type garbleWriter struct {
	w     io.Writer
	armed atomic.Bool
}

func (g *garbleWriter) arm() { g.armed.Store(true) }

func (g *garbleWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"result"`)) && g.armed.CompareAndSwap(true, false) {
		if _, err := io.WriteString(g.w, "Traceback (most recent call last): the answer was lost\n"); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return g.w.Write(p)
}

// stallReader reads r until stall is called; from then on every read
// blocks until the process ends, as in a server wedged on something else.
type stallReader struct {
	r       io.Reader
	once    sync.Once
	stalled chan struct{}
}

func (s *stallReader) stall() { s.once.Do(func() { close(s.stalled) }) }

func (s *stallReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	select {
	case <-s.stalled:
		// Whatever this read returned came after the stall: it is never
		// seen. The process ends, at SIGTERM, with this still blocked.
		select {}
	default:
	}
	return n, err
}

const nameSchema = `{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}`

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{mcp.TextContent(s)}}
}

func newServer(page, seed int, log *slog.Logger, stall, garble func()) (*server.Server, error) {
	srv := server.New(mcp.Implementation{Name: "stdioserver", Version: "1.0.0"},
		server.WithPageSize(page), server.WithLogger(log))
	named := func(_ context.Context, r *server.ToolRequest) (*mcp.CallToolResult, error) { return text(r.Name), nil }
	for i := 1; i <= seed; i++ {
		if err := srv.AddTool(mcp.Tool{Name: fmt.Sprintf("seed%d", i)}, named); err != nil {
			return nil, err
		}
	}
	var mu sync.Mutex
	contents := map[string]string{}
	read := func(_ context.Context, r *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
		mu.Lock()
		defer mu.Unlock()
		return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(r.URI, "text/plain", contents[r.URI])}}, nil
	}
	decode := func(r *server.ToolRequest) (controlArgs, error) {
		var a controlArgs
		err := json.Unmarshal(r.Arguments, &a)
		return a, err
	}
	control := map[string]server.ToolHandler{
		"add_tool": func(_ context.Context, r *server.ToolRequest) (*mcp.CallToolResult, error) {
			args, err := decode(r)
			if err != nil {
				return nil, err
			}
			return text("added"), srv.AddTool(mcp.Tool{Name: args.Name}, named)
		},
		"remove_tool": func(_ context.Context, r *server.ToolRequest) (*mcp.CallToolResult, error) {
			args, err := decode(r)
			if err != nil {
				return nil, err
			}
			return text(fmt.Sprint(srv.RemoveTools(args.Name))), nil
		},
		"add_prompt": func(_ context.Context, r *server.ToolRequest) (*mcp.CallToolResult, error) {
			args, err := decode(r)
			if err != nil {
				return nil, err
			}
			return text("added"), srv.AddPrompt(mcp.Prompt{Name: args.Name}, func(context.Context, *server.PromptRequest) (*mcp.GetPromptResult, error) {
				return &mcp.GetPromptResult{Messages: []mcp.PromptMessage{{Role: "user", Content: mcp.TextContent("hello")}}}, nil
			})
		},
		"set_resource": func(_ context.Context, r *server.ToolRequest) (*mcp.CallToolResult, error) {
			args, err := decode(r)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			_, known := contents[args.URI]
			contents[args.URI] = args.Text
			uri := args.URI
			mu.Unlock()
			if !known {
				if err := srv.AddResource(mcp.Resource{URI: uri}, read); err != nil {
					return nil, err
				}
			}
			srv.ResourceUpdated(uri)
			return text("set"), nil
		},
		"shutdown": func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			// Shutdown waits for the listens to end, which happens on other
			// goroutines; answering does not wait for it.
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = srv.Shutdown(ctx)
			}()
			return text("shutting down"), nil
		},
		"big": func(_ context.Context, r *server.ToolRequest) (*mcp.CallToolResult, error) {
			args, err := decode(r)
			if err != nil {
				return nil, err
			}
			return text(strings.Repeat("x", args.Size)), nil
		},
		"stall": func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			stall()
			return text("stalled"), nil
		},
		"garble": func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			garble()
			return text("garbled"), nil
		},
		"crash": func(context.Context, *server.ToolRequest) (*mcp.CallToolResult, error) {
			os.Exit(3)
			return nil, nil
		},
	}
	schemas := map[string]string{
		"add_tool": nameSchema, "remove_tool": nameSchema, "add_prompt": nameSchema,
		"set_resource": `{"type":"object","properties":{"uri":{"type":"string"},"text":{"type":"string"}},"required":["uri","text"]}`,
	}
	for name, h := range control {
		schema := schemas[name]
		if schema == "" {
			schema = `{"type":"object"}`
		}
		if err := srv.AddTool(mcp.Tool{Name: name, InputSchema: jsontext.Value(schema)}, h); err != nil {
			return nil, err
		}
	}
	return srv, nil
}
