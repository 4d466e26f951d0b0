package main

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"tidings/client"
	"tidings/mcp"
)

// viewModel is everything the live view shows, captured at one instant.
// Rendering it is a pure function, so the view is tested without a
// terminal.
type viewModel struct {
	Now    time.Time
	Target string
	// Era is the protocol generation spoken with the server: 2026-07-28,
	// or 2025-11-25 for a legacy (initialize and session) server; empty
	// until the client has probed.
	Era client.Era
	// Version is the revision spoken: for a legacy session, the one
	// initialize agreed on (2025-11-25, 2025-06-18 or 2025-03-26).
	Version string
	// Server is who the server says it is (nil until discovered), and
	// Versions the protocol revisions it supports.
	Server      *mcp.Implementation
	Versions    []string
	DiscoverErr string

	State client.ConnState
	// Granted is the last listen acknowledgement (nil before the first).
	Granted *mcp.SubscriptionFilter
	Stats   client.WatchStats
	// Outage is the connection trouble going on now, nil while the
	// listen is up (or was never tried).
	Outage *outageView

	// Keys is true when the view reads key presses, so it may offer them.
	Keys bool
	// Legend shows what the states mean in place of the recent changes.
	Legend bool
	// LogPane is true for a spawned server whose stderr is shown in the
	// view: Log holds its last lines, oldest first. LogFile, when set,
	// is where that stderr goes instead.
	LogPane bool
	Log     []string
	LogFile string

	Lists   []listView
	URIs    []uriView
	Changes []changeView // oldest first

	// Width and Height are the terminal's size; zero means unbounded.
	Width, Height int
}

// listView is one followed list: tools, prompts, resources or templates.
type listView struct {
	Name string
	// Followed is false for a list the server does not offer.
	Followed bool
	// Known is false until the list has been read once.
	Known bool
	// Items are the names (tool and prompt names, resource URIs, URI
	// templates), sorted.
	Items     []string
	Freshness client.FreshnessInfo
	// Notice says how a change of the list is heard: through what the
	// server granted (or, 2025-11-25, declared), through notifications
	// it sends untagged, or not at all (it is polled).
	Notice client.Notice
	// Live is true when a change would reach us: a listen that is up
	// hears of the list's changes and the list was read since that listen
	// was acknowledged. It is current whatever its TTL says.
	Live bool
}

// uriView is one resource whose content is followed.
type uriView struct {
	URI       string
	Notice    client.Notice
	Freshness client.FreshnessInfo
	Updated   time.Time // last reported content change; zero if none yet
	// Live: as for listView, through a resource subscription.
	Live bool
}

// changeView is one line of the recent-changes log.
type changeView struct {
	At   time.Time
	Text string
	// Count is how many times in a row the same thing happened (the
	// same read failure, say); At is the latest.
	Count int
}

// outageView is one spell without a listen, however many reconnect
// attempts it took: the view shows it as one status line.
type outageView struct {
	Since    time.Time
	Attempts int    // failed attempts so far
	LastErr  string // why the latest one failed
	// RetryBy is when the next attempt starts at the latest; zero when
	// nothing will be retried.
	RetryBy time.Time
}

// legendLines explain the freshness states, the notified/polled column
// and the granted line; the view shows them when asked (the ? key).
var legendLines = [...]string{
	"live      a change would reach us: the listen that is up hears of it",
	"          and it was read since; current whatever its TTL says",
	"fresh Ns  not live, but inside the TTL the server gave, N seconds left",
	"stale     TTL over (or none given), or a change was announced: read",
	"          again at the next poll or notification",
	"unknown   the listen dropped; read again once it is back",
	"missing   not read yet",
	"notified  the server agreed to announce its changes: granted by the",
	"          listen, or declared in a 2025-11-25 server's capabilities",
	"notified (untagged)  announced in notifications not tied to the listen",
	"          (no subscription id, or undeclared), and followed all the same",
	"polled    nothing announces its changes: read every --poll-interval",
	"granted   what the listen was granted; announces: what a 2025-11-25",
	"          session's stream carries, by the server's capabilities",
}

