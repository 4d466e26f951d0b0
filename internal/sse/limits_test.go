package sse_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"tidings/internal/sse"
)

// TestKeepAlivesDoNotCountTowardLimit: comments and the blank lines of
// empty events are not part of any event, so however many arrive on an
// idle stream the next real event is still read.
func TestKeepAlivesDoNotCountTowardLimit(t *testing.T) {
	var stream []byte
	for range 1000 {
		stream = sse.AppendComment(stream, "keep-alive")
		stream = append(stream, "event: ping\n\n"...) // an event with no data
	}
	stream = sse.AppendEvent(stream, []byte(`{"jsonrpc":"2.0","id":1,"result":{}}`))
	r := sse.NewReader(bytes.NewReader(stream), 100)
	ev, err := r.Next()
	if err != nil || string(ev.Data) != `{"jsonrpc":"2.0","id":1,"result":{}}` {
		t.Fatalf("after keep-alives: %q, %v", ev.Data, err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("at the end: %v, want EOF", err)
	}
	// The limit still holds per event.
	long := sse.AppendEvent(nil, []byte(strings.Repeat("y", 101)))
	if _, err := sse.NewReader(bytes.NewReader(long), 100).Next(); !errors.Is(err, sse.ErrTooLarge) {
		t.Fatalf("oversized event: %v, want ErrTooLarge", err)
	}
}

// TestUnterminatedEventDiscarded: an event cut off by the end of the
// stream (no blank line after it) is not dispatched.
func TestUnterminatedEventDiscarded(t *testing.T) {
	for _, tc := range []struct {
		stream string
		want   error
	}{
		{"data: {\"partial\":", io.ErrUnexpectedEOF},
		{"data: {}\n", io.ErrUnexpectedEOF},
		{"event: message\ndata: {}\r", io.ErrUnexpectedEOF},
		{"event: message\n", io.ErrUnexpectedEOF},
		{": only a comment\n", io.EOF},
		{": cut-off comm", io.EOF},
		{"", io.EOF},
	} {
		ev, err := sse.NewReader(strings.NewReader(tc.stream), 0).Next()
		if err != tc.want {
			t.Errorf("%q: got %+v, %v; want %v", tc.stream, ev, err, tc.want)
		}
	}
	// A complete event before the cut is still delivered.
	r := sse.NewReader(strings.NewReader("data: 1\n\ndata: 2"), 0)
	if ev, err := r.Next(); err != nil || string(ev.Data) != "1" {
		t.Fatalf("complete event: %q, %v", ev.Data, err)
	}
	if ev, err := r.Next(); err != io.ErrUnexpectedEOF {
		t.Fatalf("then: %+v, %v; want io.ErrUnexpectedEOF", ev, err)
	}
}
