package main

import (
	"fmt"
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
	// Server is who the server says it is (nil until discovered), and
	// Versions the protocol revisions it supports.
	Server      *mcp.Implementation
	Versions    []string
	DiscoverErr string

	State client.ConnState
	// Granted is the last listen acknowledgement (nil before the first).
	Granted *mcp.SubscriptionFilter
	Stats   client.WatchStats

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
	// Notified is true when the server agreed to announce changes, false
	// when the list is polled.
	Notified bool
}

// uriView is one resource whose content is followed.
type uriView struct {
	URI       string
	Notified  bool
	Freshness client.FreshnessInfo
	Updated   time.Time // last reported content change; zero if none yet
}

// changeView is one line of the recent-changes log.
type changeView struct {
	At   time.Time
	Text string
}

// renderView draws the model as text lines that fit Width and Height.
// It writes no escape sequences; the caller positions the cursor.
func renderView(m viewModel) string {
	var lines []string
	// Every line goes through printable: the strings in it are the
	// server's, and control characters in them must not drive the terminal
	// or break the layout.
	add := func(format string, a ...any) {
		lines = append(lines, strings.TrimRight(fit(printable(fmt.Sprintf(format, a...)), m.Width), " "))
	}

	title := "tidings watch  " + m.Target
	clock := m.Now.Format("15:04:05")
	if m.Width > 0 && utf8.RuneCountInString(title)+2+len(clock) <= m.Width {
		title += strings.Repeat(" ", m.Width-utf8.RuneCountInString(title)-len(clock)) + clock
	} else {
		title += "  " + clock
	}
	add("%s", title)

	switch {
	case m.Server != nil:
		s := m.Server.Name + " " + m.Server.Version
		if m.Server.Title != "" {
			s += " (" + m.Server.Title + ")"
		}
		add("server    %s", s)
	case m.DiscoverErr != "":
		add("server    unknown: %s", m.DiscoverErr)
	default:
		add("server    …")
	}
	proto := "protocol  "
	switch m.Era {
	case "":
		proto += "…"
	case client.EraLegacy:
		proto += string(m.Era) + " (legacy session)"
	default:
		proto += string(m.Era)
	}
	if len(m.Versions) > 0 {
		proto += "   server supports " + strings.Join(m.Versions, ", ")
	}
	add("%s", proto)
	add("state     %-10s  notifications %d  re-reads %d  reconnects %d",
		m.State, m.Stats.Notifications, m.Stats.Rereads, m.Stats.Reconnects)
	add("granted   %s", grantedText(m.Granted, len(m.URIs)))
	add("")

	nameW := 0
	for _, l := range m.Lists {
		nameW = max(nameW, len(l.Name))
	}
	for _, l := range m.Lists {
		if !l.Followed {
			add("%-*s    -  not offered by the server", nameW, l.Name)
			continue
		}
		count := "-"
		if l.Known {
			count = fmt.Sprint(len(l.Items))
		}
		how := "polled"
		if l.Notified {
			how = "notified"
		}
		if m.Granted == nil {
			how = "-"
		}
		head := fmt.Sprintf("%-*s %4s  %-7s %-9s %-8s  ", nameW, l.Name, count, l.Freshness.State, ttlText(l.Freshness, m.Now), how)
		avail := 0
		if m.Width > 0 {
			avail = max(m.Width-utf8.RuneCountInString(head), 0)
		}
		add("%s%s", head, itemsText(l.Items, avail))
	}

	if len(m.URIs) > 0 {
		add("")
		add("followed resources")
		for _, u := range m.URIs {
			how := "polled"
			if u.Notified {
				how = "notified"
			}
			if m.Granted == nil {
				how = "-"
			}
			updated := "not yet"
			if !u.Updated.IsZero() {
				updated = u.Updated.Format("15:04:05")
			}
			add("  %-7s %-9s %-8s  updated %-8s  %s", u.Freshness.State, ttlText(u.Freshness, m.Now), how, updated, u.URI)
		}
	}

	add("")
	add("recent changes")
	room := len(m.Changes)
	if m.Height > 0 {
		room = min(room, max(m.Height-len(lines), 0))
	}
	if len(m.Changes) == 0 && (m.Height == 0 || m.Height > len(lines)) {
		add("  (none yet)")
	}
	for i := len(m.Changes) - 1; i >= len(m.Changes)-room; i-- {
		c := m.Changes[i]
		add("  %s  %s", c.At.Format("15:04:05"), c.Text)
	}
	if m.Height > 0 && len(lines) > m.Height {
		lines = lines[:m.Height]
	}
	return strings.Join(lines, "\n")
}

// grantedText says what the last acknowledgement granted.
func grantedText(g *mcp.SubscriptionFilter, uris int) string {
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
	if len(parts) == 0 {
		return "nothing (everything is polled)"
	}
	return strings.Join(parts, ", ")
}

// ttlText is the time left before a cached answer goes stale, rounded up
// to the second.
func ttlText(f client.FreshnessInfo, now time.Time) string {
	if f.State != client.Fresh {
		return "ttl -"
	}
	left := f.Expires.Sub(now)
	secs := (left + time.Second - 1) / time.Second
	return fmt.Sprintf("ttl %ds", max(secs, 0))
}

// itemsText lists names in at most avail runes (0: no limit). Names that
// share a directory-like prefix (resource URIs) are shown relative to it,
// and names that do not fit are counted instead.
func itemsText(items []string, avail int) string {
	if len(items) == 0 {
		return ""
	}
	prefix := commonDir(items)
	var b strings.Builder
	shown := 0
	for i, it := range items {
		piece := strings.TrimPrefix(it, prefix)
		if i == 0 && prefix != "" {
			piece = prefix + " " + piece
		} else if i > 0 {
			piece = ", " + piece
		}
		if avail > 0 {
			more := ""
			if i < len(items)-1 {
				more = fmt.Sprintf(", … +%d", len(items)-i-1)
			}
			if utf8.RuneCountInString(b.String()+piece+more) > avail {
				break
			}
		}
		b.WriteString(piece)
		shown++
	}
	if shown < len(items) {
		if shown > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "… +%d", len(items)-shown)
	}
	return b.String()
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