// renderView draws the model as text lines that fit Width and Height.
// It writes no escape sequences; the caller positions the cursor. When
// the terminal is narrow, the less important columns go first (how a
// list is followed, then the "updated" label), and names are cut with
// an ellipsis rather than dropped.
func renderView(m viewModel) string {
	r := viewRender{m: m}
	top := append(r.header(), "")
	top = append(top, r.lists()...)
	bottom := r.bottom()
	middle := r.middle()
	if m.Height > 0 {
		room := m.Height - len(top) - len(bottom)
		if room < 3 { // the log and keys give way to the changes' header
			bottom = nil
			room = m.Height - len(top)
		}
		middle = middle[:min(len(middle), max(room, 0))]
		for len(middle) < room { // the keys stay on the last row
			middle = append(middle, "")
		}
	}
	lines := append(append(top, middle...), bottom...)
	if m.Height > 0 && len(lines) > m.Height {
		lines = lines[:m.Height]
	}
	return strings.Join(lines, "\n")
}

// viewRender draws the parts of one frame of m.
type viewRender struct{ m viewModel }

// line formats one line of the view, fitted to its width. Every line goes
// through printable: the strings in it are the server's, and control
// characters in them must not drive the terminal or break the layout.
func (r viewRender) line(format string, a ...any) string {
	return strings.TrimRight(fit(printable(fmt.Sprintf(format, a...)), r.m.Width), " ")
}

// header is the top of the view: the title, who the server is, the
// protocol, the connection's state and what the listen was granted.
func (r viewRender) header() []string {
	m := r.m
	title := "tidings watch  " + m.Target
	clock := m.Now.Format("15:04:05")
	if m.Width > 0 && utf8.RuneCountInString(title)+2+len(clock) <= m.Width {
		title += strings.Repeat(" ", m.Width-utf8.RuneCountInString(title)-len(clock)) + clock
	} else {
		title += "  " + clock
	}
	out := []string{r.line("%s", title), r.line("server    %s", serverText(m)), r.line("%s", protocolText(m))}
	if o := m.Outage; o != nil {
		out = append(out, r.line("state     %s", outageText(o, m.State, m.Now)))
		// An error's cause comes last ("connection refused"): keep it.
		const label = "          last error: "
		errW := 0
		if m.Width > 0 {
			errW = max(m.Width-len(label), 1)
		}
		out = append(out, r.line("%s%s", label, fitMiddle(printable(o.LastErr), errW)))
	} else {
		out = append(out, r.line("state     %-10s  notifications %d  re-reads %d  reconnects %d",
			m.State, m.Stats.Notifications, m.Stats.Rereads, m.Stats.Reconnects))
	}
	return append(out, r.line("%-9s %s", grantLabel(m.Era), grantedText(m.Granted, untaggedParts(m), len(m.URIs))))
}

// serverText says who the server is, as far as it is known.
func serverText(m viewModel) string {
	switch {
	case m.Server != nil:
		s := m.Server.Name + " " + m.Server.Version
		if m.Server.Title != "" {
			s += " (" + m.Server.Title + ")"
		}
		return s
	case m.DiscoverErr != "":
		return "unknown: " + m.DiscoverErr
	}
	return "…"
}

// protocolText is the protocol line: the revision spoken, and those the
// server supports.
func protocolText(m viewModel) string {
	proto := "protocol  "
	switch m.Era {
	case "":
		proto += "…"
	case client.EraLegacy:
		v := m.Version
		if v == "" {
			v = string(m.Era)
		}
		proto += v + " (legacy session)"
	default:
		proto += string(m.Era)
	}
	if len(m.Versions) > 0 {
		proto += "   server supports " + strings.Join(m.Versions, ", ")
	}
	return proto
}

