package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/spf13/cobra"

	"tidings/client"
	"tidings/mcp"
)

func newCallCmd() *cobra.Command {
	var flags clientFlags
	var verbose bool
	var serverLog string
	cmd := &cobra.Command{
		Use:   "call (URL REQUEST [ARG...] | REQUEST [ARG...] -- COMMAND [ARG...])",
		Short: "Send one request to an MCP server and print the answer as JSON",
		Long: `Send one request to an MCP server and print its answer to stdout as
indented JSON.

The server is either a Streamable HTTP endpoint, given as the first
argument, or a stdio server, spawned from the command after "--" (it is
stopped when the request is done; its stderr is shown only when the call
fails, or as it comes with -v, or appended to the --server-log file):

  tidings call http://127.0.0.1:8080/mcp tools
  tidings call tools -- tidings serve --dir . --stdio

REQUEST is one of:

  discover              what the server is and can do (server/discover)
  tools                 the whole tool list, every page, as one array
  prompts               the whole prompt list
  resources             the whole resource list
  templates             the whole resource template list
  call TOOL [ARGS]      call a tool; ARGS is a JSON object
  read URI              read a resource
  get PROMPT [ARGS]     render a prompt; ARGS is a JSON object of strings

A tool call the server runs as a task is followed to its end: the task id
and then each change of its status (and status message) are printed to
stderr as they happen, on one line rewritten in place when stderr is a
terminal, and the result to stdout as for any call. Ctrl-C cancels the
task.

The protocol revision is found by asking the server (server/discover,
then initialize for servers of older revisions); --protocol names it and
skips the question.

Exit status: 0 for an answer; 2 for a tool result with isError set (the
result is still printed); 1 for a failure. A JSON-RPC error response is
printed to stderr as its JSON error object.

With --oauth, a server that asks for OAuth is signed in to through the
browser (the URL to open is printed to stderr), and the tokens are kept
in --oauth-store, so the next call needs no browser.`,
		Example: `  tidings call http://127.0.0.1:8080/mcp call search_files '{"query":"TODO"}'
  tidings call read file:///tmp/notes.txt -- tidings serve --dir /tmp --stdio`,
		// Everything after -- belongs to the spawned server.
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, rest, err := splitTarget(cmd, args)
			if err != nil {
				return err
			}
			if err := flags.check(cmd, t); err != nil {
				return err
			}
			req, err := parseRequest(rest)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			// A spawned server's stderr (and the client's warnings) is
			// kept aside and shown only when the call fails: a server's
			// chatter is not the answer. -v passes it through as it comes,
			// --server-log appends it to a file.
			var kept *logPane
			logTo := cmd.ErrOrStderr()
			switch {
			case serverLog != "":
				lf, err := os.OpenFile(serverLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
				if err != nil {
					return fmt.Errorf("--server-log: %w", err)
				}
				defer lf.Close()
				logTo = lf
			case !verbose:
				kept = &logPane{}
				logTo = kept
			}
			c, closeClient, err := dial(ctx, t, flags, dialOut{log: logTo, prompt: cmd.ErrOrStderr()})
			if err != nil {
				return err
			}
			err = runCall(ctx, c, req, cmd.OutOrStdout(), cmd.ErrOrStderr())
			closeClient() // a server's last words come before the error
			if err != nil && kept != nil {
				for _, l := range kept.lines() {
					fmt.Fprintln(cmd.ErrOrStderr(), printable(l))
				}
			}
			if fatal := notMCPError(t, err); fatal != nil {
				return fatal
			}
			var ee *exitError
			if errors.As(err, &ee) {
				cmd.SilenceErrors = true // already reported
			}
			return err
		},
	}
	flags.register(cmd)
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "pass the spawned server's stderr and the client's warnings to stderr as they come, not only when the call fails")
	cmd.Flags().StringVar(&serverLog, "server-log", "", "append the spawned server's stderr (and warnings) to this file instead")
	cmd.MarkFlagsMutuallyExclusive("verbose", "server-log")
	return cmd
}

