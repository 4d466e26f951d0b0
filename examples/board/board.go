package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/redis/go-redis/v9"

	"tidings/bus"
	"tidings/bus/brokers"
	"tidings/mcp"
	"tidings/server"
	"tidings/streamhttp"
)

// The Redis keys: one hash per board (task → "open" or "done") and the
// set of board names. The replicas meet on the pub/sub channel busChannel,
// and share which tools are on in the hash busChannel+":state" (see
// brokers.OpenState), where the reports flag is the field tool:sprint_report.
const (
	boardKeyPrefix = "board:"
	boardsKey      = "boards"
	busChannel     = "board"
	reportsTool    = "sprint_report"
)

// demoBoard is created, with demoTasks open, when it does not exist.
const demoBoard = "sprint-1"

func demoTasks() []string { return []string{"plan", "build", "test", "ship"} }

// validName is what a board or task name may be: short, and safe inside
// a URI without escaping.
var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// completeScript marks a task done and says what it found: -1 for no such
// task, 0 for a task already done, 1 for a task it completed. One script
// makes the check and the write one step for every replica.
var completeScript = redis.NewScript(`
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then return -1 end
if v == 'done' then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], 'done')
return 1
`)

// board is one replica: the MCP server (with its bus and shared state)
// and its Redis client.
type board struct {
	log *slog.Logger
	rdb *redis.Client
	srv *server.Server
}

// run serves one replica until ctx ends. ready, when not nil, is told the
// address it listens on.
func run(ctx context.Context, args []string, stderr io.Writer, log *slog.Logger, ready func(addr string)) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	b, err := newBoard(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer b.rdb.Close()
	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		shutdown(b.srv, log)
		return fmt.Errorf("listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", streamhttp.New(b.srv, streamhttp.WithLogger(log)))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Info("board: listening", "url", "http://"+ln.Addr().String()+"/mcp")
	if ready != nil {
		ready(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err = <-errc:
		err = fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// Listens end with a complete result first, so that their clients
	// reconnect through the balancer at once; then the HTTP server waits
	// for the other requests.
	shutdown(b.srv, log)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := hs.Shutdown(sctx); serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = fmt.Errorf("http shutdown: %w", serr)
	}
	return err
}

func shutdown(srv *server.Server, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		log.Warn("board: shutdown", "err", err)
	}
}

// newBoard connects to Redis, joins the bus on its pub/sub channel and
// the shared state in its hash, creates the demo board if it is missing,
// registers what the server offers and loads the shared state, so that
// the replica serves what the others do from its first request.
func newBoard(ctx context.Context, cfg config, log *slog.Logger) (*board, error) {
	opt, err := redis.ParseURL(cfg.redisURL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %w", err)
	}
	busURL, err := withChannel(cfg.redisURL)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opt)
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := seed(dctx, rdb); err != nil {
		rdb.Close()
		return nil, err
	}
	// The replicas' key signs the bus's messages too (none: unsigned).
	bs, err := brokers.Open(dctx, busURL, bus.WithLogger(log), bus.WithSecret([]byte(cfg.secret)))
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("join the replicas: %w", err)
	}
	st, err := brokers.OpenState(dctx, busURL, bus.WithLogger(log))
	if err != nil {
		bs.Close()
		rdb.Close()
		return nil, fmt.Errorf("open the shared state: %w", err)
	}
	opts := []server.Option{server.WithBus(bs), server.WithSharedState(offUntilSet{st, "tool:" + reportsTool}), server.WithLogger(log)}
	if cfg.secret != "" {
		opts = append(opts, server.WithSecret([]byte(cfg.secret)))
	} else {
		log.Warn("board: no -secret: cursors from this replica will not be accepted by others")
	}
	b := &board{log: log, rdb: rdb, srv: server.New(mcp.Implementation{Name: "board", Version: "1"}, opts...)}
	err = b.register()
	if err == nil {
		err = b.srv.SyncState(dctx)
	}
	if err != nil {
		shutdown(b.srv, log) // closes the bus and the state
		rdb.Close()
		return nil, err
	}
	return b, nil
}

// offUntilSet is the shared state in which one key nobody has set yet
// reads as off: the sprint report is hidden on every replica until
// enable_reports turns it on, and a replica that starts later does not
// hide it again, since it writes nothing.
type offUntilSet struct {
	bus.State
	key string
}

// Load returns the shared state, with the key off unless it is set.
func (s offUntilSet) Load(ctx context.Context) (map[string]bool, error) {
	m, err := s.State.Load(ctx)
	if err != nil {
		return nil, err
	}
	if _, set := m[s.key]; !set {
		if m == nil {
			m = map[string]bool{}
		}
		m[s.key] = false
	}
	return m, nil
}

// withChannel returns the Redis URL with the bus's channel named in it.
func withChannel(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("redis url: %w", err)
	}
	q := u.Query()
	q.Set("channel", busChannel)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// seed creates the demo board with its tasks open, leaving any task that
// is already there as it is, so that every replica may seed at start.
func seed(ctx context.Context, rdb *redis.Client) error {
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, t := range demoTasks() {
			p.HSetNX(ctx, boardKeyPrefix+demoBoard, t, "open")
		}
		p.SAdd(ctx, boardsKey, demoBoard)
		return nil
	})
	if err != nil {
		return fmt.Errorf("seed %s: %w", demoBoard, err)
	}
	return nil
}

