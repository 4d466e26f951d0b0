package sse_test

import (
	"io"
	"testing"
	"time"

	"tidings/internal/sse"
)

// TestCRLineEndingDoesNotBlock: SSE allows lines ended by a lone CR. An
// event whose last line ends that way is complete; the reader must hand
// it over at once instead of waiting for the next byte to see whether an
// LF follows, which on a live stream may be a long time away.
func TestCRLineEndingDoesNotBlock(t *testing.T) {
	pr, pw := io.Pipe()
	defer pr.Close()
	go func() {
		_, _ = pw.Write([]byte("event: message\rdata: {\"a\":1}\r\r"))
		// The stream stays open, as an idle listen would.
	}()
	type result struct {
		ev  sse.Event
		err error
	}
	got := make(chan result, 1)
	go func() {
		ev, err := sse.NewReader(pr, 0).Next()
		got <- result{ev, err}
	}()
	select {
	case r := <-got:
		if r.err != nil || string(r.ev.Data) != `{"a":1}` || r.ev.Name != "message" {
			t.Fatalf("got %+v, %v", r.ev, r.err)
		}
	case <-time.After(5 * time.Second):
		pw.Close()
		<-got
		t.Fatal("Next blocked on a complete CR-terminated event")
	}
	pw.Close()
}

// TestCRLFSplitAcrossReads: a CRLF whose LF arrives in a later read is
// still one line break, not an extra blank line that would end the event.
func TestCRLFSplitAcrossReads(t *testing.T) {
	pr, pw := io.Pipe()
	defer pr.Close()
	go func() {
		defer pw.Close()
		for _, chunk := range []string{"data: a\r", "\ndata: b\r", "\n\r", "\n"} {
			if _, err := pw.Write([]byte(chunk)); err != nil {
				return
			}
		}
	}()
	r := sse.NewReader(pr, 0)
	ev, err := r.Next()
	if err != nil || string(ev.Data) != "a\nb" {
		t.Fatalf("got %q, %v; want \"a\\nb\"", ev.Data, err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the event: %v, want EOF", err)
	}
}