// lists draws each list with its freshness, how it is followed and its
// items, then the followed resources.
func (r viewRender) lists() []string {
	m := r.m
	nameW, howW := 0, 8
	for _, l := range m.Lists {
		nameW = max(nameW, len(l.Name))
		if l.Followed {
			howW = max(howW, len(howText(l.Notice, m.Granted)))
		}
	}
	for _, u := range m.URIs {
		howW = max(howW, len(howText(u.Notice, m.Granted)))
	}
	// The items want three fifths of a narrow terminal; the "how" column
	// (also told by the granted line) gives way first.
	head := func(l listView, how bool) string {
		count := "-"
		if l.Known {
			count = fmt.Sprint(len(l.Items))
		}
		h := fmt.Sprintf("%-*s %4s  %-9s ", nameW, l.Name, count, stateText(l.Freshness, l.Live, m.Now))
		if how {
			h += fmt.Sprintf("%-*s  ", howW, howText(l.Notice, m.Granted))
		} else {
			h += " "
		}
		return h
	}
	showHow := true
	if m.Width > 0 {
		probe := listView{Name: "resources", Known: true, Items: make([]string, 1000)}
		showHow = m.Width-utf8.RuneCountInString(head(probe, true)) >= min(50, m.Width*3/5)
	}
	var out []string
	for _, l := range m.Lists {
		if !l.Followed {
			out = append(out, r.line("%-*s    -  not offered by the server", nameW, l.Name))
			continue
		}
		h := head(l, showHow)
		avail := 0
		if m.Width > 0 {
			avail = max(m.Width-utf8.RuneCountInString(h), 0)
		}
		out = append(out, r.line("%s%s", h, itemsText(l.Items, avail)))
	}
	if len(m.URIs) == 0 {
		return out
	}
	out = append(out, "", r.line("followed resources"))
	for _, u := range m.URIs {
		updated := "not yet"
		if !u.Updated.IsZero() {
			updated = u.Updated.Format("15:04:05")
		}
		h := fmt.Sprintf("  %-9s ", stateText(u.Freshness, u.Live, m.Now))
		if showHow {
			h += fmt.Sprintf("%-*s  updated %-8s  ", howW, howText(u.Notice, m.Granted), updated)
		} else {
			h += fmt.Sprintf(" %-8s  ", updated)
		}
		avail := 0
		if m.Width > 0 {
			avail = max(m.Width-utf8.RuneCountInString(h), 1)
		}
		out = append(out, r.line("%s%s", h, fitMiddle(u.URI, avail)))
	}
	return out
}

// bottom is the spawned server's log, then the keys.
func (r viewRender) bottom() []string {
	m := r.m
	var out []string
	switch {
	case m.LogFile != "":
		out = append(out, "", r.line("log       %s", m.LogFile))
	case m.LogPane:
		out = append(out, "", r.line("log"))
		n := min(len(m.Log), 3)
		if m.Height > 0 && m.Height < 24 {
			n = min(n, 1)
		}
		if n == 0 {
			out = append(out, r.line("  (nothing yet)"))
		}
		for _, l := range m.Log[len(m.Log)-n:] {
			out = append(out, r.line("  %s", l))
		}
	}
	if !m.Keys {
		return append(out, "", r.line("live: a listen keeps it current  fresh: inside its TTL  stale: to be read again  unknown: listen lost"))
	}
	keys := "?: legend  q: quit"
	if m.Legend {
		keys = "?: recent changes  q: quit"
	}
	if m.Outage != nil {
		keys += "  r: retry now"
	}
	return append(out, "", r.line("%s", keys))
}

// middle is what takes the rows left: the recent changes, or the legend.
func (r viewRender) middle() []string {
	m := r.m
	if m.Legend {
		out := []string{"", "legend"}
		for _, l := range legendLines {
			out = append(out, r.line("  %s", l))
		}
		return out
	}
	out := []string{"", "recent changes"}
	if len(m.Changes) == 0 {
		out = append(out, r.line("  (none yet)"))
	}
	for i := len(m.Changes) - 1; i >= 0; i-- {
		c := m.Changes[i]
		text := c.Text
		if c.Count > 1 {
			text += fmt.Sprintf(" (×%d)", c.Count)
		}
		out = append(out, r.line("  %s  %s", c.At.Format("15:04:05"), text))
	}
	return out
}

