package gateway

import (
	"bytes"
	"log/slog"
	"sync"
	"time"
)

// stderrLog is where a spawned upstream's stderr goes: into the
// gateway's log, a line at a time, under the upstream's id — what a
// crashing server says of itself is the first thing an operator needs.
// A line is cut at maxStderrLine bytes, and at most maxStderrLines lines
// are logged per stderrWindow; what is passed over is counted in the next
// line logged, so that a server that floods its stderr floods no log.
type stderrLog struct {
	log *slog.Logger
	now func() time.Time

	mu     sync.Mutex
	line   []byte
	long   bool // the line under way was cut: the rest is passed over
	window time.Time
	logged int
	passed int
}

// Bounds of what a spawned upstream's stderr puts in the log.
const (
	maxStderrLine  = 2048
	maxStderrLines = 50
	stderrWindow   = 10 * time.Second
)

func (s *stderrLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rest := p
	for len(rest) > 0 {
		i := bytes.IndexByte(rest, '\n')
		chunk := rest
		if i >= 0 {
			chunk = rest[:i]
		}
		if !s.long {
			room := maxStderrLine - len(s.line)
			if len(chunk) > room {
				s.line = append(s.line, chunk[:room]...)
				s.long = true
			} else {
				s.line = append(s.line, chunk...)
			}
		}
		if i < 0 {
			break
		}
		s.emitLocked()
		rest = rest[i+1:]
	}
	return len(p), nil
}

// emitLocked logs the line gathered, as its bounds allow.
func (s *stderrLog) emitLocked() {
	line := bytes.TrimRight(s.line, "\r")
	cut := s.long
	s.line, s.long = s.line[:0], false
	if len(line) == 0 {
		return
	}
	now := s.now()
	if now.Sub(s.window) >= stderrWindow {
		s.window, s.logged = now, 0
	}
	if s.logged >= maxStderrLines {
		s.passed++
		return
	}
	s.logged++
	attrs := []any{"line", string(line)}
	if cut {
		attrs = append(attrs, "cut_at", maxStderrLine)
	}
	if s.passed > 0 {
		attrs = append(attrs, "lines_passed_over", s.passed)
		s.passed = 0
	}
	s.log.Info("upstream stderr", attrs...)
}

// flush logs a last line that ended without a newline.
func (s *stderrLog) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emitLocked()
}

// restarted is told by the client when the spawned upstream died and a
// new process was started: logged and counted, so that a server that
// keeps crashing shows long before the client gives up on it.
func (u *upstream) restarted(ended string) {
	u.st.restarts.Add(1)
	if ended == "" {
		ended = "it closed its output"
	}
	u.log.Warn("upstream process ended; started again", "ended", ended, "restarts", u.st.restarts.Load())
}
