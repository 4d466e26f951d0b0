package coalesce

import (
	"io"
	"net"
	"testing"
)

// TestIdleKeepsOneBuffer: once its flusher has exited, a Conn holds the
// buffer writes go into and not the flusher's spare, so an idle
// connection holds at most one limit's worth.
func TestIdleKeepsOneBuffer(t *testing.T) {
	a, peer := net.Pipe()
	defer peer.Close()
	c := New(a, 1<<10)
	defer c.Close()
	go func() { _, _ = io.Copy(io.Discard, peer) }()
	for range 2 { // the second round leaves the first's buffer as the spare
		if _, err := c.Write(make([]byte, 512)); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		idle := c.idle
		c.mu.Unlock()
		<-idle
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.spare != nil {
		t.Errorf("an idle connection keeps a spare buffer of %d bytes", cap(c.spare))
	}
	if cap(c.pending) == 0 {
		t.Error("an idle connection dropped the buffer writes go into")
	}
}
