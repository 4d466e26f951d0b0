package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"tidings/client"
	"tidings/mcp"
)

var t0 = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

// sampleView is a watch of a directory server with one followed file.
func sampleView() viewModel {
	fresh := func(left time.Duration) client.FreshnessInfo {
		return client.FreshnessInfo{State: client.Fresh, ObservedAt: t0.Add(left - 10*time.Second), Expires: t0.Add(left)}
	}
	return viewModel{
		Now:      t0,
		Target:   "http://127.0.0.1:8080/mcp",
		Era:      mcp.Version,
		Server:   &mcp.Implementation{Name: "tidings", Title: "dir server", Version: "1.2.3"},
		Versions: []string{"2026-07-28"},
		State:    client.Live,
		Granted:  &mcp.SubscriptionFilter{ToolsListChanged: true, ResourcesListChanged: true, ResourceSubscriptions: []string{"file:///d/a.txt"}},
		Stats:    client.WatchStats{Notifications: 3, Rereads: 7, Reconnects: 1},
		Lists: []listView{
			{Name: "tools", Followed: true, Known: true, Items: []string{"file_info", "list_directory", "search_files"}, Freshness: fresh(7200 * time.Millisecond), Notice: client.Notified},
			{Name: "prompts"},
			{Name: "resources", Followed: true, Known: true, Items: []string{"file:///d/a.txt", "file:///d/b.txt"}, Freshness: client.FreshnessInfo{State: client.Stale}, Notice: client.Notified},
			{Name: "templates", Followed: true, Freshness: client.FreshnessInfo{State: client.Missing}},
		},
		URIs: []uriView{
			{URI: "file:///d/a.txt", Notice: client.Notified, Freshness: client.FreshnessInfo{State: client.Unknown}, Updated: t0.Add(-2 * time.Second)},
			{URI: "file:///d/c.txt", Freshness: fresh(500 * time.Millisecond)},
		},
		Changes: []changeView{
			{At: t0.Add(-5 * time.Second), Text: "connected, granted tools, resources"},
			{At: t0.Add(-3 * time.Second), Text: "resources: added file:///d/b.txt"},
			{At: t0.Add(-2 * time.Second), Text: "updated file:///d/a.txt"},
		},
	}
}

func TestRenderView(t *testing.T) {
	got := renderView(sampleView())
	want := strings.Join([]string{
		"tidings watch  http://127.0.0.1:8080/mcp  10:00:00",
		"server    tidings 1.2.3 (dir server)",
		"protocol  2026-07-28   server supports 2026-07-28",
		"state     live        notifications 3  re-reads 7  reconnects 1",
		"granted   tools, resources, 1/2 resource subscriptions",
		"",
		"tools        3  fresh 8s  notified  file_info, list_directory, search_files",
		"prompts      -  not offered by the server",
		"resources    2  stale     notified  file:///d/ a.txt, b.txt",
		"templates    -  missing   polled",
		"",
		"followed resources",
		"  unknown   notified  updated 09:59:58  file:///d/a.txt",
		"  fresh 1s  polled    updated not yet   file:///d/c.txt",
		"",
		"recent changes",
		"  09:59:58  updated file:///d/a.txt",
		"  09:59:57  resources: added file:///d/b.txt",
		"  09:59:55  connected, granted tools, resources",
		"",
		"live: a listen keeps it current  fresh: inside its TTL  stale: to be read again  unknown: listen lost",
	}, "\n")
	if got != want {
		t.Errorf("render:\n%s\n\nwant:\n%s", got, want)
	}
}

func TestRenderViewBeforeConnect(t *testing.T) {
	m := sampleView()
	m.Server, m.Versions, m.DiscoverErr = nil, nil, "connection refused"
	m.State, m.Granted, m.Changes = client.Connecting, nil, nil
	got := renderView(m)
	for _, want := range []string{
		"server    unknown: connection refused\n",
		"state     connecting  ",
		"granted   - (no listen acknowledged yet)\n",
		"tools        3  fresh 8s  -         file_info",
		"recent changes\n  (none yet)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("render lacks %q:\n%s", want, got)
		}
	}
	for era, want := range map[client.Era]string{
		"":               "\nprotocol  …\n",
		client.EraLegacy: "\nprotocol  2025-11-25 (legacy session)\n",
		client.EraModern: "\nprotocol  2026-07-28\n",
	} {
		m.Era = era
		if got := renderView(m); !strings.Contains(got, want) {
			t.Errorf("era %q: render lacks %q:\n%s", era, want, got)
		}
	}
}