// callRequest is one parsed REQUEST with its arguments.
type callRequest struct {
	what string
	name string         // tool or prompt name, or URI
	args jsontext.Value // JSON object, or nil
}

// parseRequest checks REQUEST and its arguments before anything is
// started, so a typo costs no connection.
func parseRequest(args []string) (callRequest, error) {
	if len(args) == 0 {
		return callRequest{}, errors.New("no request given (discover, tools, prompts, resources, templates, call, read or get)")
	}
	r := callRequest{what: args[0]}
	rest := args[1:]
	arity := func(min, max int) error {
		if len(rest) < min || len(rest) > max {
			switch {
			case max == 0:
				return fmt.Errorf("%s takes no arguments, got %q", r.what, rest)
			case min == max:
				return fmt.Errorf("%s takes exactly %d argument(s), got %d", r.what, min, len(rest))
			}
			return fmt.Errorf("%s takes %d to %d arguments, got %d", r.what, min, max, len(rest))
		}
		return nil
	}
	switch r.what {
	case "discover", "tools", "prompts", "resources", "templates":
		return r, arity(0, 0)
	case "read":
		if err := arity(1, 1); err != nil {
			return r, err
		}
		r.name = rest[0]
		return r, nil
	case "call", "get":
		if err := arity(1, 2); err != nil {
			return r, err
		}
		r.name = rest[0]
		if len(rest) == 2 {
			v := jsontext.Value(rest[1])
			if err := v.Compact(); err != nil || v.Kind() != '{' {
				return r, fmt.Errorf("%s %s: arguments must be a JSON object, got %q", r.what, r.name, rest[1])
			}
			if r.what == "get" {
				var strs map[string]string
				if err := json.Unmarshal(v, &strs); err != nil {
					return r, fmt.Errorf("get %s: prompt arguments must be a JSON object of strings: %w", r.name, err)
				}
			}
			r.args = v
		}
		return r, nil
	}
	return r, fmt.Errorf("unknown request %q (want discover, tools, prompts, resources, templates, call, read or get)", r.what)
}

// runCall sends the request and prints its answer. A JSON-RPC error goes
// to stderr as JSON and becomes exit status 1; a tool's isError result is
// printed and becomes exit status 2.
func runCall(ctx context.Context, c *client.Client, r callRequest, stdout, stderr io.Writer) error {
	var out any
	var err error
	isError := false
	switch r.what {
	case "discover":
		if out, err = discover(ctx, c); err == nil {
			err = sayVersion(ctx, c, stderr)
		}
	case "tools":
		out, err = c.Tools(ctx)
	case "prompts":
		out, err = c.Prompts(ctx)
	case "resources":
		out, err = c.Resources(ctx)
	case "templates":
		out, err = c.ResourceTemplates(ctx)
	case "read":
		out, err = c.ReadResource(ctx, r.name)
	case "get":
		var args map[string]string
		if r.args != nil {
			if err := json.Unmarshal(r.args, &args); err != nil {
				return fmt.Errorf("get %s: %w", r.name, err)
			}
		}
		out, err = c.GetPrompt(ctx, r.name, args)
	case "call":
		var args any
		if r.args != nil {
			args = r.args
		}
		status := newTaskStatus(stderr)
		var res *mcp.CallToolResult
		res, err = c.CallTool(ctx, r.name, args, client.WithTaskStatus(status.show), client.WithProgress(status.progress))
		status.end()
		if err == nil {
			out, isError = res, res.IsError
		}
	default:
		return fmt.Errorf("unknown request %q", r.what)
	}
	if err != nil {
		var rpc *client.RPCError
		if errors.As(err, &rpc) {
			if werr := writeJSON(stderr, rpc); werr != nil {
				return werr
			}
			return &exitError{code: 1}
		}
		return fmt.Errorf("%s: %w", r.what, err)
	}
	if err := writeJSON(stdout, out); err != nil {
		return err
	}
	if isError {
		return &exitError{code: 2}
	}
	return nil
}

