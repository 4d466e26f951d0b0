package gateway

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestStderrLogBounds: lines are logged whole up to maxStderrLine, cut
// past it, written in any pieces; past maxStderrLines in a window the
// rest is counted, and the count told with the next line logged.
func TestStderrLogBounds(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1000, 0)
	s := &stderrLog{log: slog.New(slog.NewTextHandler(&buf, nil)), now: func() time.Time { return now }}
	_, _ = s.Write([]byte("one\ntw"))
	_, _ = s.Write([]byte("o\r\n" + strings.Repeat("x", 3*maxStderrLine) + "\n"))
	out := buf.String()
	if !strings.Contains(out, "line=one\n") || !strings.Contains(out, "line=two\n") {
		t.Fatalf("lines in pieces:\n%s", out)
	}
	if !strings.Contains(out, "line="+strings.Repeat("x", maxStderrLine)+" cut_at=2048") {
		t.Fatalf("a long line is not cut at %d:\n%.300s", maxStderrLine, out)
	}
	buf.Reset()
	for range 2 * maxStderrLines {
		_, _ = s.Write([]byte("flood\n"))
	}
	if n := strings.Count(buf.String(), "line=flood"); n != maxStderrLines-3 {
		t.Fatalf("%d flood lines logged in one window, want %d", n, maxStderrLines-3)
	}
	now = now.Add(stderrWindow)
	buf.Reset()
	_, _ = s.Write([]byte("later"))
	s.flush()
	if !strings.Contains(buf.String(), "line=later lines_passed_over=53") {
		t.Fatalf("the next window's line: %s", buf.String())
	}
}