func TestRenderViewFitsTheTerminal(t *testing.T) {
	m := sampleView()
	var names []string
	for i := range 40 {
		names = append(names, fmt.Sprintf("file:///data/dir/file-%02d.txt", i))
	}
	m.Lists[2].Items = names
	for i := range 12 {
		m.Changes = append(m.Changes, changeView{At: t0, Text: fmt.Sprintf("change %d %s", i, strings.Repeat("x", 100))})
	}
	m.Width, m.Height, m.Keys = 100, 22, true
	got := renderView(m)
	lines := strings.Split(got, "\n")
	if len(lines) != m.Height {
		t.Errorf("%d lines, want exactly %d (the changes fill the rest):\n%s", len(lines), m.Height, got)
	}
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > m.Width {
			t.Errorf("line of %d runes is wider than %d: %q", n, m.Width, l)
		}
	}
	if want := "tidings watch  http://127.0.0.1:8080/mcp" + strings.Repeat(" ", 52) + "10:00:00"; lines[0] != want {
		t.Errorf("title = %q, want the clock at the right edge", lines[0])
	}
	// The resource line names as many files as fit and counts the rest.
	if want := "resources   40  stale     notified  file:///data/dir/ file-00.txt, file-01.txt, file-02.txt, … +37"; lines[8] != want {
		t.Errorf("resources line = %q, want %q", lines[8], want)
	}
	// The newest change comes first, cut at the edge.
	if want := "  10:00:00  change 11 " + strings.Repeat("x", 100-23) + "…"; lines[16] != want {
		t.Errorf("first change line = %q, want %q", lines[16], want)
	}
	if !strings.HasPrefix(lines[19], "  10:00:00  change 8 ") {
		t.Errorf("line 19 = %q, want the fourth newest change", lines[19])
	}
	if lines[21] != "?: legend  q: quit" {
		t.Errorf("last line = %q, want the keys", lines[21])
	}
}

// TestRenderViewNarrow is an 80-column terminal following a directory of
// 502 files with long paths: the list shows file names, not just a
// count, and less important columns make way.
func TestRenderViewNarrow(t *testing.T) {
	m := sampleView()
	var names []string
	for i := range 502 {
		names = append(names, fmt.Sprintf("file:///home/someone/projects/website/content/posts/%03d-a-rather-long-title.md", i))
	}
	m.Lists[2].Items = names
	m.URIs[0].URI = names[7]
	m.Width, m.Height = 80, 30
	lines := strings.Split(renderView(m), "\n")
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > m.Width {
			t.Errorf("line of %d runes is wider than %d: %q", n, m.Width, l)
		}
	}
	res := lines[8]
	if !strings.HasPrefix(res, "resources  502  stale") || !strings.Contains(res, "000-a-rather-long") || !strings.HasSuffix(res, "… +501") {
		t.Errorf("resources line = %q, want the first file name (cut if need be) and the count of the rest", res)
	}
	if strings.Contains(res, "notified") {
		t.Errorf("resources line = %q: the how column goes first on a narrow terminal", res)
	}
	if want := "file://…/posts/ "; !strings.Contains(res, want) {
		t.Errorf("resources line = %q, want the common directory shortened to %q", res, want)
	}
	// The followed resource keeps the end of its URI: the file name.
	if !strings.HasSuffix(lines[12], "007-a-rather-long-title.md") || !strings.Contains(lines[12], "…") {
		t.Errorf("followed resource line = %q, want its URI cut in the middle", lines[12])
	}
	m.Width = 40
	for _, l := range strings.Split(renderView(m), "\n") {
		if n := utf8.RuneCountInString(l); n > m.Width {
			t.Errorf("at 40 columns, line of %d runes: %q", n, l)
		}
	}
}

// TestRenderViewLive: a list or followed resource that a live,
// acknowledged listen covers is shown live whatever its TTL says.
func TestRenderViewLive(t *testing.T) {
	m := sampleView()
	m.Lists[2].Live = true // its TTL ran out: stale by the cache alone
	m.URIs[0].Freshness = client.FreshnessInfo{State: client.Stale}
	m.URIs[0].Live = true
	got := renderView(m)
	for _, want := range []string{
		"\nresources    2  live      notified  file:///d/ a.txt, b.txt\n",
		"\n  live      notified  updated 09:59:58  file:///d/a.txt\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("render lacks %q:\n%s", want, got)
		}
	}
	m.Keys, m.Legend = true, true
	got = renderView(m)
	if !strings.Contains(got, "\nlegend\n  live      a change would reach us") || strings.Contains(got, "\nrecent changes\n") {
		t.Errorf("the legend replaces the recent changes:\n%s", got)
	}
}

