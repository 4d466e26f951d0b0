package coalesce_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"tidings/streamhttp/internal/coalesce"
)

// pipe returns a coalescing Conn over one end of a net.Pipe, whose
// writes block until the other end reads them, and that other end.
func pipe(t *testing.T, limit int) (*coalesce.Conn, net.Conn) {
	t.Helper()
	a, b := net.Pipe()
	c := coalesce.New(a, limit)
	t.Cleanup(func() {
		_ = b.Close()
		_ = c.Close()
	})
	return c, b
}

func TestWritesArriveInOrder(t *testing.T) {
	c, peer := pipe(t, 256)
	var want bytes.Buffer
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(peer)
		got <- b
	}()
	for i := range 2000 {
		p := fmt.Appendf(nil, "frame %d;", i)
		want.Write(p)
		if n, err := c.Write(p); n != len(p) || err != nil {
			t.Fatalf("write %d: %d, %v", i, n, err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if b := <-got; !bytes.Equal(b, want.Bytes()) {
		t.Fatalf("read %d bytes, not the %d written in order", len(b), want.Len())
	}
	if w := c.Writes(); w >= 2000 {
		t.Errorf("%d writes reached the connection for 2000 frames", w)
	}
}

// TestPendingWritesLeaveTogether holds the first write in the "kernel"
// (the pipe, unread) while more frames are written: they all leave in
// one further write.
func TestPendingWritesLeaveTogether(t *testing.T) {
	c, peer := pipe(t, 1<<10)
	if _, err := c.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := c.Write(fmt.Appendf(nil, "<%d>", i)); err != nil {
			t.Fatal(err)
		}
	}
	var all []byte
	buf := make([]byte, 1<<10)
	want := "first<0><1><2><3><4><5><6><7><8><9>"
	for len(all) < len(want) {
		n, err := peer.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, buf[:n]...)
	}
	if string(all) != want {
		t.Fatalf("read %q, want %q", all, want)
	}
	if w := c.Writes(); w > 2 {
		t.Fatalf("11 frames took %d writes to the connection, want at most 2 (the first, then the rest)", w)
	}
}

// TestFullBufferBlocksUntilDeadline: a peer that does not read blocks
// writes once the buffer is full, for as long as the write deadline.
func TestFullBufferBlocksUntilDeadline(t *testing.T) {
	c, _ := pipe(t, 64)
	if _, err := c.Write(make([]byte, 10)); err != nil { // the flusher takes it and blocks
		t.Fatal(err)
	}
	if _, err := c.Write(make([]byte, 60)); err != nil { // pending, within the limit
		t.Fatal(err)
	}
	if err := c.SetWriteDeadline(time.Now().Add(50 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := c.Write(make([]byte, 10))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("write to a full buffer: %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the write blocked %v past its deadline", d)
	}
	// The flusher's own write is bound by the deadline too, and its
	// error sticks.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.Write([]byte("x"))
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("writes still succeed after the flusher's write passed its deadline: %v", err)
		}
		time.Sleep(time.Millisecond) // polling with a deadline
	}
}

// TestWriteErrorSticks: once the peer is gone, a later Write returns the
// flusher's error.
func TestWriteErrorSticks(t *testing.T) {
	c, peer := pipe(t, 1<<10)
	_ = peer.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.Write([]byte("frame"))
		if errors.Is(err, io.ErrClosedPipe) {
			return
		}
		if err != nil {
			t.Fatalf("write: %v, want the pipe's closed error", err)
		}
		if time.Now().After(deadline) {
			t.Fatal("writes to a closed peer never failed")
		}
		time.Sleep(time.Millisecond) // polling with a deadline
	}
}

// TestCloseFlushesThenStops: Close lets pending writes leave, stops the
// flusher (goleak checks), and later writes fail.
func TestCloseFlushesThenStops(t *testing.T) {
	a, peer := net.Pipe()
	defer peer.Close()
	c := coalesce.New(a, 1<<10)
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(peer)
		got <- b
	}()
	for range 100 {
		if _, err := c.Write([]byte("goaway")); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if b := <-got; len(b) != 600 {
		t.Fatalf("the peer read %d bytes before the close, want 600", len(b))
	}
	if _, err := c.Write([]byte("late")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v, want net.ErrClosed", err)
	}
	if err := c.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second close: %v, want net.ErrClosed", err)
	}
}

// TestCloseDoesNotWaitForAStalledPeer: pending bytes a peer never reads
// hold Close for a bounded time only.
func TestCloseDoesNotWaitForAStalledPeer(t *testing.T) {
	a, peer := net.Pipe()
	defer peer.Close()
	c := coalesce.New(a, 1<<10)
	if _, err := c.Write([]byte("never read")); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close blocked on a peer that does not read")
	}
}