// outageText is the one status line of a spell without a listen: since
// when, how many attempts failed and when the next one starts (the key
// that starts it now is on the last row).
func outageText(o *outageView, state client.ConnState, now time.Time) string {
	parts := []string{state.String() + " since " + o.Since.Format("15:04:05")}
	switch o.Attempts {
	case 0:
	case 1:
		parts = append(parts, "1 failed attempt")
	default:
		parts = append(parts, fmt.Sprintf("%d failed attempts", o.Attempts))
	}
	switch {
	case state == client.Connecting:
		parts = append(parts, "retrying now")
	case !o.RetryBy.IsZero():
		left := (o.RetryBy.Sub(now) + time.Second - 1) / time.Second
		parts = append(parts, fmt.Sprintf("next retry by %s (%ds)", o.RetryBy.Format("15:04:05"), max(left, 0)))
	}
	return strings.Join(parts, ", ")
}

// stateText is the freshness column: live, "fresh Ns" with the seconds
// left of the TTL (rounded up), stale, unknown or missing.
func stateText(f client.FreshnessInfo, live bool, now time.Time) string {
	if live {
		return "live"
	}
	if f.State != client.Fresh {
		return f.State.String()
	}
	left := f.Expires.Sub(now)
	secs := (left + time.Second - 1) / time.Second
	return fmt.Sprintf("fresh %ds", max(secs, 0))
}

// howText says how a list or resource is followed: notified, notified
// (untagged), polled, or "-" before any listen was acknowledged.
func howText(n client.Notice, granted *mcp.SubscriptionFilter) string {
	switch {
	case granted == nil:
		return "-"
	case n == client.Notified, n == client.NotifiedUntagged:
		return n.String()
	}
	return "polled"
}

// untaggedParts names what untagged notifications are heard for: the
// lists (resources for resources and templates alike) and how many of
// the followed resources.
func untaggedParts(m viewModel) []string {
	var parts []string
	for _, l := range m.Lists {
		name := l.Name
		if name == "templates" {
			name = "resources"
		}
		if l.Followed && l.Notice == client.NotifiedUntagged && !slices.Contains(parts, name) {
			parts = append(parts, name)
		}
	}
	n := 0
	for _, u := range m.URIs {
		if u.Notice == client.NotifiedUntagged {
			n++
		}
	}
	if n > 0 {
		parts = append(parts, fmt.Sprintf("%d/%d resources", n, len(m.URIs)))
	}
	return parts
}

// grantLabel names what a listen hears of as the server agreed: a grant,
// or, for a 2025-11-25 session, which has none, what its stream
// announces by the server's capabilities.
func grantLabel(era client.Era) string {
	if era == client.EraLegacy {
		return "announces"
	}
	return "granted"
}

// grantedText says what the last acknowledgement granted (for a
// 2025-11-25 session, what its stream announces as the server's
// capabilities declare), and what untagged notifications are heard for.
func grantedText(g *mcp.SubscriptionFilter, untagged []string, uris int) string {
	if g == nil {
		return "- (no listen acknowledged yet)"
	}
	var parts []string
	if g.ToolsListChanged {
		parts = append(parts, "tools")
	}
	if g.PromptsListChanged {
		parts = append(parts, "prompts")
	}
	if g.ResourcesListChanged {
		parts = append(parts, "resources")
	}
	if uris > 0 {
		parts = append(parts, fmt.Sprintf("%d/%d resource subscriptions", len(g.ResourceSubscriptions), uris))
	}
	switch {
	case len(parts) == 0 && len(untagged) == 0:
		return "nothing (everything is polled)"
	case len(parts) == 0:
		parts = []string{"nothing"}
	}
	text := strings.Join(parts, ", ")
	if len(untagged) > 0 {
		text += "; notified (untagged): " + strings.Join(untagged, ", ")
	}
	return text
}