// TestReconnectsCollapse: however many reconnect attempts fail, the
// change log gets one line for the outage, and the status line counts
// them and says by when the next one starts.
func TestReconnectsCollapse(t *testing.T) {
	st := newWatchState(nil)
	st.apply(client.Event{Kind: client.Connected, At: t0})
	st.apply(client.Event{Kind: client.ToolsChanged, At: t0, Added: []string{"a"}})
	at := t0.Add(time.Second)
	for i := range 25 {
		at = at.Add(time.Second)
		st.apply(client.Event{Kind: client.Disconnected, At: at, Err: fmt.Errorf("connection refused (%d)", i)})
	}
	st.mu.Lock()
	changes := slices.Clone(st.changes)
	o := *st.outage
	st.mu.Unlock()
	if len(changes) != 3 || changes[2].Text != "disconnected: connection refused (0)" {
		t.Errorf("changes = %+v, want the connection, the read and one line for the outage", changes)
	}
	if o.Attempts != 25 || o.LastErr != "connection refused (24)" || !o.Since.Equal(t0.Add(2*time.Second)) {
		t.Errorf("outage = %+v", o)
	}
	if left := o.RetryBy.Sub(at); left <= 0 || left > maxBackoff {
		t.Errorf("next retry %v after the last attempt, want within (0, %v]", left, maxBackoff)
	}
	m := viewModel{Now: at, Target: "x", State: client.Down, Outage: &o, Keys: true, Width: 80}
	got := renderView(m)
	if !strings.Contains(got, "\nstate     down since 10:00:02, 25 failed attempts, next retry by 10:00:56 (30s)\n") ||
		!strings.Contains(got, "\n          last error: connection refused (24)\n") ||
		!strings.HasSuffix(got, "r: retry now") {
		t.Errorf("render:\n%s", got)
	}
	st.apply(client.Event{Kind: client.Connected, At: at.Add(time.Second)})
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.outage != nil || len(st.changes) != 4 || !strings.HasPrefix(st.changes[3].Text, "reconnected after 25 failed attempt(s)") {
		t.Errorf("after reconnecting: outage %+v, changes %+v", st.outage, st.changes)
	}
}

// TestRestartedWatcherReportsOnlyRealChanges: a watcher replaced to
// retry at once reads everything as new; the state reports only what
// differs from what it knew.
func TestRestartedWatcherReportsOnlyRealChanges(t *testing.T) {
	st := newWatchState([]string{"u"})
	st.apply(client.Event{Kind: client.Connected, At: t0})
	st.apply(client.Event{Kind: client.ToolsChanged, At: t0, Added: []string{"a", "b"}})
	st.apply(client.Event{Kind: client.ResourceUpdated, At: t0, URI: "u", Added: []string{"u"}})
	st.apply(client.Event{Kind: client.Disconnected, At: t0, Err: errors.New("down")})
	st.restarted()
	st.apply(client.Event{Kind: client.Connected, At: t0.Add(time.Second)})
	st.apply(client.Event{Kind: client.ToolsChanged, At: t0.Add(time.Second), Added: []string{"b", "c"}})
	st.apply(client.Event{Kind: client.ResourceUpdated, At: t0.Add(time.Second), URI: "u", Added: []string{"u"}})
	st.mu.Lock()
	defer st.mu.Unlock()
	var texts []string
	for _, c := range st.changes {
		texts = append(texts, c.Text)
	}
	want := []string{"connected, granted 0/1 resource subscriptions", "tools: added a, b", "read u", "disconnected: down", "reconnected after 1 failed attempt(s), granted 0/1 resource subscriptions", "tools: added c; removed a"}
	if !slices.Equal(texts, want) {
		t.Errorf("changes = %q, want %q", texts, want)
	}
	if got := fmt.Sprint(st.lists[client.ToolsChanged]); got != "map[b:true c:true]" {
		t.Errorf("tools = %s", got)
	}
}

