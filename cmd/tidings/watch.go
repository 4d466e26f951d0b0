package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/spf13/cobra"

	"tidings/client"
	"tidings/mcp"
)

// watchConfig is what the watch flags set.
type watchConfig struct {
	uris         []string
	json         bool
	plain        bool
	pollInterval time.Duration
	serverLog    string
}

func newWatchCmd() *cobra.Command {
	var flags clientFlags
	var cfg watchConfig
	cmd := &cobra.Command{
		Use:   "watch (URL | -- COMMAND [ARG...])",
		Short: "Follow an MCP server's tools, prompts and resources as they change",
		Example: `  tidings watch http://127.0.0.1:8080/mcp
  tidings watch https://mcp.example.com/mcp --oauth
  tidings watch -- tidings serve --stdio ./docs`,
		Long: `Follow an MCP server's tools, prompts and resources (and, with --resource,
the content of single resources) through one subscriptions/listen stream
that is healed after every drop.

The server is either a Streamable HTTP endpoint given as the argument, or a
stdio server spawned from the command after "--" (it is stopped when watch
ends, started again if it crashes, and watch ends if it keeps exiting right
after it starts). Its stderr goes to the file given with --server-log;
otherwise the live view shows its last lines in a log pane (and prints the
last ten to stderr should the watch end in an error), and --plain and
--json pass it to stderr:

  tidings watch http://127.0.0.1:8080/mcp
  tidings watch --resource file:///tmp/notes.txt -- tidings serve --dir /tmp --stdio

On a terminal, a live view is redrawn in place: the server, the connection
state, what the server agreed to announce (for a 2025-11-25 server, what
its capabilities say the session's stream announces), each list with its
freshness and its items, and the latest changes. A list is "live" while a
change would reach us: a listen that is up hears of it and it was read
since. Otherwise it is "fresh Ns" inside the TTL the server gave, "stale"
when that ran out or none was given (it is read again at the next poll),
"unknown" after the listen dropped, "missing" before its first read. Its
changes are "notified" as the server agreed, "notified (untagged)" when
they come in notifications the server did not tie to the listen (no
subscription id, or a listChanged it did not declare), or "polled". The
? key shows this legend, q quits. While the listen is down, one status line counts the
failed reconnect attempts and says by when the next one starts; r retries
at once. Otherwise (or with --plain) one line is printed per event:

  2026-11-30T10:00:00Z tools_changed added=a,b removed=c

and with --json one JSON object per event. The first read of each list is
reported as additions. SIGINT or SIGTERM end the watch.

A URL that answers, but not as an MCP server, ends the watch with exit
status 1 and says why: a 404, 405 or 410, a 401 or 403 (the -H headers are
not accepted), another 4xx without a JSON-RPC body, a web page or other
non-JSON body, or JSON that is not JSON-RPC. This holds until the endpoint
has answered once as MCP; failures that may pass (a refused connection, a
timeout, a 5xx, 408, 429) are retried with backoff.

With --oauth, a server that asks for OAuth is signed in to through the
browser: the URL to open is printed to stderr (the live view starts once
the first request is answered, and steps aside for a later sign-in), and
the tokens are kept in --oauth-store for the next run.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, rest, err := splitTarget(cmd, args)
			if err != nil {
				return err
			}
			if len(rest) > 0 {
				return fmt.Errorf("unexpected arguments %q: watch takes a URL, or a command after --", rest)
			}
			if err := flags.check(cmd, t); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stdout := cmd.OutOrStdout()
			var view *liveView
			if f, ok := stdout.(*os.File); ok && !cfg.json && !cfg.plain {
				if _, _, ok := terminalSize(f); ok {
					view = &liveView{term: f}
				}
			}
			// What the spawned server and the client's logger write must
			// not land between the live view's frames: it goes to the
			// log pane, or to --server-log.
			logTo := cmd.ErrOrStderr()
			switch {
			case cfg.serverLog != "":
				lf, err := os.OpenFile(cfg.serverLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
				if err != nil {
					return fmt.Errorf("--server-log: %w", err)
				}
				defer lf.Close()
				logTo = lf
				if view != nil {
					view.logFile = cfg.serverLog
				}
			case view != nil:
				view.log = &logPane{}
				logTo = view.log
			}
			out := dialOut{log: logTo, prompt: cmd.ErrOrStderr()}
			if view != nil && flags.oauth {
				// The sign-in URL is printed on a normal screen: the view
				// starts after the first request (and so the first sign-in)
				// is done, and steps aside for any later one.
				view.share = &termShare{}
				out.share = view.share
			}
			c, closeClient, err := dial(ctx, t, flags, out)
			if err != nil {
				return err
			}
			defer closeClient()
			if view != nil {
				if keys, stopKeys, err := openKeys(); err == nil {
					view.keys = keys
					defer stopKeys()
				}
			}
			err = runWatch(ctx, c, t, cfg, stdout, view)
			if err != nil && view != nil && view.log != nil {
				// The view is gone: what the server said last may tell why
				// it ended.
				lines := view.log.lines()
				for _, l := range lines[max(len(lines)-10, 0):] {
					fmt.Fprintln(cmd.ErrOrStderr(), printable(l))
				}
			}
			return err
		},
	}
	flags.register(cmd)
	f := cmd.Flags()
	f.StringArrayVar(&cfg.uris, "resource", nil, "also follow this resource's content (repeatable)")
	f.BoolVar(&cfg.json, "json", false, "print one JSON object per event")
	f.BoolVar(&cfg.plain, "plain", false, "print one line per event even on a terminal")
	f.StringVar(&cfg.serverLog, "server-log", "", "append the spawned server's stderr (and warnings) to this file; by default the live view shows its last lines, and --plain or --json pass it to stderr")
	f.DurationVar(&cfg.pollInterval, "poll-interval", 30*time.Second, "how often to re-read what the server will not announce")
	cmd.MarkFlagsMutuallyExclusive("json", "plain")
	return cmd
}

// errServerExited ends a watch whose spawned server keeps exiting right
// after it starts: there is nothing left to reconnect to.
var errServerExited = errors.New("the server process exited")

// Reconnect backoff bounds, set on the watcher rather than left to its
// defaults so that the view can tell by when the next attempt starts.
const (
	minBackoff = 250 * time.Millisecond
	maxBackoff = 30 * time.Second
)

// liveView is what the live view draws on and reads from.
type liveView struct {
	term *os.File
	// keys delivers key presses; nil when the terminal cannot be read.
	keys <-chan byte
	// log holds a spawned server's stderr for the log pane; nil when it
	// goes elsewhere (logFile, when that is set).
	log     *logPane
	logFile string
	// share, set with --oauth, lends the terminal to the sign-in prompt.
	share *termShare
}

// runWatch follows the server until ctx ends, a spawned server exits, the
// endpoint proves not to be an MCP server, or stdout fails. With view
// set it draws the live view; otherwise it prints one line (or JSON
// object) per event to out.
func runWatch(ctx context.Context, c *client.Client, t target, cfg watchConfig, out io.Writer, view *liveView) error {
	r := &watchRun{
		c: c, t: t, cfg: cfg, out: out, view: view, st: newWatchState(cfg.uris),
		redraw: make(chan struct{}, 1), rediscover: make(chan struct{}, 1),
		gone: make(chan struct{}), writeErr: make(chan error, 1), fatal: make(chan error, 1),
	}
	opts := client.WatchOptions{
		Tools: true, Prompts: true, Resources: true,
		URIs:         cfg.uris,
		OnEvent:      r.onEvent,
		PollInterval: cfg.pollInterval,
		MinBackoff:   minBackoff,
		MaxBackoff:   maxBackoff,
	}
	if err := r.discoverFirst(ctx, &opts); err != nil || ctx.Err() != nil {
		return err
	}
	r.st.follow(opts)
	r.ws = &watchers{c: c, ctx: ctx, opts: opts}
	r.ws.start()
	defer r.ws.close()
	if view == nil {
		select {
		case <-ctx.Done():
			return nil
		case <-r.gone:
			return r.finish(ctx)
		case err := <-r.writeErr:
			return err
		case err := <-r.fatal:
			return err
		}
	}
	return r.live(ctx)
}

// watchRun is one run of watch: the state the events build up, and the
// signals between the Watcher's events, the background discovery and
// the loop that prints or draws.
type watchRun struct {
	c    *client.Client
	t    target
	cfg  watchConfig
	out  io.Writer
	view *liveView // nil: one line per event
	st   *watchState
	ws   *watchers

	redraw, rediscover chan struct{}
	// gone is closed when a spawned server is given up for good.
	gone     chan struct{}
	goneOnce sync.Once
	writeErr chan error
	// fatal ends the watch of an HTTP endpoint that has never answered
	// as an MCP server and whose failure shows it is none (see notMCP):
	// no retry would change a 404 or a web page into a server.
	fatal    chan error
	spoke    atomic.Bool  // the server answered as MCP once
	connects atomic.Int32 // Connected events so far
	known    atomic.Bool  // a Discover succeeded
}

// poke wakes whoever waits on ch, without blocking.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// notServer ends the watch when err shows that the endpoint, which never
// answered as MCP, is not an MCP server.
func (r *watchRun) notServer(err error) {
	if r.spoke.Load() {
		return
	}
	if ferr := notMCPError(r.t, err); ferr != nil {
		select {
		case r.fatal <- ferr:
		default:
		}
	}
}

// onEvent takes one of the Watcher's events: into the view's state, or
// printed as a line (or JSON object).
func (r *watchRun) onEvent(e client.Event) {
	// A spawned server that crashed is started again; one that keeps
	// exiting at once is given up, and then every request fails with
	// ErrClosed.
	if r.t.command != nil && e.Kind == client.Disconnected && errors.Is(e.Err, client.ErrClosed) {
		r.goneOnce.Do(func() { close(r.gone) })
	}
	switch e.Kind {
	case client.Connected:
		r.spoke.Store(true)
	case client.Disconnected:
		r.notServer(e.Err)
	}
	if r.view != nil {
		r.st.apply(e)
		// A reconnection may have reached another server; the first
		// connection's server is discovered already, unless that failed.
		if e.Kind == client.Connected && (r.connects.Add(1) > 1 || !r.known.Load()) {
			poke(r.rediscover)
		}
		poke(r.redraw)
		return
	}
	line, err := []byte(eventLine(e)), error(nil)
	if r.cfg.json {
		line, err = eventJSON(e)
	}
	if err == nil {
		_, err = r.out.Write(append(line, '\n'))
	}
	if err != nil {
		select {
		case r.writeErr <- fmt.Errorf("writing events: %w", err):
		default:
		}
	}
}

// discoverFirst asks the server what it offers, so that only the lists
// it has are followed; a server that is not up yet is followed in full
// as it comes. It returns the error that ends the watch, if any.
func (r *watchRun) discoverFirst(ctx context.Context, opts *client.WatchOptions) error {
	d, err := r.c.Discover(ctx)
	switch {
	case err == nil:
		r.spoke.Store(true)
		r.known.Store(true)
		caps := d.Capabilities
		opts.Tools, opts.Prompts, opts.Resources = caps.Tools != nil, caps.Prompts != nil, caps.Resources != nil
		era, _ := r.c.Era(ctx) // known once Discover succeeded
		v, _ := r.c.ProtocolVersion(ctx)
		r.st.discovered(d, era, v, nil)
	case ctx.Err() != nil:
	default:
		if ferr := notMCPError(r.t, err); ferr != nil {
			return ferr
		}
	}
	return nil
}

// finish is the end of a watch whose spawned server was given up. A
// signal that also reached it (Ctrl-C in a terminal) may make it exit
// first: that is still a clean end.
func (r *watchRun) finish(ctx context.Context) error {
	if ctx.Err() != nil {
		return nil
	}
	return errServerExited
}

// discoverLoop reads the server's identity again whenever rediscover is
// poked (after a reconnection, as the server behind a URL may have been
// replaced), until ctx ends.
func (r *watchRun) discoverLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.rediscover:
		}
		d, err := r.c.Discover(ctx)
		var era client.Era
		var v string
		if err == nil {
			era, err = r.c.Era(ctx)
		}
		if err == nil {
			v, err = r.c.ProtocolVersion(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			r.spoke.Store(true)
			r.known.Store(true)
		} else {
			r.notServer(err)
		}
		r.st.discovered(d, era, v, err)
		poke(r.redraw)
	}
}

// The escape sequences of the live view: enterView hides the cursor and
// clears the screen, leaveView shows a normal screen (for a sign-in
// prompt), and restoreCursor puts the cursor back below the last frame.
const (
	enterView     = "\x1b[?25l\x1b[H\x1b[2J"
	leaveView     = "\x1b[?25h\x1b[H\x1b[2J"
	restoreCursor = "\x1b[?25h\r\n"
)

// live draws the view until the watch ends: at every event, every
// second, and at each key.
func (r *watchRun) live(ctx context.Context) error {
	view := r.view
	if view.log != nil {
		view.log.setNotify(func() { poke(r.redraw) })
	}
	dctx, stopDiscover := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopDiscover()
		wg.Wait()
	}()
	if !r.known.Load() {
		poke(r.rediscover) // the first Discover failed: try again here
	}
	wg.Go(func() { r.discoverLoop(dctx) })

	var loans <-chan termLoan // nil without --oauth: none come
	if view.share != nil {
		var stopDrawing func()
		var err error
		if loans, stopDrawing, err = view.share.draw(ctx); err != nil {
			return nil // ended while a sign-in had the terminal
		}
		defer stopDrawing()
	}
	if _, err := io.WriteString(view.term, enterView); err != nil {
		return err
	}
	defer func() { _, _ = io.WriteString(view.term, restoreCursor) }()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	legend := false
	for {
		if err := r.draw(legend); err != nil {
			return fmt.Errorf("drawing: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-r.gone:
			return r.finish(ctx)
		case err := <-r.fatal:
			return err
		case k := <-view.keys:
			switch k {
			case 'q', 'Q':
				return nil
			case '?', 'h':
				legend = !legend
			case 'r', 'R':
				r.retry()
			}
		case l := <-loans:
			if done, err := r.lend(ctx, l); done || err != nil {
				return err
			}
		case <-r.redraw:
		case <-tick.C:
		}
	}
}

// retry reconnects at once while the listen is down; not while an
// attempt is under way, which is a retry already.
func (r *watchRun) retry() {
	if r.st.down() && r.ws.w.State() != client.Connecting {
		r.ws.restart()
		r.st.restarted()
	}
}

// lend gives the terminal to a sign-in prompt, which needs a normal
// screen for its URL, and takes it back once the prompt is done. done
// reports that the watch ended meanwhile.
func (r *watchRun) lend(ctx context.Context, l termLoan) (done bool, err error) {
	if _, err := io.WriteString(r.view.term, leaveView); err != nil {
		return true, fmt.Errorf("drawing: %w", err)
	}
	close(l.given)
	select {
	case <-l.back:
	case <-ctx.Done():
		return true, nil
	}
	if _, err := io.WriteString(r.view.term, enterView); err != nil {
		return true, fmt.Errorf("drawing: %w", err)
	}
	return false, nil
}

// draw renders one frame over the last one.
func (r *watchRun) draw(legend bool) error {
	view := r.view
	cols, rows, _ := terminalSize(view.term)
	m := r.st.snapshot(time.Now(), r.c, r.ws.w.State(), r.ws.stats(), r.t.String())
	m.Width, m.Height = cols, rows
	m.Keys, m.Legend = view.keys != nil, legend
	m.LogFile = view.logFile
	if view.log != nil {
		m.Log = view.log.lines()
		m.LogPane = r.t.command != nil || len(m.Log) > 0
	}
	var b strings.Builder
	b.WriteString("\x1b[H") // home, then overwrite line by line
	for i, line := range strings.Split(renderView(m), "\n") {
		if i > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString(line + "\x1b[K")
	}
	b.WriteString("\x1b[J") // clear whatever the last frame left below
	_, err := io.WriteString(view.term, b.String())
	return err
}

// watchers holds the watcher of a live view. The client has no way to
// cut a reconnect backoff short, so retrying now means replacing the
// watcher: the new one listens at once and reads everything again (see
// watchState.restarted). Only runWatch's goroutine uses it.
type watchers struct {
	c    *client.Client
	ctx  context.Context
	opts client.WatchOptions
	w    *client.Watcher
	// base sums the counters of the watchers replaced so far.
	base client.WatchStats
}

func (ws *watchers) start() { ws.w = ws.c.Watch(ws.ctx, ws.opts) }

// restart replaces the watcher, counting the new listen as a reconnect.
func (ws *watchers) restart() {
	ws.w.Close()
	s := ws.w.Stats()
	ws.base.Notifications += s.Notifications
	ws.base.Rereads += s.Rereads
	ws.base.Reconnects += s.Reconnects + 1
	ws.start()
}

func (ws *watchers) stats() client.WatchStats {
	s := ws.w.Stats()
	return client.WatchStats{
		Notifications: ws.base.Notifications + s.Notifications,
		Rereads:       ws.base.Rereads + s.Rereads,
		Reconnects:    ws.base.Reconnects + s.Reconnects,
	}
}

func (ws *watchers) close() { ws.w.Close() }

// maxChanges is how many changes the live view remembers.
const maxChanges = 10

// watchState is what the live view knows beyond the client's cache: the
// items of each list (kept from the watcher's events, so drawing never
// causes a request), the server's identity, the latest changes, and the
// connection's history, from which it tells when the next reconnect
// attempt starts. Which lists a listen keeps current the client tells
// (client.FreshnessInfo).
type watchState struct {
	mu          sync.Mutex
	server      *mcp.Implementation
	versions    []string
	era         client.Era
	version     string
	discoverErr string
	granted     *mcp.SubscriptionFilter
	lists       map[client.EventKind]map[string]bool // nil entry: not read yet
	followed    map[client.EventKind]bool
	uris        []string
	updated     map[string]time.Time
	changes     []changeView

	// ackedAt is when the current listen was acknowledged; zero while
	// there is none.
	ackedAt   time.Time
	connected bool // a listen has been acknowledged once
	outage    *outageView
	// backoffN mirrors the watcher's count of backoff steps: the delay
	// before the next attempt is at most minBackoff << backoffN, capped
	// at maxBackoff, and a listen that lived maxBackoff resets it. When
	// the estimate errs, it errs late, so RetryBy stays an upper bound.
	backoffN int
	// rebase marks lists and resources whose next event comes from a new
	// watcher, which reports everything it reads as added: the state
	// compares it with what it knows instead.
	rebase    map[client.EventKind]bool
	rebaseURI map[string]bool
}

func newWatchState(uris []string) *watchState {
	return &watchState{
		lists: map[client.EventKind]map[string]bool{}, uris: uris, updated: map[string]time.Time{},
		rebase: map[client.EventKind]bool{}, rebaseURI: map[string]bool{},
	}
}

// follow records which lists the watcher follows.
func (s *watchState) follow(o client.WatchOptions) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.followed = map[client.EventKind]bool{
		client.ToolsChanged:     o.Tools,
		client.PromptsChanged:   o.Prompts,
		client.ResourcesChanged: o.Resources,
		client.TemplatesChanged: o.Resources,
	}
}

func (s *watchState) discovered(d *client.DiscoverResult, era client.Era, version string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.discoverErr = err.Error()
		return
	}
	s.server, s.versions, s.era, s.version, s.discoverErr = d.ServerInfo, d.SupportedVersions, era, version, ""
}

// down reports whether the listen is out, so that retrying makes sense.
func (s *watchState) down() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.outage != nil
}

// restarted records that the watcher was replaced to retry at once.
func (s *watchState) restarted() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.lists {
		s.rebase[k] = true
	}
	for _, u := range s.uris {
		s.rebaseURI[u] = true
	}
	s.backoffN, s.ackedAt = 0, time.Time{}
	if s.outage != nil {
		s.outage.RetryBy = time.Time{}
	}
}

// addChange appends to the change log; the same text again only counts.
func (s *watchState) addChange(at time.Time, text string) {
	if n := len(s.changes); n > 0 && s.changes[n-1].Text == text {
		s.changes[n-1].At = at
		s.changes[n-1].Count++
		return
	}
	s.changes = append(s.changes, changeView{At: at, Text: text, Count: 1})
	if n := len(s.changes) - maxChanges; n > 0 {
		s.changes = slices.Delete(s.changes, 0, n)
	}
}

// apply folds one event into the state.
func (s *watchState) apply(e client.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch e.Kind {
	case client.ToolsChanged, client.PromptsChanged, client.ResourcesChanged, client.TemplatesChanged:
		set := s.lists[e.Kind]
		if set == nil {
			set = map[string]bool{}
			s.lists[e.Kind] = set
		}
		if s.rebase[e.Kind] {
			// A new watcher's first read: everything it saw is in Added.
			delete(s.rebase, e.Kind)
			now := map[string]bool{}
			for _, n := range e.Added {
				now[n] = true
			}
			var added, removed []string
			for n := range now {
				if !set[n] {
					added = append(added, n)
				}
			}
			for n := range set {
				if !now[n] {
					removed = append(removed, n)
				}
			}
			s.lists[e.Kind] = now
			if len(added)+len(removed) == 0 {
				return
			}
			slices.Sort(added)
			slices.Sort(removed)
			e.Added, e.Removed, e.Changed = added, removed, nil
			break
		}
		for _, n := range e.Added {
			set[n] = true
		}
		for _, n := range e.Removed {
			delete(set, n)
		}
	case client.ResourceUpdated:
		if s.rebaseURI[e.URI] && len(e.Added) > 0 {
			// Read again by a new watcher, which cannot tell a change.
			delete(s.rebaseURI, e.URI)
			return
		}
		s.updated[e.URI] = e.At
	case client.Connected:
		g := e.Granted
		s.granted = &g
		s.ackedAt = e.At
		grant := grantLabel(s.era) + " " + grantedText(&g, nil, len(s.uris))
		text := "connected, " + grant
		if o := s.outage; o != nil {
			text = "reconnected"
			if o.Attempts > 0 {
				text += fmt.Sprintf(" after %d failed attempt(s)", o.Attempts)
			}
			text += ", " + grant
		}
		s.outage, s.connected = nil, true
		s.addChange(e.At, text)
		return
	case client.Disconnected:
		// One outage is one line in the log, however many attempts it
		// takes; the status line counts them.
		if !s.ackedAt.IsZero() && e.At.Sub(s.ackedAt) >= maxBackoff+time.Second {
			s.backoffN = 0 // the listen lived long enough to reset the backoff
		}
		s.ackedAt = time.Time{}
		delay := min(minBackoff<<min(s.backoffN, 20), maxBackoff)
		s.backoffN++
		first := s.outage == nil
		if first {
			s.outage = &outageView{Since: e.At}
		}
		o := s.outage
		o.RetryBy = e.At.Add(delay)
		if errors.Is(e.Err, client.ErrClosed) {
			o.RetryBy = time.Time{} // nothing will be retried
		}
		if e.Graceful {
			o.LastErr = "the server ended the stream"
		} else {
			o.Attempts++
			o.LastErr = errText(e.Err)
		}
		if !first {
			return
		}
		text := eventText(e, len(s.uris))
		if !s.connected && !e.Graceful {
			text = "cannot connect: " + errText(e.Err)
		}
		s.addChange(e.At, text)
		return
	}
	s.addChange(e.At, eventText(e, len(s.uris)))
}

// watchLists names the followed lists in display order, with the event
// that reports each and the method whose cache entry holds it.
var watchLists = [...]struct {
	name   string
	kind   client.EventKind
	method string
}{
	{"tools", client.ToolsChanged, mcp.MethodToolsList},
	{"prompts", client.PromptsChanged, mcp.MethodPromptsList},
	{"resources", client.ResourcesChanged, mcp.MethodResourcesList},
	{"templates", client.TemplatesChanged, mcp.MethodResourcesTemplates},
}

// snapshot captures the view model at now.
func (s *watchState) snapshot(now time.Time, c *client.Client, state client.ConnState, stats client.WatchStats, target string) viewModel {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := viewModel{
		Now: now, Target: target,
		Era: s.era, Version: s.version,
		Server: s.server, Versions: s.versions, DiscoverErr: s.discoverErr,
		State: state, Granted: s.granted, Stats: stats,
		Changes: slices.Clone(s.changes),
	}
	if s.outage != nil && state != client.Live {
		o := *s.outage
		m.Outage = &o
	}
	if m.State == client.Polling {
		// No listen at all: nothing is announced.
		m.Granted = &mcp.SubscriptionFilter{}
	}
	// The client tells how each answer's changes are heard and whether a
	// listen vouches for it now; the view only shows it.
	for _, l := range watchLists {
		set := s.lists[l.kind]
		items := make([]string, 0, len(set))
		for n := range set {
			items = append(items, n)
		}
		slices.Sort(items)
		f := c.Freshness(l.method, "")
		m.Lists = append(m.Lists, listView{
			Name: l.name, Followed: s.followed[l.kind], Known: set != nil, Items: items,
			Freshness: f, Notice: f.Notice, Live: f.Live,
		})
	}
	for _, u := range s.uris {
		f := c.Freshness(mcp.MethodResourcesRead, u)
		m.URIs = append(m.URIs, uriView{
			URI: u, Notice: f.Notice, Freshness: f, Updated: s.updated[u], Live: f.Live,
		})
	}
	return m
}

// eventText describes an event for the live view's change log; uris is
// how many resource subscriptions were asked for.
func eventText(e client.Event, uris int) string {
	switch e.Kind {
	case client.ToolsChanged, client.PromptsChanged, client.ResourcesChanged, client.TemplatesChanged:
		list := strings.TrimSuffix(e.Kind.String(), "_changed")
		var parts []string
		for _, p := range []struct {
			verb  string
			names []string
		}{{"added", e.Added}, {"removed", e.Removed}, {"changed", e.Changed}} {
			if len(p.names) > 0 {
				parts = append(parts, p.verb+" "+itemsText(p.names, 0))
			}
		}
		if len(parts) == 0 {
			return list + ": read, empty"
		}
		return list + ": " + strings.Join(parts, "; ")
	case client.ResourceUpdated:
		switch {
		case len(e.Added) > 0:
			return "read " + e.URI
		case len(e.Removed) > 0:
			return "gone " + e.URI
		}
		return "updated " + e.URI
	case client.Connected:
		return "connected, granted " + grantedText(&e.Granted, nil, uris)
	case client.Disconnected:
		if e.Graceful {
			return "disconnected: the server ended the stream"
		}
		return "disconnected: " + errText(e.Err)
	case client.ReadFailed:
		return "read failed: " + errText(e.Err)
	}
	return e.Kind.String()
}

// eventLine is the plain one-line form of an event. Names, URIs and
// error texts come from the server, so the line is made printable: a
// newline or escape sequence in them can neither forge further lines nor
// drive the terminal.
func eventLine(e client.Event) string {
	var b strings.Builder
	b.WriteString(e.At.UTC().Format(time.RFC3339) + " " + e.Kind.String())
	field := func(k string, names []string) {
		if len(names) > 0 {
			b.WriteString(" " + k + "=" + strings.Join(names, ","))
		}
	}
	switch e.Kind {
	case client.Connected:
		var g []string
		if e.Granted.ToolsListChanged {
			g = append(g, "tools")
		}
		if e.Granted.PromptsListChanged {
			g = append(g, "prompts")
		}
		if e.Granted.ResourcesListChanged {
			g = append(g, "resources")
		}
		if len(g) == 0 {
			g = []string{"none"}
		}
		field("granted", g)
		field("subscriptions", e.Granted.ResourceSubscriptions)
	case client.Disconnected:
		if e.Graceful {
			b.WriteString(" graceful")
		} else {
			b.WriteString(" error=" + strconv.Quote(errText(e.Err)))
		}
	case client.ReadFailed:
		b.WriteString(" error=" + strconv.Quote(errText(e.Err)))
	default:
		if e.Kind == client.ResourceUpdated {
			// The first read adds the URI; a resource that went away is
			// removed.
			b.WriteString(" uri=" + e.URI)
		}
		field("added", e.Added)
		field("removed", e.Removed)
		field("changed", e.Changed)
		if !e.ChangedAt.IsZero() {
			b.WriteString(" age=" + e.At.Sub(e.ChangedAt).Round(time.Millisecond).String())
		}
		if id := traceID(e.TraceParent); id != "" {
			b.WriteString(" trace=" + id)
		}
	}
	return printable(b.String())
}

// jsonEvent is the --json form of an event.
type jsonEvent struct {
	Time     time.Time               `json:"time"`
	Event    string                  `json:"event"`
	URI      string                  `json:"uri,omitempty"`
	Added    []string                `json:"added,omitempty"`
	Removed  []string                `json:"removed,omitempty"`
	Changed  []string                `json:"changed,omitempty"`
	Granted  *mcp.SubscriptionFilter `json:"granted,omitzero"`
	Graceful bool                    `json:"graceful,omitzero"`
	Error    string                  `json:"error,omitempty"`
	// TraceParent is the change's trace context, as the server's
	// notification carried it.
	TraceParent string `json:"traceparent,omitempty"`
	// ChangedAt is when the change happened, by the server's clock.
	ChangedAt time.Time `json:"changedAt,omitzero"`
}

// eventJSON is the --json form of an event, on one line.
func eventJSON(e client.Event) ([]byte, error) {
	j := jsonEvent{
		Time: e.At.UTC(), Event: e.Kind.String(), URI: e.URI,
		Added: e.Added, Removed: e.Removed, Changed: e.Changed, Graceful: e.Graceful, TraceParent: e.TraceParent, ChangedAt: e.ChangedAt,
	}
	if e.Kind == client.Connected {
		g := e.Granted
		j.Granted = &g
	}
	if e.Err != nil {
		j.Error = e.Err.Error()
	}
	b, err := json.Marshal(j, json.Deterministic(true))
	if err != nil {
		return nil, fmt.Errorf("encoding a watch event: %w", err)
	}
	return b, nil
}

// traceID is the trace id of a W3C traceparent ("" for none): the part a
// person looks a trace up by.
func traceID(traceParent string) string {
	parts := strings.Split(traceParent, "-")
	if len(parts) != 4 || len(parts[1]) != 32 {
		return ""
	}
	return parts[1]
}

func errText(err error) string {
	if err == nil {
		return "unknown error"
	}
	return err.Error()
}
