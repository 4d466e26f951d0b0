package main

import (
	"errors"
	"strings"
	"testing"

	"tidings/client"
	"tidings/mcp"
)

func TestPrintable(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain name", "plain name"},
		{"Ünïcödé ✓ 名前", "Ünïcödé ✓ 名前"},
		{"evil\x1b]52;c;AAAA\x07\nname", "evil\uFFFD]52;c;AAAA\uFFFD\uFFFDname"},
		{"\x1b[2J\x1b[H", "\uFFFD[2J\uFFFD[H"},
		{"tab\there\r", "tab\uFFFDhere\uFFFD"},
		{"c1 \u009b31m", "c1 \uFFFD31m"},             // 8-bit CSI
		{"bidi \u202egnp.exe", "bidi \uFFFDgnp.exe"}, // right-to-left override
		{"bad \xff utf8", "bad \uFFFD utf8"},
		{"del \x7f", "del \uFFFD"},
	} {
		if got := printable(c.in); got != c.want {
			t.Errorf("printable(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// hostile reports whether s holds anything that could drive a terminal.
func hostile(s string) bool { return strings.ContainsAny(s, "\x1b\x07\u009b\r") }

// TestRenderViewEscapesServerStrings: a server naming itself (or its
// tools, resources and errors) with escape sequences and newlines cannot
// reach the terminal through the live view: no ESC, BEL or extra line.
func TestRenderViewEscapesServerStrings(t *testing.T) {
	const evil = "evil\x1b]52;c;AAAA\x07\nname"
	m := sampleView()
	m.Server = &mcp.Implementation{Name: evil, Title: evil, Version: evil}
	m.Lists[0].Items = []string{evil, "ok"}
	m.URIs[0].URI = "file:///d/" + evil
	m.Changes = append(m.Changes, changeView{At: t0, Text: eventText(client.Event{Kind: client.ReadFailed, Err: errors.New(evil)}, 0)})
	want := len(strings.Split(renderView(sampleView()), "\n")) + 1 // one more change line
	for _, width := range []int{0, 60} {
		m.Width = width
		got := renderView(m)
		if hostile(got) {
			t.Errorf("width %d: control characters reach the terminal:\n%q", width, got)
		}
		if n := len(strings.Split(got, "\n")); n != want {
			t.Errorf("width %d: %d lines, want %d (a newline in a server string broke the layout):\n%s", width, n, want, got)
		}
		if !strings.Contains(got, "evil\uFFFD]52;c;AAAA\uFFFD\uFFFDname") {
			t.Errorf("width %d: server name not shown with its controls replaced:\n%s", width, got)
		}
	}
	m.Server = nil
	m.DiscoverErr = "HTTP 502: " + evil
	if got := renderView(m); hostile(got) || strings.Count(got, "\n") != want-1 {
		t.Errorf("discover error reaches the terminal raw:\n%q", got)
	}
}

// TestEventLineEscapesServerStrings: the plain event form is one line per
// event, whatever names, URIs and errors the server sends.
func TestEventLineEscapesServerStrings(t *testing.T) {
	const evil = "x\x1b[31m\ny\x07"
	for _, e := range []client.Event{
		{Kind: client.ToolsChanged, Added: []string{evil}, Removed: []string{evil}, Changed: []string{evil}},
		{Kind: client.ResourceUpdated, URI: "file:///" + evil},
		{Kind: client.Connected, Granted: mcp.SubscriptionFilter{ResourceSubscriptions: []string{evil}}},
		{Kind: client.ReadFailed, Err: errors.New(evil)},
		{Kind: client.Disconnected, Err: errors.New(evil)},
	} {
		e.At = t0
		got := eventLine(e)
		if hostile(got) || strings.Contains(got, "\n") {
			t.Errorf("%s: line %q carries control characters", e.Kind, got)
		}
	}
}