func TestLogPane(t *testing.T) {
	var p logPane
	notified := 0
	p.setNotify(func() { notified++ })
	fmt.Fprint(&p, "one\ntw")
	fmt.Fprint(&p, "o\r\n")
	if got := p.lines(); !slices.Equal(got, []string{"one", "two"}) || notified != 2 {
		t.Errorf("lines = %q (notified %d), want one, two", got, notified)
	}
	for i := range 3 * logPaneLines {
		fmt.Fprintf(&p, "line %d\n", i)
	}
	fmt.Fprintln(&p, strings.Repeat("x", 10*logPaneLineMax))
	got := p.lines()
	if len(got) != logPaneLines || got[0] != fmt.Sprintf("line %d", 2*logPaneLines+1) || len(got[len(got)-1]) != logPaneLineMax {
		t.Errorf("kept %d lines, first %q, last of %d bytes", len(got), got[0], len(got[len(got)-1]))
	}
	m := sampleView()
	m.Width, m.Height, m.Keys = 80, 30, true
	m.LogPane, m.Log = true, []string{"a", "b", "c", "d \x1b[2Jevil"}
	out := renderView(m)
	if !strings.Contains(out, "\nlog\n  b\n  c\n  d \ufffd[2Jevil\n\n?: legend") {
		t.Errorf("the log pane shows the last three lines, printable:\n%s", out)
	}
}

func TestItemsText(t *testing.T) {
	items := []string{"alpha", "beta", "gamma", "delta"}
	for _, tc := range []struct {
		avail int
		want  string
	}{
		{0, "alpha, beta, gamma, delta"},
		{100, "alpha, beta, gamma, delta"},
		{25, "alpha, beta, gamma, delta"},
		{24, "alpha, beta, gamma, … +1"},
		{23, "alpha, beta, … +2"},
		{17, "alpha, beta, … +2"},
		{16, "alpha, … +3"},
		{3, "… +4"},
	} {
		if got := itemsText(items, tc.avail); got != tc.want {
			t.Errorf("itemsText(avail %d) = %q, want %q", tc.avail, got, tc.want)
		}
	}
	if got := itemsText([]string{"file:///a.txt", "file:///b.txt"}, 0); got != "file:///a.txt, file:///b.txt" {
		t.Errorf("no common directory beyond the scheme: %q", got)
	}
	if got := itemsText([]string{"file:///srv/x/a.txt"}, 0); got != "file:///srv/x/ a.txt" {
		t.Errorf("one URI: %q", got)
	}
}

