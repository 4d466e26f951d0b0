package sse_test

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"tidings/internal/sse"
)

// wantData is what a conforming reader must return for a payload written
// with AppendEvent: the payload itself, except that SSE has no way to
// carry a bare CR or a CRLF inside data, so every line break (CR, LF or
// CRLF) reads back as LF. JSON text is unchanged in meaning by this,
// since raw line breaks in JSON can only be whitespace between tokens.
func wantData(p []byte) []byte {
	p = bytes.ReplaceAll(p, []byte("\r\n"), []byte("\n"))
	return bytes.ReplaceAll(p, []byte("\r"), []byte("\n"))
}

// FuzzSSERoundTrip writes two payloads (with a keep-alive comment between
// them) and reads them back, whole and one byte at a time.
func FuzzSSERoundTrip(f *testing.F) {
	seeds := [][2]string{
		{`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}`, `{"jsonrpc":"2.0","id":1,"result":{}}`},
		{"", ""},
		{"a\nb", "c\r\nd"},
		{"a\rb\r", "\r\n\r\n"},
		{"\n", "\r"},
		{"data: x", ": not a comment"},
		{"::::", "event: other\nid: 7\nretry: 5"},
		{" leading space", "  two spaces"},
		{"trailing\n", "\ntrailing"},
		{"\x00\xff\xfe", "ünïcødé ☃"},
		{"\r\r\n\n\r", "x\r\ny\rz\n"},
	}
	for _, s := range seeds {
		f.Add([]byte(s[0]), []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, p1, p2 []byte) {
		var stream []byte
		stream = sse.AppendEvent(stream, p1)
		stream = sse.AppendComment(stream, "keep-alive")
		stream = sse.AppendEvent(stream, p2)
		stream = sse.AppendComment(stream, "")

		for name, r := range map[string]io.Reader{
			"whole":        bytes.NewReader(stream),
			"byte-by-byte": iotest.OneByteReader(bytes.NewReader(stream)),
		} {
			rd := sse.NewReader(r, 0)
			for i, p := range [][]byte{p1, p2} {
				ev, err := rd.Next()
				if err != nil {
					t.Fatalf("%s: event %d: %v\nstream %q", name, i, err, stream)
				}
				if ev.Name != "message" {
					t.Fatalf("%s: event %d named %q, want message", name, i, ev.Name)
				}
				if ev.ID != "" {
					t.Fatalf("%s: event %d has id %q; the writer sends none", name, i, ev.ID)
				}
				if want := wantData(p); !bytes.Equal(ev.Data, want) {
					t.Fatalf("%s: event %d data %q, want %q\nstream %q", name, i, ev.Data, want, stream)
				}
				if !bytes.ContainsAny(p, "\r") && !bytes.Equal(ev.Data, p) {
					t.Fatalf("%s: payload without CR changed: %q → %q", name, p, ev.Data)
				}
			}
			if ev, err := rd.Next(); !errors.Is(err, io.EOF) {
				t.Fatalf("%s: after both events got %+v, %v; want EOF", name, ev, err)
			}
		}
	})
}

// TestReaderLimit checks that an event larger than the reader's limit is
// refused rather than buffered.
func TestReaderLimit(t *testing.T) {
	stream := sse.AppendEvent(nil, bytes.Repeat([]byte("x"), 1000))
	_, err := sse.NewReader(bytes.NewReader(stream), 100).Next()
	if !errors.Is(err, sse.ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	stream = sse.AppendEvent(nil, bytes.Repeat([]byte("x\n"), 100))
	_, err = sse.NewReader(bytes.NewReader(stream), 100).Next()
	if !errors.Is(err, sse.ErrTooLarge) {
		t.Fatalf("many small lines: err = %v, want ErrTooLarge", err)
	}
}