// itemsText lists names in at most avail runes (0: no limit). Names that
// share a directory-like prefix (resource URIs) are shown relative to it;
// a prefix that would take more than a third of the room is shortened
// from the left ("file://…/docs/"), names that do not fit are counted,
// and a first name too long for the room is cut with an ellipsis, so that
// something of the list shows even on a narrow terminal.
func itemsText(items []string, avail int) string {
	if len(items) == 0 {
		return ""
	}
	prefix := commonDir(items)
	lead := prefix
	if avail > 0 && prefix != "" && utf8.RuneCountInString(prefix)+1 > avail/3 {
		lead = shortenDir(prefix, max(avail/3-1, 3))
	}
	if lead != "" {
		lead += " "
	}
	more := func(shown int) string {
		if shown == len(items) {
			return ""
		}
		return fmt.Sprintf(", … +%d", len(items)-shown)
	}
	var b strings.Builder
	shown := 0
	for i, it := range items {
		piece := strings.TrimPrefix(it, prefix)
		if i == 0 {
			piece = lead + piece
		} else {
			piece = ", " + piece
		}
		if avail > 0 && utf8.RuneCountInString(b.String()+piece+more(i+1)) > avail {
			break
		}
		b.WriteString(piece)
		shown++
	}
	if shown == 0 && avail > 0 {
		// Not even the first name fits whole: cut it.
		tail := more(1)
		if room := avail - utf8.RuneCountInString(lead+tail); room >= 4 {
			return lead + fit(strings.TrimPrefix(items[0], prefix), room) + tail
		}
	}
	if shown < len(items) {
		if shown > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "… +%d", len(items)-shown)
	}
	return b.String()
}

// shortenDir cuts a directory URI to at most w runes by dropping leading
// path segments after the scheme: "file:///home/me/docs/" becomes
// "file://…/docs/". The end of a path tells more than its start.
func shortenDir(dir string, w int) string {
	if utf8.RuneCountInString(dir) <= w {
		return dir
	}
	scheme := ""
	rest := dir
	if i := strings.Index(dir, "://"); i >= 0 {
		scheme, rest = dir[:i+3], dir[i+3:]
	}
	for i := 0; i < len(rest)-1; i++ {
		if rest[i] == '/' {
			if s := scheme + "…" + rest[i:]; utf8.RuneCountInString(s) <= w {
				return s
			}
		}
	}
	return "…/"
}

// fitMiddle cuts s to at most w runes (0: no limit) by dropping its
// middle, keeping the start (a URI's scheme) and the longer end (its
// file name).
func fitMiddle(s string, w int) string {
	r := []rune(s)
	if w <= 0 || len(r) <= w {
		return s
	}
	if w < 2 {
		return "…"
	}
	head := (w - 1) / 3
	return string(r[:head]) + "…" + string(r[len(r)-(w-1-head):])
}

// commonDir is the longest prefix, ending in "/", shared by every item
// that has a URI scheme; "" when the items are not URIs or share none
// beyond the scheme.
func commonDir(items []string) string {
	prefix := items[0]
	for _, it := range items[1:] {
		n := 0
		for n < len(prefix) && n < len(it) && prefix[n] == it[n] {
			n++
		}
		prefix = prefix[:n]
	}
	scheme := strings.Index(prefix, "://")
	if scheme < 0 {
		return ""
	}
	cut := strings.LastIndexByte(prefix, '/')
	if cut <= scheme+3 {
		return ""
	}
	return prefix[:cut+1]
}

// fit cuts s to at most w runes (0: no limit), marking the cut.
func fit(s string, w int) string {
	if w <= 0 || utf8.RuneCountInString(s) <= w {
		return s
	}
	r := []rune(s)
	return string(r[:w-1]) + "…"
}