func TestWatchStateKeepsListsAndLastChanges(t *testing.T) {
	st := newWatchState([]string{"file:///d/a.txt"})
	st.apply(client.Event{Kind: client.Connected, At: t0, Granted: mcp.SubscriptionFilter{ToolsListChanged: true}})
	st.apply(client.Event{Kind: client.ToolsChanged, At: t0, Added: []string{"a", "b", "c"}})
	st.apply(client.Event{Kind: client.ToolsChanged, At: t0, Added: []string{"d"}, Removed: []string{"b"}, Changed: []string{"a"}})
	st.apply(client.Event{Kind: client.PromptsChanged, At: t0})
	st.apply(client.Event{Kind: client.ResourceUpdated, At: t0.Add(time.Second), URI: "file:///d/a.txt", Changed: []string{"file:///d/a.txt"}})
	for i := range 20 {
		st.apply(client.Event{Kind: client.ReadFailed, At: t0, Err: fmt.Errorf("fail %d", i)})
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if got := fmt.Sprint(st.lists[client.ToolsChanged]); got != "map[a:true c:true d:true]" {
		t.Errorf("tools = %s", got)
	}
	if st.lists[client.PromptsChanged] == nil || len(st.lists[client.PromptsChanged]) != 0 {
		t.Errorf("an empty read makes the list known and empty: %v", st.lists[client.PromptsChanged])
	}
	if st.lists[client.ResourcesChanged] != nil {
		t.Errorf("resources were never read: %v", st.lists[client.ResourcesChanged])
	}
	if !st.updated["file:///d/a.txt"].Equal(t0.Add(time.Second)) {
		t.Errorf("updated = %v", st.updated)
	}
	if st.granted == nil || !st.granted.ToolsListChanged {
		t.Errorf("granted = %+v", st.granted)
	}
	if len(st.changes) != maxChanges || st.changes[0].Text != "read failed: fail 10" || st.changes[maxChanges-1].Text != "read failed: fail 19" {
		t.Errorf("changes = %+v, want the last %d", st.changes, maxChanges)
	}
}

func TestEventText(t *testing.T) {
	for _, tc := range []struct {
		e    client.Event
		want string
	}{
		{client.Event{Kind: client.ToolsChanged, Added: []string{"a", "b"}, Removed: []string{"c"}, Changed: []string{"d"}}, "tools: added a, b; removed c; changed d"},
		{client.Event{Kind: client.TemplatesChanged}, "templates: read, empty"},
		{client.Event{Kind: client.ResourceUpdated, URI: "u", Added: []string{"u"}}, "read u"},
		{client.Event{Kind: client.ResourceUpdated, URI: "u", Changed: []string{"u"}}, "updated u"},
		{client.Event{Kind: client.ResourceUpdated, URI: "u", Removed: []string{"u"}}, "gone u"},
		{client.Event{Kind: client.Connected, Granted: mcp.SubscriptionFilter{PromptsListChanged: true}}, "connected, granted prompts, 0/2 resource subscriptions"},
		{client.Event{Kind: client.Disconnected, Graceful: true}, "disconnected: the server ended the stream"},
		{client.Event{Kind: client.Disconnected, Err: errors.New("boom")}, "disconnected: boom"},
		{client.Event{Kind: client.ReadFailed, Err: errors.New("nope")}, "read failed: nope"},
	} {
		if got := eventText(tc.e, 2); got != tc.want {
			t.Errorf("eventText(%v) = %q, want %q", tc.e.Kind, got, tc.want)
		}
	}
}

func TestEventLine(t *testing.T) {
	at := time.Date(2026, 11, 30, 11, 0, 0, 0, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		e    client.Event
		want string
	}{
		{client.Event{Kind: client.ToolsChanged, Added: []string{"a", "b"}, Removed: []string{"c"}}, "2026-11-30T10:00:00Z tools_changed added=a,b removed=c"},
		{client.Event{Kind: client.PromptsChanged}, "2026-11-30T10:00:00Z prompts_changed"},
		{client.Event{Kind: client.ResourcesChanged, Changed: []string{"file:///x"}}, "2026-11-30T10:00:00Z resources_changed changed=file:///x"},
		{client.Event{Kind: client.ResourceUpdated, URI: "file:///x", Changed: []string{"file:///x"}}, "2026-11-30T10:00:00Z resource_updated uri=file:///x changed=file:///x"},
		{client.Event{Kind: client.Connected, Granted: mcp.SubscriptionFilter{ToolsListChanged: true, ResourcesListChanged: true, ResourceSubscriptions: []string{"u1", "u2"}}}, "2026-11-30T10:00:00Z connected granted=tools,resources subscriptions=u1,u2"},
		{client.Event{Kind: client.Connected}, "2026-11-30T10:00:00Z connected granted=none"},
		{client.Event{Kind: client.Disconnected, Graceful: true}, "2026-11-30T10:00:00Z disconnected graceful"},
		{client.Event{Kind: client.Disconnected, Err: errors.New(`say "hi"`)}, `2026-11-30T10:00:00Z disconnected error="say \"hi\""`},
		{client.Event{Kind: client.ReadFailed, Err: errors.New("x")}, `2026-11-30T10:00:00Z read_failed error="x"`},
	} {
		tc.e.At = at
		if got := eventLine(tc.e); got != tc.want {
			t.Errorf("eventLine = %q, want %q", got, tc.want)
		}
	}
}

func TestEventJSON(t *testing.T) {
	b, err := eventJSON(client.Event{Kind: client.ResourcesChanged, At: t0, Added: []string{"u"}})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"time":"2026-11-30T10:00:00Z","event":"resources_changed","added":["u"]}`; string(b) != want {
		t.Errorf("got %s, want %s", b, want)
	}
	b, err = eventJSON(client.Event{Kind: client.Connected, At: t0})
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"time":"2026-11-30T10:00:00Z","event":"connected","granted":{}}`; string(b) != want {
		t.Errorf("got %s, want %s (an empty grant is still reported)", b, want)
	}
	b, err = eventJSON(client.Event{Kind: client.Disconnected, At: t0, Err: errors.New("gone")})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m["error"] != "gone" || m["event"] != "disconnected" || m["graceful"] != nil {
		t.Errorf("got %s (%v)", b, err)
	}
}

