package main

import (
	"bytes"
	"sync"
)

// Bounds of the log pane: a chatty server costs at most this much memory.
const (
	logPaneLines   = 100
	logPaneLineMax = 1024 // bytes; a longer line is cut
)

// logPane keeps the last lines a spawned server (and the client's own
// logger) wrote while the live view owns the terminal, where writing
// them through would tear the frames apart. The view shows the newest;
// the strings are made printable when drawn.
type logPane struct {
	mu      sync.Mutex
	ring    []string
	partial []byte
	// notify, when set, is called after new lines arrive; it must not
	// block, as the server's writes to stderr wait for Write.
	notify func()
}

// Write implements io.Writer; it never fails and never blocks for long.
func (p *logPane) Write(b []byte) (int, error) {
	p.mu.Lock()
	n := len(b)
	added := false
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			room := logPaneLineMax - len(p.partial)
			p.partial = append(p.partial, b[:min(len(b), max(room, 0))]...)
			break
		}
		room := logPaneLineMax - len(p.partial)
		p.partial = append(p.partial, b[:min(i, max(room, 0))]...)
		p.push(string(bytes.TrimRight(p.partial, "\r")))
		p.partial = p.partial[:0]
		b = b[i+1:]
		added = true
	}
	notify := p.notify
	p.mu.Unlock()
	if added && notify != nil {
		notify()
	}
	return n, nil
}

func (p *logPane) push(line string) {
	p.ring = append(p.ring, line)
	if over := len(p.ring) - logPaneLines; over > 0 {
		p.ring = append(p.ring[:0], p.ring[over:]...)
	}
}

// setNotify sets the function called after new lines arrive.
func (p *logPane) setNotify(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notify = f
}

// lines returns the kept lines, oldest first.
func (p *logPane) lines() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.ring...)
}