// taskStatus shows how a call goes on w: the progress the server reports,
// and the states of the task the call runs as — the task's id once, then
// its status and status message at each change. On
// a terminal the status is one line, rewritten in place and cut to the
// terminal's width, so that a long task does not fill the screen;
// elsewhere (a pipe, a file, a log) each change is a line of its own.
// What the server says passes through printable first.
type taskStatus struct {
	mu    sync.Mutex // progress and task states may come from two goroutines
	w     io.Writer
	tty   bool
	cols  int
	id    string
	shown bool // a status line is on the terminal, without its newline
}

func newTaskStatus(w io.Writer) *taskStatus {
	s := &taskStatus{w: w}
	if f, ok := w.(*os.File); ok {
		s.cols, _, s.tty = terminalSize(f)
	}
	return s
}

// show prints one state of the task.
func (s *taskStatus) show(t mcp.Task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id == "" {
		s.id = t.TaskID
		fmt.Fprintf(s.w, "task %s\n", printable(t.TaskID))
	}
	line := string(t.Status)
	if t.StatusMessage != "" {
		line += ": " + t.StatusMessage
	}
	s.lineLocked(line)
}

// progress prints one progress notification of the call, unless the
// call runs as a task, whose states are shown instead.
func (s *taskStatus) progress(done float64, total *float64, msg string) {
	line := "progress " + strconv.FormatFloat(done, 'f', -1, 64)
	if total != nil {
		line += "/" + strconv.FormatFloat(*total, 'f', -1, 64)
	}
	if msg != "" {
		line += ": " + msg
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.id != "" {
		return // a task's states say as much, and say it once
	}
	s.lineLocked(line)
}

// lineLocked prints a status line as the output allows.
func (s *taskStatus) lineLocked(line string) {
	line = printable(line)
	if !s.tty {
		fmt.Fprintln(s.w, line)
		return
	}
	if r := []rune(line); s.cols > 1 && len(r) >= s.cols {
		line = string(r[:s.cols-2]) + "…"
	}
	// Back to the start of the line, and clear what the last one left.
	fmt.Fprintf(s.w, "\r\x1b[K%s", line)
	s.shown = true
}

// end finishes the status line, once the call is over.
func (s *taskStatus) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.shown {
		fmt.Fprintln(s.w)
		s.shown = false
	}
}

// discover returns the server/discover result as the server sent it; a
// 2025-11-25 server, which has no server/discover, is described by what
// it said at initialize, in the same shape.
func discover(ctx context.Context, c *client.Client) (any, error) {
	era, err := c.Era(ctx)
	if err != nil {
		return nil, err
	}
	if era != client.EraLegacy {
		return c.Request(ctx, mcp.MethodDiscover, nil)
	}
	d, err := c.Discover(ctx)
	if err != nil {
		return nil, err
	}
	return legacyDiscover{
		SupportedVersions: d.SupportedVersions, Capabilities: d.Capabilities,
		Instructions: d.Instructions, ServerInfo: d.ServerInfo,
	}, nil
}

// sayVersion tells on w the revision the client and the server agreed
// on, which the discover answer itself does not say: the server lists
// what it speaks, and the client picks.
func sayVersion(ctx context.Context, c *client.Client, w io.Writer) error {
	v, err := c.ProtocolVersion(ctx)
	if err != nil {
		return err
	}
	how := "server/discover"
	if era, _ := c.Era(ctx); era == client.EraLegacy {
		how = "initialize"
	}
	_, err = fmt.Fprintf(w, "protocol revision %s (agreed through %s)\n", v, how)
	return err
}

// legacyDiscover is how a 2025-11-25 server's initialize answer is shown.
type legacyDiscover struct {
	SupportedVersions []string            `json:"supportedVersions"`
	Capabilities      mcp.ServerCaps      `json:"capabilities"`
	Instructions      string              `json:"instructions,omitempty"`
	ServerInfo        *mcp.Implementation `json:"serverInfo,omitzero"`
}

// writeJSON prints v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v, jsontext.WithIndent("  "), json.Deterministic(true))
	if err != nil {
		return fmt.Errorf("encoding the answer: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}