// taskArgs are complete_task's arguments.
type taskArgs struct {
	Board string `json:"board" jsonschema:"The board, as in board://NAME."`
	Task  string `json:"task" jsonschema:"The task to mark done."`
}

// taskResult is what complete_task did.
type taskResult struct {
	Board string `json:"board"`
	Task  string `json:"task"`
	// Changed is false for a task that was already done.
	Changed bool `json:"changed"`
}

// reportsResult is what enable_reports did.
type reportsResult struct {
	// Enabled is true once every replica can be told to show the report.
	Enabled bool `json:"enabled"`
}

// progress is one board's line of the sprint report.
type progress struct {
	Board string `json:"board"`
	Done  int    `json:"done"`
	Total int    `json:"total"`
}

// report is the sprint report.
type report struct {
	Boards []progress `json:"boards"`
}

// task is one task as board://{name} shows it.
type task struct {
	Task string `json:"task"`
	Done bool   `json:"done"`
}

// boardView is the content of board://{name}.
type boardView struct {
	Board string `json:"board"`
	Tasks []task `json:"tasks"`
}

func (b *board) register() error {
	if err := server.AddTypedTool(b.srv, mcp.Tool{Name: "complete_task", Description: "Marks a task of a board done."}, b.completeTask); err != nil {
		return fmt.Errorf("complete_task: %w", err)
	}
	if err := server.AddTypedTool(b.srv, mcp.Tool{Name: "enable_reports", Description: "Turns the sprint report on, for everyone."}, b.enableReports); err != nil {
		return fmt.Errorf("enable_reports: %w", err)
	}
	// Every replica registers the report; the shared state hides it
	// until enable_reports.
	if err := server.AddTypedTool(b.srv, mcp.Tool{Name: reportsTool, Description: "How far each board is."}, b.sprintReport); err != nil {
		return fmt.Errorf("%s: %w", reportsTool, err)
	}
	if err := b.srv.AddResourceTemplate(mcp.ResourceTemplate{URITemplate: "board://{name}", Name: "board",
		Description: "A board's tasks and whether each is done.", MimeType: "application/json"}, b.readBoard); err != nil {
		return fmt.Errorf("board template: %w", err)
	}
	return nil
}

func (b *board) completeTask(ctx context.Context, _ *server.ToolRequest, in taskArgs) (taskResult, error) {
	if !validName.MatchString(in.Board) || !validName.MatchString(in.Task) {
		return taskResult{}, fmt.Errorf("no task %q on board %q", in.Task, in.Board)
	}
	n, err := completeScript.Run(ctx, b.rdb, []string{boardKeyPrefix + in.Board}, in.Task).Int()
	if err != nil {
		return taskResult{}, fmt.Errorf("complete %s/%s: %w", in.Board, in.Task, err)
	}
	if n < 0 {
		return taskResult{}, fmt.Errorf("no task %q on board %q", in.Task, in.Board)
	}
	if n > 0 {
		// The bus tells the listeners of every other replica too.
		b.srv.ResourceUpdated("board://" + in.Board)
	}
	return taskResult{Board: in.Board, Task: in.Task, Changed: n > 0}, nil
}

// enableReports shows the report here at once, and on every other
// replica once the shared state has it: they hear of the change over the
// bus, load the state, and tell their listeners the tool list changed.
func (b *board) enableReports(ctx context.Context, _ *server.ToolRequest, _ struct{}) (reportsResult, error) {
	if err := b.srv.Enable(ctx, server.Tool(reportsTool)); err != nil {
		return reportsResult{}, fmt.Errorf("enable reports: %w", err)
	}
	return reportsResult{Enabled: true}, nil
}

func (b *board) sprintReport(ctx context.Context, _ *server.ToolRequest, _ struct{}) (report, error) {
	names, err := b.rdb.SMembers(ctx, boardsKey).Result()
	if err != nil {
		return report{}, fmt.Errorf("list boards: %w", err)
	}
	slices.Sort(names)
	r := report{Boards: []progress{}}
	for _, name := range names {
		tasks, err := b.rdb.HGetAll(ctx, boardKeyPrefix+name).Result()
		if err != nil {
			return report{}, fmt.Errorf("read board %s: %w", name, err)
		}
		p := progress{Board: name, Total: len(tasks)}
		for _, state := range tasks {
			if state == "done" {
				p.Done++
			}
		}
		r.Boards = append(r.Boards, p)
	}
	return r, nil
}

func (b *board) readBoard(ctx context.Context, req *server.ResourceRequest) (*mcp.ReadResourceResult, error) {
	name := req.Vars["name"]
	if !validName.MatchString(name) {
		return nil, server.ErrResourceNotFound
	}
	tasks, err := b.rdb.HGetAll(ctx, boardKeyPrefix+name).Result()
	if err != nil {
		return nil, fmt.Errorf("read board %s: %w", name, err)
	}
	if len(tasks) == 0 {
		return nil, server.ErrResourceNotFound
	}
	v := boardView{Board: name}
	for t, state := range tasks {
		v.Tasks = append(v.Tasks, task{Task: t, Done: state == "done"})
	}
	slices.SortFunc(v.Tasks, func(a, b task) int { return cmp.Compare(a.Task, b.Task) })
	body, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode board %s: %w", name, err)
	}
	return &mcp.ReadResourceResult{Contents: []mcp.ResourceContents{mcp.TextContents(req.URI, "application/json", string(body))}}, nil
}