func TestParseRequest(t *testing.T) {
	ok := []struct {
		args []string
		want callRequest
	}{
		{[]string{"tools"}, callRequest{what: "tools"}},
		{[]string{"discover"}, callRequest{what: "discover"}},
		{[]string{"read", "file:///x"}, callRequest{what: "read", name: "file:///x"}},
		{[]string{"call", "t"}, callRequest{what: "call", name: "t"}},
		{[]string{"call", "t", ` { "a" : [1] } `}, callRequest{what: "call", name: "t", args: []byte(`{"a":[1]}`)}},
		{[]string{"get", "p", `{"k":"v"}`}, callRequest{what: "get", name: "p", args: []byte(`{"k":"v"}`)}},
	}
	for _, tc := range ok {
		got, err := parseRequest(tc.args)
		if err != nil || got.what != tc.want.what || got.name != tc.want.name || string(got.args) != string(tc.want.args) {
			t.Errorf("parseRequest(%q) = %+v, %v; want %+v", tc.args, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "no request given"},
		{[]string{"list"}, `unknown request "list"`},
		{[]string{"tools", "x"}, "tools takes no arguments"},
		{[]string{"read"}, "read takes exactly 1 argument"},
		{[]string{"call"}, "call takes 1 to 2 arguments"},
		{[]string{"call", "t", "{}", "x"}, "call takes 1 to 2 arguments"},
		{[]string{"call", "t", "[1]"}, "must be a JSON object"},
		{[]string{"call", "t", "{"}, "must be a JSON object"},
		{[]string{"get", "p", `{"n":1}`}, "JSON object of strings"},
	} {
		_, err := parseRequest(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseRequest(%q) error = %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}

func TestSplitTarget(t *testing.T) {
	split := func(args ...string) (target, []string, error) {
		var tg target
		var rest []string
		var err error
		cmd := &cobra.Command{
			Use: "x", Args: cobra.ArbitraryArgs, SilenceErrors: true, SilenceUsage: true,
			RunE: func(cmd *cobra.Command, args []string) error {
				tg, rest, err = splitTarget(cmd, args)
				return nil
			},
		}
		cmd.Flags().Bool("json", false, "")
		cmd.SetArgs(args)
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		return tg, rest, err
	}
	tg, rest, err := split("http://h/mcp", "call", "t", "{}")
	if err != nil || tg.url != "http://h/mcp" || tg.command != nil || strings.Join(rest, " ") != "call t {}" {
		t.Errorf("URL form: %+v %q %v", tg, rest, err)
	}
	tg, rest, err = split("--json", "resources", "--", "srv", "--dir", "d", "--json")
	if err != nil || tg.url != "" || strings.Join(tg.command, " ") != "srv --dir d --json" || strings.Join(rest, " ") != "resources" {
		t.Errorf("command form: %+v %q %v", tg, rest, err)
	}
	tg, rest, err = split("--", "srv")
	if err != nil || strings.Join(tg.command, " ") != "srv" || len(rest) != 0 {
		t.Errorf("bare command: %+v %q %v", tg, rest, err)
	}
	for _, args := range [][]string{
		{},
		{"tools"},
		{"ftp://h/x", "tools"},
		{"tools", "--"},
		{"http://h/mcp", "tools", "--", "srv"},
	} {
		if _, _, err := split(args...); err == nil {
			t.Errorf("split(%q) succeeded", args)
		}
	}
}

// TestRenderViewUntagged: what untagged notifications are heard for is
// marked in the how column, which widens for it, and named in the grant
// line; a 2025-11-25 session's grant line says what its stream announces.
func TestRenderViewUntagged(t *testing.T) {
	m := sampleView()
	m.Lists[0].Notice = client.NotifiedUntagged
	m.Lists[0].Live = true
	m.URIs[0].Notice = client.NotifiedUntagged
	got := renderView(m)
	for _, want := range []string{
		"\ngranted   tools, resources, 1/2 resource subscriptions; notified (untagged): tools, 1/2 resources\n",
		"\ntools        3  live      notified (untagged)  file_info, list_directory, search_files\n",
		"\nresources    2  stale     notified             file:///d/ a.txt, b.txt\n",
		"\n  unknown   notified (untagged)  updated 09:59:58  file:///d/a.txt\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("render lacks %q:\n%s", want, got)
		}
	}
	m.Era = client.EraLegacy
	if got := renderView(m); !strings.Contains(got, "\nannounces tools, resources, 1/2 resource subscriptions; notified (untagged)") {
		t.Errorf("a legacy session's grant line:\n%s", got)
	}
}