// TestSniffing: a connection coalesces once its first read shows the
// HTTP/2 preface, and not when it shows HTTP/1.1.
func TestSniffing(t *testing.T) {
	for _, tc := range []struct {
		first string
		want  bool
	}{
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", true},
		{"GET / HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{"\x16\x03\x01\x02\x00", false},
	} {
		a, b := net.Pipe()
		c := coalesce.Sniffing(a, 0)
		if c.Coalescing() {
			t.Fatal("a sniffing conn coalesces before its first read")
		}
		go func() { _, _ = b.Write([]byte(tc.first)) }()
		if _, err := c.Read(make([]byte, 64)); err != nil {
			t.Fatal(err)
		}
		if c.Coalescing() != tc.want {
			t.Errorf("after reading %q coalescing is %v, want %v", tc.first, c.Coalescing(), tc.want)
		}
		// Before coalescing, a write goes straight through: it blocks until read.
		_ = b.Close()
		_ = c.Close()
	}
	a, b := net.Pipe()
	defer b.Close()
	c := coalesce.Sniffing(a, 0)
	c.Coalesce()
	if !c.Coalescing() {
		t.Fatal("Coalesce did not turn coalescing on")
	}
	_ = c.Close()
}

// accepted dials addr, where ln listens, and returns the connection ln
// accepts; the client's end is closed when the test ends.
func accepted(t *testing.T, ln net.Listener, addr string) net.Conn {
	t.Helper()
	client, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return nc
}

// TestSocketOnlyWhileWritesPassThrough: a Conn that passes writes
// straight through offers the TCP socket beneath, for a transport that
// takes the connection over; one that gathers them refuses.
func TestSocketOnlyWhileWritesPassThrough(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c := coalesce.Sniffing(accepted(t, ln, ln.Addr().String()), 0)
	defer c.Close()
	if _, err := c.SyscallConn(); err != nil {
		t.Fatalf("a Conn passing writes through hides its socket: %v", err)
	}
	c.Coalesce()
	if _, err := c.SyscallConn(); err == nil {
		t.Fatal("a Conn gathering writes offers its socket")
	}
}

// TestListenerCountsTakenWrites: a Listener's Stats count the writes its
// connections took into their buffers, once they leave, and not the
// writes refused.
func TestListenerCountsTakenWrites(t *testing.T) {
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := coalesce.Listen(tcp, 0)
	defer ln.Close()
	c := accepted(t, ln, tcp.Addr().String()).(*coalesce.Conn)
	c.Coalesce()
	for range 3 {
		if _, err := c.Write([]byte("frame")); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(); err != nil { // lets the three leave
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("late")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v, want net.ErrClosed", err)
	}
	st := ln.Stats()
	if g, w := st.Gathered.Load(), st.Written.Load(); g != 3 || w < 1 || w > 3 {
		t.Fatalf("gathered %d in %d writes, want 3 in 1 to 3: the refused write is not taken", g, w)
	}
}

// TestPastDeadlineKeepsWhatWasHandedOver: a write deadline already past,
// as tls.Conn sets right after writing its close_notify, refuses the
// Writes that follow but not the bytes earlier Writes handed over, which
// the peer still reads; else a TLS connection's last records (a GOAWAY,
// the close_notify) would be dropped unsent.
func TestPastDeadlineKeepsWhatWasHandedOver(t *testing.T) {
	c, peer := pipe(t, 256)
	// The peer does not read yet: the flusher is blocked writing.
	if _, err := c.Write([]byte("last words")); err != nil {
		t.Fatal(err)
	}
	if err := c.SetWriteDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("more")); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("Write after a past deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	_ = peer.SetReadDeadline(time.Now().Add(5 * time.Second)) // fails rather than hangs
	got := make([]byte, len("last words"))
	if _, err := io.ReadFull(peer, got); err != nil || string(got) != "last words" {
		t.Fatalf("the peer read %q, %v; want %q", got, err, "last words")
	}
}

// TestSlowReaderIsNotCut: a peer that reads slowly but steadily, so
// that a write takes longer than the write deadline, gets every byte:
// the deadline runs again while the peer takes some, and cuts only a
// peer that takes none (TestFullBufferBlocksUntilDeadline).
func TestSlowReaderIsNotCut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const writes = 3
		a, b := net.Pipe()
		msg := bytes.Repeat([]byte("x"), 16<<10)
		c := coalesce.New(a, len(msg))
		defer c.Close()
		defer b.Close()
		got := make(chan []byte, 1)
		go func() {
			var all []byte
			buf := make([]byte, 1<<10)
			for len(all) < writes*len(msg) {
				time.Sleep(100 * time.Millisecond) // 1 KiB every 100ms
				n, err := b.Read(buf)
				if err != nil {
					break
				}
				all = append(all, buf[:n]...)
			}
			got <- all
		}()
		if err := c.SetWriteDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		// The first write goes to the socket, the second waits in the
		// buffer, the third waits for room until the first has left,
		// some 1.6s on: past the deadline, with the peer reading all
		// along.
		for i := range writes {
			if _, err := c.Write(msg); err != nil {
				t.Fatalf("write %d behind a slow reader: %v", i+1, err)
			}
		}
		if all := <-got; len(all) != writes*len(msg) {
			t.Fatalf("the peer read %d bytes, want %d", len(all), writes*len(msg))
		}
	})
}
